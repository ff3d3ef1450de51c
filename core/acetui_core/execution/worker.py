"""The local worker process: ``python -m acetui_core.execution.worker --store PATH RUN_ID...`` runs queued runs of
the store one after another, loading each model once.

It starts in its own session when detached (no controlling terminal: SIGHUP and a dropped SSH
connection do not reach it). Its stdout and stderr go to the log file of the run it is executing.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

from acetui_core.basics.choices import RunStatus
from acetui_core.basics.errors import Cancelled, UserError
from acetui_core.execution.runner import run_queue
from acetui_core.storage.store import Store


def spawn(store: Store, run_ids: list[str], *, detach: bool = True, env: dict | None = None) -> subprocess.Popen:
    """Start a worker for the queued ``run_ids`` and hand the runs to it (liveness follows its pid)."""
    first_log = store.log_path(run_ids[0])
    first_log.parent.mkdir(parents=True, exist_ok=True)
    with open(first_log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "acetui_core.execution.worker", "--store", str(store.path), *run_ids],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=detach,
            env={**os.environ, **(env or {})},
            close_fds=True,
        )
    for run_id in run_ids:
        store.set_owner(run_id, process.pid)
    return process


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m acetui_core.execution.worker", description=__doc__)
    parser.add_argument("--store", required=True)
    parser.add_argument("run_ids", nargs="+")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # belt and braces: a new session has no terminal to hang up
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} worker pid {os.getpid()} runs {' '.join(args.run_ids)}", flush=True)
    try:
        store = Store(args.store)
        run_queue(store, args.run_ids, redirect_output=True)
    except Cancelled as stopped:
        print("stopped by a signal; the current and queued runs are recorded cancelled.", flush=True)
        return 128 + (stopped.signum or signal.SIGINT)  # 143 for SIGTERM, 130 for SIGINT
    except UserError as error:
        print(f"acetui: {error}", flush=True)
        return 2
    statuses = [store.get_run(run_id, layers=False).status for run_id in args.run_ids]
    print(f"done: {', '.join(f'{i} {s}' for i, s in zip(args.run_ids, statuses, strict=False))}", flush=True)
    return 0 if all(s == RunStatus.FINISHED for s in statuses) else 1


if __name__ == "__main__":
    sys.exit(main())
