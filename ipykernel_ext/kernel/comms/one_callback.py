"""At most one comm callback at a time, whichever thread lets it through, and the interrupts a
UI loop's thread must see.

jupyter-ui-poll's ``ui_events()`` runs the main cell's callbacks on a thread of its own while the
cell blocks, waiting for it (a handoff). An interrupt reaches the main thread only: the cell
leaves its wait and joins that thread, and a second interrupt ends the join, so the cell can
end while a callback still runs there. Two things keep the main shell whole then:

* :class:`CallbackGate`: a dispatch off the main shell's thread is *held* while it runs, and the
  main shell starts nothing (a cell, a comm message at rest or mid-cell) until no such dispatch
  runs; a mid-cell dispatch on the main thread (an awaiting cell's, ``handle_waiting_comms()``)
  holds the other side, and a thread off it (one that runs in the cell's context, a
  ``to_thread`` worker awaiting ``do_one_iteration()``) waits for it: at most one callback at a
  time, and nothing of the next cell beside one;
* :class:`InterruptCount`: the interrupts the main thread took (the kernel's SIGINT handler for
  a request counts them): a poll thread takes no further message once one came while it polled,
  so the messages not yet taken wait for the main shell in arrival order instead of being taken
  for a loop that is ending; and an ``input()`` a callback waits for on that thread ends with
  the interrupt (``KeyboardInterrupt`` in the callback), so it never takes a later reply.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from signal import default_int_handler
from types import FrameType
from typing import Any

from ipykernel.ipkernel import IPythonKernel

from .mid_cell import current as current_mid_cell_comm


class CallbackGate:
    """One side at a time lets comm callbacks run: the main shell's thread, or the threads off
    it (jupyter-ui-poll's); thread-safe."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._holders = 0  # dispatches off the main shell's thread
        self._main = 0  # mid-cell dispatches on the main shell's thread
        self._wakers: list[Callable[[], object]] = []

    @contextmanager
    def held(self, nested: bool) -> Iterator[None]:
        """Within: a dispatch runs off the main shell's thread. Entered once the main thread
        runs no mid-cell callback, unless ``nested`` (inside that callback: the main thread
        waits for this one, a handoff)."""
        with self._cond:
            while self._main and not nested:
                self._cond.wait()
            self._holders += 1
        try:
            yield
        finally:
            with self._cond:
                self._holders -= 1
                wakers: list[Callable[[], object]] = []
                if not self._holders:
                    self._cond.notify_all()
                    wakers, self._wakers = self._wakers, []
            for wake in wakers:
                wake()

    @contextmanager
    def main_held(self) -> Iterator[None]:
        """Within: a mid-cell dispatch on the main shell's thread, entered (blocking) once no
        dispatch runs off it (a blocking cell's ``handle_waiting_comms()``)."""
        with self._cond:
            while self._holders:
                self._cond.wait()
            self._main += 1
        try:
            yield
        finally:
            self._leave_main()

    @asynccontextmanager
    async def main_held_async(self) -> AsyncIterator[None]:
        """:meth:`main_held` awaited, without blocking the event loop (an awaiting cell)."""
        await self.wait_free_async(enter_main=True)
        try:
            yield
        finally:
            self._leave_main()

    def _leave_main(self) -> None:
        with self._cond:
            self._main -= 1
            if not self._main:
                self._cond.notify_all()

    @property
    def free(self) -> bool:
        """Whether no dispatch runs off the main shell's thread (an unlocked read)."""
        return not self._holders

    async def wait_free_async(self, enter_main: bool = False) -> None:
        """Await, without blocking the event loop, until no dispatch runs off its thread (and
        then, atomically, enter the main side if ``enter_main``)."""
        loop = asyncio.get_running_loop()
        while True:
            with self._cond:
                if not self._holders:
                    self._main += enter_main
                    return
                woken: asyncio.Future[None] = loop.create_future()
                self._wakers.append(functools.partial(loop.call_soon_threadsafe, _done, woken))
            await woken


def _done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class InterruptCount:
    """The interrupts (SIGINT) the main thread took while the kernel handled a request."""

    def __init__(self) -> None:
        self.taken = 0
        #: threads off the main one whose callback waits for an ``input()`` reply
        self._inputs: set[int] = set()
        self._inputs_lock = threading.Lock()
        #: the count when each handoff began: jupyter-ui-poll runs each ``poll(n)`` of the cell
        #: as a task of its thread's loop (``run_coroutine_threadsafe``), which calls
        #: ``do_one_iteration()`` ``n`` times
        self._at_handoff: weakref.WeakKeyDictionary[asyncio.Task[Any], int] = (
            weakref.WeakKeyDictionary()
        )

    def since_handoff(self) -> Callable[[], bool]:
        """Whether an interrupt came since the current handoff (this thread's current task;
        without one, since now) began: a loop the cell keeps polling after catching one
        hands off again, and goes on."""
        try:
            task = asyncio.current_task()
        except RuntimeError:  # (no running loop on this thread)
            task = None
        base = self.taken if task is None else self._at_handoff.setdefault(task, self.taken)
        return lambda: self.taken != base

    def handler(self, signum: int, frame: FrameType | None) -> Any:
        """A SIGINT handler: counts, ends the ``input()`` of each callback that waits for one
        off the main thread (a signal reaches the main thread only), then raises
        ``KeyboardInterrupt`` as Python's default."""
        self.taken += 1
        with self._inputs_lock:  # (never held by the main thread outside this handler)
            for thread_id in self._inputs:
                _raise_in(thread_id, KeyboardInterrupt)
        return default_int_handler(signum, frame)

    @contextmanager
    def input_awaited(self, in_callback: bool) -> Iterator[None]:
        """Within: this thread waits for an ``input()`` reply; an interrupt ends the wait if
        it is a callback's off the main thread (jupyter-ui-poll's), else stock's."""
        if not in_callback or threading.current_thread() is threading.main_thread():
            yield
            return
        thread_id = threading.get_ident()
        with self._inputs_lock:
            self._inputs.add(thread_id)
        try:
            yield
        finally:
            with self._inputs_lock:
                self._inputs.discard(thread_id)


def _raise_in(thread_id: int, exception: type[BaseException]) -> None:
    """Raise ``exception`` in another thread at its next bytecode (CPython's own call for it):
    ipykernel's ``input()`` polls its socket every 10 ms in Python, so it ends there."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exception)
    )


class InterruptibleInputs(IPythonKernel):
    """A kernel whose ``input()`` in a callback off the main thread ends with an interrupt."""

    interrupt_count: InterruptCount

    def _input_request(self, prompt: str, ident: Any, parent: Any, password: bool = False) -> str:
        """As stock; a callback's off the main thread ends with an interrupt."""
        with self.interrupt_count.input_awaited(current_mid_cell_comm() is not None):
            reply: str = super()._input_request(prompt, ident, parent, password)
            return reply
