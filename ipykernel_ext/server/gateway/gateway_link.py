"""The server's links to a gateway kernel: the messages it reads, the feed that hears each cell.

In gateway mode the kernels' ZMQ channels are on the gateway's side; jupyter_server's
``GatewayWebSocketConnection`` proxies each tab's websocket to a websocket of its own to the
gateway, in the legacy JSON protocol. This module is what the outputs owner needs of those
links (:mod:`.gateway_connection` is the tab's connection class):

* :class:`GatewayMessage` and :func:`decode`: one message from the gateway, as the owner
  reads it;
* :class:`GatewayLink`: jupyter_server's websocket to the gateway, which closes what it opened;
* :class:`FeedSocket` and :class:`GatewayFeed`: the server's own websocket to the gateway, the
  IOPub of every cell once, whichever tabs are open. The tab's websocket to the gateway
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
import struct
import uuid
from collections.abc import Callable
from typing import Any

from jupyter_client.session import json_packer
from jupyter_server.gateway.connections import GatewayWebSocketConnection
from jupyter_server.services.kernels.connection.base import deserialize_binary_message

from ..outputs import OutputsOwner

#: The longest a tab's messages wait for the feed to become live (seconds).
FEED_READY_TIMEOUT = 10.0

#: The ``status`` states a gateway writes to its websockets when the kernel restarted or died
#: (jupyter_server's websocket handler on the gateway's side).
KERNEL_ENDED_STATES = {"restarting": "restart", "dead": "dead"}


class GatewayMessage:
    """One kernel message from the gateway's websocket (legacy JSON, decoded), as the owner
    reads a message (:class:`~..outputs.HeardMessage`)."""

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
    """A legacy message as a dict: JSON text, or jupyter_server's binary form (a message with
    buffers: offsets, JSON, buffers), whose ``buffers`` it then holds; None for anything else
    (it is relayed untouched)."""
    try:
        if isinstance(message, bytes):
            msg = deserialize_binary_message(message)
        else:
            msg = json.loads(message)
    except (TypeError, ValueError, IndexError, struct.error):
        return None
    return msg if isinstance(msg, dict) else None


class GatewayLink(GatewayWebSocketConnection):
    """jupyter_server's websocket to the gateway, which closes what it opened and passes
    binary messages on.

    Stock leaves its websocket to the gateway open and unread when its tab closed before the
    gateway answered (``disconnect`` cannot cancel a tornado future, and ``_connection_done``
    only logs): the gateway keeps the kernel's channels for it and counts it as a connection
    (a connected kernel is not culled) until the server stops. This one closes it.

    Stock also decodes every frame from the gateway as UTF-8, and a message with buffers comes
    as a binary frame (jupyter_server's binary form): a widget with binary state (an ``Image``,
    a ``FileUpload``, an ipympl figure) ends stock's reading loop with a ``UnicodeDecodeError``,
    and the tab hears nothing more from its kernel until it reconnects. This one hands binary
    frames on as they are (:func:`decode` reads them).
    """

    def _connection_done(self, fut: Any) -> None:
        super()._connection_done(fut)
        if self.disconnected and not fut.cancelled() and fut.exception() is None:
            fut.result().close()

    async def _read_messages(self) -> None:
        """Hand each message from the gateway on, text or binary, until the connection is lost
        or this side disconnected; then stock's loop, which finds the connection closed
        (tornado's ``read_message`` gives None) and reconnects as it does."""
        while self.ws is not None and not self.disconnected:
            try:
                message = await self.ws.read_message()
            except Exception as exc:
                self.log.error("Exception reading message from websocket: %s", exc)
                break
            if message is None:
                break
            self.handle_outgoing_message(message)  # type: ignore[arg-type]  # typed str; bytes too
        if self.reading_ended():
            return
        await super()._read_messages()

    def reading_ended(self) -> bool:
        """The loop above ended (the websocket closed, or this side disconnected): True if
        a subclass dealt with it, and stock's reconnect must not run."""
        return False


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
        if not owner.following:
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
    open while a tab of the kernel is or a followed cell runs; the gateway's
    :class:`~..outputs.Feed`."""

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
