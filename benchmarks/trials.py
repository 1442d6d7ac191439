"""What every benchmark shares: kernels, alternating trials, medians and ratios, a table, JSON.

A benchmark module (see ``benchmarks/runner.py`` for what the runner asks of one) keeps only
its trial and its summary; everything below is the same for all of them, so it lives here once:

* the kernel names (``STOCK`` is stock ipykernel, ``EXT`` is ipykernel_ext) and kernel start
  through the harness the tests use too (:func:`kernel`, over :mod:`harness.kernels`);
* :func:`alternate`, the trial order: kernels take turns trial by trial, so that load from
  elsewhere on the machine hits both alike;
* :func:`median`, :func:`ratio` and :func:`fmt`, which all treat ``None`` (a lost idle, a
  trial with no time) as missing instead of failing;
* :func:`print_table`, the one table printer (:func:`cells` makes a row of an object's
  fields), and :func:`write_json`, the common ``--json``.

Nothing here imports the runner: the runner imports this module.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar, overload

from jupyter_client import BlockingKernelClient, KernelManager

from harness.kernels import EXT_KERNEL, STOCK_KERNEL, running_kernel

STOCK, EXT = STOCK_KERNEL, EXT_KERNEL
KERNELS = (STOCK, EXT)
ROOT = Path(__file__).resolve().parents[1]
#: Where benchmarks that always keep their raw results write them (git-ignored).
RESULTS = ROOT / "benchmarks" / "results"
T = TypeVar("T")


@contextmanager
def kernel(
    name: str,
    extra: list[str] | None = None,
    curve: bool = True,
    client: Callable[[KernelManager], BlockingKernelClient] | None = None,
    **kwargs: Any,
) -> Iterator[tuple[KernelManager, BlockingKernelClient]]:
    """A fresh kernel and one ready client with a session of its own; both shut down on exit.

    ``curve=False`` asks for plain TCP explicitly ("disabled"), not the manager's default,
    so that a plain-TCP row is plain TCP whatever the environment configures. ``client``
    makes the client (default :func:`harness.kernels.new_client`; ``shell_and_control_client`` for
    one that leaves IOPub to a raw subscriber); ``kwargs`` go to ``KernelManager``.
    """
    if not curve:
        kwargs["transport_encryption"] = "disabled"
    with running_kernel(name, extra, client, encryption=curve, **kwargs) as pair:
        yield pair


# Two signatures: without ``items`` the items are the kernel names (a TypeVar has no default).
@overload
def alternate(trials: int, *, rotate: bool = False) -> Iterator[tuple[int, str]]: ...
@overload
def alternate(trials: int, items: Sequence[T], rotate: bool = False) -> Iterator[tuple[int, T]]: ...
def alternate(
    trials: int, items: Sequence[Any] = KERNELS, rotate: bool = False
) -> Iterator[tuple[int, Any]]:
    """``(trial, item)`` with the items (kernels, by default) taking turns in every trial.

    ``rotate=True`` starts trial ``t`` at item ``t % len(items)``, so that no item always goes
    first (with two items: the order flips every trial).
    """
    for trial in range(trials):
        shift = trial % len(items) if rotate else 0
        for item in [*items[shift:], *items[:shift]]:
            yield trial, item


def median(xs: Iterable[float | None]) -> float | None:
    """The median of the values that are not None; None if there are none."""
    values = [x for x in xs if x is not None]
    return statistics.median(values) if values else None


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """``ours / theirs``, None if either is missing or ``theirs`` is 0."""
    return None if ours is None or not theirs else ours / theirs


def fmt(x: float | None, digits: int = 2, unit: str = "") -> str:
    """A number with ``digits`` decimals and ``unit`` after it, ``-`` for a missing one."""
    return "-" if x is None else f"{x:.{digits}f}{unit}"


def cells(obj: Any, fields: Iterable[str], digits: int = 1) -> list[Any]:
    """The attributes ``fields`` of ``obj`` as table cells, floats with ``digits`` decimals."""
    values = (getattr(obj, name) for name in fields)
    return [fmt(v, digits) if isinstance(v, float) else v for v in values]


def print_table(
    header: Sequence[str],
    rows: Iterable[Sequence[Any]],
    align: str | None = None,
    markdown: bool = False,
) -> None:
    """Print ``rows`` under ``header``, each column as wide as its widest cell.

    ``align`` has one letter per column, ``l`` or ``r`` (default: the first column left, the
    rest right). Cells are printed with ``str``: format numbers before passing them.
    ``markdown=True`` prints a Markdown table (for results pasted into the docs).
    """
    cells = [[str(c) for c in row] for row in rows]
    align = align or "l" + "r" * (len(header) - 1)
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]

    def line(row: Sequence[str]) -> str:
        padded = [
            c.ljust(w) if a == "l" else c.rjust(w)
            for c, w, a in zip(row, widths, align, strict=True)
        ]
        return "| " + " | ".join(padded) + " |" if markdown else " ".join(padded).rstrip()

    print(line(header))
    if markdown:
        print("| " + " | ".join("-" * w for w in widths) + " |")
    else:
        print("-" * len(line(header)))
    for row in cells:
        print(line(row))


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` to ``path`` (directories made) and say where."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))
    print(f"\nraw results: {path}")
