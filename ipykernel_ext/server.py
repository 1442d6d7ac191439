"""SharedChannelsConnection: jupyter_server's kernel websocket on one set of ZMQ channels.

Stock jupyter_server (``ZMQChannelsWebsocketConnection``) opens shell, control, stdin and
IOPub sockets for every websocket: twenty browser tabs on one notebook are eighty sockets at
the kernel, and every IOPub message is encrypted, sent, received and decrypted twenty times.
This connection class keeps one :class:`~ipykernel_ext.shared_channels.SharedChannels` per
kernel and attaches every websocket of that kernel to it::

    jupyter server \\
      --ServerApp.kernel_websocket_connection_class=ipykernel_ext.server.SharedChannelsConnection

What stays exactly as with the stock class (it is inherited, not rewritten): both websocket
protocols (``v1.kernel.websocket.jupyter.org`` and the legacy JSON one), the IOPub rate limit
(per websocket, as before), the traceback redaction, ``restarting``/``dead`` statuses on kernel
restarts, replacing a stale websocket of the same session, buffering messages while the last
websocket of a kernel is away and replaying them when the same session comes back, and the
signatures (a client's messages are signed by its connection's Session, as before).

What changes:

* replies (shell, control, stdin) are routed by ``parent_header.session`` instead of by a
  socket per client. A session id belongs to one websocket at a time: a websocket that opens
  with the ``session_id`` of another *takes it over* (jupyter_server already closes the older
  one as stale; this makes sure no reply goes to it meanwhile), and a message whose
  ``header.session`` another websocket of the kernel owns or owned is refused with an error
  on the sender's IOPub (a stderr stream) rather than sent, so one client can never receive
  another's replies;
* a ``comm_echo`` is not sent to the websocket whose session caused it
  (``deliver_own_comm_echo`` turns that off);
* the kernel_info "nudge" that checks the sockets are live runs once per channel set, not once
  per websocket, with the channels' own session (its replies reach nobody);
* the channels close ``shared_channels_grace_period`` seconds after the last websocket (and
  the offline buffer, if any) lets go of them;
* each IOPub message is decoded and encoded for the websocket once, not once per websocket;
* a websocket that joins a kernel whose channels are already open gets the kernel's last
  ``status`` whose parent jupyter_server tracks (``MappingKernelManager.track_message_type``),
  exactly as the kernel sent it: it joins an existing IOPub subscription, so the kernel cannot
  greet it, and a page reloaded mid-cell shows "Busy" rather than "Unknown";
* if the shared channels stop (a receiving loop failed), every websocket on them is closed
  with code 1011 and the reason, so frontends reconnect (JupyterLab does on any close it did
  not ask for) and get a fresh channel set instead of waiting on a deaf one;
* the shared IOPub socket's receive queue holds ``shared_iopub_rcvhwm`` messages (set before
  it connects), so libzmq drains the kernel whatever the loop does, and every websocket has
  its own ordered outgoing queue (:mod:`.shared_channels.outbox`): a slow websocket holds
  only itself; one whose buffer would pass ``websocket_buffer_limit`` bytes is closed with
  code 1013 and a logged warning (the frontend reconnects), so what it costs the server is
  bounded by the limit plus one message.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import zmq
import zmq.asyncio
from jupyter_server.services.kernels.connection.base import serialize_msg_to_ws_v1
from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection
from jupyter_server.services.kernels.kernelmanager import MappingKernelManager
from traitlets import Bool, Float, Int

from .shared_channels import (
    CHANNELS,
    DEFAULT_BUDGET,
    DEFAULT_GRACE_PERIOD,
    IOPUB_RCVHWM,
    RECV_BATCH,
    KernelMessage,
    Outbox,
    RefusedMessage,
    SharedChannels,
    SharedClient,
)

V1_PROTOCOL = "v1.kernel.websocket.jupyter.org"

#: The websocket close code for "the server hit an unexpected condition" (RFC 6455).
CLOSE_INTERNAL_ERROR = 1011

#: The websocket close code for a websocket that did not read its messages: "Try Again Later"
#: (RFC 6455 registry, 1013): the frontend reconnects and gets the kernel's state back.
CLOSE_TOO_SLOW = 1013

#: RFC 6455 allows 123 bytes of close reason.
MAX_CLOSE_REASON = 123


class _SocketState:
    """``stream.socket.closed`` for ``MappingKernelManager.stop_buffering``."""

    def __init__(self, client: SharedClient) -> None:
        self._client = client

    @property
    def closed(self) -> bool:
        return self._client.closed


class SharedChannel:
    """One channel of a websocket's membership, shaped like the ZMQStream it replaces.

    jupyter_server's connection and kernel-manager code use ``send_multipart`` (through
    ``Session.send``/``send_raw``), ``closed()``, ``close()``, ``flush()``, ``on_recv()``
    (the offline buffer) and ``socket.closed`` on what is in ``connection.channels``.
    """

    def __init__(self, client: SharedClient, channel: str, shared: SharedChannels) -> None:
        self.client = client
        self.channel = channel
        self.shared = shared
        self.socket = _SocketState(client)
        self.recv_callback: Any = None

    def send_multipart(self, frames: list[Any], flags: int = 0, copy: bool = True) -> None:
        if self.channel == "iopub":
            raise RefusedMessage("messages cannot be sent on the iopub channel")
        self.client.send(self.channel, frames)

    def closed(self) -> bool:
        return self.client.closed

    def close(self) -> None:
        self.client.close()

    def flush(self) -> None:
        if self.channel == "iopub" and not self.client.closed:
            self.shared.flush_iopub()

    def on_recv(self, callback: Any) -> None:
        """Divert this channel's messages to ``callback(KernelMessage)`` (None: stop)."""
        self.recv_callback = callback

    def on_recv_stream(self, callback: Any) -> None:
        self.recv_callback = callback


