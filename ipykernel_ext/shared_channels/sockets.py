"""The socket set under a :class:`~ipykernel_ext.shared_channels.SharedChannels`.

:class:`KernelSockets` connects shell, control, stdin and IOPub with jupyter_client's own
connect rule (:func:`ipykernel_ext.endpoints.connect_channel`; shell and stdin share one
identity, since the kernel sends an ``input_request`` to the stdin peer whose identity asked
on shell), runs one receiving loop per socket, and hands every received message to
``dispatch(channel, frames)``. A loop that stops for any reason other than the sockets being
closed calls ``on_failure(reason)`` once: the owner must not keep a deaf channel open.

How fast IOPub is drained does not depend on the Python loop: the IOPub socket's receive
queue (``iopub_rcvhwm``, :data:`IOPUB_RCVHWM` messages by default, set before it connects)
is filled by libzmq's I/O thread as fast as the kernel sends, with no GIL and no loop turn.
A kernel publishing a burst of up to that many messages never finds its queue to the relay
full (stock ipykernel drops past 1000 queued on its side; ours waits), however long the
relay's fan-out takes; the loop then reads ``recv_batch`` messages per turn from memory.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, cast

import zmq
import zmq.asyncio

from ..endpoints import connect_channel
from .messages import RELAYED_CHANNELS

#: Messages taken from one socket per event-loop iteration (default). One, as ``ZMQStream``
#: does: the server's other streams (its IOPub activity monitor, other kernels' channels)
#: read one message per iteration too, and a larger batch starves them during a burst
#: (measured: the activity monitor's subscription overflowed, so the kernel dropped messages
#: for it). Batching is not what keeps the relay's own subscription from overflowing: the
#: receive queue below is (libzmq's I/O thread fills it whatever the loop does).
RECV_BATCH = 1

#: The IOPub socket's ``RCVHWM`` (messages; libzmq's default is 1000, 0 means no limit):
#: a burst this long fits in the relay's queue even while the loop is busy. It costs memory
#: only while the relay is behind (at most this many messages).
IOPUB_RCVHWM = 10000

Dispatch = Callable[[str, list[bytes]], None]


def ports_of(connection_info: Mapping[str, Any]) -> tuple[int, ...]:
    """The ports of :data:`RELAYED_CHANNELS` in a connection dict, in that order."""
    return tuple(int(connection_info[f"{c}_port"]) for c in RELAYED_CHANNELS)


class KernelSockets:
    """One connected socket per channel, each read by its own task on the running loop."""

    def __init__(
        self,
        connection_info: dict[str, Any],
        context: zmq.asyncio.Context,
        identity: bytes,
        dispatch: Dispatch,
        on_failure: Callable[[str], None],
        log: logging.Logger | logging.LoggerAdapter[Any],
        *,
        iopub_rcvhwm: int = IOPUB_RCVHWM,
        recv_batch: int = RECV_BATCH,
    ) -> None:
        self.connection_info = dict(connection_info)
        self.iopub_rcvhwm = iopub_rcvhwm
        self.recv_batch = max(1, recv_batch)
        #: Messages read from each channel's socket so far (over reconnections too).
        self.received: dict[str, int] = dict.fromkeys(RELAYED_CHANNELS, 0)
        self.context = context
        self.identity = identity
        self.dispatch = dispatch
        self.on_failure = on_failure
        self.log = log
        self.sockets: dict[str, zmq.asyncio.Socket] = {}
        self.pumps: list[asyncio.Task[None]] = []

    @property
    def ports(self) -> tuple[int, ...]:
        return ports_of(self.connection_info)

    def open(self) -> None:
        """Connect every channel and start reading (inside a running loop)."""
        for channel in RELAYED_CHANNELS:
            identity = None if channel == "iopub" else self.identity
            rcvhwm = self.iopub_rcvhwm if channel == "iopub" else None
            self.sockets[channel] = connect_channel(  # type: ignore[assignment]  # asyncio context: asyncio socket
                self.context, self.connection_info, channel, identity, rcvhwm
            )
        self.pumps = [
            asyncio.ensure_future(self._pump(channel, sock))
            for channel, sock in self.sockets.items()
        ]

    def close(self) -> None:
        for task in self.pumps:
            task.cancel()
        self.pumps = []
        for sock in self.sockets.values():
            sock.close(linger=0)
        self.sockets = {}

    def send(self, channel: str, frames: list[Any]) -> None:
        """Send at once when the socket has room, else queue in order (zmq.asyncio)."""
        sock = self.sockets.get(channel)
        if sock is None or sock.closed:
            raise RuntimeError(f"the shared {channel} channel is not open")
        # A Future at run time; pyzmq's stubs say only Awaitable.
        fut = cast("asyncio.Future[Any]", sock.send_multipart(frames, copy=True))
        if not fut.done():
            fut.add_done_callback(self._log_send_error)
        elif (exc := fut.exception()) is not None:
            raise exc

    def _log_send_error(self, fut: asyncio.Future[Any]) -> None:
        if not fut.cancelled() and fut.exception() is not None:
            self.log.error("Sending to the kernel failed: %s", fut.exception())

    async def _pump(self, channel: str, sock: zmq.asyncio.Socket) -> None:
        # Wait with the asyncio socket only when it is empty; read with its synchronous
        # shadow (no Future per message), recv_batch messages per loop iteration.
        sync: zmq.Socket[bytes] = zmq.Socket.shadow(sock.underlying)
        batch = range(self.recv_batch)
        received = self.received
        try:
            while True:
                for _ in batch:
                    try:
                        frames = sync.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        await sock.poll(flags=zmq.POLLIN)  # type: ignore[call-arg]  # pyzmq's stub gives it Poller.poll's signature
                        break
                    received[channel] += 1
                    self.dispatch(channel, frames)
                else:
                    await asyncio.sleep(0)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if sock.closed or self.sockets.get(channel) is not sock:
                return  # closed or replaced on purpose: nothing lost
            self.log.error("Shared %s channel stopped receiving", channel, exc_info=True)
            self.on_failure(f"the shared {channel} channel stopped receiving ({exc!r})"[:200])

    def flush_iopub(self) -> int:
        """Dispatch every IOPub message already received by the socket; return how many."""
        sock = self.sockets.get("iopub")
        if sock is None or sock.closed:
            return 0
        sync: zmq.Socket[bytes] = zmq.Socket.shadow(sock.underlying)
        count = 0
        while True:
            try:
                frames = sync.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return count
            self.received["iopub"] += 1
            self.dispatch("iopub", frames)
            count += 1
