"""SharedChannelsConnection: jupyter_server's kernel websocket on the kernel's shared channels.

Stock jupyter_server (``ZMQChannelsWebsocketConnection``) opens four sockets per websocket:
twenty tabs are eighty sockets at the kernel, each IOPub message encrypted, sent, received and
decrypted twenty times. This class attaches every websocket of a kernel to its one
:class:`~ipykernel_ext.shared_channels.SharedChannels` (:data:`..kernels.channel_sets`)::

    jupyter server \\
      --ServerApp.kernel_websocket_connection_class=ipykernel_ext.server.SharedChannelsConnection

What stays exactly as with the stock class (inherited, not rewritten): both websocket
protocols (``v1.kernel.websocket.jupyter.org`` and the legacy JSON one), the traceback
redaction, ``restarting``/``dead`` statuses on kernel restarts, replacing a stale websocket of
the same session, buffering messages while the last websocket of a kernel is away and
replaying them when the same session comes back, and the signatures (a client's messages are
signed by its connection's Session). What changes:

* the IOPub rate (per websocket, stock's settings): what waits is merged and paced, never
  dropped (:mod:`.paced_iopub`); ``iopub_merge=False`` brings stock's dropping limiter back;
* replies (shell, control, stdin) are routed by ``parent_header.session``, not by a socket per
  client; a session id belongs to one websocket at a time: one that opens with another's
  ``session_id`` *takes it over* (stock closes the older one as stale; no reply goes to it
  meanwhile), and a message whose ``header.session`` another websocket of the kernel owns or
  owned is refused with an error on the sender's IOPub (a stderr stream), so no client ever
  gets another's replies; a ``comm_echo`` skips the websocket whose session caused it
  (``deliver_own_comm_echo`` turns that off);
* the kernel_info "nudge" runs once per channel set, with the channels' own session (its
  replies reach nobody); an IOPub message is decoded, and encoded for websockets, once
  (``KernelMessage.cache``); the channels close ``shared_channels_grace_period`` seconds
  after the last websocket (and the offline buffer, if any) lets go of them;
* a websocket joining open channels gets the kernel's last ``status`` whose parent
  jupyter_server tracks (``track_message_type``), as sent: the kernel cannot greet a new
  IOPub subscriber, and a page reloaded mid-cell shows "Busy" rather than "Unknown";
* if the shared channels stop (a receiving loop failed), every websocket on them is closed
  with code 1011 and the reason: frontends reconnect (JupyterLab does on any close it did not
  ask for) to a fresh channel set instead of waiting on a deaf one;
* the shared IOPub socket's receive queue holds ``shared_iopub_rcvhwm`` messages (libzmq
  drains the kernel whatever the loop does); each websocket writes through its own ordered
  :class:`~.outbox.Outbox`: a slow one holds only itself, and one past
  ``websocket_buffer_limit`` bytes is closed with code 1013, logged, and reconnects;
* with ``keep_outputs`` (:class:`~..keep_outputs.KeepOutputs`) the kernel's outputs owner
  watches the channels, is told when this websocket opens and closes, and what it hides from
  this websocket's session is left out, live or replayed.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any

from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection
from traitlets import Int

from ...shared_channels import (
    RELAYED_CHANNELS,
    KernelMessage,
    RefusedMessage,
    SharedChannels,
    SharedClient,
)
from ..keep_outputs import KeepOutputs
from ..kernels import channel_sets
from ..lasting.resuming import resume_on_open
from ..outputs import ChannelsFeed
from .channel_options import ChannelOptions
from .merging import Entry, Message
from .outbox import DEFAULT_BUDGET, Outbox, close_too_slow, close_websocket
from .paced_iopub import PacedIOPub
from .pacer import Pacer
from .wire import WebsocketWire

#: The websocket close code for "the server hit an unexpected condition" (RFC 6455).
CLOSE_INTERNAL_ERROR = 1011


class SharedChannelsConnection(WebsocketWire, KeepOutputs, ChannelOptions, PacedIOPub):
    """A kernel websocket connection that shares one set of ZMQ channels per kernel."""

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

    shared: SharedChannels | None = None
    client: SharedClient | None = None
    _outbox: Outbox | None = None
    _outbox_reported = False
    _pacer: Pacer | None = None

    # --- this websocket's outgoing queue ---------------------------------------------------

    @property
    def outbox(self) -> Outbox:
        """This websocket's bounded, ordered outgoing queue (:class:`Outbox`)."""
        if self._outbox is None:
            self._outbox = Outbox(
                self.websocket_handler.write_message,
                self.websocket_buffer_limit,
                self._on_outbox_overflow,
                logger=self.log,
            )
        return self._outbox

    @property
    def write_message(self) -> Any:
        """Every write of this connection (kernel messages, the stock class's own statuses and
        stderr notes) goes through the outbox, so they keep their order."""
        return self._queue_message

    @property
    def pacer(self) -> Pacer:
        """This websocket's IOPub pacer (:mod:`.pacer`): merged and paced, never dropped."""
        if self._pacer is None:
            self._pacer = self.make_pacer(
                self,
                self.outbox,
                self._on_outbox_overflow,
                self.log,
                f"websocket {self.session.session} of kernel {self.kernel_id}",
            )
        return self._pacer

    def _queue_message(self, message: Any, binary: bool = False) -> None:
        # A message the connection writes itself (a restarting or dead status, a stderr
        # note) follows what the kernel sent before it: what waits in the pacer goes first.
        if self._pacer is not None:
            self._pacer.release()
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
        close_too_slow(self.websocket_handler, budget, self.log)

    def disconnect(self) -> None:  # type: ignore[override]  # sync as stock's; the base declares it async
        """Stock, then hand what this websocket had not taken yet to jupyter_server's buffer
        of its session, if it buffers one (and say how much there was)."""
        super().disconnect()
        outbox = self._outbox
        left = len(outbox) if outbox is not None else 0
        # What this websocket never got: its outbox's unwritten messages, then the pacer's
        # line, then what came once either stopped (over the budget: closing with 1013).
        unwritten = outbox.close() if outbox is not None else []
        waiting = self._pacer.close() if self._pacer is not None else []
        self._buffer_waiting([*unwritten, *waiting])
        if outbox is not None and not self._outbox_reported:
            self._outbox_reported = True
            self.log.info(
                "Websocket %s of kernel %s closed: %d messages queued, %d written, %d left; "
                "peak %d bytes buffered (budget %d); the channels read %d IOPub messages",
                self.session.session,
                self.kernel_id,
                outbox.queued,
                outbox.written,
                left,
                outbox.peak,
                self.websocket_buffer_limit,
                self.shared.received["iopub"] if self.shared is not None else -1,
            )
            outbox.close()
        self.owner_closed()

    def _buffer_waiting(self, waiting: list[KernelMessage | Entry | Message]) -> None:
        """Hand what waited in the pacer to jupyter_server's offline buffer, if it buffers
        this session (this was the kernel's last websocket; stock's ``disconnect`` has just
        started it, so the buffer is empty and these go first): the session's next websocket
        gets them, in order, before what came since. Otherwise they go where every message
        for a closed websocket goes (the outputs owner heard them already)."""
        handed = 0
        for entry in waiting:
            kmsg = self._as_kernel_message(entry)
            stream = self.channels.get(kmsg.channel) if self.channels else None
            callback = getattr(stream, "recv_callback", None)
            if callback is None:
                break
            callback(kmsg)
            handed += 1
        if waiting:
            # Not handed: another websocket of the kernel is open, and jupyter_server keeps
            # no buffer for this session; said, never lost without a word.
            self.log.log(
                logging.INFO if handed == len(waiting) else logging.WARNING,
                "Websocket %s of kernel %s closed with %d messages waiting: %d handed to the "
                "buffer of its session%s",
                self.session.session,
                self.kernel_id,
                len(waiting),
                handed,
                ""
                if handed == len(waiting)
                else " (jupyter_server buffers a session only when it was the kernel's "
                "last websocket; with keep_outputs the outputs are in the notebook)",
            )

    # --- the shared set ------------------------------------------------------------------

    def _shared_channels(self) -> SharedChannels:
        channel_sets.listen(self.websocket_handler.settings.get("event_logger"))
        return self.open_channels(
            self.kernel_id,
            self.kernel_manager.get_connection_info(),
            self.multi_kernel_manager,
            self.session.unpack,
            self.log,
        )

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
        # The offline buffer diverts them with on_recv (ChannelStream, as a ZMQStream).
        self.channels = {channel: self.client.stream(channel) for channel in RELAYED_CHANNELS}
        if self.keeps_outputs():
            owner = self.find_owner(ChannelsFeed)
            assert isinstance(owner.feed, ChannelsFeed)  # an owner of this class's kernels
            owner.feed.watch(self.shared)
            # What the owner hides from this session is dropped at the replay: jupyter_server's
            # offline buffer need not hold it (an owned cell's outputs, however many).
            self.client.skip_diverted = partial(owner.hides, session=self.session.session)

    def connect(self) -> asyncio.Future[None] | None:  # type: ignore[override]  # sync as stock's; the base declares it async
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
            with self._replaying():  # let in as the tab reads (Pacer.replaying)
                for _channel, kmsg in replay:
                    if isinstance(kmsg, KernelMessage):
                        self._on_kernel_message(kmsg)  # without what the owner hides
            for stream in buffer_info["channels"].values():
                stream.close()
        assert self.shared is not None and self.client is not None
        self.owner_opened()
        resume_on_open(self.kernel_id, self.shared, self.owner)  # a taken-back kernel's cells
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
        await channel_sets.aclose_all()

    def _on_channels_lost(self, reason: str) -> None:
        """The shared channels closed under this websocket: close it so the frontend
        reconnects (to a fresh channel set) instead of waiting for messages forever."""
        if getattr(self.websocket_handler, "ws_connection", None) is None:
            return  # the websocket is gone already (an offline buffer held the membership)
        self.log.warning("Closing websocket %s: %s", self.session.session, reason)
        close_websocket(self.websocket_handler, CLOSE_INTERNAL_ERROR, reason, self.log)

    # --- kernel -> websocket -------------------------------------------------------------

    def _on_kernel_message(self, kmsg: KernelMessage) -> None:
        owner = self.owner
        if owner is not None and owner.hides(kmsg, self.session.session):
            return  # the server wrote it into the live document this tab shows
        self.handle_outgoing_message(kmsg.channel, kmsg)

    def handle_outgoing_message(self, stream: str, outgoing_msg: Any) -> None:
        """Send one kernel message to this websocket.

        The stock order: traceback redaction, IOPub rate (here: paced, :mod:`.pacer`),
        encoding; what does not depend on the websocket is computed once per message
        (``KernelMessage.cache``).
        """
        kmsg = outgoing_msg
        if not isinstance(kmsg, KernelMessage):
            kmsg = KernelMessage(stream, list(outgoing_msg), self.session.unpack)
        channel = kmsg.channel
        if self.paces_iopub:
            msg_type = kmsg.msg_type if channel == "iopub" else ""
            size = sum(len(frame) for frame in kmsg.frames)
            self.pacer.put(kmsg, channel, msg_type, size)
            return
        if channel == "iopub" and self.limit_rate:
            msg: dict[str, Any] = {"header": kmsg.header, "parent_header": None, "content": None}
            if kmsg.msg_type == "status":
                msg["content"] = kmsg.content
            if self._limit_rate(channel, msg, kmsg.parts):
                return
        self.pace_send(kmsg)

    # --- websocket -> kernel -------------------------------------------------------------

    def handle_incoming_message(self, incoming_msg: str) -> None:
        """The stock relay; a refused message is answered on the sender's IOPub."""
        try:
            super().handle_incoming_message(incoming_msg)
        except RefusedMessage as exc:
            self.write_stderr(f"Message not sent to the kernel: {exc}", exc.header)
