"""Resource samples of a run's process, recorded with each heartbeat."""

import os
import sys
import threading
import time
import types

import psutil
import pytest
from runhelpers import wait_until

from acetui_core.basics import resources
from acetui_core.basics.resources import ResourceSample, ResourceSampler
from acetui_core.execution.heartbeat import heartbeat
from acetui_core.run.config import RunConfig
from acetui_core.run.records import from_dict
from acetui_core.storage.store import Store


def test_a_sample_reads_this_process():
    sampler = ResourceSampler()
    sum(i * i for i in range(2_000_000))  # some CPU time between the two samples
    sample = sampler.sample()
    rss = psutil.Process(os.getpid()).memory_info().rss / 2**20
    assert sample.rss_mb == pytest.approx(rss, rel=0.2)
    assert sample.cpu_percent > 0
    assert sample.gpu is None and sample.gpu_used_mb is None  # this process never touched CUDA


def test_gpu_fields_come_from_the_current_cuda_device(monkeypatch):
    """With CUDA initialised: the device's used/total memory, this process's share, and NVML's load."""
    cuda = types.SimpleNamespace(
        is_initialized=lambda: True,
        current_device=lambda: 1,
        mem_get_info=lambda device: (30 * 2**30, 80 * 2**30),
        memory_reserved=lambda device: 42 * 2**30,
        utilization=lambda device: 97,
    )
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    sample = ResourceSampler().sample()
    assert (sample.gpu, sample.gpu_used_mb, sample.gpu_total_mb, sample.gpu_process_mb, sample.gpu_util_percent) == (
        "cuda:1",
        50 * 1024,
        80 * 1024,
        42 * 1024,
        97.0,
    )

    def no_nvml(device):
        raise ModuleNotFoundError("pynvml")

    cuda.utilization = no_nvml
    assert ResourceSampler().sample().gpu_util_percent is None


def test_cuda_is_not_initialised_by_sampling(monkeypatch):
    cuda = types.SimpleNamespace(
        is_initialized=lambda: False, mem_get_info=lambda device: pytest.fail("would create a CUDA context")
    )
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    assert resources._gpu_fields() == {}


def test_the_heartbeat_records_a_sample(tmp_path):
    store = Store(tmp_path / "runs.db")
    run_id = store.create_run(RunConfig(model="m", method="wanda", sparsity="0.5"))
    store.claim(run_id)
    assert store.get_run(run_id, layers=False).resources is None
    with heartbeat(store, run_id, threading.Event(), threading.Event()):
        wait_until(lambda: store.get_run(run_id, layers=False).resources, "a resource sample", timeout=10)
    sample = from_dict(ResourceSample, store.get_run(run_id, layers=False).resources)
    assert sample.rss_mb > 10 and abs(sample.taken - time.time()) < 10


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the inherited high-water mark is Linux's")
def test_a_run_started_by_a_large_process_reports_its_own_peak_memory():
    """A run launched by a big parent (pytest late in the suite, the app) reports what it used itself:
    ru_maxrss would report the parent's 400 MiB."""
    import subprocess

    held = bytearray(400 * 2**20)
    held[::4096] = b"\1" * len(held[::4096])  # touch every page so it is resident
    code = "from acetui_core.basics.resources import peak_rss_mb; print(peak_rss_mb())"
    child = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert child < 300, child
    assert resources.peak_rss_mb() > 400
    del held
