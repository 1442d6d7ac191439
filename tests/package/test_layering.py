"""The package's layering, read from the imports themselves (ast); docs/ARCHITECTURE.md.

A package per side, rooms inside a side, and leaves at the top:

* ``kernel/`` runs in the kernel process. It never imports ``client/``, ``shared_channels/``
  nor ``server/``. Its rooms (``iopub/``, ``comms/``, ``widgets/``, ``busy/``),
  ``router_identity`` and ``shell_handlers`` import only themselves and the shared leaves,
  except the room-on-room edges of ``ROOM_EDGES`` (each a design decision), and never the
  wiring (``ipkernel``, ``kernelapp``); only ``__main__`` and the kernel's face import the
  launcher.
* ``shared_channels/`` (the relay for servers) and ``client/`` (helpers for frontends and
  scripts) never import the kernel side nor ``server/``; ``shared_channels/`` never imports
  jupyter_server (``server/`` puts jupyter_server's websockets on it) nor ``client/``.
* ``server/outputs/`` (the server's model of running cells' outputs, and its writers) imports
  nothing of ``server/`` outside itself; its model imports no server package at all, the
  writers import them when they write.
* ``endpoints`` (the connection rule), ``protocol`` (channel and message names, frames),
  ``stream_text`` (a stream as the page stores it) and the package ``__init__`` are shared
  leaves: they import nothing of ours but ``protocol``
  (``LEAF_EDGES``), which imports nothing of ours; any side may use them.
* No module imports itself back through others (no circle).

A new module or room must be put in one of the groups below; the test says so if it is not.

Around the package, in the checkout: ``harness/`` (what tests and benchmarks share) and
``benchmarks/`` never import ``tests``, and the package imports none of the three.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

from harness.package_source import PACKAGE_DIR, ROOT, imported_names, modules, path_of
from harness.package_source import package_imports_in as imports_in
from harness.package_source import package_imports_of as imports_of

SIDES = {"kernel", "shared_channels", "client", "server"}
TOP_MODULES = {
    "__init__",
    "__main__",
    "endpoints",
    "protocol",
    "stream_text",
    "install",
    "voila_config",
}
SHARED_LEAVES = {"__init__", "endpoints", "protocol", "stream_text"}
#: The leaves built on another leaf (importer -> what it may import).
LEAF_EDGES = {
    # the channels a client connects to are the kernel's channels
    "endpoints": {"protocol"},
}

KERNEL_WIRING = {"kernel.__init__", "kernel.ipkernel", "kernel.kernelapp", "kernel.zmqshell"}
#: The kernel's rooms (a subpackage each) and its one-module features.
KERNEL_ROOMS = {"kernel.iopub", "kernel.comms", "kernel.widgets", "kernel.busy", "kernel.journal"}
KERNEL_LEAF_MODULES = {"kernel.router_identity", "kernel.shell_handlers", "kernel.orphan"}
#: The rooms built on another room (importer -> what it may import).
ROOM_EDGES = {
    # the mid-cell answers send the widget snapshot, and compare it after the cell
    "kernel.busy": {"kernel.widgets"},
}
#: The outputs model: what imports no server package at all, even inside functions.
OUTPUTS_MODEL = {
    "server.outputs.registry",
    "server.outputs.fold",
    "server.outputs.text",
    "server.outputs.capture",
    "server.outputs.coalesce",
}


def side_of(module: str) -> str:
    return module.split(".")[0] if "." in module else module


def imports_outside(module: str) -> set[str]:
    """The top-level names of the other packages ``module`` imports."""
    return imported_names(path_of(module).read_text())


def room_of(module: str) -> str | None:
    """The kernel room (``kernel.iopub``) or one-module feature a kernel module belongs to."""
    parts = module.split(".")
    if len(parts) >= 3 and ".".join(parts[:2]) in KERNEL_ROOMS:
        return ".".join(parts[:2])
    return module if module in KERNEL_LEAF_MODULES else None


def test_every_module_is_in_a_group() -> None:
    unknown = sorted(
        m
        for m in modules()
        if (side_of(m) not in SIDES and m not in TOP_MODULES)
        or (m.startswith("kernel.") and m not in KERNEL_WIRING and room_of(m) is None)
    )
    assert not unknown, f"put {unknown} in a group of tests/package/test_layering.py"
    rooms = {".".join(m.split(".")[:2]) for m in modules() if m.count(".") >= 2}
    declared = KERNEL_ROOMS | KERNEL_LEAF_MODULES | KERNEL_WIRING | TOP_MODULES | OUTPUTS_MODEL
    gone = sorted(
        d for d in declared if not any(m == d or m.startswith(d + ".") for m in modules())
    )
    assert not gone, f"{gone} no longer exist: drop them from tests/package/test_layering.py"
    assert {r for r in rooms if r.startswith("kernel.")} == KERNEL_ROOMS


@pytest.mark.parametrize("module", sorted(m for m in modules() if side_of(m) == "kernel"))
def test_the_kernel_side_imports_no_other_side(module: str) -> None:
    others = {m for m in imports_of(module) if side_of(m) in SIDES - {"kernel"}}
    others |= imports_of(module) & {"install", "voila_config"}
    assert not others, f"{module} (kernel side) imports {sorted(others)}"


@pytest.mark.parametrize(
    "module", sorted(m for m in modules() if side_of(m) in {"client", "shared_channels"})
)
def test_relay_and_clients_never_import_the_kernel_side(module: str) -> None:
    kernel = {m for m in imports_of(module) if side_of(m) == "kernel"}
    assert not kernel, f"{module} imports the kernel side: {sorted(kernel)}"
    server = {m for m in imports_of(module) if side_of(m) == "server"}
    assert not server, f"{module} imports the server side: {sorted(server)}"


@pytest.mark.parametrize("module", sorted(m for m in modules() if side_of(m) == "shared_channels"))
def test_the_relay_needs_no_jupyter_server_and_no_client_helpers(module: str) -> None:
    assert "jupyter_server" not in imports_outside(module)
    assert not {m for m in imports_of(module) if side_of(m) == "client"}


@pytest.mark.parametrize("module", sorted(m for m in modules() if m.startswith("server.outputs.")))
def test_the_outputs_room_imports_nothing_else_of_the_server(module: str) -> None:
    """The outputs room is fed by the connection classes; it never reaches back to them."""
    others = {
        m
        for m in imports_of(module)
        if side_of(m) == "server" and not m.startswith("server.outputs.")
    }
    assert not others, f"{module} imports {sorted(others)}"


@pytest.mark.parametrize("module", sorted(OUTPUTS_MODEL))
def test_the_outputs_model_imports_no_server_package(module: str) -> None:
    """The model runs without jupyter_server, pycrdt or jupyter_ydoc (tests/unit use it so)."""
    servers = {"jupyter_server", "pycrdt", "jupyter_ydoc", "nbformat", "tornado"}
    assert not imports_outside(module) & servers, imports_outside(module)


def test_only_the_package_face_imports_the_channel_set() -> None:
    """The relay's parts get what they need passed in; none reaches back into the whole."""
    importers = {m for m in modules() if "shared_channels.channels" in imports_of(m)}
    assert importers <= {"shared_channels.__init__"}, importers