class SharedChannelsConnection(ZMQChannelsWebsocketConnection):
    """A kernel websocket connection that shares one set of ZMQ channels per kernel."""

    shared_channels_grace_period = Float(
        DEFAULT_GRACE_PERIOD,
        min=0,
        config=True,
        help="""Seconds a kernel's shared channels stay open after the last websocket left
        (and no offline buffer holds them), so a page reload reuses them.""",
    )

    deliver_own_comm_echo = Bool(
        False,
        config=True,
        help="""Also send a websocket the comm_echo messages its own comm messages caused.
        Off: each websocket gets only the other clients' echoes (it knows what it sent).""",
    )

    websocket_buffer_limit = Int(
        DEFAULT_BUDGET,
        min=1,
        config=True,
        help="""Bytes of kernel messages the server holds for one websocket that has not taken
        them yet (queued, plus one chunk being written). A message that would go over it
        closes that websocket (code 1013, logged) instead of growing the server's memory or
        holding the other websockets; the frontend reconnects. One message larger than the
        limit is still delivered to a websocket that is caught up.""",
    )

    shared_iopub_rcvhwm = Int(
        IOPUB_RCVHWM,
        min=0,
        config=True,
        help="""RCVHWM (messages; 0: no limit) of the shared IOPub socket, set before it
        connects. libzmq's I/O thread drains the kernel into this queue whatever the event
        loop does, so a burst shorter than this never fills the kernel's queue to the relay
        (stock ipykernel drops past 1000 there).""",
    )

    shared_recv_batch = Int(
        RECV_BATCH,
        min=1,
        config=True,
        help="""Messages the shared channels read from one socket per event-loop turn. More
        reads a burst in fewer turns, but starves the server's other ZMQ streams (its IOPub
        activity monitor reads one message per turn, and overflows).""",
    )

    #: kernel id -> its shared channels (one per kernel in this server process).
    _shared: ClassVar[dict[str, SharedChannels]] = {}

    #: The channel-set class (a subclass may add behaviour, e.g. fault injection in tests).
    channels_class: ClassVar[type[SharedChannels]] = SharedChannels

    shared: SharedChannels | None = None
    client: SharedClient | None = None
    _outbox: Outbox | None = None
    _outbox_reported = False

    @property
    def _v1(self) -> bool:
        return self.subprotocol == V1_PROTOCOL

    # --- this websocket's outgoing queue ---------------------------------------------------

    @property
    def outbox(self) -> Outbox:
        """This websocket's bounded, ordered outgoing queue (:mod:`.shared_channels.outbox`)."""
        if self._outbox is None:
            self._outbox = Outbox(
                self.websocket_handler.write_message,
                self.websocket_buffer_limit,
                self._on_outbox_overflow,
                logger=self.log,
            )
        return self._outbox

    @property
    def write_message(self) -> Any:  # type: ignore[override]
        """Every write of this connection (kernel messages, the stock class's own statuses and
        stderr notes) goes through the outbox, so they keep their order."""
        return self._queue_message

    def _queue_message(self, message: Any, binary: bool = False) -> None:
        self.outbox.put(message, binary)

    def _on_outbox_overflow(self, buffered: int) -> None:
        outbox = self._outbox
        budget = self.websocket_buffer_limit
        self.log.warning(
            "Closing websocket %s of kernel %s: it did not read its messages "
            "(%d bytes buffered with the next one, over its %d-byte budget; %d messages "
            "queued, %d written)",
            self.session.session,
            self.kernel_id,
            buffered,
            budget,
            outbox.queued if outbox is not None else -1,
            outbox.written if outbox is not None else -1,
        )
        reason = f"over the server's {budget}-byte buffer for this websocket; reconnect"
        try:
            self.websocket_handler.close(CLOSE_TOO_SLOW, reason[:MAX_CLOSE_REASON])
        except Exception as exc:  # already closed
            self.log.debug("Closing the websocket failed: %s", exc)

    def disconnect(self) -> None:
        """Stock, then drop what this websocket had not taken yet (and say how much)."""
        super().disconnect()
        outbox = self._outbox
        if outbox is not None and not self._outbox_reported:
            self._outbox_reported = True
            self.log.info(
                "Websocket %s of kernel %s closed: %d messages queued, %d written, %d left; "
                "peak %d bytes buffered (budget %d); the channels read %d IOPub messages",
                self.session.session,
                self.kernel_id,
                outbox.queued,
                outbox.written,
                len(outbox),
                outbox.peak,
                self.websocket_buffer_limit,
                self.shared.received["iopub"] if self.shared is not None else -1,
            )
            outbox.close()

    # --- the shared set ------------------------------------------------------------------

    def _shared_channels(self) -> SharedChannels:
        kernel_id = self.kernel_id
        info = self.kernel_manager.get_connection_info()
        shared = self._shared.get(kernel_id)
        if shared is not None and not shared.closed:
            if tuple(int(info[f"{c}_port"]) for c in CHANNELS) != shared.ports:
                # A restart on new ports: move every websocket of the kernel along.
                shared.reconnect(info)
            return shared

        def forget(closed: SharedChannels) -> None:
            if self._shared.get(kernel_id) is closed:
                del self._shared[kernel_id]

        shared = self.channels_class(
            info,
            context=self._zmq_context(),
            unpack=self.session.unpack,
            grace_period=self.shared_channels_grace_period,
            skip_own_echo=not self.deliver_own_comm_echo,
            logger=self.log,
            on_close=forget,
            track_status=self._status_parent_tracked(),
            iopub_rcvhwm=self.shared_iopub_rcvhwm,
            recv_batch=self.shared_recv_batch,
        )
        shared.start()
        self._shared[kernel_id] = shared
        return shared

    def _status_parent_tracked(self) -> Any:
        """jupyter_server's rule for which statuses set a kernel's ``execution_state``."""
        track = getattr(self.multi_kernel_manager, "track_message_type", None)
        if callable(track):
            return track
        trait = MappingKernelManager.class_traits()["untracked_message_types"]
        untracked = frozenset(trait.default_value)
        return lambda parent_type: parent_type not in untracked

    def _zmq_context(self) -> zmq.asyncio.Context | None:
        # The server's own context (one I/O thread for every kernel) rather than a second
        # one; the multi-kernel manager's lives as long as the server.
        context = getattr(self.multi_kernel_manager, "context", None)
        if isinstance(context, zmq.asyncio.Context):
            return context
        if isinstance(context, zmq.Context) and not context.closed:
            return zmq.asyncio.Context.shadow(context.underlying)
        return None

    def create_stream(self) -> None:
        """Attach this websocket to the kernel's shared channels (the stock class connects
        four sockets of its own here)."""
        self.shared = self._shared_channels()
        self.client = self.shared.attach(
            self._on_kernel_message,
            session=self.session.session,
            skip_own_echo=not self.deliver_own_comm_echo,
            name=f"websocket {self.session.session}",
            on_lost=self._on_channels_lost,
            # Given in connect(), after any offline-buffer replay (which is newer).
            announce_status=False,
        )
        self.channels = {
            channel: SharedChannel(self.client, channel, self.shared) for channel in CHANNELS
        }

    def connect(self) -> asyncio.Future[None] | None:  # type: ignore[override]
        """Join the kernel's shared channels; the future is done once they are live."""
        self.multi_kernel_manager.notify_connect(self.kernel_id)
        buffer_info = self.multi_kernel_manager.get_buffer(self.kernel_id, self.session_key)
        try:
            self.create_stream()
        except Exception as exc:
            self.log.error("Error attaching to the kernel's shared channels: %s", exc)
            self.disconnect()
            return None
        if buffer_info and buffer_info["session_key"] == self.session_key:
            # The same session is back: replay what arrived while it was away, before any
            # live message (nothing is dispatched until this method returns), then let go
            # of the buffer's membership (this websocket owns the session now).
            replay = buffer_info["buffer"]
            if replay:
                self.log.info("Replaying %s buffered messages", len(replay))
            for _channel, kmsg in replay:
                if isinstance(kmsg, KernelMessage):
                    self._on_kernel_message(kmsg)
            for stream in buffer_info["channels"].values():
                stream.close()
        assert self.shared is not None and self.client is not None
        # The kernel's state as it last published it, for a websocket that joins channels
        # other websockets opened (after a replay too: a replay may end before the cell did).
        self.shared.announce_status(self.client)

        self.multi_kernel_manager.add_restart_callback(self.kernel_id, self.on_kernel_restarted)
        self.multi_kernel_manager.add_restart_callback(
            self.kernel_id, self.on_restart_failed, "dead"
        )
        ZMQChannelsWebsocketConnection._open_sockets.add(self)
        busy = getattr(self.kernel_manager, "execution_state", None) == "busy"
        ready = self.shared.ready(
            nudge=not busy,
            timeout=self.kernel_info_timeout,
            keep_trying=lambda: self.kernel_id in self.multi_kernel_manager,
            # As the stock nudge: go on until the server's activity monitor saw the kernel
            # leave "starting" (it needs a status on its own IOPub socket for that).
            settled=lambda: getattr(self.kernel_manager, "execution_state", None) != "starting",
        )
        # One websocket giving up (closing while it waits) must not cancel the others' wait.
        return asyncio.ensure_future(asyncio.shield(ready))

    @classmethod
    async def close_all(cls) -> None:
        """Close every websocket (stock), then every shared channel set."""
        await super().close_all()
        for shared in list(cls._shared.values()):
            await shared.aclose()

    def _on_channels_lost(self, reason: str) -> None:
        """The shared channels closed under this websocket: close it so the frontend
        reconnects (to a fresh channel set) instead of waiting for messages forever."""
        if getattr(self.websocket_handler, "ws_connection", None) is None:
            return  # the websocket is gone already (an offline buffer held the membership)
        self.log.warning("Closing websocket %s: %s", self.session.session, reason)
        encoded = reason.encode()[:MAX_CLOSE_REASON].decode(errors="ignore")
        try:
            self.websocket_handler.close(CLOSE_INTERNAL_ERROR, encoded)
        except Exception as exc:  # already closed or never opened
            self.log.debug("Closing the websocket failed: %s", exc)

    # --- kernel -> websocket -------------------------------------------------------------

    def _on_kernel_message(self, kmsg: KernelMessage) -> None:
        stream = self.channels.get(kmsg.channel)
        if stream is not None and stream.recv_callback is not None:
            stream.recv_callback(kmsg)  # the offline buffer holds this membership
            return
        self.handle_outgoing_message(kmsg.channel, kmsg)  # type: ignore[arg-type]

    def handle_outgoing_message(self, stream: str, outgoing_msg: Any) -> None:
        """Send one kernel message to this websocket.

        The stock order: traceback redaction, IOPub rate limit (per websocket), encoding.
        What does not depend on the websocket (decoding the header, the redaction, the
        encoding) is computed once per message and shared through ``KernelMessage.cache``.
        """
        kmsg = outgoing_msg
        if not isinstance(kmsg, KernelMessage):
            kmsg = KernelMessage(stream, list(outgoing_msg), self.session.unpack)
        channel = kmsg.channel
        if channel == "iopub" and self.limit_rate:
            msg: dict[str, Any] = {"header": kmsg.header, "parent_header": None, "content": None}
            if kmsg.msg_type == "status":
                msg["content"] = kmsg.content
            if self._limit_rate(channel, msg, kmsg.parts):
                return
        try:
            if self._v1:
                data = kmsg.memo("ws:v1", lambda: self._encode_v1(kmsg))
            else:
                data = kmsg.memo("ws:legacy", lambda: self._encode_legacy(kmsg))
        except Exception:
            self.log.critical("Malformed message: %r", kmsg.frames, exc_info=True)
            return
        self.outbox.put(data, isinstance(data, bytes))

    def _encode_v1(self, kmsg: KernelMessage) -> bytes:
        parts = kmsg.parts
        redact = not self.multi_kernel_manager.allow_tracebacks
        if redact and kmsg.channel == "iopub" and kmsg.msg_type == "error":
            parts = list(parts)  # _on_error rewrites the content frame in place
            self._on_error(kmsg.channel, {"header": kmsg.header, "content": None}, parts)
        return serialize_msg_to_ws_v1(parts, kmsg.channel)

    def _encode_legacy(self, kmsg: KernelMessage) -> str | bytes:
        msg = self.session.deserialize(list(kmsg.frames))  # verifies, as the stock class
        self._on_error(kmsg.channel, msg, kmsg.parts)
        return self._reserialize_reply(msg, channel=kmsg.channel)

    # --- websocket -> kernel -------------------------------------------------------------

    def handle_incoming_message(self, incoming_msg: str) -> None:
        """The stock relay; a refused message is answered on the sender's IOPub."""
        try:
            super().handle_incoming_message(incoming_msg)
        except RefusedMessage as exc:
            self.write_stderr(f"Message not sent to the kernel: {exc}", exc.header)
