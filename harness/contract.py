"""Whether another package's name still has the shape we rely on: shapes, a row, the checker.

:class:`Row` names an upstream name (``"module:Qualified.name"``), the :class:`Shape` s we rely
on (:class:`Function` signature and kind, :class:`Accepts`, :class:`Value`, :class:`IsProperty`,
:class:`Trait`, :class:`Attribute` on a small new instance, :class:`Source` patterns, a
:class:`Probe` that calls it), the files of ours that use it and why; :func:`check` says what no
longer holds and :func:`failure_message` names the name and our files. The table of what the
package relies on is tests/package/test_contract.py.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

ImportModule = Callable[[str], types.ModuleType]

_MISSING = object()


# --- shapes ---------------------------------------------------------------------------------


class Shape:
    """What we rely on about one upstream name. ``problems`` returns what does not hold."""

    def describe(self) -> str:
        raise NotImplementedError

    def problems(self, owner: Any, name: str, value: Any) -> list[str]:
        raise NotImplementedError


def _kind(owner: Any, name: str, value: Any) -> str:
    """How ``name`` is defined on ``owner``: staticmethod, classmethod, property, ..."""
    raw = inspect.getattr_static(owner, name, None) if isinstance(owner, type) else None
    if isinstance(raw, staticmethod):
        return "staticmethod"
    if isinstance(raw, classmethod):
        return "classmethod"
    if isinstance(raw, property):
        return "property"
    if inspect.iscoroutinefunction(value):
        return "async function"
    if callable(value):
        return "function"
    return type(value).__name__


class Function(Shape):
    """A callable taking ``params`` first, in this order; any further ones have defaults."""

    def __init__(self, *params: str, kind: str = "function") -> None:
        self.params = params
        self.kind = kind  # or "async function", "staticmethod", "classmethod"

    def describe(self) -> str:
        return f"{self.kind} ({', '.join(self.params)})"

    def problems(self, owner: Any, name: str, value: Any) -> list[str]:
        found = _kind(owner, name, value)
        if found != self.kind:
            return [f"is a {found}, not a {self.kind}"]
        try:
            signature = inspect.signature(value)
        except (TypeError, ValueError) as exc:
            return [f"has no readable signature ({exc})"]
        params = list(signature.parameters.values())
        names = tuple(p.name for p in params[: len(self.params)])
        out = []
        if names != self.params:
            out.append(f"takes {signature}, expected ({', '.join(self.params)}, ...)")
        for extra in params[len(self.params) :]:
            if extra.default is inspect.Parameter.empty and extra.kind not in (
                inspect.Parameter.VAR_POSITIONAL,
                inspect.Parameter.VAR_KEYWORD,
            ):
                out.append(f"has a new required parameter {extra.name!r}: {signature}")
        return out


class Accepts(Shape):
    """A callable that accepts these keyword arguments (in any position)."""

    def __init__(self, *keywords: str) -> None:
        self.keywords = keywords

    def describe(self) -> str:
        return f"accepts {', '.join(self.keywords)}"

    def problems(self, owner: Any, name: str, value: Any) -> list[str]:
        parameters = inspect.signature(value).parameters
        return [f"no longer accepts {k!r}" for k in self.keywords if k not in parameters]


@dataclass(frozen=True)
class Value(Shape):
    """A module or class attribute that is an instance of ``type_``."""

    type_: type | tuple[type, ...]

    def describe(self) -> str:
        return f"a {_type_names(self.type_)}"

    def problems(self, owner: Any, name: str, value: Any) -> list[str]:
        if isinstance(value, self.type_):
            return []
        return [f"is a {type(value).__name__}, not a {_type_names(self.type_)}"]


@dataclass(frozen=True)
class IsProperty(Shape):
    def describe(self) -> str:
        return "a property"

    def problems(self, owner: Any, name: str, value: Any) -> list[str]:
        found = _kind(owner, name, value)
        return [] if found == "property" else [f"is a {found}, not a property"]


@dataclass(frozen=True)
class Trait(Shape):
    """A traitlets trait of the class, of this trait type (``traitlets.Any`` etc.)."""

    trait_type: str

    def describe(self) -> str:
        return f"a traitlets {self.trait_type} trait"

    def problems(self, owner: Any, name: str, value: Any) -> list[str]:
        import traitlets

        traits = owner.class_traits() if hasattr(owner, "class_traits") else {}
        if name not in traits:
            return ["is no longer a trait"]
        expected = getattr(traitlets, self.trait_type)
        if not isinstance(traits[name], expected):
            return [f"is a {type(traits[name]).__name__} trait, not a {self.trait_type}"]
        return []


@dataclass(frozen=True)
class Attribute(Shape):
    """An instance attribute (set in ``__init__``): checked on ``make()``'s instance."""

    type_: type | tuple[type, ...]
    make: Callable[[], Any]

    def describe(self) -> str:
        return f"an instance attribute holding a {_type_names(self.type_)}"

    def problems(self, owner: Any, name: str, value: Any) -> list[str]:
        instance = self.make()
        found = getattr(instance, name, _MISSING)
        if found is _MISSING:
            return [f"is not set on a new {type(instance).__name__} instance"]
        if not isinstance(found, self.type_):
            return [f"holds a {type(found).__name__}, not a {_type_names(self.type_)}"]
        return []


