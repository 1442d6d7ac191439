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
from typing import Any, NamedTuple

from jupyter_client.jsonutil import json_default
from jupyter_server.services.kernels.connection.base import serialize_binary_message

from ..keep_outputs import KeepOutputs
from ..outputs import OutputsOwner
from ..websocket import DEFAULT_BUDGET, Entry, Message, Outbox, PacedIOPub, Pacer, close_too_slow
from .gateway_link import (
    FEED_READY_TIMEOUT,
    FeedSocket,
    GatewayFeed,
    GatewayLink,
    GatewayMessage,
    decode,
)


class FromGateway(NamedTuple):
    """One message from the gateway as its pacer holds it: the text, and its decoding
    (None: not JSON; it is passed on untouched, in its place)."""

    text: str | bytes
    msg: dict[str, Any] | None


#: Seconds what a closed tab's websocket had read from the gateway and not delivered is kept
#: for the same session's next websocket (the gateway has sent it already: it is ours alone).
HELD_FOR = 600.0


class Held(NamedTuple):
    """What a closed websocket of a kernel had not delivered, for its session's return."""

    session: str
    messages: list[FromGateway]
    expiry: asyncio.TimerHandle | None


#: By kernel: the last closed websocket's undelivered messages (one session a kernel, as
#: jupyter_server's own buffer of a local kernel's last websocket).
_held: dict[str, Held] = {}


class GatewayOutputsConnection(GatewayLink, KeepOutputs, PacedIOPub):
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
            self.owner_opened()  # opens the feed if it is not
        if self.paces_iopub:
            self._replay_held()
        await super().connect()

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
        super().disconnect()
        if self._pacer is not None:
            # What the gateway sent and this tab never got: the outbox's unwritten messages,
            # then the line, then what came once either stopped. Kept for the session's
            # next websocket: the gateway will not send it again.
            unwritten = self._pacer.outbox.close()
            self._hold_for_session([*unwritten, *self._pacer.close()])
        self.owner_closed()

    def _hold_for_session(self, waiting: list[Any]) -> None:
        kept = [self._as_from_gateway(item) for item in waiting]
        previous = _held.pop(self.kernel_id, None)
        if previous is not None:
            self._drop_held(previous, "a newer websocket of the kernel closed")
        if not kept:
            return
        loop = asyncio.get_event_loop()
        kernel_id = self.kernel_id
        expiry = loop.call_later(HELD_FOR, lambda: self._expire_held(kernel_id))
        _held[kernel_id] = Held(self.session_id, kept, expiry)
        self.log.info(
            "Websocket %s of gateway kernel %s closed with %d messages waiting: kept for "
            "its session's next websocket",
            self.session_id,
            kernel_id,
            len(kept),
        )

    def _expire_held(self, kernel_id: str) -> None:
        held = _held.pop(kernel_id, None)
        if held is not None:
            self._drop_held(held, f"its session did not come back within {HELD_FOR:g} s")

    def _drop_held(self, held: Held, why: str) -> None:
        if held.expiry is not None:
            held.expiry.cancel()
        self.log.warning(
            "Gateway kernel %s: %d messages session %s never got are dropped: %s (with "
            "keep_outputs the outputs are in the notebook)",
            self.kernel_id,
            len(held.messages),
            held.session,
            why,
        )

    def _replay_held(self) -> None:
        """What this session's last websocket had not delivered, first (the gateway replays
        what came after it, if it buffered, once this connects)."""
        held = _held.pop(self.kernel_id, None)
        if held is None:
            return
        if held.session != self.session_id:
            self._drop_held(held, f"session {self.session_id} connected")
            return
        if held.expiry is not None:
            held.expiry.cancel()
        self.log.info(
            "Replaying %d messages kept for session %s", len(held.messages), self.session_id
        )
        owner = self.owner
        for item in held.messages:
            if (
                owner is not None
                and item.msg is not None
                and owner.hides(GatewayMessage(item.msg), self.session_id)
            ):
                continue  # the owner wrote it into the live document this tab shows
            self._pace(item)

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
