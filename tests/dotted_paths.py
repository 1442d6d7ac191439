"""Whether a dotted path names something that exists: a module, or a module's attribute.

Shared by the package tests that check the paths users see: those the docs show
(tests/package/test_public_paths.py, in a fresh interpreter) and the cross-references in
the package's docstrings (tests/package/test_docstring_refs.py). Imports nothing of the
package itself, so a fresh interpreter imports only what each path needs.
"""

from __future__ import annotations

import importlib


def _is_missing(exc: ModuleNotFoundError, name: str) -> bool:
    """The module ``name`` (or a package above it) does not exist; False when ``name``
    exists but something it imports is missing."""
    missing = exc.name or ""
    return name == missing or name.startswith(missing + ".")


def _is_namespace(module: object) -> bool:
    spec = getattr(module, "__spec__", None)
    return spec is not None and spec.origin is None and spec.submodule_search_locations is not None


def resolve(path: str) -> str | None:
    """None if ``path`` imports: the longest importable module prefix, then each remaining
    name an attribute of the one before. Otherwise why not, naming the part that is missing
    (an error raised while importing a module that exists is reported, not skipped). A
    namespace package does not count: the package has none, and a wheel has no empty folder."""
    parts = path.split(".")
    for k in range(len(parts), 0, -1):
        module = ".".join(parts[:k])
        try:
            obj = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if _is_missing(exc, module):
                continue
            return f"importing {module}: {type(exc).__name__}: {exc}"
        except Exception as exc:
            return f"importing {module}: {type(exc).__name__}: {exc}"
        if _is_namespace(obj):  # a folder without __init__.py (left behind by a move)
            return f"{module} is a folder without __init__.py, not a package"
        for depth, name in enumerate(parts[k:], start=k):
            if not hasattr(obj, name):
                owner = ".".join(parts[:depth])
                return f"{owner} has no attribute {name!r}"
            obj = getattr(obj, name)
        return None
    return f"no module {parts[0]!r}"
