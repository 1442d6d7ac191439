"""The IOPub XPUB socket that never loses a message silently.

libzmq's XPUB keeps one outgoing queue per subscriber, capped at ``SNDHWM`` messages, and
by default drops every message past the cap *without an error*. Stock ipykernel binds its
IOPub socket with the default cap of 1000, so a burst that outruns a subscriber (a widget
grid over CurveZMQ) loses messages that nobody hears about.

:class:`NoDropXPubSocket` is the kernel's IOPub socket instead:

* ``SNDHWM`` is set before bind (libzmq copies it into each subscriber's pipe when the pipe
  is made; a later change does not resize existing pipes).
* ``XPUB_NODROP`` is on, with ``SNDTIMEO``: a full queue makes the send *wait* for room
  (backpressure on the kernel) instead of dropping.
* When a send has waited the whole timeout, the same frames are sent again with
  ``XPUB_NODROP`` off, so every subscriber with room still gets the message and only the
  stalled one misses it; then ``XPUB_NODROP`` goes back on. libzmq then parks the stalled
  subscriber's pipe until it drains, so one stall costs one timeout, not one per message.
* Every wait, timeout and fallback is counted in :class:`IOPubStats` and reported to the
  kernel log, one warning per stall episode.

All sends and socket-option calls happen on ipykernel's IOPub thread (``IOPubThread``
calls :meth:`NoDropXPubSocket.send_multipart` there); other threads only read the counters.

Under ``ExtKernelApp`` this socket is made and bound by the app (``"socket":
"bound-by-ext-app"`` in ``iopub_stats_reply``). Under any other app that binds a plain XPUB
(stock ``IPKernelApp``, cluster launchers, ``embed_kernel``) :mod:`ipykernel_ext.iopub_adopt`
puts the same send path over the socket that app bound (``"adopted"``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

import zmq
from traitlets import Bool, HasTraits, Integer

#: Defaults, chosen as explained in README.md ("Choosing the IOPub defaults"). libzmq tells a
#: waiting writer about room only after the reader has taken about half a queue, so a reader
#: slower than ~SNDHWM/2 messages per send timeout looks stalled: a *smaller* queue is kinder
#: to slow readers, and it bounds the memory a stalled one holds.
DEFAULT_SNDHWM = 1_000
DEFAULT_SEND_TIMEOUT_MS = 2_000

#: Stalls closer together than this are gathered into one warning, logged when it is over.
WARNING_INTERVAL_S = 10.0

#: ``iopub_stats_reply["socket"]``: who made the socket the send path runs on.
BOUND_BY_EXT_APP = "bound-by-ext-app"
ADOPTED = "adopted"


def check_sndhwm(value: int, option: str) -> int:
    """``value`` as an IOPub queue size, or ValueError naming ``option``."""
    if value < 0:
        raise ValueError(f"{option} must be 0 (unbounded) or more, not {value}")
    return int(value)


def check_send_timeout(value: int, option: str) -> int:
    """``value`` as an IOPub send timeout in ms, or ValueError naming ``option``."""
    if value < 1:
        raise ValueError(f"{option} must be at least 1 ms, not {value}")
    return int(value)


class IOPubTraits(HasTraits):
    """The three IOPub options, declared once for the two classes that take them.

    ``ExtKernelApp`` (``--iopub-*``, ``c.ExtKernelApp.iopub_*``) and ``ExtKernel``
    (``c.ExtKernel.iopub_*``, honoured under any app) both inherit these; each validates with
    :func:`check_sndhwm` and :func:`check_send_timeout`, naming its own option in the error.
    """

    iopub_sndhwm = Integer(
        DEFAULT_SNDHWM,
        help="""IOPub queue per subscriber, in messages (ZMQ_SNDHWM; 0: unbounded). Memory
        held for a stalled subscriber grows up to this many messages. libzmq fixes it when
        the socket is bound: only ExtKernelApp (python -m ipykernel_ext) binds after reading
        it; under another app a different value is logged as a warning.""",
    ).tag(config=True)

    iopub_nodrop = Bool(
        True,
        help="""Make IOPub wait for room (XPUB_NODROP) instead of silently dropping messages
        for a full subscriber. Off: stock ipykernel behaviour.""",
    ).tag(config=True)

    iopub_send_timeout = Integer(
        DEFAULT_SEND_TIMEOUT_MS,
        help="""Milliseconds one IOPub send may wait for a full subscriber. Past it the
        message goes to the other subscribers only, and the stall is counted and logged.
        Keep it well under ipykernel's 10 s output-flush timeout.""",
    ).tag(config=True)


