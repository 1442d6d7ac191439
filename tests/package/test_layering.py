"""The package's layering, read from the imports themselves (ast); docs/ARCHITECTURE.md.

A package per side, and leaves at the top:

* ``kernel/`` runs in the kernel process. It never imports ``client/``, ``shared_channels/``
  or ``server/``. Inside it, the feature modules are leaves: they import no other module of
  the package, except the feature-on-feature edges listed in ``FEATURE_EDGES`` (each a design
  decision), and never the wiring (``ipkernel``, ``kernelapp``); only ``__main__`` and the
  package face import the launcher.
* ``shared_channels/`` (the relay for servers) and ``client/`` (helpers for frontends and
  scripts) never import the kernel side nor ``server/``; ``shared_channels/`` never imports
  jupyter_server (``server/`` puts jupyter_server's websockets on it) nor ``client/``.
* ``outputs/`` (the server's model of running cells' outputs, and its writers) imports no
  other side, and the packages of a server (jupyter_server, pycrdt) only where it writes.
* ``endpoints`` (the connection rule), ``protocol`` (message names and frames) and the
  package ``__init__`` are shared leaves: they import nothing of ours; any side may use them.

A new module must be put in one of the groups below; the test says so if it is not.

Around the package, in the checkout: ``harness/`` (what tests and benchmarks share) and
``benchmarks/`` never import ``tests``, and the package imports none of the three.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "ipykernel_ext"
PACKAGE_DIR = Path(__file__).resolve().parents[2] / PACKAGE

SIDES = {"kernel", "shared_channels", "client", "server", "outputs"}
TOP_MODULES = {"__init__", "__main__", "endpoints", "protocol", "install", "demo"}
SHARED_LEAVES = {"__init__", "endpoints", "protocol"}

KERNEL_WIRING = {"kernel.__init__", "kernel.ipkernel", "kernel.kernelapp"}
KERNEL_FEATURES = {
    "kernel.cell_events",
    "kernel.comm_routing",
    "kernel.comm_echo",
    "kernel.busy_answers",
    "kernel.busy_routing",
    "kernel.control_comm",
    "kernel.iopub",
    "kernel.iopub_adopt",
    "kernel.iopub_backlog",
    "kernel.iopub_notice",
    "kernel.iopub_options",
    "kernel.iopub_stats",
    "kernel.iopub_warning",
    "kernel.main_shell_status",
    "kernel.router_identity",
    "kernel.widget_buffers",
    "kernel.widget_reconcile",
    "kernel.widget_state",
}
#: The kernel-side features built on another feature (importer -> what it may import).
FEATURE_EDGES = {
    # the settings it runs with, what it counts, what waits, and the give-up warning
    "kernel.iopub": {
        "kernel.iopub_backlog",
        "kernel.iopub_options",
        "kernel.iopub_stats",
        "kernel.iopub_warning",
    },
    "kernel.iopub_stats": {"kernel.iopub_options"},  # reports the settings with the counters
    "kernel.iopub_warning": {"kernel.iopub_options", "kernel.iopub_stats"},  # what it logs
    # the no-loss socket, adopted under another app, with the options the kernel declares
    "kernel.iopub_adopt": {"kernel.iopub", "kernel.iopub_options", "kernel.iopub_stats"},
    # tells a cell what the socket missed, and the send timeout in force
    "kernel.iopub_notice": {"kernel.iopub_options", "kernel.iopub_stats"},
    # the answers given mid-cell: what routing claims, the control comm's snapshot, and the
    # check after the cell
    "kernel.busy_answers": {
        "kernel.busy_routing",
        "kernel.control_comm",
        "kernel.main_shell_status",
        "kernel.widget_reconcile",
    },
    # what is claimed depends on the main shell's status and on ipywidgets being loaded
    "kernel.busy_routing": {"kernel.main_shell_status", "kernel.widget_state"},
    "kernel.control_comm": {"kernel.widget_state"},  # answers with the snapshot
    "kernel.widget_reconcile": {"kernel.widget_state"},  # compares with a new snapshot
    "kernel.widget_state": {"kernel.widget_buffers"},  # splits buffers as ipywidgets does
}


def modules() -> list[str]:
    """Every module of the package, dotted below it (``kernel.iopub``, ``server.kernels``)."""
    return sorted(
        ".".join(path.relative_to(PACKAGE_DIR).with_suffix("").parts)
        for path in PACKAGE_DIR.rglob("*.py")
    )


def side_of(module: str) -> str:
    return module.split(".")[0] if "." in module else module


def imports_of(module: str) -> set[str]:
    """The package modules ``module`` imports, anywhere in it (functions included)."""
    path = PACKAGE_DIR / (module.replace(".", "/") + ".py")
    return imports_in(path.read_text(), module)


def imports_in(source: str, module: str) -> set[str]:
    """The package modules (dotted below the package) that ``source``, of ``module``, imports.

    ``from .x import y`` counts as importing ``x`` (and ``x.y`` where that is a module).
    """
    own = set(modules())
    here = [PACKAGE, *module.split(".")[:-1]]
    if module.endswith("__init__"):
        here = [PACKAGE, *module.split(".")[:-1]]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            bases, names = [alias.name for alias in node.names], []
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                parent = here[: len(here) - (node.level - 1)]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            bases, names = [base], [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in bases + names:
            parts = name.split(".")
            if parts[0] != PACKAGE:
                continue
            dotted = ".".join(parts[1:]) or "__init__"
            if dotted in own:
                found.add(dotted)
            elif f"{dotted}.__init__" in own:
                found.add(f"{dotted}.__init__")
    found.discard(module)
    return found


def imports_outside(module: str) -> set[str]:
    """The top-level names of the other packages ``module`` imports."""
    return absolute_imports(PACKAGE_DIR / (module.replace(".", "/") + ".py"))


def absolute_imports(path: Path) -> set[str]:
    """The top-level names ``path`` imports absolutely, anywhere in it (functions included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_every_module_is_in_a_group() -> None:
    unknown = sorted(
        m
        for m in modules()
        if (side_of(m) not in SIDES and m not in TOP_MODULES)
        or (m.startswith("kernel.") and m not in KERNEL_WIRING | KERNEL_FEATURES)
    )
    assert not unknown, f"put {unknown} in a group of tests/package/test_layering.py"
    gone = sorted((KERNEL_WIRING | KERNEL_FEATURES | TOP_MODULES) - set(modules()))
    assert not gone, f"{gone} no longer exist: drop them from tests/package/test_layering.py"


@pytest.mark.parametrize("module", sorted(m for m in modules() if side_of(m) == "kernel"))
def test_the_kernel_side_imports_no_other_side(module: str) -> None:
    other_sides = {"client", "shared_channels", "server", "outputs"}
    others = {m for m in imports_of(module) if side_of(m) in other_sides}
    others |= imports_of(module) & {"demo", "install"}
    assert not others, f"{module} (kernel side) imports {sorted(others)}"


@pytest.mark.parametrize(
    "module", sorted(m for m in modules() if side_of(m) in {"client", "shared_channels"})
)
def test_relay_and_clients_never_import_the_kernel_side(module: str) -> None:
    kernel = {m for m in imports_of(module) if side_of(m) == "kernel"}
    assert not kernel, f"{module} imports the kernel side: {sorted(kernel)}"
    server = {m for m in imports_of(module) if side_of(m) == "server"}
    assert not server, f"{module} imports the server side: {sorted(server)}"


@pytest.mark.parametrize(
    "module", sorted(m for m in modules() if side_of(m) == "shared_channels")
)
def test_the_relay_needs_no_jupyter_server_and_no_client_helpers(module: str) -> None:
    assert "jupyter_server" not in imports_outside(module)
    assert not {m for m in imports_of(module) if side_of(m) == "client"}


@pytest.mark.parametrize("module", sorted(m for m in modules() if side_of(m) == "outputs"))
def test_the_outputs_side_is_server_side_and_a_leaf(module: str) -> None:
    """Outputs (the server's model of running cells) import none of our other sides, and
    jupyter_server / pycrdt only inside functions (the writers), never at import time."""
    others = {m for m in imports_of(module) if side_of(m) != "outputs"}
    assert not others - SHARED_LEAVES, f"{module} imports {sorted(others)}"
    tree = ast.parse((PACKAGE_DIR / (module.replace(".", "/") + ".py")).read_text())
    top = {
        (n.module or "").split(".")[0] if isinstance(n, ast.ImportFrom) else a.name.split(".")[0]
        for n in tree.body
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    }
    assert not top & {"jupyter_server", "pycrdt", "jupyter_ydoc", "nbformat"}, top


def test_only_the_package_face_imports_the_channel_set() -> None:
    """The relay's parts get what they need passed in; none reaches back into the whole."""
    importers = {m for m in modules() if "shared_channels.channels" in imports_of(m)}
    assert importers <= {"shared_channels.__init__"}, importers


@pytest.mark.parametrize("module", sorted(KERNEL_FEATURES))
def test_kernel_features_are_leaves(module: str) -> None:
    allowed = SHARED_LEAVES | FEATURE_EDGES.get(module, set())
    extra = imports_of(module) - allowed
    assert not extra, (
        f"{module} is a feature module but imports {sorted(extra)}: features are leaves "
        "(ipkernel and kernelapp wire them). Move the shared part into its own module, or "
        "add the edge to FEATURE_EDGES if one feature is really built on the other."
    )


def test_only_the_launcher_and_the_face_import_the_app() -> None:
    importers = {m for m in modules() if "kernel.kernelapp" in imports_of(m)}
    assert importers <= {"__main__", "kernel.__init__"}, importers


@pytest.mark.parametrize("module", sorted(SHARED_LEAVES))
def test_shared_leaves_import_nothing_of_ours(module: str) -> None:
    assert imports_of(module) == set()


def test_the_reader_sees_relative_absolute_and_nested_imports() -> None:
    """The import reader itself: a layering test that cannot see an import cannot fail."""
    source = """
import json
import ipykernel_ext.kernel.comm_echo
from ipykernel_ext import endpoints, __version__
from . import iopub
from ..client import RouterClient
from .widget_state import build_widget_state_reply

def later():
    from ..shared_channels.channels import SharedChannels
    import ipykernel_ext
"""
    assert imports_in(source, "kernel.probe") == {
        "kernel.comm_echo",
        "endpoints",
        "kernel.__init__",  # `from . import iopub` runs the package's face first
        "kernel.iopub",
        "client.__init__",
        "kernel.widget_state",
        "shared_channels.channels",
        "__init__",
    }


# --- the checkout around the package: harness/, benchmarks/, tests/ ---------------------------

ROOT = PACKAGE_DIR.parent


def top_level_imports(folder: Path) -> dict[str, set[str]]:
    """For each ``.py`` under ``folder`` (relative path), the top-level names it imports
    absolutely, anywhere in it (functions included)."""
    found: dict[str, set[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        found[str(path.relative_to(ROOT))] = absolute_imports(path)
    return found


@pytest.mark.parametrize("folder", ["harness", "benchmarks"])
def test_the_harness_and_the_benchmarks_never_import_the_tests(folder: str) -> None:
    """What tests and benchmarks share lives in harness/; tests/ is imported by nobody."""
    imports = top_level_imports(ROOT / folder)
    importers = sorted(f for f, names in imports.items() if "tests" in names)
    assert not importers, f"{importers} import tests: move what they need into harness/"


def test_the_package_never_imports_the_harness_or_the_benchmarks() -> None:
    importers = sorted(
        f
        for f, names in top_level_imports(PACKAGE_DIR).items()
        if names & {"harness", "benchmarks", "tests"}
    )
    assert not importers, f"{importers} import the checkout's harness, benchmarks or tests"


def test_the_import_scan_sees_the_checkout_folders() -> None:
    """The scan above cannot pass by finding no files."""
    assert "harness/kernels.py" in top_level_imports(ROOT / "harness")
    assert "harness" in top_level_imports(ROOT / "benchmarks")["benchmarks/trials.py"]
