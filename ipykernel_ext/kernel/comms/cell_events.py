"""The cell events (``pre_execute``/``post_execute``) a comm message cannot fire in mid-cell.

``comm``'s ``BaseComm.handle_msg`` triggers IPython's ``pre_execute`` and ``post_execute``
around every comm callback, so that a figure the callback draws is shown. Whoever flushes on
``post_execute`` (matplotlib-inline's ``flush_figures``, ipympl's) flushes *every* pending
figure, the running cell's included, under the parent of the message being handled: a comm
message, whose outputs no frontend shows. That is harmless between cells and wrong in the middle
of one, which is where a comm message is handled while an async cell awaits or a blocking loop
lets waiting comms through (:mod:`.comm_routing`).

:class:`CellEvents` is IPython's ``EventManager`` with one addition: inside
:func:`held_cell_events` (a context variable, so it holds only for the task or thread that set
it) it skips ``pre_execute`` and ``post_execute``; the cell's own ``post_execute`` at its end
then shows its figures in the cell, as it would have without the comm message. Every other
event, and both of them everywhere else, run as stock runs them. The shell that uses it is
``ExtShell`` (:mod:`ipykernel_ext.kernel.zmqshell`).

Held, ``post_execute`` would also leave a figure the *callback* opened (pyplot's inline backend)
for the cell's own flush, which would show it in the cell at its end. :func:`callback_figures`
shows those, and only those, as the callback's ``post_execute`` would have at rest: under the
comm message, closed after (``InlineBackend.close_figures``); the cell's figures stay the cell's:
set aside while the callback runs, so that a flush of its own (``plt.show()``, ``interact``)
shows and closes only its figures.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from IPython.core.events import EventManager

#: The events a comm message's handling triggers around its callback (comm's ``handle_msg``).
CELL_EVENTS = frozenset({"pre_execute", "post_execute"})

_held: ContextVar[bool] = ContextVar("ipykernel_ext_cell_events_held", default=False)


@contextmanager
def held_cell_events() -> Iterator[None]:
    """Skip ``pre_execute``/``post_execute`` within this block, in this task or thread only."""
    token = _held.set(True)
    try:
        yield
    finally:
        _held.reset(token)


class CellEvents(EventManager):
    """IPython's events, except the cell's two while :func:`held_cell_events` holds them."""

    def trigger(self, event: str, *args: Any, **kwargs: Any) -> None:
        if event in CELL_EVENTS and _held.get():
            return
        super().trigger(event, *args, **kwargs)


@contextmanager
def callback_figures() -> Iterator[list[Any]]:
    """Within this block (a comm callback handled mid-cell) pyplot sees only the figures the
    callback opens: the cell's are set aside (``Gcf.figs``), so that a ``plt.show()`` or an
    ``interact`` (which flushes every figure) shows and closes the callback's alone, and
    ``plt.gcf()`` never draws into the cell's; matplotlib-inline's note of what the cell drew
    is kept for the cell's own flush. At its end the callback's figures still open are shown
    under the current parent when pyplot draws inline, and the cell's come back (numbers
    kept, the cell's current figure current again). Without pyplot imported: nothing
    (matplotlib is not imported for it). Yields the list of the figures shown, filled at the
    end."""
    helpers = sys.modules.get("matplotlib._pylab_helpers")
    cells: dict[Any, Any] = dict(helpers.Gcf.figs) if helpers is not None else {}
    if helpers is not None:
        helpers.Gcf.figs.clear()
    inline = sys.modules.get("matplotlib_inline.backend_inline")
    drawn = _inline_notes(inline)
    shown: list[Any] = []
    try:
        yield shown
    finally:
        helpers = sys.modules.get("matplotlib._pylab_helpers")
        try:
            opened = list(helpers.Gcf.figs.values()) if helpers is not None else []
            if opened and _draws_inline():
                _show(opened)
                shown.extend(opened)
            elif opened:
                shown.extend(_show_widget_figures(opened))
        finally:
            if helpers is not None:
                _bring_back(helpers.Gcf.figs, cells)
            if drawn is not None and inline is not None:
                inline.show._draw_called, inline.show._to_draw = drawn


def _show_widget_figures(managers: list[Any]) -> list[Any]:
    """ipympl (``%matplotlib widget``): display the canvas of each figure the callback opened
    that ipympl waits to show at the next ``post_execute`` (the cell's, held), under the
    current parent, and take it off that list, as its flush at rest does. The shown ones."""
    backend = getattr(sys.modules.get("ipympl.backend_nbagg"), "_Backend_ipympl", None)
    pending = getattr(backend, "_to_show", None)
    if not isinstance(pending, list):
        return []
    from IPython.display import display

    shown = [m for m in managers if m.canvas.figure in pending]
    for manager in shown:
        display(manager.canvas)
        pending.remove(manager.canvas.figure)
    return shown


def _inline_notes(inline: Any) -> tuple[bool, list[Any]] | None:
    """matplotlib-inline's note of what was drawn since its last flush (the cell's)."""
    show = getattr(inline, "show", None)
    if show is None:
        return None
    return bool(getattr(show, "_draw_called", False)), list(getattr(show, "_to_draw", []))


def _bring_back(figs: Any, cells: dict[Any, Any]) -> None:
    """Put the cell's figures back in ``figs`` (pyplot's ``Gcf.figs``), after the callback's
    still open, renumbered past the cell's where a number is taken: the cell's last figure is
    current again."""
    remaining = list(figs.values())
    figs.clear()
    for manager in remaining:
        if manager.num in cells:
            manager.num = max([*cells, *figs]) + 1  # (Figure.number is read-only: pyplot's)
        figs[manager.num] = manager
    for num, manager in cells.items():
        figs[num] = manager


def _draws_inline() -> bool:
    """Whether pyplot's backend is matplotlib-inline's (asked once a figure exists: resolved)."""
    matplotlib = sys.modules.get("matplotlib")
    return matplotlib is not None and "inline" in str(matplotlib.get_backend()).lower()


def _show(managers: list[Any]) -> None:
    """Display each manager's figure (as matplotlib-inline's flush does), then close it if the
    inline backend closes figures after they are shown. The modules are the ones the user's
    code imported (neither is a dependency of ours)."""
    from IPython.display import display

    pyplot = sys.modules.get("matplotlib.pyplot")
    inline = sys.modules.get("matplotlib_inline.backend_inline")
    close = inline is not None and inline.InlineBackend.instance().close_figures
    for manager in managers:
        figure = manager.canvas.figure
        display(figure)
        if close and pyplot is not None:
            pyplot.close(figure)
