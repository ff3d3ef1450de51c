"""A run's own log file (``logs/<run id>.log`` beside the store, or in the job folder): its events,
warnings and log records, the traceback when it fails, and for a worker process without a terminal
everything the process prints."""

from __future__ import annotations

import logging
import os
import sys
import time
import traceback
import warnings
from contextlib import contextmanager
from pathlib import Path

from acetui_core.basics.errors import Cancelled
from acetui_core.run.events import Event, LayerPruned, RunFinished, Stage


@contextmanager
def run_log(path: Path | None, redirect_output: bool = False):
    """Write the run's log to ``path``: its warnings and log records, and its traceback if it fails.

    ``redirect_output`` (a worker process, which has no terminal) also sends the process's own
    stdout/stderr there, so whatever a library prints lands in the run's log."""
    if path is None:
        yield None
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", buffering=1, encoding="utf-8") as log:
        saved = None
        if redirect_output:
            sys.stdout.flush()
            sys.stderr.flush()
            saved = os.dup(1), os.dup(2)
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
        handler = logging.StreamHandler(log)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s", "%H:%M:%S"))
        root = logging.getLogger()
        root.addHandler(handler)
        show = warnings.showwarning

        def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
            log.write(warnings.formatwarning(message, category, filename, lineno, line))

        warnings.showwarning = show_warning
        try:
            yield log
        except BaseException as error:
            if not isinstance(error, (Cancelled, KeyboardInterrupt)):
                log.write("".join(traceback.format_exception(error)))
            raise
        finally:
            warnings.showwarning = show
            root.removeHandler(handler)
            if saved is not None:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
                os.close(saved[0])
                os.close(saved[1])


def log_line(log, event: Event) -> None:
    """One line per event worth reading in a run's log."""
    if log is None:
        return
    stamp = time.strftime("%H:%M:%S")
    if isinstance(event, Stage) and (event.done == 0 or event.done == event.total):
        line = f"{event.name} {event.done}/{event.total if event.total is not None else '?'}"
    elif isinstance(event, LayerPruned):
        line = event.layer.line
    elif isinstance(event, RunFinished):
        ppl = event.result.ppl_wikitext2
        line = f"finished: prune {event.result.prune_seconds:.1f} s, ppl {'-' if ppl is None else f'{ppl:.3f}'}"
    else:
        return
    log.write(f"{stamp} {line}\n")
