"""A comm message handled while the cell waits: what it gets, and how it runs there.

A comm message that waited in the inbox (:mod:`.comm_routing`) is handled in the middle of a cell
when the cell waits: an async cell awaits, or a blocking loop calls
:func:`~.comm_routing.handle_waiting_comms` (or jupyter-ui-poll's ``ui_events()``, through
``ExtKernel.do_one_iteration``). There it is handled as one handled at rest, on the wire:

* its own ``busy`` once it is verified, then its ``comm_echo`` and the callbacks' outputs,
  then its own ``idle`` (ipywidgets' frontend holds a model's next changes until the ``idle``
  of its pending message: without it a slider moved once mid-cell stops reaching the kernel),
  and then ``busy`` again for the cell that still runs (PROTOCOL.md section 7);
* in a copy of the cell's context (its parent is its own, not the cell's), with the cell's
  ``pre_execute``/``post_execute`` held (:mod:`.cell_events`).

:class:`MidCellComm` is what the kernel notes about the one being handled (a context variable,
so a callback that handles more messages itself nests its own); :func:`run_now` runs a
dispatch to its end on the calling thread, for a blocking cell on the main thread, which sits
inside the running event loop and so cannot await it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass
class MidCellComm:
    """The comm message being handled mid-cell, in this context."""

    #: the verified message (its ``busy`` published), or None before verification
    parent: dict[str, Any] | None = None
    #: an interrupt reached its callback (it stops the cell that let it through)
    interrupted: bool = False
    #: stopped before it began, it went back to the inbox (once)
    returned: bool = False

    @property
    def began(self) -> bool:
        """Whether its handling began (verified, its ``busy`` published): from then on it is
        handled, or stopped with its ``idle``, never put back."""
        return self.parent is not None


_current: ContextVar[MidCellComm | None] = ContextVar("ipykernel_ext_mid_cell_comm", default=None)


@contextmanager
def handling_mid_cell(noted: MidCellComm) -> Iterator[MidCellComm]:
    """Note, in this context only, that the comm message ``noted`` is being handled mid-cell."""
    token = _current.set(noted)
    try:
        yield noted
    finally:
        _current.reset(token)


def current() -> MidCellComm | None:
    """The comm message being handled mid-cell in this context, or None (at rest, a cell)."""
    return _current.get()


class AwaitedMidCellError(RuntimeError):
    """A comm handler awaited something while a blocking cell let it through."""


def run_now(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end on this thread, in the current context, without an event loop.

    For the comm dispatch a blocking cell lets through: the cell runs inside the main event
    loop's callback, so the loop can run nothing else until the cell returns, and comm handlers
    are synchronous (``comm``'s ``CommManager``). A bare ``yield`` (``asyncio.sleep(0)``) is
    stepped over; a handler that truly awaits the loop cannot be run here and fails with
    :class:`AwaitedMidCellError` (from an async cell, ``await kernel.do_one_iteration()``).
    """
    error: BaseException | None = None
    try:
        while True:
            yielded = coro.send(None) if error is None else coro.throw(error)
            error = None if yielded is None else AwaitedMidCellError(_AWAITED)
    except StopIteration as stop:
        result: T = stop.value
        return result


_AWAITED = (
    "a comm handler awaited the event loop while a blocking cell let it through; "
    "from an async cell, await kernel.do_one_iteration() instead"
)


def interrupts_noted(handler: Callable[..., Any]) -> Callable[..., Any]:
    """A comm shell handler that notes an interrupt reaching it mid-cell (:class:`MidCellComm`).

    ``dispatch_shell`` swallows a ``KeyboardInterrupt`` from a handler (it must not end the
    kernel); mid-cell the cell that let the message through is stopped by it instead, as it
    would have been had the interrupt come a moment later. At rest: stock's.
    """

    @functools.wraps(handler)
    def handle(stream: Any, ident: list[Any], msg: dict[str, Any]) -> Any:
        mid = current()
        if mid is None:
            return handler(stream, ident, msg)
        try:
            return handler(stream, ident, msg)
        except KeyboardInterrupt:
            mid.interrupted = True
            return None

    return handle
