"""What a run's process uses right now: memory, CPU and, when the run is on a GPU, GPU memory and load.

The runner's heartbeat records one sample with each beat, so the app shows a live resource line for a
run executing in another process, even on another machine sharing the store's folder.
"""

from __future__ import annotations

import resource
import sys
import time
from dataclasses import dataclass

import psutil


@dataclass
class ResourceSample:
    """One look at the run's process. GPU fields are None when the run has not touched CUDA."""

    taken: float  # POSIX seconds
    rss_mb: float  # resident memory of the process
    cpu_percent: float  # of one core, since the previous sample (100 = one core busy)
    gpu: str | None = None  # the device, e.g. "cuda:0"
    gpu_used_mb: float | None = None  # the whole device's memory in use (every process on it)
    gpu_total_mb: float | None = None
    gpu_process_mb: float | None = None  # reserved by this process's PyTorch allocator
    gpu_util_percent: float | None = None  # None without NVML (pip install nvidia-ml-py)


class ResourceSampler:
    """Samples one process (default: this one). CPU % is measured between consecutive samples, so the
    first sample reads 0."""

    def __init__(self, pid: int | None = None):
        self.process = psutil.Process(pid)
        self.process.cpu_percent(None)  # starts the CPU clock the next sample measures against

    def sample(self) -> ResourceSample:
        with self.process.oneshot():
            rss, cpu = self.process.memory_info().rss, self.process.cpu_percent(None)
        return ResourceSample(time.time(), rss / 2**20, cpu, **_gpu_fields())


def _gpu_fields() -> dict:
    """The current CUDA device's memory and load, only once this process has initialised CUDA: asking
    earlier would create a CUDA context (hundreds of MiB) on a run that runs on the CPU."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return {}
    device = torch.cuda.current_device()
    free, total = torch.cuda.mem_get_info(device)
    try:
        util = float(torch.cuda.utilization(device))  # through NVML, which is optional
    except Exception:  # no nvidia-ml-py, or NVML refuses: the line shows memory only
        util = None
    return {
        "gpu": f"cuda:{device}",
        "gpu_used_mb": (total - free) / 2**20,
        "gpu_total_mb": total / 2**20,
        "gpu_process_mb": torch.cuda.memory_reserved(device) / 2**20,
        "gpu_util_percent": util,
    }


def reset_peak_memory() -> None:
    """Start this process's high-water marks again from what it holds now: VmHWM (Linux's ``clear_refs``)
    and, once CUDA is in use, PyTorch's peak of allocated GPU memory. A run that follows others in one
    process (``acetui compare``'s grid, a study) then reports its own peak, not the highest before it."""
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
    except OSError:  # not Linux: ru_maxrss cannot be reset, the peak stays the process's
        pass
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats()


def peak_rss_mb() -> float:
    """This process's peak resident memory since it started running its program. Linux's ``ru_maxrss``
    keeps the high-water mark of the process that forked it across exec, so a run started by a 4 GB
    pytest or app process would report 4 GB; ``VmHWM`` belongs to this program's address space alone."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # macOS reports bytes, Linux KiB
