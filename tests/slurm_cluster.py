"""A real one-node Slurm cluster for tests, run from Debian's packages in one temporary folder.

Five daemons run in the foreground as children of this process, with every key, socket, database,
spool, state and log file under that folder and every port picked free: munged (a key of its own),
mariadbd and slurmdbd (accounting, without which `sacct` fails and submitit never learns a job's
state), slurmctld and slurmd. No system-wide configuration, service or port is used, so several
clusters can run side by side. The daemons run as root (Slurm needs root to start jobs); `.ci/slurm-deps`
installs the packages.

The session fixture `slurm_cluster` starts one cluster when ACETUI_TEST_SLURM=1 and skips otherwise.
Running this file prints how long the cluster takes to start and a job to start once submitted:
    .venv/bin/python tests/slurm_cluster.py
"""

from __future__ import annotations

import getpass
import importlib.util
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

PARTITION = "debug"
# The node offers two "GPUs", so a job asking for --gpus-per-node is scheduled and sees
# CUDA_VISIBLE_DEVICES as on a GPU cluster, but runs on CPU. Slurm drops a GPU without a device file
# and wants a character device, so two harmless ones stand in (nothing opens them with task/none).
FAKE_GPU_DEVICES = ("/dev/null", "/dev/zero")
FAKE_GPUS = len(FAKE_GPU_DEVICES)
# Seconds between the SIGTERM of a cancelled job and its SIGKILL (Slurm's default is 30).
KILL_WAIT_S = 5
START_TIMEOUT_S = 120  # per daemon: the shared 2-core machine can be slow
# Debian installs the daemons in /usr/sbin, which is on root's PATH but not always on others'.
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
BINARIES = (
    "mungekey",
    "munged",
    "mariadb-install-db",
    "mariadbd",
    "slurmdbd",
    "slurmctld",
    "slurmd",
    "sinfo",
    "squeue",
    "sbatch",
    "sacct",
    "scancel",
)


class ClusterError(RuntimeError):
    """The cluster could not start; the message names the daemon and ends with its log."""


@dataclass(frozen=True)
class SlurmCluster:
    """What a test needs of a running cluster."""

    root: Path  # the cluster's folder: conf in etc/, logs in log/
    env: dict[str, str]  # for any Slurm client (sbatch, sacct, submitit): SLURM_CONF
    partition: str
    work_dir: Path  # a folder on a local disk for job folders
    gpus: int  # counted GPUs per node (no real device)
    startup_s: float

    def run(self, *command: str) -> str:
        """Run a Slurm client command against this cluster; its stdout."""
        return subprocess.run(
            command, env={**os.environ, **self.env}, check=True, capture_output=True, text=True
        ).stdout


def missing_requirements() -> str | None:
    """Why this machine cannot run the cluster (one sentence), or None when it can."""
    missing = [name for name in BINARIES if shutil.which(name, path=SEARCH_PATH) is None]
    if missing:
        return f"the Slurm test cluster needs {', '.join(missing)}: run .ci/slurm-deps (as root)"
    if importlib.util.find_spec("submitit") is None:
        return "the Slurm tests need submitit, one of acetui's dependencies: pip install -e '.[test]'"
    if os.geteuid() != 0:
        return f"the Slurm test cluster runs its daemons as root, and this is {getpass.getuser()}"
    return None


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A one-node cluster for the session, with SLURM_CONF set in os.environ for submitit's commands."""
    if os.environ.get("ACETUI_TEST_SLURM") != "1":
        pytest.skip("Slurm tests run only with ACETUI_TEST_SLURM=1 (install with .ci/slurm-deps)")
    problem = missing_requirements()
    if problem:
        pytest.fail(f"ACETUI_TEST_SLURM=1 but {problem}", pytrace=False)
    root = make_cluster_folder()
    try:
        with one_node_cluster(root) as cluster, pytest.MonkeyPatch.context() as patch:
            for name, value in cluster.env.items():
                patch.setenv(name, value)
            yield cluster
    except ClusterError as error:
        pytest.fail(str(error), pytrace=False)
    shutil.rmtree(root, ignore_errors=True)


