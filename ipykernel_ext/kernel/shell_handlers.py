"""The kernel's table of shell handlers: a UI loop's swap of ``execute_request`` is the main
shell's, and a subshell console's cell runs while a cell polls.

jupyter-ui-poll's ``ui_events()`` replaces ``kernel.shell_handlers["execute_request"]`` while a
cell polls, so that a cell sent to the main shell waits (it would otherwise run *inside* the
polling cell, re-entered by the poll) and is replayed when the loop ends. A subshell runs its
requests on a thread of its own and never re-enters the polling cell, yet ipykernel looks every
handler up in the one table: a subshell console's cell (JEP 91, JupyterLab's "New Subshell
Console") then waits for the main cell's loop to end, and a loop that waits for that console
waits for good.

:class:`ShellHandlers` is that table, a ``dict`` as stock's. While a subshell dispatches (the
kernel sets :func:`dispatching_on` around ``dispatch_shell``), looking up a type of
:data:`OWN_ON_SUBSHELLS` gives the handler the kernel had once wired: what a swap put there
applies to the main shell only. Every other lookup, and every lookup of the main shell, is
stock's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

#: The request types a subshell always runs with the kernel's own handler. Only
#: ``execute_request``: the one a UI loop defers, and the one a console's cell is.
OWN_ON_SUBSHELLS = frozenset({"execute_request"})

# Per task (a ContextVar, not a thread-local): the subshell's dispatch and what it awaits see it;
# a main-shell task running at the same time in another thread or task does not.
_on_subshell: ContextVar[bool] = ContextVar("ipykernel_ext_dispatch_on_subshell", default=False)


class ShellHandlers(dict[str, Any]):
    """The table of shell handlers, whose :data:`OWN_ON_SUBSHELLS` entries a subshell reads
    as they were when the table was made."""

    def __init__(self, handlers: Mapping[str, Any]) -> None:
        super().__init__(handlers)
        self.own: dict[str, Any] = {t: handlers[t] for t in OWN_ON_SUBSHELLS if t in handlers}

    def get(self, key: str, default: Any = None) -> Any:
        if key in self.own and _on_subshell.get():
            return self.own[key]
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        if key in self.own and _on_subshell.get():
            return self.own[key]
        return super().__getitem__(key)


@contextmanager
def dispatching_on(subshell_id: str | None) -> Iterator[None]:
    """Within: a dispatch for ``subshell_id`` (None: the main shell's)."""
    token = _on_subshell.set(subshell_id is not None)
    try:
        yield
    finally:
        _on_subshell.reset(token)
