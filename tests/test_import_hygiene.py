"""`core` is the engine: it must import with the UI packages unimportable."""

import importlib.util
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import acetui_core

BLOCK = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split('.')[0] in {'acetui', 'textual', 'typer', 'textual_plotext', 'plotext'}:
            raise ImportError(f'core must not import {name}')
sys.meta_path.insert(0, Block())
import importlib
for name in MODULES:
    importlib.import_module(name)
print('ok')
"""


REPO = Path(__file__).parent.parent


# Modules of the engine that need a package only a GPU install brings (CUDA builds of PyTorch bring
# Triton): imported here where it is installed; the engine imports them only for CUDA tensors.
NEEDS = {"acetui_core.pruning.fusedsums": "triton"}


def test_core_imports_without_ui_packages():
    modules = [
        m.name
        for m in pkgutil.walk_packages(acetui_core.__path__, "acetui_core.")
        if m.name not in NEEDS or importlib.util.find_spec(NEEDS[m.name]) is not None
    ]
    assert "acetui_core.pruning.pipeline" in modules and "acetui_core.storage.store" in modules
    code = f"MODULES = {modules!r}\n" + BLOCK
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_core_source_names_no_ui_package():
    for path in Path(acetui_core.__file__).parent.rglob("*.py"):
        text = path.read_text()
        found = re.findall(r"^\s*(?:from|import) (textual|typer|acetui)\b(?!_)", text, flags=re.M)
        assert not found, f"{path.name} imports {found}"