def make_cluster_folder() -> Path:
    """A fresh folder under the system's temp dir. munged wants its socket's folders open to everyone
    (so not pytest's 0700 tmp_path), and its key folder closed to everyone but its owner."""
    root = Path(tempfile.mkdtemp(prefix="acetui-slurm-"))
    root.chmod(0o755)
    return root


@contextmanager
def one_node_cluster(root: Path) -> Iterator[SlurmCluster]:
    """Start munged, mariadbd, slurmdbd, slurmctld and slurmd under `root`; stop them on exit."""
    started = time.monotonic()
    layout = _Layout(root)
    daemons = _Daemons(layout.log)
    env = {"SLURM_CONF": str(layout.slurm_conf)}
    try:
        ports = _free_ports(4)
        node_line = _node_hardware()
        node = node_line.split()[0].removeprefix("NodeName=")
        _write_confs(layout, node_line, node, ports)

        _run(layout, "mungekey", "--create", "--keyfile", str(layout.munge_key))
        daemons.start(
            "munged",
            [
                "munged",
                "--foreground",
                f"--key-file={layout.munge_key}",
                f"--socket={layout.munge_socket}",
                f"--pid-file={layout.run / 'munged.pid'}",
                f"--seed-file={layout.munge / 'munged.seed'}",
            ],
            env,
        )
        daemons.wait_until("munged", layout.munge_socket.exists)

        _run(
            layout,
            "mariadb-install-db",
            *_mariadb_options(layout),
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        )
        daemons.start(
            "mariadbd",
            [
                "mariadbd",
                *_mariadb_options(layout),
                f"--port={ports.mariadb}",
                "--bind-address=127.0.0.1",
                "--skip-name-resolve",
                f"--socket={layout.run / 'mariadb.sock'}",
                f"--init-file={layout.db_init}",
            ],
            env,
        )
        daemons.wait_until("mariadbd", lambda: _listening(ports.mariadb))

        daemons.start("slurmdbd", ["slurmdbd", "-D"], env)
        daemons.wait_until("slurmdbd", lambda: _listening(ports.slurmdbd))
        daemons.start("slurmctld", ["slurmctld", "-D"], env)
        daemons.wait_until("slurmctld", lambda: _listening(ports.slurmctld))
        daemons.start("slurmd", ["slurmd", "-D"], env)
        daemons.wait_until("slurmd", lambda: _node_state(node, env) == "idle")

        yield SlurmCluster(
            root=root,
            env=env,
            partition=PARTITION,
            work_dir=layout.work,
            gpus=FAKE_GPUS,
            startup_s=time.monotonic() - started,
        )
    finally:
        if daemons.running("slurmctld"):
            _cancel_all_jobs(env)
        daemons.stop_all()


class _Layout:
    """Where each file of the cluster lives under its root folder."""

    def __init__(self, root: Path):
        self.etc, self.run, self.log = root / "etc", root / "run", root / "log"
        self.munge, self.db, self.state = root / "munge", root / "db", root / "state"
        self.spool, self.work = root / "spool", root / "work"
        for folder in (self.etc, self.run, self.log, self.db, self.state, self.spool, self.work):
            folder.mkdir(mode=0o755)
        self.munge.mkdir(mode=0o700)
        self.munge_key = self.munge / "munge.key"
        self.munge_socket = self.run / "munge.sock"
        # slurmdbd reads slurmdbd.conf from the folder of SLURM_CONF.
        self.slurm_conf, self.slurmdbd_conf = self.etc / "slurm.conf", self.etc / "slurmdbd.conf"
        self.gres_conf, self.db_init = self.etc / "gres.conf", self.etc / "db-init.sql"


@dataclass(frozen=True)
class _Ports:
    mariadb: int
    slurmdbd: int
    slurmctld: int
    slurmd: int


