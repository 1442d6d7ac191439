"""Outputs survive the tab for kernels behind a gateway (``--gateway-url``).

In gateway mode the kernels' ZMQ channels are on the gateway's side (Jupyter Enterprise
Gateway, a Kernel Gateway): jupyter_server's ``GatewayWebSocketConnection`` proxies each
tab's websocket to a websocket of its own to the gateway, in the legacy JSON protocol. Every
message a tab sends and gets still passes through the notebook server, which is where the
notebook and its live document are, so the same :class:`~..outputs.OutputsOwner` as for local
kernels can keep a departed tab's outputs (docs/PROTOCOL.md section 6) if it hears them:

* :class:`GatewayOutputsConnection` (the tab's side; a subclass of jupyter_server's class,
  whose relaying it keeps as it is) tells the owner what the tab sends (a cell's
  ``execute_request``, comm messages, an ``input_reply``), the replies and input requests
  the gateway routes to this tab alone (``execute_reply``, ``input_request``), when the tab
  opens and closes, and leaves out what the owner wrote into the live document for it;
* the server's own websocket to the gateway (:class:`~.gateway_link.GatewayFeed`, one per
  kernel, :mod:`.gateway_link`) hears the IOPub of every cell, whichever tabs are open;
* its IOPub is merged and paced as for local kernels (:mod:`..websocket.pacer`): jupyter_server's
  gateway websocket has no rate limit at all, so a flood would reach the page unshielded.

A restart or shutdown through the server's API ends the running cells as for local kernels
(jupyter_server's kernel action events); one the gateway makes itself reaches the feed as
the ``status`` ``restarting`` or ``dead`` it writes to its websockets.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from jupyter_client.jsonutil import json_default
from jupyter_server.services.kernels.connection.base import serialize_binary_message

from ..keep_outputs import KeepOutputs
from ..outputs import OutputsOwner
from ..websocket import DEFAULT_BUDGET, Entry, Message, Outbox, PacedIOPub, Pacer, close_too_slow
from .gateway_link import FEED_READY_TIMEOUT, FeedSocket, GatewayFeed, GatewayMessage, decode
from .session_return import FromGateway, SessionReturn, parked_websocket


class GatewayOutputsConnection(SessionReturn, KeepOutputs, PacedIOPub):
    """jupyter_server's gateway websocket, whose tab's outputs survive the tab (module
    docstring); the relaying itself is stock.

    One more difference: a websocket that will fail opens nothing at the gateway. In gateway
    mode jupyter_server speaks only the legacy protocol, so it accepts JupyterLab's and
    Notebook 7's websocket (which offers ``v1.kernel.websocket.jupyter.org``) with no
    subprotocol; the browser then fails the handshake and opens another websocket without
    one, with the same session. Stock has already asked the gateway for a websocket of that
    session for the first, and the gateway finds it a "stale connection" when the second
    comes: the page's kernel stayed unconnected for about a minute (Enterprise Gateway 3.3,
    most page loads here). Such a websocket (its client offered subprotocols, none was
    selected) connects to the gateway when its client sends its first message, which a
    browser never does on it; a client that accepts the legacy protocol anyway gets its
    messages answered as before, its first one after the connection is made.
    """

    _deferred = False  # nothing opened yet: the client may fail the handshake (above)
    _starting: asyncio.Future[None] | None = None
    _pacer: Pacer | None = None
    _too_slow_closed = False  # closed with 1013 by this server: not parked on its close

    def _feed(self) -> GatewayFeed | None:
        owner = self.owner
        feed = owner.feed if owner is not None else None
        return feed if isinstance(feed, GatewayFeed) else None

    async def connect(self) -> None:
        self._waiting: list[str] = []
        handler = self.websocket_handler
        offered = handler.request.headers.get("Sec-WebSocket-Protocol")
        if offered and handler.selected_subprotocol is None:
            self._deferred = True
            return
        await self._connect()

    async def _connect(self) -> None:
        if self.keeps_outputs():
            self.find_owner(self._make_feed)
            parked = parked_websocket(self.kernel_id, self.session_id)
            if parked is not None and parked.take_over(self):
                self.owner_opened()
                return  # its gateway websocket is this one's now: nothing to open
            if parked is not None:
                await parked.park_over  # closing: what it read is held once it closed
        if self.paces_iopub:
            self._replay_held()
        await super().connect()
        if self.owner is not None:
            # The gateway hands what it buffered for this session to the first websocket of
            # the kernel that opens, if it has this session (any other drops it): the feed,
            # which the owner opens if it is not, connects once this one has.
            if self.ws_future is not None:
                await asyncio.wait([self.ws_future])
            if not self.disconnected and self._parked is None:  # not closed meanwhile
                self.owner_opened()

    def _make_feed(self, owner: OutputsOwner) -> GatewayFeed:
        """The kernel's feed, for its new owner: the server's own websocket to the gateway,
        made as this tab's (its kernel manager's URL and config)."""
        kernel_manager, config = self.kernel_manager, self.config

        def make_socket(on_live: Callable[[], None]) -> FeedSocket:
            return FeedSocket(owner, on_live, parent=kernel_manager, config=config)

        return GatewayFeed(
            make_socket, self.log, self.kernel_id, min(self.kernel_info_timeout, FEED_READY_TIMEOUT)
        )

    def disconnect(self) -> None:  # type: ignore[override]  # sync as stock's; the base declares it async
        if self._deferred:
            self.disconnected = True
            return  # nothing was opened
        waiting: list[Any] = []
        if self._pacer is not None:
            # What the gateway sent and this tab never got: the outbox's unwritten messages,
            # then the line, then what came once either stopped. Kept for the session's
            # next websocket: the gateway will not send it again.
            unwritten = self._pacer.outbox.close()
            waiting = [*unwritten, *self._pacer.close()]
        if (
            self.owner is not None
            and self.ws is not None
            and self.keep_outputs_grace > 0
            and not self._too_slow_closed  # a 1013 is no blip: what waits is held (below)
        ):
            self._park(waiting)
        else:
            super().disconnect()
            self._hold_for_session(waiting)
        self.owner_closed()

    def _as_from_gateway(self, item: Any) -> FromGateway:
        """A waiting entry (or a merged message the outbox held) as a message from the
        gateway: as it came, or the merged message as this side encodes it."""
        if isinstance(item, Entry):
            item = item.handed_over()
        return item if isinstance(item, FromGateway) else self._encode_merged(item)

    # --- tab -> gateway ------------------------------------------------------------------

    def handle_incoming_message(self, message: str) -> None:
        """Stock, once the connection is made and the feed hears the kernel (in the order
        the tab sent them)."""
        if self._deferred:
            self._deferred = False
            self._waiting.append(message)
            self._starting = asyncio.ensure_future(self._connect())
            self._starting.add_done_callback(lambda _: self._when_passable())
            return
        if self._waiting or not self._passable():
            self._waiting.append(message)
            if len(self._waiting) == 1:
                self._when_passable()
            return
        self._pass(message)

    def _passable(self) -> bool:
        if self._starting is not None and not self._starting.done():
            return False
        feed = self._feed()
        return feed is None or feed.passable

    def _when_passable(self) -> None:
        if not self._passable():
            if self._starting is None or self._starting.done():
                feed = self._feed()
                assert feed is not None
                feed.when_passable(self._when_passable)
            return  # the start's done callback comes back here
        waiting, self._waiting = self._waiting, []
        for message in waiting:
            self._pass(message)

    def _pass(self, message: str) -> None:
        owner = self.owner
        # Cheap text tests first: most of what a tab sends is none of these.
        if owner is not None and (
            "execute_request" in message or "comm_" in message or "input_reply" in message
        ):
            msg = decode(message)
            if msg is not None:
                owner.sent_message(str(msg.get("channel")), msg)
        super().handle_incoming_message(message)

    # --- gateway -> tab ------------------------------------------------------------------

    def handle_outgoing_message(self, incoming_msg: str | bytes, *args: Any) -> None:
        """Stock, but what the gateway routes to this tab alone is heard by the owner, and
        what the owner wrote into the live document for this tab's session is left out."""
        if self._successor is not None:  # the session's next websocket took this one over
            successor = self._successor
            successor.handle_outgoing_message(incoming_msg, *args)  # type: ignore[arg-type]  # bytes too
            return
        owner = self.owner
        if owner is not None and (
            owner.hiding
            or (
                owner.following
                and (
                    isinstance(incoming_msg, bytes)  # a message with buffers: read it
                    or "execute_reply" in incoming_msg
                    or "input_request" in incoming_msg
                )
            )
        ):
            msg = decode(incoming_msg)
            if msg is not None:
                heard = GatewayMessage(msg)
                if heard.channel in ("shell", "stdin"):
                    owner.received(heard)
                elif owner.hides(heard, self.session.session):
                    return
        if self._parked is not None and self._keep_parked(incoming_msg, decode(incoming_msg)):
            return  # its tab is gone: kept for the session's return
        if not self.paces_iopub:
            if isinstance(incoming_msg, bytes):  # stock would write it as a text frame
                if self.websocket_handler.ws_connection is not None:  # not closed yet
                    self.websocket_handler.write_message(incoming_msg, binary=True)
                return
            super().handle_outgoing_message(incoming_msg, *args)
            return
        self._pace(FromGateway(incoming_msg, decode(incoming_msg)))

    def _pace(self, original: FromGateway) -> None:
        msg = original.msg
        channel = msg_type = ""
        if msg is not None:
            heard = GatewayMessage(msg)
            channel = heard.channel
            msg_type = heard.msg_type if channel == "iopub" else ""
        self.pacer.put(original, channel, msg_type, len(original.text))

    # --- IOPub paced and merged (:mod:`..websocket.pacer`), as for this server's kernels ---

    @property
    def pacer(self) -> Pacer:
        """This websocket's IOPub pacer: jupyter_server's gateway websocket has no rate
        limit at all, so without one a print flood reaches the page unshielded."""
        if self._pacer is None:
            outbox = Outbox(
                self.websocket_handler.write_message,
                DEFAULT_BUDGET,
                self._too_slow,
                logger=self.log,
            )
            self._pacer = self.make_pacer(
                self,
                outbox,
                self._too_slow,
                self.log,
                f"websocket {self.session.session} of gateway kernel {self.kernel_id}",
            )
        return self._pacer

    def _too_slow(self, buffered: int) -> None:
        self._too_slow_closed = True
        self.log.warning(
            "Closing websocket %s of gateway kernel %s: it did not read its messages "
            "(%d bytes waiting, over its %d-byte budget)",
            self.session.session,
            self.kernel_id,
            buffered,
            DEFAULT_BUDGET,
        )
        close_too_slow(self.websocket_handler, DEFAULT_BUDGET, self.log)

    def pace_decode(self, original: FromGateway) -> Message:
        msg = original.msg
        assert msg is not None  # only decoded messages are read
        return msg

    def pace_send(self, original: FromGateway) -> None:
        self.pacer.outbox.put(original.text, isinstance(original.text, bytes), original)

    def pace_send_merged(self, msg: Message) -> None:
        encoded = self._encode_merged(msg)
        self.pacer.outbox.put(encoded.text, isinstance(encoded.text, bytes), encoded)

    def _encode_merged(self, msg: Message) -> FromGateway:
        header = msg.get("header") or {}
        merged = {**msg, "msg_id": header.get("msg_id"), "msg_type": header.get("msg_type")}
        if merged.get("buffers"):  # jupyter_server's binary form, as the gateway sent them
            return FromGateway(serialize_binary_message(merged), merged)
        merged.pop("buffers", None)
        return FromGateway(json.dumps(merged, default=json_default), merged)
