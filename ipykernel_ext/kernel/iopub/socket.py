"""The IOPub XPUB socket that never loses a message silently.

libzmq's XPUB keeps one outgoing queue per subscriber, capped at ``SNDHWM`` messages, and
by default drops every message past the cap *without an error*. Stock ipykernel binds its
IOPub socket with the default cap of 1000, so a burst that outruns a subscriber (a widget
grid over CurveZMQ, a server that pauses for a few seconds) loses messages nobody hears of.

:class:`NoDropXPubSocket` is the kernel's IOPub socket instead:

* ``SNDHWM`` is set before bind (libzmq copies it into each subscriber's pipe when the pipe
  is made; a later change does not resize existing pipes).
* ``XPUB_NODROP`` is on: a send that finds a subscriber's queue full fails instead of
  dropping, and the message waits, in order, in this socket's **backlog**
  (:mod:`ipykernel_ext.kernel.iopub.backlog`).
* **The IOPub thread never blocks on a subscriber.** Once attached to the IOPub thread's loop
  (:meth:`NoDropXPubSocket.attach`), the backlog is retried on a timer (every 1 to 20 ms, never
  a blocking send: libzmq reports no "room again" event for an XPUB); between
  two slices the thread serves everything else scheduled on it, so output flushes, and with
  them every shell and control reply (ipykernel flushes stdout/stderr after each), go on while
  a subscriber is paused.
* **Alive means no loss.** A subscriber is given up only when its queue has had no room for
  ``send_timeout_ms`` (a minute by default: a server's event loop blocked 30 s, a process
  stopped 10 s or a reader at 100 msg/s all come back well within it), or when the backlog
  would outgrow ``backlog_limit_bytes``: then the IOPub thread waits for room itself, so the
  kernel's threads wait to hand it more and the cell slows down (a wait never grows the
  kernel without bound, and a slow reader loses nothing).
* Giving up sends the head of the backlog once with ``XPUB_NODROP`` off: the subscribers
  with room get it and libzmq *parks* the full pipe (it skips it until its reader has taken
  about half a queue). Parked pipes do not count for NODROP, so the rest of the backlog and
  every later message go out with NODROP back on: the other subscribers keep their no-loss
  guarantee, and a subscriber that never comes back costs one wait in all.
* It runs with one ``IOPubSettings`` value (:mod:`.settings`), replaced whole on a change
  (:meth:`NoDropXPubSocket.apply`). Every wait, episode, give-up and missed message is counted
  (:mod:`.stats`, ``iopub_stats_request``) and logged (:mod:`.give_up_log`).
* A :class:`GiveUpWatcher` (:mod:`ipykernel_ext.kernel.iopub.notice`), if one is set with
  :meth:`NoDropXPubSocket.watch`, hears of each give-up when it happens and may put messages
  ahead of any message just before it leaves the socket (from the backlog or at once): so what
  the user is told follows what actually left, not what was queued.

All sends and socket-option calls happen on ipykernel's IOPub thread (``IOPubThread`` calls
:meth:`NoDropXPubSocket.send_multipart` there); other threads only read the counters and
settings. A socket used on its own (no loop attached, as in the unit tests) waits on the
calling thread instead, up to the same timeout; after the IOPub thread has stopped (the kernel
is exiting) nothing waits: what is left goes out at once, to the subscribers with room.

Under ``ExtKernelApp`` this socket is made and bound by the app (``"socket":
"bound-by-ext-app"`` in ``iopub_stats_reply``). Under any other app that binds a plain XPUB
(stock ``IPKernelApp``, cluster launchers, ``embed_kernel``)
:mod:`ipykernel_ext.kernel.iopub.adoption` puts the same send path over the socket that app bound
(``"adopted"``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

import zmq

from .backlog import Backlog, BacklogEntry
from .give_up_log import GiveUpWarnings
from .settings import IOPubSettings
from .stats import BOUND_BY_EXT_APP, IOPubStats

#: How soon the backlog is tried again: at once after progress, then doubling while a queue
#: stays full. The loop sleeps in between, so every other event on the IOPub thread (above
#: all the queue the kernel's threads write their messages into) is served at once.
RETRY_MIN_S = 0.001
RETRY_MAX_S = 0.02
#: Messages sent from the backlog in one turn of the IOPub loop before it serves the others.
DRAIN_BATCH = 500


class GiveUpWatcher(Protocol):
    """Who hears of the give-ups, and may send messages ahead of the next ones to leave.

    Both are called on the IOPub thread only, in order with the sends.
    """

    def given_up(self, missed: int, stats: IOPubStats, settings: IOPubSettings) -> None:
        """A subscriber was just given up; ``missed`` (>= 1) messages were counted for it."""

    def ahead_of(self, parts: Sequence[Any]) -> Sequence[list[bytes]]:
        """The messages to send just before ``parts`` leaves the socket (usually none)."""


class NoDropXPubSocket(zmq.Socket[bytes]):
    """An XPUB socket that keeps a full subscriber's messages, up to a limit, instead of dropping.

    Create it through the context and configure it before binding::

        sock = ctx.socket(zmq.XPUB, socket_class=NoDropXPubSocket)
        sock.configure(IOPubSettings(sndhwm=1000, send_timeout_ms=60_000), log=app.log)
        sock.bind("tcp://127.0.0.1:0")
        sock.attach(iopub_thread.io_loop.call_later, iopub_thread.thread)

    With ``nodrop=False`` it is a plain XPUB with the given ``SNDHWM`` (stock behaviour),
    still counting what it sends.
    """

    #: What ``iopub_stats_reply["socket"]`` says about this socket.
    origin = BOUND_BY_EXT_APP

    #: what it runs with: replaced whole (:meth:`apply`), on the IOPub thread once attached
    settings: IOPubSettings
    #: what happened: counted on the IOPub thread
    stats: IOPubStats
    log: logging.Logger
    _backlog: Backlog
    _warnings: GiveUpWarnings
    _episode_started: float | None
    _last_room: float
    _call_later: Callable[[float, Callable[[], None]], object] | None
    _retry_s: float
    _thread: threading.Thread | None
    _drain_due: bool
    _watcher: GiveUpWatcher | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Until configured: a plain XPUB with libzmq's queue size, counting what it sends.
        self.settings = IOPubSettings(sndhwm=self.sndhwm, nodrop=False)
        self.stats = IOPubStats()
        self.log = logging.getLogger(__name__)
        self._backlog = Backlog()
        self._warnings = GiveUpWarnings(self)
        self._episode_started = None
        self._last_room = 0.0
        self._call_later = None
        self._retry_s = RETRY_MIN_S
        self._thread = None
        self._drain_due = False
        self._watcher = None

    # --- setup -------------------------------------------------------------------------

    def configure(
        self, settings: IOPubSettings | None = None, *, log: logging.Logger | None = None
    ) -> None:
        """Run with ``settings`` (the defaults if None), queue size included. Call before ``bind``.

        ``log`` should write to the real stderr (the app's log): a logger whose output
        ends up in ``sys.stderr`` inside the kernel would publish on this very socket.
        """
        settings = settings or IOPubSettings()
        self.sndhwm = settings.sndhwm
        self.apply(settings, log=log)

    def apply(self, settings: IOPubSettings, *, log: logging.Logger | None = None) -> None:
        """Run with ``settings`` from now on. Valid after bind; once attached, on the IOPub thread.

        libzmq reads ``XPUB_NODROP`` at each send, so unlike ``SNDHWM`` it takes effect for
        subscribers that are already connected; the queue size kept is the one in force
        (libzmq fixed it at bind), which is what the reply reports.
        """
        self.setsockopt(zmq.XPUB_NODROP, int(settings.nodrop))
        self.settings = replace(settings, sndhwm=self.sndhwm)
        if log is not None:
            self.log = log

    def attach(
        self, call_later: Callable[[float, Callable[[], None]], object], thread: threading.Thread
    ) -> None:
        """Wait for full subscribers on ``thread``'s loop, never blocking it.

        ``call_later(seconds, f)`` must run ``f`` on ``thread``'s loop (tornado's
        ``IOLoop.call_later`` of the IOPub thread's loop).
        """
        self._call_later = call_later
        self._thread = thread

    def watch(self, watcher: GiveUpWatcher | None) -> None:
        """Tell ``watcher`` of each give-up and let it send ahead (call on the IOPub thread)."""
        self._watcher = watcher

    # --- reporting ---------------------------------------------------------------------

    @property
    def backlog_messages(self) -> int:
        """Messages waiting in the backlog now."""
        return len(self._backlog)

    def stats_reply(self) -> dict[str, Any]:
        """The content of an ``iopub_stats_reply`` (from any thread)."""
        return self.stats.as_reply(self.settings, socket=self.origin, backlog=self._backlog)

    # --- sending -----------------------------------------------------------------------

    def send_multipart(
        self,
        msg_parts: Any,
        flags: int = 0,
        copy: bool = True,
        track: bool = False,
        **kwargs: Any,
    ) -> zmq.MessageTracker | None:
        """Send one message to every subscriber, now or, behind a full queue, in order later.

        Never raises ``zmq.Again``. Only the first frame can find a queue full (libzmq counts
        whole messages against SNDHWM), so a failed attempt has sent nothing and may be
        repeated as it is.
        """
        stats = self.stats
        stats.sent += 1
        if not self.settings.nodrop:
            return super().send_multipart(msg_parts, flags, copy=copy, track=track, **kwargs)
        kwargs = {"copy": copy, "track": track, **kwargs}
        if not self._backlog and self._watcher is not None:
            # What goes ahead of a message at the backlog's head is put there by _head.
            for ahead in self._watcher.ahead_of(msg_parts):
                self.send_multipart(ahead)
        if self._backlog:
            self._hold(msg_parts, flags, kwargs)
            return None
        try:
            # The common case: room everywhere, no wait.
            return super().send_multipart(msg_parts, flags | zmq.NOBLOCK, **kwargs)
        except zmq.Again:
            stats.waits += 1
        if not self._on_loop():
            return self._send_waiting_here(msg_parts, flags, kwargs)
        self._episode_started = self._last_room = time.monotonic()
        self._retry_s = RETRY_MIN_S
        stats.stalls += 1
        self._hold(msg_parts, flags, kwargs)
        return None

    def _on_loop(self) -> bool:
        """True when waits can be spread over the IOPub loop (this is its running thread)."""
        thread = self._thread
        return thread is not None and thread is threading.current_thread()

    def _try_send(self, parts: Any, flags: int, kwargs: dict[str, Any], wait_ms: int) -> bool:
        """One attempt, waiting at most ``wait_ms`` for room (libzmq wakes it when room comes)."""
        self.sndtimeo = wait_ms
        try:
            super().send_multipart(parts, flags, **kwargs)
        except zmq.Again:
            return False
        return True

    def _send_while_room(self, *, limit: int | None = None, first_wait_ms: int = 0) -> int:
        """Send from the backlog, in order, while every queue that counts has room; how many.

        The first attempt may wait up to ``first_wait_ms`` for room, the others do not wait;
        at most ``limit`` messages (None: all that fit). The one send loop of the backlog:
        the timer's turn, the hold-back and the give-up all send through it.
        """
        sent = 0
        wait_ms = first_wait_ms
        while self._backlog and sent != limit:
            head = self._head()
            if not self._try_send(head.parts, head.flags, head.kwargs, wait_ms):
                break
            self._backlog.pop()
            sent += 1
            wait_ms = 0
        return sent

    def _head(self) -> BacklogEntry:
        """The next message to send: the backlog's head, or what the watcher puts ahead of it."""
        if self._watcher is not None:
            for parts in reversed(self._watcher.ahead_of(self._backlog.head().parts)):
                self.stats.sent += 1
                self._backlog.add(parts, 0, {"copy": True, "track": False}, ahead=True)
        return self._backlog.head()

    def _no_room_for_too_long(self, now: float) -> bool:  # no room at all since _last_room
        return (now - self._last_room) * 1000 >= self.settings.send_timeout_ms

    def _hold(self, parts: Any, flags: int, kwargs: dict[str, Any]) -> None:
        """Queue a message behind the backlog; hold the output back if that breaks the budget."""
        self._backlog.add(parts, flags, kwargs)
        if not self._on_loop():
            # The IOPub thread is gone (the kernel is exiting): send what waits, no wait.
            self._give_up(exiting=True)
        elif self._backlog.nbytes > self.settings.backlog_limit_bytes:
            self._hold_back()
        else:
            self._schedule_drain(self._retry_s)

    def _hold_back(self) -> None:
        """The backlog is over its budget: wait here, on the IOPub thread, until it is not.

        This is the one place the IOPub thread blocks: the kernel's threads then wait to hand
        it more (ipykernel's event pipe fills), so the cell slows down to what the frontends
        take instead of growing the kernel's memory, and nothing is lost for a reader that is
        slow but reading. A queue that stays full for the whole send timeout is still given up.
        """
        self.stats.over_budget += 1
        while self._backlog.nbytes > self.settings.backlog_limit_bytes:  # (so not empty)
            if self._send_while_room(first_wait_ms=int(RETRY_MAX_S * 1000)):
                self._last_room = time.monotonic()
            elif self._no_room_for_too_long(time.monotonic()):
                self._give_up()
        if not self._backlog:
            self._end_stall()
        else:
            self._schedule_drain(RETRY_MIN_S)

    def _schedule_drain(self, delay: float) -> None:
        if not self._drain_due and self._call_later is not None:
            self._drain_due = True
            self._call_later(delay, self._drain)

    def _drain(self) -> None:
        """One turn on the IOPub loop: send what the queues have room for, then come back."""
        self._drain_due = False
        if self.closed:
            return
        sent = self._send_while_room(limit=DRAIN_BATCH)
        now = time.monotonic()
        if sent:
            self._last_room = now
            self._retry_s = RETRY_MIN_S
        if not self._backlog:
            self._end_stall()
        elif self._no_room_for_too_long(now):
            self._give_up()
        elif sent == DRAIN_BATCH:
            self._schedule_drain(0)  # there may be more room: after the loop's other events
        else:
            self._schedule_drain(self._retry_s)
            self._retry_s = min(self._retry_s * 2, RETRY_MAX_S)

    def _end_stall(self) -> None:
        """The backlog is empty: the episode is over; note how long it lasted."""
        if self._episode_started is not None:
            self._note_stall_length(self._episode_started)
        self._episode_started = None

    def _send_waiting_here(
        self, parts: Any, flags: int, kwargs: dict[str, Any]
    ) -> zmq.MessageTracker | None:
        """No loop to wait on: wait on this thread, up to the timeout, then give up."""
        started = time.monotonic()
        self.stats.stalls += 1
        try:
            # A socket used on its own waits here for room; an exiting kernel does not.
            standalone = self._thread is None
            if standalone and self._try_send(parts, flags, kwargs, self.settings.send_timeout_ms):
                return None
            self._backlog.add(parts, flags, kwargs)
            self._give_up(exiting=self._thread is not None)
            return None
        finally:
            self._note_stall_length(started)

    def _note_stall_length(self, started: float) -> None:
        waited = int((time.monotonic() - started) * 1000)
        self.stats.longest_stall_ms = max(self.stats.longest_stall_ms, waited)

    def _give_up(self, *, exiting: bool = False) -> None:
        """Send the head with NODROP off (libzmq parks the full pipe), then the rest as usual.

        The rest goes out at once, with NODROP back on, to every queue with room: a parked
        pipe does not count, so only another full queue keeps messages waiting (it gets its
        own timeout). Each message that waited counts as missed, once: the parked subscriber
        cannot have it. When ``exiting`` nothing waits any more: all goes lossy.
        """
        stats = self.stats
        if not exiting:
            stats.timeouts += 1
        # Counted now, once each: the parked subscriber cannot have any of these.
        missed = self._backlog.mark_missed()
        stats.missed += missed
        if missed and not exiting and self._watcher is not None:
            # Before the head goes: the watcher may want something sent ahead of it.
            self._watcher.given_up(missed, stats, self.settings)
        # A lossy XPUB send never waits nor fails. Once the full pipe is parked by the first
        # one, the rest keeps NODROP's guarantee.
        self.setsockopt(zmq.XPUB_NODROP, 0)
        try:
            self._send_while_room(limit=None if exiting else 1)
        finally:
            self.setsockopt(zmq.XPUB_NODROP, 1)
        if not exiting:
            self._send_while_room()
        if not self._backlog:
            self._end_stall()
        if not exiting:
            self._warnings.given_up()
            if self._backlog:
                self._last_room = time.monotonic()  # another full queue gets its own timeout
                self._retry_s = RETRY_MIN_S
                self._schedule_drain(self._retry_s)

    def close(self, linger: int | None = None) -> None:
        """Send what still waits (to the subscribers with room), then close."""
        if self._backlog and not self.closed:
            try:
                self._give_up(exiting=True)
            except zmq.ZMQError:
                self._backlog.clear()
        super().close(linger=linger)
