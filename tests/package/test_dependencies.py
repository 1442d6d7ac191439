"""Every package the package imports is declared in pyproject.toml, where its side needs it.

Read from the imports themselves (ast, top-level and inside functions; a block under
``if TYPE_CHECKING:`` is left out, the type checker's concern), each top-level name mapped to
the distribution that installs it (``importlib.metadata.packages_distributions()``):

* any module: declared in ``[project] dependencies`` (what ``pip install ipykernel-ext``
  brings), or
* a module of a side in :data:`SIDE_EXTRAS`: in one of that side's extras (the server side runs
  only in a jupyter_server, which the ``server`` or ``collab`` extra installs).

A package that reaches us only through another's requirements (IPython through ipykernel,
nbformat through jupyter_server) is still declared: its floor and cap are then ours to choose
and to test (``.ci/lowest-pins.py`` pins the runtime floors), not left to another package.
"""

from __future__ import annotations

import re
import sys
import tomllib
from collections.abc import Mapping
from importlib.metadata import packages_distributions

from harness.package_source import PACKAGE, ROOT, imported_names, modules, path_of

PYPROJECT = ROOT / "pyproject.toml"

#: The sides (subpackages) an extra may provide for, and those extras. Every other module
#: (the kernel, the relay, the client helpers, the top-level modules) has only the runtime
#: dependencies.
SIDE_EXTRAS = {"server": ("server", "collab")}

REQUIREMENT_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them: lower case, runs of ``-_.`` as ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(pyproject_text: str) -> dict[str | None, set[str]]:
    """The canonical names each extra declares; key None: ``[project] dependencies``."""
    project = tomllib.loads(pyproject_text)["project"]
    groups: dict[str | None, list[str]] = {
        None: project.get("dependencies", []),
        **project.get("optional-dependencies", {}),
    }
    names: dict[str | None, set[str]] = {}
    for group, requirements in groups.items():
        names[group] = set()
        for requirement in requirements:
            match = REQUIREMENT_NAME.match(requirement)
            assert match, (
                f"cannot read the requirement {requirement!r} in {group or 'dependencies'}"
            )
            names[group].add(canonical(match.group(1)))
    return names


def package_imports() -> dict[str, set[str]]:
    """Module (dotted below the package) -> the other packages' top-level names it imports."""
    found: dict[str, set[str]] = {}
    for module in modules():
        names = imported_names(path_of(module).read_text(), type_checking=False) - {PACKAGE}
        found[module] = {n for n in names if n not in sys.stdlib_module_names}
    return found


def distributions_of(name: str, installed: Mapping[str, list[str]]) -> set[str]:
    """The canonical distributions that install the top-level ``name``: the one named like it
    when several share it (``pycrdt``, not the ``pycrdt-store`` that adds a subpackage), else
    all of them, any of which may be the declared one. Empty: nothing installed provides it."""
    dists = {canonical(d) for d in installed.get(name, [])}
    return {canonical(name)} if canonical(name) in dists else dists


def undeclared(
    pyproject_text: str,
    imports: dict[str, set[str]] | None = None,
    installed: Mapping[str, list[str]] | None = None,
) -> dict[str, list[str]]:
    """Distribution (or ``?name`` when no installed distribution provides the import) -> the
    modules importing it where neither the runtime dependencies nor their side's extras
    declare it. Empty when everything is declared. ``imports`` defaults to the package's
    (:func:`package_imports`), ``installed`` to this environment's top-level names."""
    groups = declared(pyproject_text)
    installed = packages_distributions() if installed is None else installed
    missing: dict[str, list[str]] = {}
    for module, names in (package_imports() if imports is None else imports).items():
        extras = SIDE_EXTRAS.get(module.split(".")[0], ())
        allowed = groups[None].union(*(groups.get(e, set()) for e in extras))
        for name in sorted(names):
            dists = distributions_of(name, installed)
            if not dists:
                missing.setdefault(f"?{name}", []).append(module)
            elif not dists & allowed:
                for dist in sorted(dists):
                    missing.setdefault(dist, []).append(module)
    return missing


def test_every_imported_distribution_is_declared_where_its_side_needs_it() -> None:
    missing = undeclared(PYPROJECT.read_text())
    assert missing == {}, (
        "imported but not declared in pyproject.toml ([project] dependencies, or for "
        f"{SIDE_EXTRAS} those extras): {missing}"
    )


def without_requirement(pyproject_text: str, name: str) -> str:
    """``pyproject_text`` with every requirement line naming ``name`` removed."""
    pattern = re.compile(rf'^\s*"{name}[<>=!~ ;,"].*\n', re.MULTILINE | re.IGNORECASE)
    stripped, count = pattern.subn("", pyproject_text)
    assert count, f"{name} is not declared on a line of its own"
    return stripped


def test_the_check_reports_a_removed_runtime_declaration() -> None:
    """jupyter_core (the kernel's paths, the writers' ensure_async) undeclared: it says so,
    naming the modules, and nothing else changes."""
    text = PYPROJECT.read_text()
    before = undeclared(text)
    after = undeclared(without_requirement(text, "jupyter_core"))
    assert set(after) - set(before) == {"jupyter-core"}, after
    assert "kernel.kernelapp" in after["jupyter-core"], after


def test_an_extra_covers_its_side_only() -> None:
    """A package declared only in the server extra: fine for a server module, reported for a
    kernel module importing it."""
    text = PYPROJECT.read_text().replace(
        'server = ["jupyter_server', 'server = ["a-server-only-package", "jupyter_server', 1
    )
    assert "a-server-only-package" in declared(text)["server"]
    imports = {"server.outputs.writer": {"a_server_only"}, "kernel.ipkernel": {"a_server_only"}}
    installed = {"a_server_only": ["a_server_only_package"]}
    missing = undeclared(text, imports, installed)
    assert missing == {"a-server-only-package": ["kernel.ipkernel"]}, missing
