"""The settings table (``acetui_core.run.config.SETTINGS``) is the one declaration of a run's settings: the
CLI's prune, compare and sweep, the New run form, the configuration and the comparison key all cover
exactly its settings."""

from dataclasses import fields
from pathlib import Path

import pytest
import typer
from runhelpers import cli
from textual.widgets import Checkbox, Collapsible, Input, Static

from acetui.app import make_app
from acetui.cli import app
from acetui.options import settings_markdown
from acetui_core.analysis.rowlabels import _NEVER_SPLIT
from acetui_core.run.config import SETTINGS, RunConfig
from acetui_core.storage.store import Store

# The grid commands name a few of their lists in the plural.
GRID_NAMES = {"models": "model", "methods": "method", "seeds": "seed"}


def _options(command: str) -> dict:
    """The command's parameters by the setting they carry."""
    click_command = typer.main.get_command(app).commands[command]
    return {
        GRID_NAMES.get(p.name, p.name): p for p in click_command.params if GRID_NAMES.get(p.name, p.name) in SETTINGS
    }


def test_prune_compare_sweep_and_the_config_cover_exactly_the_table():
    single_run = {name for name, spec in SETTINGS.items() if spec.single_run}
    assert single_run == {"save", "overwrite"}  # a grid of runs cannot save them all to one folder
    assert set(_options("prune")) == set(SETTINGS)
    assert set(_options("compare")) == set(SETTINGS) - single_run
    assert set(_options("sweep")) == set(SETTINGS) - single_run
    assert [f.name for f in fields(RunConfig)] == list(SETTINGS)


@pytest.mark.parametrize("command", ["prune", "compare", "sweep"])
def test_each_option_is_the_tables(command):
    """Names, help and defaults of every non-axis option come from the table, as ``RunConfig`` has them."""
    for name, option in _options(command).items():
        spec = SETTINGS[name]
        if spec.axis:
            continue
        if spec.flags:
            assert option.opts[0] == spec.flag
        assert spec.help in option.help.replace("\\[", "[")
        parsed = None if option.default is None else spec.value(option.default)  # None: decided per run
        assert parsed == spec.default, name


def test_bookkeeping_settings_never_split_a_comparison():
    bookkeeping = {name for name, spec in SETTINGS.items() if not spec.result}
    assert {"keep_masks", "fidelity", "save", "overwrite", "evals", "device", "batch_size"} == bookkeeping
    assert bookkeeping < _NEVER_SPLIT


def test_a_bad_value_is_the_tables_sentence_at_the_command_line(monkeypatch, capsys):
    code, _, err = cli(monkeypatch, capsys, "compare", "--varp-form", "cubic", "--store", "/nonexistent/x.db")
    assert code == 2
    assert err == "acetui: Unknown --varp-form 'cubic'; choose one of: series, inverse.\n"


# The form's widgets that stand for a setting under another name.
FORM_NAMES = {"metrics": "method", "eval-wikitext2": "evals", "eval-zeroshot": "evals"}


@pytest.mark.asyncio
async def test_the_new_run_form_has_every_setting_and_starts_what_it_shows(tmp_path, calib_file):
    """Every setting has a field; the advanced ones start collapsed; a changed one reaches the runs, and a
    bad one is flagged inline with the CLI's sentence."""
    app = make_app(Store(tmp_path / "runs.db"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()  # mounted, remembered values restored, first check done
        screen = app.screen
        assert {FORM_NAMES.get(key, key) for key in screen.values()} == set(SETTINGS)
        advanced = screen.query_one("#advanced", Collapsible)
        assert advanced.collapsed
        [config] = screen.configs()
        assert config == RunConfig(model=config.model)  # the form's defaults are the table's
        assert {SETTINGS[name].help for name in SETTINGS if SETTINGS[name].group == "advanced"} <= {
            str(widget.render()) for widget in advanced.query(".help").results(Static)
        }

        screen.query_one("#keep_masks", Checkbox).value = True
        screen.query_one("#calib", Input).value = calib_file
        screen.query_one("#owl_m", Input).value = "7"
        await pilot.pause()
        [config] = screen.configs()
        assert (config.keep_masks, config.calib, config.owl_m) == (True, calib_file, 7.0)

        screen.query_one("#dsnot_cycles", Input).value = "0"
        await pilot.pause()
        assert screen.check_all() == ["dsnot_cycles"]
        assert str(screen.query_one("#dsnot_cycles-error", Static).render()) == (
            "--dsnot-cycles must be at least 1 (got 0)."
        )


def test_the_cli_reference_lists_the_table():
    """docs/cli.md's list of settings is the table's (regenerate with acetui.options.settings_markdown())."""
    page = (Path(__file__).parents[1] / "docs" / "cli.md").read_text()
    start = page.index("<!-- settings table:")
    listed = page[page.index("\n", start) + 1 : page.index("<!-- end of settings table -->")]
    assert listed == settings_markdown()