@dataclass
class IOPubStats:
    """Counters and settings of one IOPub socket.

    Written only by the IOPub thread; read from any thread (each field is a plain int or
    bool, so a read never sees a torn value).
    """

    sndhwm: int
    nodrop: bool
    send_timeout_ms: int
    #: BOUND_BY_EXT_APP or ADOPTED (see the module docstring)
    socket: str = BOUND_BY_EXT_APP
    #: messages handed to the XPUB socket
    sent: int = 0
    #: sends that found a subscriber's queue full and had to wait for room
    waits: int = 0
    #: sends that waited the whole timeout
    timeouts: int = 0
    #: messages re-sent with NODROP off: a stalled subscriber missed each, and then misses
    #: the messages after it, uncounted, until it has read about half its queue
    fallback_sends: int = 0

    def as_reply(self) -> dict[str, Any]:
        """The content of an ``iopub_stats_reply``."""
        return {"status": "ok", **asdict(self)}


class NoDropXPubSocket(zmq.Socket):
    """An XPUB socket that waits for a full subscriber, up to a timeout, before dropping.

    Create it through the context and configure it before binding::

        sock = ctx.socket(zmq.XPUB, socket_class=NoDropXPubSocket)
        sock.configure(sndhwm=10_000, nodrop=True, send_timeout_ms=2_000, log=app.log)
        sock.bind("tcp://127.0.0.1:0")

    With ``nodrop=False`` it is a plain XPUB with the given ``SNDHWM`` (stock behaviour),
    still counting what it sends.
    """

    #: What ``iopub_stats_reply["socket"]`` says about this socket.
    origin = BOUND_BY_EXT_APP

    stats: IOPubStats
    log: logging.Logger
    _last_warning: float
    _reported_timeouts: int
    _warning_lock: threading.Lock
    _warning_timer: threading.Timer | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stats = IOPubStats(sndhwm=1000, nodrop=False, send_timeout_ms=-1, socket=self.origin)
        self.log = logging.getLogger(__name__)
        self._last_warning = -WARNING_INTERVAL_S
        self._reported_timeouts = 0
        self._warning_lock = threading.Lock()
        self._warning_timer = None

    def configure(
        self,
        *,
        sndhwm: int = DEFAULT_SNDHWM,
        nodrop: bool = True,
        send_timeout_ms: int = DEFAULT_SEND_TIMEOUT_MS,
        log: logging.Logger | None = None,
    ) -> None:
        """Apply the queue size, NODROP and send timeout. Call before ``bind``.

        ``log`` should write to the real stderr (the app's log): a logger whose output
        ends up in ``sys.stderr`` inside the kernel would publish on this very socket.
        """
        self.sndhwm = check_sndhwm(sndhwm, "sndhwm")
        self.set_send_options(nodrop=nodrop, send_timeout_ms=send_timeout_ms, log=log)

    def set_send_options(
        self,
        *,
        nodrop: bool = True,
        send_timeout_ms: int = DEFAULT_SEND_TIMEOUT_MS,
        log: logging.Logger | None = None,
    ) -> None:
        """Apply NODROP and the send timeout, and start counting. Also valid after ``bind``.

        libzmq reads ``XPUB_NODROP`` and ``SNDTIMEO`` at each send, so unlike ``SNDHWM``
        they take effect for subscribers that are already connected.
        """
        check_send_timeout(send_timeout_ms, "send_timeout_ms")
        if nodrop:
            self.setsockopt(zmq.XPUB_NODROP, 1)
            self.sndtimeo = send_timeout_ms
        self.stats = IOPubStats(
            sndhwm=self.sndhwm,
            nodrop=nodrop,
            send_timeout_ms=send_timeout_ms,
            socket=self.origin,
        )
        if log is not None:
            self.log = log

    def send_multipart(  # type: ignore[override]
        self,
        msg_parts: Any,
        flags: int = 0,
        copy: bool = True,
        track: bool = False,
        **kwargs: Any,
    ) -> zmq.MessageTracker | None:
        """Send one message to every subscriber; never raise ``zmq.Again``.

        Only the first frame can find a queue full (libzmq counts whole messages against
        SNDHWM), so a failed attempt has sent nothing and may be repeated as it is.
        """
        stats = self.stats
        stats.sent += 1
        if not stats.nodrop:
            return super().send_multipart(msg_parts, flags, copy=copy, track=track, **kwargs)
        try:
            # The common case: room everywhere, no wait, no timer.
            return super().send_multipart(
                msg_parts, flags | zmq.NOBLOCK, copy=copy, track=track, **kwargs
            )
        except zmq.Again:
            stats.waits += 1
        try:
            return super().send_multipart(msg_parts, flags, copy=copy, track=track, **kwargs)
        except zmq.Again:
            return self._send_lossy(msg_parts, flags, copy=copy, track=track, **kwargs)

    def _send_lossy(self, msg_parts: Any, flags: int, **kwargs: Any) -> zmq.MessageTracker | None:
        """Resend with NODROP off: the subscribers with room get it, the full one misses it."""
        stats = self.stats
        stats.timeouts += 1
        stats.fallback_sends += 1
        self.setsockopt(zmq.XPUB_NODROP, 0)
        try:
            # A lossy XPUB send never blocks and never raises Again.
            return super().send_multipart(msg_parts, flags, **kwargs)
        finally:
            self.setsockopt(zmq.XPUB_NODROP, 1)
            self._warn_stall()

    def _warn_stall(self) -> None:
        """Warn about the stall just counted: now, or gathered with others a little later.

        Every stall gets logged; stalls within WARNING_INTERVAL_S of the last warning are
        reported together by one timer when the interval is over, so neither a flapping
        subscriber floods the log nor a second stall goes unreported.
        """
        with self._warning_lock:
            if self._warning_timer is not None:
                return  # a gathered warning is already due
            delay = self._last_warning + WARNING_INTERVAL_S - time.monotonic()
            if delay > 0:
                self._warning_timer = threading.Timer(delay, self._log_stalls)
                self._warning_timer.daemon = True
                self._warning_timer.start()
                return
        self._log_stalls()

    def _log_stalls(self) -> None:
        stats = self.stats
        with self._warning_lock:
            self._warning_timer = None
            new_stalls = stats.timeouts - self._reported_timeouts
            if new_stalls <= 0:
                return
            self._reported_timeouts = stats.timeouts
            self._last_warning = time.monotonic()
        self.log.warning(
            "IOPub: %d subscriber stall(s): a frontend's queue stayed full for the whole send "
            "timeout (%.1f s). The message went to the other frontends; the stalled one misses "
            "IOPub messages until it has read about half its queue (%d messages). "
            "%d stall(s) in all, %d messages sent. If that frontend is alive but slow, raise "
            "--iopub-send-timeout. Counters: control message iopub_stats_request.",
            new_stalls,
            stats.send_timeout_ms / 1000,
            stats.sndhwm // 2,
            stats.timeouts,
            stats.sent,
        )