@pytest.mark.parametrize("module", sorted(m for m in modules() if room_of(m) is not None))
def test_kernel_rooms_import_only_themselves(module: str) -> None:
    room = room_of(module)
    assert room is not None
    allowed = {m for m in modules() if room_of(m) in {room, *ROOM_EDGES.get(room, set())}}
    extra = imports_of(module) - allowed - SHARED_LEAVES
    assert not extra, (
        f"{module} (room {room}) imports {sorted(extra)}: a room imports only itself "
        "(ipkernel and kernelapp wire the rooms). Move the shared part into its own module, "
        "or add the edge to ROOM_EDGES if one room is really built on the other."
    )


def circle_in(graph: dict[str, set[str]]) -> list[str] | None:
    """The first import circle in ``graph`` (importer -> imported), or None."""
    done: set[str] = set()

    def visit(m: str, path: list[str]) -> list[str] | None:
        if m in path:
            return [*path[path.index(m) :], m]
        if m in done:
            return None
        for n in sorted(graph.get(m, ())):
            found = visit(n, [*path, m])
            if found:
                return found
        done.add(m)
        return None

    for m in sorted(graph):
        found = visit(m, [])
        if found:
            return found
    return None


def test_no_module_imports_itself_back() -> None:
    """No circle among the package's modules (imports anywhere in a module, as ast sees them).
    A package's face importing its own modules is not counted against them."""
    graph = {
        m: {i for i in imports_of(m) if not (i.endswith(".__init__") and m.startswith(i[:-8]))}
        for m in modules()
    }
    assert circle_in(graph) is None, " -> ".join(circle_in(graph) or [])