def _free_ports(count: int) -> _Ports:
    """Ports free now (the kernel's choice), so this cluster never meets another on the machine."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return _Ports(*(sock.getsockname()[1] for sock in sockets))
    finally:
        for sock in sockets:
            sock.close()


def _node_hardware() -> str:
    """slurmd's own description of this machine ("NodeName=vm CPUs=2 ... RealMemory=24105"), so the
    node's declared hardware matches what slurmd finds and it is never drained for a mismatch."""
    out = subprocess.run([_binary("slurmd"), "-C"], check=True, capture_output=True, text=True).stdout
    return out.splitlines()[0]


def _write_confs(layout: _Layout, node_line: str, node: str, ports: _Ports) -> None:
    user = getpass.getuser()
    layout.slurm_conf.write_text(f"""\
ClusterName=acetui
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ports.slurmctld}
SlurmdPort={ports.slurmd}
SlurmUser={user}
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={layout.munge_socket}
CredType=cred/munge
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={ports.slurmdbd}
# For the connection to slurmdbd this names munged's socket (AuthInfo does not cover it).
AccountingStoragePass={layout.munge_socket}
JobAcctGatherType=jobacct_gather/linux
StateSaveLocation={layout.state}
SlurmdSpoolDir={layout.spool}
SlurmctldPidFile={layout.run / "slurmctld.pid"}
SlurmdPidFile={layout.run / "slurmd.pid"}
SlurmctldLogFile={layout.log / "slurmctld.log"}
SlurmdLogFile={layout.log / "slurmd.log"}
# No cgroups and no systemd in a container: track job processes through /proc.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait={KILL_WAIT_S}
# Schedule a submitted batch job at the scheduler's next one-second tick, not up to 3 s later (the default).
SchedulerParameters=batch_sched_delay=0
GresTypes=gpu
{node_line} Gres=gpu:{FAKE_GPUS} NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP
""")
    layout.gres_conf.write_text(
        "AutoDetect=off\n" + "".join(f"NodeName={node} Name=gpu File={device}\n" for device in FAKE_GPU_DEVICES)
    )
    layout.slurmdbd_conf.write_text(f"""\
AuthType=auth/munge
AuthInfo=socket={layout.munge_socket}
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={ports.slurmdbd}
SlurmUser={user}
PidFile={layout.run / "slurmdbd.pid"}
LogFile={layout.log / "slurmdbd.log"}
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={ports.mariadb}
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
""")
    layout.slurmdbd_conf.chmod(0o600)  # slurmdbd refuses a conf (it holds a password) others can read
    layout.db_init.write_text(
        "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';\n"
        "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';\n"
    )


def _mariadb_options(layout: _Layout) -> list[str]:
    """Shared by the database's creation and its server: no my.cnf, a small redo log and buffer pool
    (defaults 96 MB and 128 MB). The database still grows to about 100 MB as slurmdbd makes its tables."""
    return [
        "--no-defaults",
        f"--datadir={layout.db}",
        f"--user={getpass.getuser()}",
        "--innodb-log-file-size=8M",
        "--innodb-buffer-pool-size=32M",
    ]


