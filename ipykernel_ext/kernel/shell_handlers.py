"""What a UI loop swaps in the kernel: the table of shell handlers and the main shell's lock.

jupyter-ui-poll's ``ui_events()`` (its ``KernelWrapper``) makes two swaps while a cell polls,
undone at the end of the next cell to run (IPython's ``post_run_cell``):

* ``kernel.shell_handlers["execute_request"]`` becomes a handler that keeps the request for
  later (a cell sent to the main shell would otherwise run *inside* the polling cell, re-entered
  by the poll) and replays it when the loop's cell ends;
* ``kernel._main_asyncio_lock`` becomes ``contextlib.nullcontext()``, so that the main shell's
  next requests reach that handler at once instead of waiting for the lock. ipykernel 7's
  ``shell_main`` then fails on it (``'nullcontext' object has no attribute 'locked'``) and
  drops the request without a reply: a main-shell cell sent while a subshell console polls, the
  next cell queued behind an ``async with ui_events()`` cell, every cell after a callback at
  rest used ``ui_events()`` (its swap is never undone: no cell ends after it).

:class:`KeptMainLock` keeps the kernel's own lock whatever is assigned: what a swap assigns is
noted (:attr:`KeptMainLock.main_lock_swap`) and never used. The lock then keeps every request of
the main shell out of a running cell, which is what the swaps were for, so a deferral is
needless, and one left behind (by a callback at rest, or by a subshell console's loop, whose
swap is kernel-wide) would keep the main shell's next cells for a replay that may never come,
or run them on the console's thread. So while a swap of the lock is in force the kernel
dispatches ``execute_request`` with the handler it wired, on the main shell too.

:class:`ShellHandlers` is the table, a ``dict`` as stock's. While a subshell dispatches (the
kernel sets :func:`dispatching_on` around ``dispatch_shell``), or while the lock's swap is in
force, looking up a type of :data:`OWN_ON_SUBSHELLS` gives the handler the kernel had once
wired: a subshell console's cell runs while the main cell polls (a loop that waits for that
console would otherwise wait for good). Every other lookup is stock's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

#: The request types a subshell (and the main shell while a UI loop swapped the lock) always
#: runs with the kernel's own handler. Only ``execute_request``: the one a UI loop defers, and
#: the one a console's cell is.
OWN_ON_SUBSHELLS = frozenset({"execute_request"})

# Per task (a ContextVar, not a thread-local): the subshell's dispatch and what it awaits see it;
# a main-shell task running at the same time in another thread or task does not.
_on_subshell: ContextVar[bool] = ContextVar("ipykernel_ext_dispatch_on_subshell", default=False)


class ShellHandlers(dict[str, Any]):
    """The table of shell handlers, whose :data:`OWN_ON_SUBSHELLS` entries a subshell reads
    as they were when the table was made, and so does the main shell while ``ui_loop_swap``."""

    def __init__(self, handlers: Mapping[str, Any]) -> None:
        super().__init__(handlers)
        self.own: dict[str, Any] = {t: handlers[t] for t in OWN_ON_SUBSHELLS if t in handlers}
        #: a UI loop's swap of the main shell's lock is in force (:class:`KeptMainLock`)
        self.ui_loop_swap = False

    def _own(self, key: str) -> bool:
        return key in self.own and (self.ui_loop_swap or _on_subshell.get())

    def get(self, key: str, default: Any = None) -> Any:
        if self._own(key):
            return self.own[key]
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        if self._own(key):
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


class KeptMainLock:
    """A kernel mixin whose ``_main_asyncio_lock`` (ipykernel 7's, set in its ``__init__``)
    stays an ``asyncio.Lock`` whatever is assigned to it.

    An ``asyncio.Lock`` assigned becomes the lock (stock's ``__init__``, jupyter-ui-poll's
    restore, which puts the same one back); anything else (jupyter-ui-poll's
    ``nullcontext()``) is noted as :attr:`main_lock_swap` until a lock is assigned again, and
    the table of shell handlers is told (:attr:`ShellHandlers.ui_loop_swap`).
    """

    _kept_main_lock: asyncio.Lock | None = None
    #: what a UI loop assigned in the lock's place, while in force (None: no swap)
    main_lock_swap: object | None = None

    @property
    def _main_asyncio_lock(self) -> asyncio.Lock:
        if self._kept_main_lock is None:  # (read before stock's __init__ set it)
            self._kept_main_lock = asyncio.Lock()
        return self._kept_main_lock

    @_main_asyncio_lock.setter
    def _main_asyncio_lock(self, value: Any) -> None:
        if isinstance(value, asyncio.Lock):
            self._kept_main_lock = value
            self.main_lock_swap = None
        else:
            self.main_lock_swap = value
        handlers = getattr(self, "shell_handlers", None)
        if isinstance(handlers, ShellHandlers):
            handlers.ui_loop_swap = self.main_lock_swap is not None
