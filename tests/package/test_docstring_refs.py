"""Every cross-reference in the package's docstrings and comments names something that exists.

A Sphinx-style reference (``:mod:``, ``:class:``, ``:func:``, ``:meth:``, ``:data:``,
``:attr:``, ``:exc:``, ``:obj:``; ``~``, ``!`` and ``title <target>`` allowed) to
``ipykernel_ext`` or with leading dots (resolved as a relative import) must import: the longest
importable module prefix, then attributes (:func:`tests.dotted_paths.resolve`, in this
process). A module moved or a name renamed without its references fails here, naming the file
and line. Other packages' references and bare names (``:meth:`run```) are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from tests.dotted_paths import resolve

PACKAGE = "ipykernel_ext"
PACKAGE_DIR = Path(__file__).resolve().parents[2] / PACKAGE

ROLE = re.compile(r":(?:py:)?(?:mod|class|func|meth|data|attr|exc|obj):`([^`]+)`")


class Reference(NamedTuple):
    where: str  # path:line
    written: str  # the role's text
    target: str  # the dotted path it names


def target_of(written: str) -> str:
    """The dotted name a role's text names: ``title <target>``, ``~``/``!``, ``()`` dropped;
    a target wrapped over two lines is read joined."""
    explicit = re.search(r"<([^<>]+)>\s*$", written)
    text = re.sub(r"\s+", "", explicit.group(1) if explicit else written)
    return text.lstrip("~!").removesuffix("()")


def absolute(target: str, module: str, is_package: bool) -> str:
    """``target`` made absolute against ``module`` (``is_package``: an ``__init__``)."""
    dots = len(target) - len(target.lstrip("."))
    if not dots:
        return target
    base = module if is_package else module.rsplit(".", 1)[0]
    for _ in range(dots - 1):
        base = base.rsplit(".", 1)[0]
    return f"{base}.{target[dots:]}"


def references_in(source: str, module: str, is_package: bool, where: str) -> list[Reference]:
    """The references in ``source`` (module ``module``) to the package, absolute."""
    found = []
    for match in ROLE.finditer(source):
        target = target_of(match.group(1))
        if not (target.startswith(".") or target.split(".")[0] == PACKAGE):
            continue
        line = source.count("\n", 0, match.start()) + 1
        found.append(
            Reference(f"{where}:{line}", match.group(0), absolute(target, module, is_package))
        )
    return found


def package_references() -> list[Reference]:
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        module = ".".join(parts[:-1] if is_package else parts)
        where = str(path.relative_to(PACKAGE_DIR.parent))
        found += references_in(path.read_text(), module, is_package, where)
    return found


def test_references_are_read_and_made_absolute() -> None:
    source = (
        ":mod:`.owner` :class:`~.owner.OutputsOwner` :func:`..kernel.ExtKernel` "
        ":meth:`ipykernel_ext.x.Y.z()` :class:`the class <.fold.CellOutputs>` "
        ":class:`SharedChannels` :func:`jupyter_client.run` :data:`!..protocol.CONTENT`"
    )
    targets = [
        r.target
        for r in references_in(source, "ipykernel_ext.server.outputs", True, "x/__init__.py")
    ]
    assert targets == [
        "ipykernel_ext.server.outputs.owner",
        "ipykernel_ext.server.outputs.owner.OutputsOwner",
        "ipykernel_ext.server.kernel.ExtKernel",
        "ipykernel_ext.x.Y.z",
        "ipykernel_ext.server.outputs.fold.CellOutputs",
        "ipykernel_ext.server.protocol.CONTENT",
    ]
    in_module = references_in(
        ":mod:`.comm_routing`", "ipykernel_ext.kernel.comms.cells", False, "m"
    )
    assert [r.target for r in in_module] == ["ipykernel_ext.kernel.comms.comm_routing"]


def test_every_reference_in_the_package_resolves() -> None:
    references = package_references()
    assert len(references) > 20, f"the reader found only {references}"
    broken = [f"{r.where}: {r.written} -> {why}" for r in references if (why := resolve(r.target))]
    assert broken == [], "references to nothing:\n" + "\n".join(broken)