class _Daemons:
    """The cluster's daemons, children of this process, each logging to log/<name>.out."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.started: dict[str, subprocess.Popen] = {}

    def start(self, name: str, command: list[str], env: dict[str, str]) -> None:
        with open(self.log_dir / f"{name}.out", "wb") as log:
            # A session of its own, so a Ctrl-C in the terminal reaches pytest, which stops them in order.
            self.started[name] = subprocess.Popen(
                [_binary(command[0]), *command[1:]],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **env},
                start_new_session=True,
            )

    def running(self, name: str) -> bool:
        return name in self.started and self.started[name].poll() is None

    def wait_until(self, name: str, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready():
            code = self.started[name].poll()
            if code is not None:
                raise ClusterError(f"{name} exited with code {code} while starting; {_log_tail(self.log_dir, name)}")
            if time.monotonic() > deadline:
                raise ClusterError(f"{name} was not ready after {START_TIMEOUT_S} s; {_log_tail(self.log_dir, name)}")
            time.sleep(0.1)

    def stop_all(self) -> None:
        """SIGTERM each, newest first (slurmd before slurmctld before slurmdbd...), SIGKILL if it hangs."""
        for process in reversed(self.started.values()):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def _log_tail(log_dir: Path, name: str, lines: int = 15) -> str:
    """The end of a daemon's log files (the daemon's own log file and what it printed), for an error."""
    files = sorted(log_dir.glob(f"{name}*"))
    tails = [f"{path}:\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) for path in files]
    return "its logs end:\n" + "\n".join(tails) if tails else f"it wrote no log under {log_dir}"


def _run(layout: _Layout, name: str, *arguments: str) -> None:
    """Run a one-off set-up command; its output goes to log/<name>.out only when it fails."""
    done = subprocess.run([_binary(name), *arguments], check=False, capture_output=True, text=True)
    if done.returncode != 0:
        (layout.log / f"{name}.out").write_text(done.stdout + done.stderr)
        raise ClusterError(f"{name} failed with code {done.returncode}; {_log_tail(layout.log, name)}")


def _binary(name: str) -> str:
    path = shutil.which(name, path=SEARCH_PATH)
    if path is None:
        raise ClusterError(f"{name} is not installed: run .ci/slurm-deps (as root)")
    return path


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _node_state(node: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [_binary("sinfo"), "--noheader", "--Node", "--nodes", node, "--format=%T"],
        check=False,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
    return done.stdout.strip()


def _cancel_all_jobs(env: dict[str, str]) -> None:
    """Cancel what the tests left running and wait for it to end, so no job step outlives the cluster."""
    full_env = {**os.environ, **env}
    subprocess.run([_binary("scancel"), "--user", getpass.getuser()], check=False, env=full_env, capture_output=True)
    deadline = time.monotonic() + KILL_WAIT_S + 30
    while time.monotonic() < deadline:
        queue = subprocess.run(
            [_binary("squeue"), "--noheader"], check=False, env=full_env, capture_output=True, text=True
        )
        if queue.returncode != 0 or not queue.stdout.strip():
            return
        time.sleep(0.5)


def _report_timings(samples: int = 5) -> None:
    """Print how long the cluster takes to start and to stop, and how long a job waits to start."""
    import submitit

    root = make_cluster_folder()
    stop_started = 0.0
    with one_node_cluster(root) as cluster:
        os.environ.update(cluster.env)
        sbatch_waits = []
        for index in range(samples):
            stamp = cluster.work_dir / f"sbatch-{index}"
            submitted = time.time()
            cluster.run(
                "sbatch",
                "--quiet",
                f"--partition={cluster.partition}",
                f"--output={stamp}.log",
                "--wrap",
                f"date +%s.%N > {stamp}",
            )
            sbatch_waits.append(_wait_for_stamp(stamp) - submitted)
        executor = submitit.SlurmExecutor(folder=cluster.work_dir / "submitit")
        executor.update_parameters(partition=cluster.partition, time=5)
        submitit_waits, result_waits = [], []
        for _ in range(samples):
            submitted = time.time()
            job = executor.submit(time.time)
            started = job.result()
            submitit_waits.append(started - submitted)
            result_waits.append(time.time() - submitted)
        stop_started = time.monotonic()
    stopped = time.monotonic() - stop_started
    shutil.rmtree(root, ignore_errors=True)

    def row(label: str, seconds: list[float]) -> str:
        return (
            f"| {label} | {len(seconds)} | {min(seconds):.2f} | {statistics.median(seconds):.2f} | {max(seconds):.2f} |"
        )

    print("| measure (s) | n | min | median | max |")
    print("|---|---|---|---|---|")
    print(row("cluster start (5 daemons, node idle)", [cluster.startup_s]))
    print(row("cluster stop", [stopped]))
    print(row("sbatch --wrap: submit to start", sbatch_waits))
    print(row("submitit: submit to the function's first line", submitit_waits))
    print(row("submitit: submit to job.result() returning", result_waits))


def _wait_for_stamp(path: Path, timeout: float = 60) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return float(path.read_text())
        time.sleep(0.02)
    raise TimeoutError(f"the job writing {path} did not run within {timeout} s")


if __name__ == "__main__":
    problem = missing_requirements()
    if problem:
        raise SystemExit(problem)
    _report_timings()
