"""Outputs survive the tab for kernels behind a gateway (``--gateway-url``).

In gateway mode the kernels' ZMQ channels are on the gateway's side (Jupyter Enterprise
Gateway, a Kernel Gateway): jupyter_server's ``GatewayWebSocketConnection`` proxies each
tab's websocket to a websocket of its own to the gateway, in the legacy JSON protocol. Every
message a tab sends and gets still passes through the notebook server, which is where the
notebook and its live document are, so the same :class:`~.outputs.owner.OutputsOwner` as for local
kernels can keep a departed tab's outputs (docs/PROTOCOL.md section 6) if it hears them:

* :class:`GatewayOutputsConnection` (the tab's side; a subclass of jupyter_server's class,
  whose relaying it keeps as it is) tells the owner what the tab sends (a cell's
  ``execute_request``, comm messages, an ``input_reply``), the replies and input requests
  the gateway routes to this tab alone (``execute_reply``, ``input_request``), when the tab
  opens and closes, and leaves out what the owner wrote into the live document for it;
* :class:`GatewayFeed` (one per kernel) is the server's own websocket to the gateway: the
  IOPub of every cell, once, whichever tabs are open. The tab's websocket to the gateway
  closes with the tab (stock), so it cannot be the one that hears the rest of the cell.
  The feed is open while a tab of the kernel is or a followed cell runs, and closed
  otherwise: a websocket left open would count as a connection, and the gateway does not
  cull a connected idle kernel. A tab's messages wait until the feed is live (its
  ``kernel_info_request`` on control answered: the gateway subscribes the feed's IOPub
  before it reads what the feed sends), so the feed hears every cell from its first
  message; if the feed cannot be made live within ``kernel_info_timeout`` (at most
  ``FEED_READY_TIMEOUT`` s) the tab's messages go on without it, and the log says the
  kernel's outputs will not survive its tab. Once live, no tab waits for it again: after a
  lost connection stock reconnects it (the gap is logged as lost) or gives up.

A restart or shutdown through the server's API ends the running cells as for local kernels
(jupyter_server's kernel action events); one the gateway makes itself reaches the feed as
the ``status`` ``restarting`` or ``dead`` it writes to its websockets.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

from jupyter_client.jsonutil import json_default
from jupyter_client.session import json_packer
from jupyter_server.gateway.connections import GatewayWebSocketConnection

from .connection import CLOSE_TOO_SLOW, MAX_CLOSE_REASON
from .keep_outputs import KeepOutputs
from .outbox import DEFAULT_BUDGET, Outbox
from .outputs.owner import OutputsOwner
from .paced_iopub import PacedIOPub
from .pacer import Message, Pacer

#: The longest a tab's messages wait for the feed to become live (seconds).
FEED_READY_TIMEOUT = 10.0

#: The ``status`` states a gateway writes to its websockets when the kernel restarted or died
#: (jupyter_server's websocket handler on the gateway's side).
KERNEL_ENDED_STATES = {"restarting": "restart", "dead": "dead"}


class GatewayMessage:
    """One kernel message from the gateway's websocket (legacy JSON, decoded), as the owner
    reads a message (:class:`~.outputs.heard.HeardMessage`)."""

    __slots__ = ("channel", "msg")

    def __init__(self, msg: dict[str, Any]) -> None:
        self.msg = msg
        self.channel: str = msg.get("channel") or ""

    @property
    def header(self) -> dict[str, Any]:
        return self.msg.get("header") or {}

    @property
    def parent_header(self) -> dict[str, Any]:
        return self.msg.get("parent_header") or {}

    @property
    def msg_type(self) -> str:
        return str(self.header.get("msg_type", ""))

    def content_once(self) -> Any:
        return self.msg.get("content") or {}


def decode(message: str | bytes) -> dict[str, Any] | None:
    """A legacy JSON message as a dict; None for anything else (it is relayed untouched)."""
    try:
        msg = json.loads(message)
    except (TypeError, ValueError):
        return None
    return msg if isinstance(msg, dict) else None


class GatewayLink(GatewayWebSocketConnection):
    """jupyter_server's websocket to the gateway, which closes what it opened.

    Stock leaves its websocket to the gateway open and unread when its tab closed before the
    gateway answered (``disconnect`` cannot cancel a tornado future, and ``_connection_done``
    only logs): the gateway keeps the kernel's channels for it and counts it as a connection
    (a connected kernel is not culled) until the server stops. This one closes it.
    """

    def _connection_done(self, fut: Any) -> None:
        super()._connection_done(fut)
        if self.disconnected and not fut.cancelled() and fut.exception() is None:
            fut.result().close()


class FeedSocket(GatewayLink):
    """One lifetime of the feed's websocket to the gateway (jupyter_server's class: its URL,
    its connection arguments, its reconnects), with no tab behind it: what it reads goes to
    the kernel's owner."""

    def __init__(self, owner: OutputsOwner, on_live: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.owner = owner
        self.on_live = on_live
        self.live = False
        #: it was live once: tabs no longer wait for it (a reconnect's gap is logged as lost)
        self.was_live = False
        self._probe: str | None = None
        # Its own session: the gateway routes its replies to it, and no tab's is taken over.
        self.session.session = f"ipykernel-ext-outputs-{uuid.uuid4().hex}"

    async def connect(self) -> None:
        """Connect (again, after a lost connection: stock reconnects), then probe."""
        if self.live:
            self.log.warning(
                "Kernel %s: the server's websocket to the gateway was lost; outputs of the "
                "running cells that came meanwhile are missing from what it keeps",
                self.kernel_id,
            )
        self.live = False
        await super().connect()
        probe = self.session.msg("kernel_info_request", content={})
        self._probe = probe["header"]["msg_id"]
        # Stock sends it once its websocket is connected (it waits on the connection).
        self.handle_incoming_message(json_packer({**probe, "channel": "control"}).decode())

    def handle_outgoing_message(self, incoming_msg: str, *args: Any) -> None:
        """A message from the gateway: the owner hears its IOPub (stock writes it to a tab)."""
        if not self.live:
            msg = decode(incoming_msg)
            if (
                msg is not None
                and msg.get("channel") == "control"
                and (msg.get("parent_header") or {}).get("msg_id") == self._probe
            ):
                self.live = self.was_live = True
                self.on_live()
            return  # before the probe's reply: no tab's message has reached the kernel yet
        owner = self.owner
        if not owner.cells.cells:
            return  # nothing followed: nothing decoded
        msg = decode(incoming_msg)
        if msg is None or msg.get("channel") != "iopub":
            return
        heard = GatewayMessage(msg)
        if heard.msg_type == "status":
            ended = KERNEL_ENDED_STATES.get(heard.content_once().get("execution_state"))
            if ended is not None:
                owner.kernel_ended(ended)
                return
        owner.received(heard)


class GatewayFeed:
    """The server's own websocket to one gateway kernel, for its owner (module docstring):
    open while a tab of the kernel is or a followed cell runs."""

    def __init__(
        self,
        make_socket: Callable[[Callable[[], None]], FeedSocket],
        log: Any,
        kernel_id: str,
        ready_timeout: float,
    ) -> None:
        self.make_socket = make_socket
        self.log = log
        self.kernel_id = kernel_id
        self.ready_timeout = ready_timeout
        self.socket: FeedSocket | None = None
        #: the feed was not live in time: tabs' messages go on without waiting for it
        self.gave_up = False
        self._waiting: list[Callable[[], None]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._connecting: asyncio.Future[None] | None = None

    @property
    def passable(self) -> bool:
        """Whether a tab's message may go to the kernel now: the feed hears what follows, or
        will not (it was not live in time); once live, never waited for again (after a lost
        connection stock reconnects, or gives up: a tab must not wait on that)."""
        return self.socket is None or self.socket.was_live or self.gave_up

    def when_passable(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once :attr:`passable` (now, if it is)."""
        if self.passable:
            callback()
        else:
            self._waiting.append(callback)

    def update(self, tabs_open: bool, following: bool) -> None:
        want = tabs_open or following
        if want and self.socket is None:
            self.gave_up = False
            self.socket = self.make_socket(self._live)
            self._connecting = asyncio.ensure_future(self.socket.connect())
            self._timer = asyncio.get_running_loop().call_later(
                self.ready_timeout, self._not_live_in_time
            )
        elif not want and self.socket is not None:
            self.close()

    def _live(self) -> None:
        if self.gave_up:
            self.log.info(
                "Kernel %s: the server's websocket to the gateway is live now; "
                "outputs survive the tab again",
                self.kernel_id,
            )
        self.gave_up = False
        self._release()

    def _not_live_in_time(self) -> None:
        self._timer = None
        if self.socket is None or self.socket.live:
            return
        self.gave_up = True
        self.log.error(
            "Kernel %s: the server's own websocket to the gateway was not live within %.0f s; "
            "its tabs go on without it, and outputs of its cells will not survive the tab "
            "until it is",
            self.kernel_id,
            self.ready_timeout,
        )
        self._release()

    def _release(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiting, self._waiting = self._waiting, []
        for callback in waiting:
            callback()

    def close(self) -> None:
        socket, self.socket = self.socket, None
        if socket is not None:
            socket.disconnect()
        self._release()


class FromGateway(NamedTuple):
    """One message from the gateway as its pacer holds it: the text, and its decoding
    (None: not JSON; it is passed on untouched, in its place)."""

    text: str
    msg: dict[str, Any] | None


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

    owner: OutputsOwner | None = None
    _owner_open = False
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
        if self.keep_outputs:
            owner = self.owner = self.outputs_owner(
                self.kernel_id,
                self.websocket_handler.settings,
                self.session.unpack,
                self.log,
                self.multi_kernel_manager,
            )
            if owner.feed is None:
                kernel_manager, config = self.kernel_manager, self.config

                def make_socket(on_live: Callable[[], None]) -> FeedSocket:
                    return FeedSocket(owner, on_live, parent=kernel_manager, config=config)

                owner.feed = GatewayFeed(
                    make_socket,
                    self.log,
                    self.kernel_id,
                    min(self.kernel_info_timeout, FEED_READY_TIMEOUT),
                )
            self._owner_open = True
            owner.opened(self.session.session)  # opens the feed if it is not
        await super().connect()

    def disconnect(self) -> None:  # type: ignore[override]  # sync as stock's; the base declares it async
        if self._deferred:
            self.disconnected = True
            return  # nothing was opened
        super().disconnect()
        if self._pacer is not None:
            self._pacer.close()
            self._pacer.outbox.close()
        if self.owner is not None and self._owner_open:
            self._owner_open = False
            self.owner.closed(self.session.session)

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

    def handle_outgoing_message(self, incoming_msg: str, *args: Any) -> None:
        """Stock, but what the gateway routes to this tab alone is heard by the owner, and
        what the owner wrote into the live document for this tab's session is left out."""
        owner = self.owner
        if owner is not None and (
            owner.hidden
            or (
                owner.cells.cells
                and ("execute_reply" in incoming_msg or "input_request" in incoming_msg)
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
            super().handle_outgoing_message(incoming_msg, *args)
            return
        msg = decode(incoming_msg)
        channel = msg_type = ""
        text_bytes = 0
        if msg is not None:
            heard = GatewayMessage(msg)
            channel = heard.channel
            msg_type = heard.msg_type if channel == "iopub" else ""
            if msg_type == "stream":
                text_bytes = len(str(heard.content_once().get("text", "")))
        original = FromGateway(incoming_msg, msg)
        self.pacer.put(original, channel, msg_type, len(incoming_msg), text_bytes)

    # --- IOPub paced and merged (:mod:`.pacer`), as for kernels of this server -----------

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
        reason = f"over the server's {DEFAULT_BUDGET}-byte buffer for this websocket; reconnect"
        try:
            self.websocket_handler.close(CLOSE_TOO_SLOW, reason[:MAX_CLOSE_REASON])
        except Exception as exc:  # already closed
            self.log.debug("Closing the websocket failed: %s", exc)

    def pace_decode(self, original: FromGateway) -> Message:
        msg = original.msg
        assert msg is not None  # only decoded messages are read
        return msg

    def pace_send(self, original: FromGateway) -> None:
        self.pacer.outbox.put(original.text, False)

    def pace_send_merged(self, msg: Message) -> None:
        header = msg.get("header") or {}
        merged = {**msg, "msg_id": header.get("msg_id"), "msg_type": header.get("msg_type")}
        self.pacer.outbox.put(json.dumps(merged, default=json_default), False)