class Source(Shape):
    """A behaviour only the code shows: its source contains each regular expression."""

    def __init__(self, *patterns: str) -> None:
        self.patterns = patterns

    def describe(self) -> str:
        return "code matching " + ", ".join(repr(p) for p in self.patterns)

    def problems(self, owner: Any, name: str, value: Any) -> list[str]:
        target: Any = value.fget if isinstance(value, property) else value
        try:
            text = inspect.getsource(target)
        except (OSError, TypeError) as exc:
            return [f"has no readable source ({exc})"]
        missing = [p for p in self.patterns if not re.search(p, text)]
        return [f"no longer has code matching {p!r}" for p in missing]


@dataclass(frozen=True)
class Probe(Shape):
    """A behaviour checked by calling it: ``check(value)`` returns what is wrong, or None."""

    description: str
    check: Callable[[Any], str | None]

    def describe(self) -> str:
        return self.description

    def problems(self, owner: Any, name: str, value: Any) -> list[str]:
        try:
            problem = self.check(value)
        except Exception as exc:
            problem = f"raised {type(exc).__name__}: {exc}"
        return [] if problem is None else [problem]


def _type_names(type_: type | tuple[type, ...]) -> str:
    types_ = type_ if isinstance(type_, tuple) else (type_,)
    return " or ".join(t.__name__ for t in types_)


# --- the table ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    path: str  # "module:Qualified.name"
    shapes: Sequence[Shape]
    users: tuple[str, ...]
    why: str = ""

    def because(self, why: str) -> Row:
        return dataclasses.replace(self, why=why)

    @property
    def module(self) -> str:
        return self.path.split(":")[0]

    @property
    def qualname(self) -> str:
        return self.path.split(":")[1]

    @property
    def name(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]


# --- the checker ----------------------------------------------------------------------------


def resolve(row: Row, import_module: ImportModule = importlib.import_module) -> tuple[Any, Any]:
    """``(owner, value)`` of the row's name; raises LookupError saying what is missing."""
    try:
        owner: Any = import_module(row.module)
    except ImportError as exc:
        raise LookupError(f"module {row.module} cannot be imported ({exc})") from exc
    parts = row.qualname.split(".")
    for index, part in enumerate(parts):
        if isinstance(owner, type) and index == len(parts) - 1 and _is_instance_attribute(row):
            return owner, None  # set in __init__: the shape checks a new instance
        value = getattr(owner, part, _MISSING)
        if value is _MISSING and isinstance(owner, type) and index == len(parts) - 1:
            traits = owner.class_traits() if hasattr(owner, "class_traits") else {}
            value = traits.get(part, _MISSING)
        if value is _MISSING:
            where = ".".join([row.module, *parts[:index]])
            raise LookupError(f"{where} has no attribute {part!r}")
        if index == len(parts) - 1:
            return owner, value
        owner = value
    raise AssertionError("unreachable")  # pragma: no cover


def _is_instance_attribute(row: Row) -> bool:
    return all(isinstance(s, (Attribute, Probe)) for s in row.shapes) and any(
        isinstance(s, Attribute) for s in row.shapes
    )


def check(row: Row, import_module: ImportModule = importlib.import_module) -> list[str]:
    """What no longer holds of ``row`` (empty if everything does)."""
    try:
        owner, value = resolve(row, import_module)
    except LookupError as exc:
        return [f"is gone: {exc}"]
    found: list[str] = []
    for shape in row.shapes:
        found += shape.problems(owner, row.name, value)
    return found


def failure_message(row: Row, problems: list[str]) -> str:
    expected = "; ".join(shape.describe() for shape in row.shapes)
    return (
        f"{row.path} {' and '.join(problems)}.\n"
        f"  We rely on it being: {expected} ({row.why}).\n"
        f"  Used by: {', '.join(row.users)}.\n"
        "  Adapt those files to the new shape (or pin the package), then update this row."
    )
