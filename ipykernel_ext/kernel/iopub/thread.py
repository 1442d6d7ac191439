"""The IOPub thread, which never waits on its own wake-up queue.

Stock ipykernel's ``IOPubThread.schedule(f)`` appends ``f`` to the thread's event queue and
then wakes the thread with a message on the calling thread's own ``PUSH`` socket, an inproc
pipe to the thread's ``PULL``. The send blocks while that pipe is full (libzmq's default high
water marks: 2000 unread wake-ups). The wait is harmless for a cell's thread, as the IOPub
thread reads the pipe and frees it. It is a deadlock for the IOPub thread itself, and that
thread schedules too: every message it sends from inside an event (a stream's flush runs
there, and each flush's ``Session.send`` schedules the real send) puts a wake-up in its own
pipe. The thread reads one wake-up per turn of its loop, so when threads flush faster than
that (two threads printing flushed lines beside a cell, on a loaded machine), unread wake-ups
pile up, the pipe fills, and the IOPub thread blocks on a send only it could ever free. No
output leaves the kernel again; every flush times out after 10 s ("IOStream.flush timed out")
and the cell never ends.

:class:`WakeSafeIOPubThread` schedules as stock does, except on the IOPub thread itself. There
the wake-up is sent without waiting, and a full pipe skips it: a full pipe holds unread
wake-ups, each of which runs every event queued by then (``IOPubThread._handle_event``), so
``f`` still runs, in order, at the next one. The queue, the pipes and everything sent are
stock's. ``ExtKernelApp`` makes this thread; under another app (:mod:`.adoption`) the thread
is that app's, and stock's behaviour stays.

A :class:`SentTap` (``tap``, set by the app) is shown each message after the socket took it,
on this thread, in the order the messages leave: the kernel's cell journal
(:mod:`ipykernel_ext.kernel.journal`) records there.
"""

from __future__ import annotations

import contextlib
import threading
import traceback
from collections.abc import Callable
from typing import Any, Protocol

import zmq
from ipykernel.iostream import IOPubThread


class SentTap(Protocol):
    """Shown each message the IOPub socket took, on the IOPub thread, in order."""

    def sent(self, frames: list[Any]) -> None: ...


class WakeSafeIOPubThread(IOPubThread):
    """ipykernel's IOPub thread, whose own scheduling never waits on its full wake-up pipe."""

    #: shown every message sent (None: nothing is)
    tap: SentTap | None = None

    def _really_send(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        """Stock's send, then the tap (a failing tap must not stop IOPub)."""
        super()._really_send(msg, *args, **kwargs)
        tap = self.tap
        if tap is not None and isinstance(msg, list):
            try:
                tap.sent(msg)
            except Exception:  # as stock's IOPub thread reports its own errors: to stderr
                traceback.print_exc()

    def schedule(self, f: Callable[[], Any]) -> None:
        """Run ``f`` on the IOPub thread (at once if the thread is not running)."""
        if threading.current_thread() is not self.thread:
            super().schedule(f)
            return
        # On the IOPub thread: queue as stock does; wake without waiting (see the module).
        self._events.append(f)
        with contextlib.suppress(zmq.Again):
            self._event_pipe.send(b"", zmq.NOBLOCK)
