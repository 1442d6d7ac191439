"""The package's layering, as README states it, read from the imports themselves (ast).

* Kernel-side feature modules are leaves: they import no other module of the package,
  except the few feature-on-feature edges listed in ``FEATURE_EDGES`` (each a deliberate
  design decision), and never the wiring.
* ``app`` and ``kernel`` wire the features together; only the launcher imports ``app``.
* Client-side modules never import the kernel side (and the kernel side never imports
  client-side modules).
* ``endpoints`` (the connection rule) and the package ``__init__`` (names and version) are
  shared leaves: they import nothing of ours, and either side may import them.

A new module must be put in one of the groups below; the test says so if it is not.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "ipykernel_ext"
PACKAGE_DIR = Path(__file__).resolve().parents[1] / PACKAGE

WIRING = {"app", "kernel", "__main__"}
KERNEL_FEATURES = {
    "echo",
    "widget_state",
    "widget_buffers",
    "iopub",
    "iopub_adopt",
    "reconnect",
    "router_identity",
    "install",
}
CLIENT_SIDE = {
    "client",
    "demo",
    "router_client",
    "router_reach",
    "server",
    "shared_channels",
    "shared_clients",
    "shared_messages",
    "shared_outbox",
    "shared_readiness",
    "shared_sockets",
}
SHARED_LEAVES = {"__init__", "endpoints"}

#: The kernel-side features built on another feature (importer -> what it may import).
FEATURE_EDGES = {
    "iopub_adopt": {"iopub"},  # the same no-loss socket, adopted when another app bound it
    "reconnect": {"widget_state"},  # the busy-kernel answer sends widget_state's snapshot
    "widget_state": {"widget_buffers"},  # the snapshot splits buffers as ipywidgets does
}


def modules() -> list[str]:
    return sorted(path.stem for path in PACKAGE_DIR.glob("*.py"))


def imports_of(module: str) -> set[str]:
    """The package modules ``module`` imports, anywhere in it (functions included)."""
    return imports_in((PACKAGE_DIR / f"{module}.py").read_text(), module)


def imports_in(source: str, module: str) -> set[str]:
    """The package modules that ``source`` (the text of ``module``) imports."""
    own = set(modules())
    tree = ast.parse(source)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                names = [node.module or ""]
                base = node.module or ""
            else:
                base = ".".join([PACKAGE, node.module] if node.module else [PACKAGE])
                names = [base]
            # `from ipykernel_ext import echo` / `from . import echo` import the submodule.
            if base == PACKAGE:
                names += [f"{PACKAGE}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] != PACKAGE:
                continue
            target = parts[1] if len(parts) > 1 else "__init__"
            if target in own:
                found.add(target)
            elif len(parts) == 1:
                found.add("__init__")
    found.discard(module)
    return found


def test_every_module_is_in_a_group() -> None:
    grouped = WIRING | KERNEL_FEATURES | CLIENT_SIDE | SHARED_LEAVES
    unknown = sorted(set(modules()) - grouped)
    assert not unknown, f"put {unknown} in a group of tests/test_layering.py (see README)"
    gone = sorted(grouped - set(modules()))
    assert not gone, f"{gone} no longer exist: drop them from tests/test_layering.py"


@pytest.mark.parametrize("module", sorted(KERNEL_FEATURES))
def test_feature_modules_are_leaves(module: str) -> None:
    allowed = SHARED_LEAVES | FEATURE_EDGES.get(module, set())
    extra = imports_of(module) - allowed
    assert not extra, (
        f"{PACKAGE}.{module} is a feature module but imports {sorted(extra)}: features are "
        "leaves (app and kernel wire them). Move the shared part into its own module, or "
        "add the edge to FEATURE_EDGES if one feature is really built on the other."
    )


def test_only_the_launcher_imports_the_app_and_only_wiring_imports_the_kernel() -> None:
    importers = {m: imports_of(m) for m in modules()}
    assert {m for m, found in importers.items() if "app" in found} <= {"__main__"}
    assert {m for m, found in importers.items() if "kernel" in found} <= {"app", "__main__"}


@pytest.mark.parametrize("module", sorted(CLIENT_SIDE))
def test_client_side_never_imports_the_kernel_side(module: str) -> None:
    kernel_side = WIRING | KERNEL_FEATURES
    assert not imports_of(module) & kernel_side, (
        f"{PACKAGE}.{module} (client side) imports {sorted(imports_of(module) & kernel_side)}"
    )


@pytest.mark.parametrize("module", sorted(WIRING | KERNEL_FEATURES))
def test_kernel_side_never_imports_the_client_side(module: str) -> None:
    assert not imports_of(module) & CLIENT_SIDE, (
        f"{PACKAGE}.{module} (kernel side) imports {sorted(imports_of(module) & CLIENT_SIDE)}"
    )


@pytest.mark.parametrize("module", sorted(SHARED_LEAVES))
def test_shared_leaves_import_nothing_of_ours(module: str) -> None:
    assert imports_of(module) == set()


def test_the_reader_sees_relative_absolute_and_nested_imports() -> None:
    """The import reader itself: a layering test that cannot see an import cannot fail."""
    source = """
import json
import ipykernel_ext.echo
from ipykernel_ext import widget_state, __version__
from . import iopub
from .endpoints import endpoint

def later():
    from .kernel import ExtKernel
    import ipykernel_ext
"""
    assert imports_in(source, "probe") == {
        "echo", "widget_state", "iopub", "endpoints", "kernel", "__init__"
    }
    assert imports_of("install") == {"__init__"}  # `from . import KERNEL_NAME`
    assert imports_of("__main__") == {"app"}
