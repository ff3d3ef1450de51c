"""The workbench every screen works on: the run store, its runs (listed by one thread for every screen),
the run the Run screen follows and its batch, the user's preferences, and starting, cancelling and killing runs.

``AceApp`` (``acetui.app.app``) adds the screens, keys, themes and command palette; the screens read this
class's state through ``app = getters.app(Workbench)``, which gives them its types.
"""

from __future__ import annotations

from textual import work
from textual.app import App
from textual.notifications import SeverityLevel
from textual.reactive import reactive
from textual.signal import Signal
from textual.widget import AwaitMount
from textual.worker import get_current_worker

from acetui import notify, preferences
from acetui.app import summary
from acetui.app.confirm import ConfirmScreen
from acetui.app.messages import RunsListed, StoreFailed
from acetui.app.watch import watch_runs
from acetui_core.basics.choices import RunStatus
from acetui_core.basics.errors import UserError
from acetui_core.basics.imports import HEAVY_IMPORTS
from acetui_core.execution.kill import WHEN_IT_STOPS, cancel, check_killable, force_kill, process_runs
from acetui_core.execution.launch import LocalProcesses, gpus_for, launch
from acetui_core.run.config import RunConfig
from acetui_core.storage.store import Store
from acetui_core.storage.store_rows import RunRecord