def test_the_circle_finder_finds_circles() -> None:
    assert circle_in({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert circle_in({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_only_the_launcher_and_the_face_import_the_app() -> None:
    importers = {m for m in modules() if "kernel.kernelapp" in imports_of(m)}
    assert importers <= {"__main__", "kernel.__init__"}, importers


@pytest.mark.parametrize("module", sorted(SHARED_LEAVES))
def test_shared_leaves_import_nothing_of_ours(module: str) -> None:
    assert imports_of(module) <= LEAF_EDGES.get(module, set()), imports_of(module)


def test_the_reader_sees_relative_absolute_and_nested_imports() -> None:
    """The import reader itself: a layering test that cannot see an import cannot fail."""
    source = """
import json
import ipykernel_ext.kernel.comms.echo
from ipykernel_ext import endpoints, __version__
from . import iopub
from ..client import RouterClient
from .widgets.snapshot import build_widget_state_reply

def later():
    from ..shared_channels.channels import SharedChannels
    import ipykernel_ext
"""
    assert imports_in(source, "kernel.probe") == {
        "kernel.comms.echo",
        "endpoints",
        "kernel.__init__",  # `from . import iopub` runs the package's face first
        "kernel.iopub.__init__",
        "client.__init__",
        "kernel.widgets.snapshot",
        "shared_channels.channels",
        "__init__",
    }


# --- the checkout around the package: harness/, benchmarks/, tests/ ---------------------------


def top_level_imports(folder: Path) -> dict[str, set[str]]:
    """For each ``.py`` under ``folder`` (relative path), the top-level names it imports
    absolutely, anywhere in it (functions included)."""
    found: dict[str, set[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        found[str(path.relative_to(ROOT))] = imported_names(path.read_text())
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


#: One concept per module: a module past this many lines holds more than one (split it).
MAX_MODULE_LINES = 400


@pytest.mark.parametrize("module", modules())
def test_no_module_passes_the_line_bound(module: str) -> None:
    lines = len(path_of(module).read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{module} has {lines} lines: split it by concept"


# --- one name, one place ------------------------------------------------------------------


def defined_names(module: str) -> tuple[list[str], list[str]]:
    """The classes ``module`` defines, and its CamelCase module-level type aliases."""
    tree = ast.parse((PACKAGE_DIR / (module.replace(".", "/") + ".py")).read_text())
    classes = [node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    aliases = [
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name) and re.fullmatch(r"[A-Z][a-z]\w*", target.id)
    ]
    return classes, aliases


def test_no_two_modules_or_classes_share_a_name() -> None:
    """A name leads to one place: each module's file name (a package's ``__init__`` and the
    ``__main__`` apart: Python names them) and each class name is the package's once, and a
    type alias is not named as a class (it reads as one in an annotation)."""
    files: dict[str, list[str]] = defaultdict(list)
    classes: dict[str, list[str]] = defaultdict(list)
    aliases: list[tuple[str, str]] = []
    for module in modules():
        if (name := module.rsplit(".", 1)[-1]) not in ("__init__", "__main__"):
            files[name + ".py"].append(module)
        module_classes, module_aliases = defined_names(module)
        for name in module_classes:
            classes[name].append(module)
        aliases += [(name, module) for name in module_aliases]
    shared = {n: m for named in (files, classes) for n, m in named.items() if len(m) > 1}
    shared |= {n: [*classes[n], m] for n, m in aliases if n in classes}
    assert not shared, f"names used twice (rename each to say what it owns): {shared}"
    assert {"protocol.py", "SplitFrames"} <= set(files) | set(classes)  # the scan reads them


#: What splits a message at its delimiter: only ``protocol.split_frames`` may use these.
SPLITTING_NAMES = {"DELIM", "DELIMITER", "feed_identities"}


def splits_frames(source: str) -> bool:
    """Whether code (not a docstring) names the delimiter or jupyter_client's split."""
    for node in ast.walk(ast.parse(source)):
        value = getattr(node, "value", None)
        if isinstance(node, ast.Constant) and isinstance(value, bytes) and b"<IDS|MSG>" in value:
            return True
        named = {getattr(node, "id", None), getattr(node, "attr", None)}
        if isinstance(node, ast.ImportFrom):
            named |= {alias.name for alias in node.names}
        if named & SPLITTING_NAMES:
            return True
    return False


def test_frames_are_split_only_in_protocol() -> None:
    """One split (``protocol.split_frames``) and one bytes helper (``protocol.frame_bytes``)."""
    assert [m for m in modules() if splits_frames(module_source(m))] == ["protocol"]
    for code in ('x = b"<IDS|MSG>"', "s.feed_identities(m)", "from a import DELIM", "DELIMITER"):
        assert splits_frames(code), code
    assert not splits_frames('"""Frames ``[*identities, DELIMITER, ...]``."""')


def module_source(module: str) -> str:
    return (PACKAGE_DIR / (module.replace(".", "/") + ".py")).read_text()
