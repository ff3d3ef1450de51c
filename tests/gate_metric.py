"""A plug-in metric that holds a run at a known point until the test lets it go: cancellation tests need
neither a model slow enough to interrupt nor sleeps.

It scores like magnitude. From the first linear of layer 1 on (layer 0 is pruned and recorded), every call
waits, after creating ``waiting`` in the folder ``$ACETUI_TEST_GATE`` names, until the test creates
``open`` there, or, for ``until_cancelled``, until the run's cancel flag is set (a stop signal, ``acetui
runs cancel``, the app's cancel). Once the flag is set it creates ``cancel-seen``, so a test knows that
a first Ctrl-C has reached the run. Use it as ``--method tests/gate_metric.py:until_cancelled`` with a
model of at least three layers (the tiny llama's seven linears per layer are counted).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

LINEARS_PER_LAYER = 7  # a llama layer's: q, k, v, o, gate, up, down
_calls: Counter[str] = Counter()  # per gate folder: tests that run in one process keep separate counts


def until_cancelled(W, stats, opts):
    """Magnitude's scores; from layer 1 on, held until the run is cancelled or the gate opens."""
    _hold(open_on_cancel=True)
    return W.abs()


def until_opened(W, stats, opts):
    """Magnitude's scores; from layer 1 on, held until the gate opens, whatever the run's cancel flag says
    (a signal still interrupts the wait: a second Ctrl-C raises in here)."""
    _hold(open_on_cancel=False)
    return W.abs()


def _hold(open_on_cancel: bool) -> None:
    folder = Path(os.environ["ACETUI_TEST_GATE"])
    _calls[str(folder)] += 1
    if _calls[str(folder)] <= LINEARS_PER_LAYER:
        return
    cancel = _cancel_flag()
    (folder / "waiting").touch()
    while not (folder / "open").exists():
        if cancel.is_set():
            (folder / "cancel-seen").touch()
            if open_on_cancel:
                return
        time.sleep(0.01)


def _cancel_flag() -> threading.Event:
    """The run's cancel flag. The plug-in contract gives a metric no handle on it, so it is taken from
    the layer loop that called the metric: the nearest caller with a ``threading.Event`` named ``cancel``."""
    frame = sys._getframe(2)
    while frame is not None:
        flag = frame.f_locals.get("cancel")
        if isinstance(flag, threading.Event):
            return flag
        frame = frame.f_back
    raise RuntimeError("the gate metric found no cancel flag among its callers (has the layer loop renamed it?)")