class Workbench(App):
    """The state and the run operations the screens share (see the module docstring)."""

    followed: reactive[str | None] = reactive(None)
    """The run the Run screen shows (None: none yet)."""

    batch: reactive[tuple[str, ...]] = reactive(())
    """The runs started together with ``followed`` (a comparison), in queue order."""

    def __init__(self, store: Store, user: preferences.Preferences, ansi_color: bool | None) -> None:
        super().__init__(ansi_color=ansi_color)
        self.store = store
        self.preferences = user
        self.runs: list[RunRecord] = []
        self.runs_listed = False
        self.chosen_runs: set[str] = set()  # runs the Results screen starts with selected (a study's)
        self.runs_signal: Signal[list[RunRecord]] = Signal(self, "runs")

    # ---- preferences ----

    def remember(self, **values) -> None:
        """Save the user's preferences (the settings.json file); a refusal is a warning, never a failure."""
        for name, value in values.items():
            setattr(self.preferences, name, value)
        try:
            preferences.save(self.preferences)
        except UserError as error:
            self.notify(str(error), severity="warning", timeout=8)

    # ---- the store's runs, for every screen ----

    @work(thread=True, exclusive=True, group="runs")
    def _watch_runs(self) -> None:
        watch_runs(self.store, self.post_message, get_current_worker().cancelled_event)

    def on_runs_listed(self, message: RunsListed) -> None:
        if not self.is_running:  # a list the watcher delivered as the app quits: its screens may be gone already
            return
        before = {run.id: run for run in self.runs}
        first = not self.runs_listed
        self.runs = message.runs
        self.runs_listed = True
        if first:
            self._announce_runs_going_on()
        for run in self.runs:
            if run.id in before and before[run.id].active and not run.active:
                self.announce_end(run)
        self._announce_new_runs(before)
        was_followed = self.followed
        self._forget_deleted_runs(before)
        if self.followed is None and self.current_mode == "run" and (pick := summary.run_to_show(self.runs, None)):
            self.follow(pick)
        elif self.batch == (self.followed,) and (shown := next((r for r in self.runs if r.id == self.followed), None)):
            self.batch = summary.batch_of(self.runs, shown)  # attached before the list came: find its comparison
        if was_followed in before and was_followed not in {run.id for run in self.runs} and self.current_mode == "run":
            # another run's numbers under the user's eyes: say whose they are now
            now = f"run {self.followed}" if self.followed else "no run"
            self.notify(f"Run {was_followed} was removed from the store; the Run screen shows {now}.", timeout=10)
        self.runs_signal.publish(self.runs)
        self.refresh_bindings()  # F2 on the Run screen depends on which runs are active

    def _forget_deleted_runs(self, before: dict[str, RunRecord]) -> None:
        """A run deleted (here, or by ``acetui runs rm``) leaves the Run screen and its comparison's line;
        the screen shows the next run of the comparison, else the run F2 would pick."""
        listed = {run.id for run in self.runs}
        gone = {run_id for run_id in (*self.batch, self.followed) if run_id in before and run_id not in listed}
        if not gone:
            return
        at = self.batch.index(self.followed) if self.followed in self.batch else 0
        after = [run_id for run_id in self.batch[at:] if run_id not in gone]  # the next run of the comparison
        self.batch = tuple(run_id for run_id in self.batch if run_id not in gone)
        if self.followed in gone:
            # the next run of the comparison, else the one before it, else none (F2's pick)
            self.followed = after[0] if after else (self.batch[-1] if self.batch else None)

    def _announce_new_runs(self, before: dict[str, RunRecord]) -> None:
        """On the Run screen of an ended run, say that a new run (from the CLI, a script, another session)
        has started and that F2 shows it."""
        shown = next((r for r in self.runs if r.id == self.followed), None)
        if not before or self.current_mode != "run" or shown is None or shown.active:
            return
        new = [run for run in self.runs if run.id not in before and run.active and run.id not in self.batch]
        if new:  # one toast for a comparison queued at once
            first = min(new, key=lambda r: (r.created, r.id))
            more = f" and {len(new) - 1} more" if len(new) > 1 else ""
            self.notify(f"Run {first.id} ({first.title}){more} started: F2 shows it.", timeout=8)

    def _announce_runs_going_on(self) -> None:
        """On opening the app (after an SSH session dropped, say) away from the Run screen: the runs still
        queued or running, and that F2 shows them."""
        going = [run for run in self.runs if run.active]
        if not going or self.current_mode == "run":
            return
        shown = next(run for run in going if run.id == summary.run_to_show(going, None))  # the one F2 shows
        what = f"{shown.title}, run {shown.id}"
        if len(going) == 1:
            self.notify(f"A run is still going ({what}): F2 shows it.", timeout=10)
        else:
            self.notify(f"{len(going)} runs are still going ({what} the newest): F2 shows {shown.id}.", timeout=10)

    def on_store_failed(self, message: StoreFailed) -> None:
        self.notify(message.error, severity="error", timeout=10)

    def announce_end(self, run: RunRecord) -> None:
        """A toast, and the bell or a desktop notification in the terminal (``--notify``)."""
        if run.status == RunStatus.FINISHED:
            what = f"finished: ppl {summary.ppl_text(run)}" if run.ppl is not None else "finished"
        else:
            what = run.status + (f": {run.error}" if run.error else "")
        body = f"{run.title} (run {run.id}) {what}"
        severities: dict[str, SeverityLevel] = {RunStatus.FINISHED: "information", RunStatus.CANCELLED: "warning"}
        severity = severities.get(run.status, "error")
        self.notify(body, title="Run ended", severity=severity, timeout=10)
        notify.send(self.preferences.notify, "acetui", body, self.write_to_terminal)

    def write_to_terminal(self, text: str) -> None:
        """Raw bytes to the user's terminal (as Textual's own bell and clipboard do)."""
        if self._driver is not None:
            self._driver.write(text)

    # ---- following runs ----

    def follow(self, run_id: str, batch: tuple[str, ...] | None = None) -> AwaitMount:
        """Show ``run_id`` on the Run screen, live while it runs; ``batch``: the runs queued with it
        (default: those its process owns, as far as the run list tells). Awaitable: the Run screen mounted."""
        self.follow_later(run_id, batch)
        return self.switch_mode("run")

    def follow_later(self, run_id: str, batch: tuple[str, ...] | None = None) -> None:
        """Make ``run_id`` the run the Run screen (F2) shows, without switching to it."""
        run = next((r for r in self.runs if r.id == run_id), None)
        self.batch = batch or (summary.batch_of(self.runs, run) if run else (run_id,))
        self.followed = run_id

    def start_runs(self, configs: list[RunConfig]) -> list[str]:
        """Check ``configs`` and start them through the launcher as detached worker processes (one per
        visible GPU, each loading its model once); return their ids. The checks read the model, bound its
        memory and may ask the hub (seconds): called from a worker thread, never the UI's, which then
        follows the runs (``follow``). Raises the launcher's UserError."""
        with HEAVY_IMPORTS:  # the checks may import transformers while a cost estimate's thread does too
            return launch(configs, LocalProcesses(detach=True, gpus=gpus_for(configs[0].device)), self.store)

    def kill_run(self, run: RunRecord) -> None:
        """Ask first; then end the run's process at once (``acetui_core.execution.kill``): for a run that did not
        stop after a cancel request."""
        try:
            check_killable(self.store, run.id)
            others = [r.id for r in process_runs(self.store, run) if r.id != run.id]
        except UserError as error:
            self.notify(str(error), severity="warning", timeout=8)
            return

        def answered(yes: bool | None) -> None:
            if not yes:
                return
            try:
                cancelled = force_kill(self.store, run.id)
            except UserError as error:
                self.notify(str(error), severity="error", timeout=8)
                return
            self.notify(f"Process {run.pid} killed; recorded as cancelled: {', '.join(cancelled) or 'none'}.")

        also = f" Its other run(s) {', '.join(others)} end too." if others else ""
        self.push_screen(
            ConfirmScreen(
                f"Kill run {run.id} ({run.title}) now? Its process {run.pid} is ended "
                f"at once, mid-layer; the layers done are kept and the run is recorded as cancelled.{also}"
            ),
            answered,
        )

    def cancel_run(self, run: RunRecord) -> None:
        """Ask first; then ask the run's process to stop at its next check (a queued run is cancelled at
        once)."""

        def answered(yes: bool | None) -> None:
            if not yes:
                return
            try:
                status = cancel(self.store, run.id)
            except UserError as error:
                self.notify(str(error), severity="warning")
                return
            self.notify(
                f"Run {run.id}: cancel requested ({status})."
                + (f" {WHEN_IT_STOPS.capitalize()}." if status == RunStatus.RUNNING else "")
            )

        self.push_screen(
            ConfirmScreen(
                f"Cancel run {run.id} ({run.title}, {run.status})? "
                "It stops at its next check; the layers done are kept."
            ),
            answered,
        )
