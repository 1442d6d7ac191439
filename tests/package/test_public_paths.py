"""Every name a user types keeps working, imported from a fresh interpreter.

These paths are written into kernelspecs, cluster images, server config and scripts
(README.md, docs/CLUSTER.md, PROTOCOL.md "Names"); moving a module must not break them.
:data:`PUBLIC` lists them with where they are used; every path the docs show is checked too,
read from their code (so a module that moves without its docs fails here).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: What users read: the README and every page under docs/.
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

PUBLIC = [
    "ipykernel_ext.kernel.ExtKernel",  # --kernel-class-name, kernel_class=, embed_kernel
    "ipykernel_ext.kernel.ExtKernelApp",
    "ipykernel_ext.kernel.handle_waiting_comms",  # a blocking cell lets widget events through
    "ipykernel_ext.server.SharedChannelsConnection",  # kernel_websocket_connection_class
    "ipykernel_ext.server.GatewayOutputsConnection",  # the same, with --gateway-url
    "ipykernel_ext.server.KeepOutputs",  # c.KeepOutputs.keep_outputs (config of both)
    # jpserver_extensions {"ipykernel_ext": ...} (jupyter_server_config.d/ipykernel_ext.json)
    "ipykernel_ext._jupyter_server_extension_points",
    "ipykernel_ext.server.extension._load_jupyter_server_extension",
    "ipykernel_ext.shared_channels.SharedChannels",
    "ipykernel_ext.client.is_own_echo",
    "ipykernel_ext.client.fetch_widget_states",
    "ipykernel_ext.client.async_fetch_widget_states",
    "ipykernel_ext.client.WidgetStateError",
    "ipykernel_ext.client.RouterClient",
    "ipykernel_ext.client.KernelUnreachable",
    "ipykernel_ext.install.InstallExtKernelSpecApp",  # the install subcommand
]


@pytest.mark.parametrize("path", PUBLIC)
def test_public_path_imports_in_a_fresh_interpreter(path: str) -> None:
    module, name = path.rsplit(".", 1)
    code = f"import importlib; getattr(importlib.import_module({module!r}), {name!r})"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_the_launcher_runs_as_users_type_it() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ipykernel_ext", "--version"], capture_output=True, text=True
    )
    assert proc.returncode == 0 and "ipykernel" in proc.stdout, proc.stdout + proc.stderr


# --- every path the docs show ----------------------------------------------------------------

FENCED = re.compile(r"^(```|~~~)[^\n]*\n(.*?)^\1", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"(`+)(.+?)\1", re.DOTALL)
#: A dotted path, not the tail of a file path or of a longer name (``config.d/ipykernel_ext.json``).
DOTTED = re.compile(r"(?<![\w./\\-])ipykernel_ext(?:\.[A-Za-z_]\w*)+")
#: ``from ipykernel_ext.<...> import a, b as c`` on one line, or in parentheses over several.
FROM_IMPORT = re.compile(
    r"^\s*from\s+(ipykernel_ext(?:\.\w+)*)\s+import\s+(\([^)]*\)|[^\n#;]+)", re.MULTILINE
)
#: A last part that makes the match a file name, not an import path.
FILE_SUFFIXES = {"json", "py", "md", "toml", "txt", "cfg", "ipynb", "yaml", "yml"}


def code_of(markdown: str) -> list[str]:
    """The fenced blocks' and the inline code spans' text."""
    blocks = [m.group(2) for m in FENCED.finditer(markdown)]
    prose = FENCED.sub("", markdown)
    return blocks + [m.group(2) for m in INLINE.finditer(prose)]


def shown_paths(markdown: str) -> set[str]:
    """Every ``ipykernel_ext.<...>`` path the page's code shows, and every name its code
    imports ``from ipykernel_ext.<...>``."""
    paths: set[str] = set()
    for code in code_of(markdown):
        paths.update(m.group(0) for m in DOTTED.finditer(code))
        for module, names in FROM_IMPORT.findall(code):
            for name in names.replace("(", " ").replace(")", " ").split(","):
                words = name.split()  # "name" or "name as alias"
                if words:
                    paths.add(f"{module}.{words[0]}")
    return {p for p in paths if p.rsplit(".", 1)[-1] not in FILE_SUFFIXES}


def test_the_reader_finds_paths_in_code_only() -> None:
    page = (
        "Prose ipykernel_ext.not.code is not read; `ipykernel_ext.kernel.ExtKernel()` is.\n"
        "`jupyter_server_config.d/ipykernel_ext.json` is a file, `ipykernel_ext.json` too.\n"
        "```python\nfrom ipykernel_ext.client import is_own_echo, fetch_widget_states as f\n"
        "from ipykernel_ext.client import (\n    RouterClient,\n    KernelUnreachable,\n)\n"
        'c.X.cls = "ipykernel_ext.server.SharedChannelsConnection"\n```\n'
    )
    assert shown_paths(page) == {
        "ipykernel_ext.kernel.ExtKernel",
        "ipykernel_ext.client",
        "ipykernel_ext.client.is_own_echo",
        "ipykernel_ext.client.fetch_widget_states",
        "ipykernel_ext.client.RouterClient",
        "ipykernel_ext.client.KernelUnreachable",
        "ipykernel_ext.server.SharedChannelsConnection",
    }


def test_every_path_the_docs_show_imports_in_a_fresh_interpreter() -> None:
    shown: dict[str, str] = {}
    for doc in DOCS:
        for path in shown_paths(doc.read_text()):
            shown.setdefault(path, doc.name)
    assert "ipykernel_ext.kernel.ExtKernel" in shown, "the docs reader found none of the paths"
    # One interpreter for all of them: fresh (nothing of the package imported before), fast.
    code = (
        "import json, sys\n"
        "from tests.dotted_paths import resolve\n"
        "paths = json.loads(sys.argv[1])\n"
        "print(json.dumps({p: why for p in paths if (why := resolve(p))}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(sorted(shown))],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    broken = {f"{path} ({shown[path]})": why for path, why in json.loads(proc.stdout).items()}
    assert broken == {}, f"paths the docs show that do not import: {broken}"
