"""The package read as source, never imported: its modules, and what each one imports (ast).

The package tests that hold a rule over every module (the layering, the declared
dependencies) read it this way. A module is named dotted below the package (``kernel.iopub``,
``server.kernels``, ``__init__`` for the package's face, ``kernel.__init__`` for a
subpackage's); imports are found anywhere in a file, inside functions too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "ipykernel_ext"
PACKAGE_DIR = ROOT / PACKAGE


def modules() -> list[str]:
    """Every module of the package, dotted below it (``kernel.iopub``, ``server.kernels``)."""
    return sorted(
        ".".join(path.relative_to(PACKAGE_DIR).with_suffix("").parts)
        for path in PACKAGE_DIR.rglob("*.py")
    )


def path_of(module: str) -> Path:
    return PACKAGE_DIR / (module.replace(".", "/") + ".py")


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported_names(source: str, type_checking: bool = True) -> set[str]:
    """The top-level names ``source`` imports absolutely; with ``type_checking=False``, not
    counting a block under ``if TYPE_CHECKING:`` (the type checker's concern)."""
    tree = ast.parse(source)
    skipped: set[int] = set()
    if not type_checking:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and _is_type_checking(node.test):
                skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def package_imports_in(source: str, module: str) -> set[str]:
    """The package modules that ``source``, of ``module``, imports (dotted below the package).

    ``from .x import y`` counts as importing ``x`` (and ``x.y`` where that is a module).
    """
    own = set(modules())
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


def package_imports_of(module: str) -> set[str]:
    """The package modules ``module`` imports."""
    return package_imports_in(path_of(module).read_text(), module)
