"""Which attached clients get each kernel message, and the kernel status a newcomer is told.

:class:`Dispatcher` takes every message the sockets receive (``dispatch(channel, frames)``):

* shell, control and stdin replies go to the client that owns the session id in
  ``parent_header.session`` (:class:`~ipykernel_ext.shared_channels.clients.Members`); replies
  to the channels' own requests are taken out first (:class:`.readiness.OwnRequests`), and a
  reply whose client left is dropped: nobody else may have it;
* IOPub goes to every attached client, except that a ``comm_echo`` skips the client whose
  session caused it when that client asked so (``skip_own_echo``); every IOPub message tells
  a readiness wait that IOPub delivers;
* with ``track_status``, the last ``status`` whose parent's msg_type it accepts is kept
  (:attr:`Dispatcher.status`) for clients that join later;
* a wait for an IOPub message (:meth:`Dispatcher.iopub_message`) is done with the first that
  matches, once every client was given it;
* a :class:`Watcher` (one per set, optional) is shown every kernel message once, in the order
  the kernel sent it, before any client gets it (IOPub, and every reply, also one whose client
  left); what clients send it sees through :meth:`Watcher.sent`, called by the channels.

A message that cannot be read is logged and dropped; a client whose ``deliver`` raises is
logged and does not keep the message from the others.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..protocol import COMM_ECHO_MSG_TYPE, HEADER
from .clients import Members, SharedClient
from .messages import KernelMessage, Unpack
from .readiness import OwnRequests, Readiness

#: ``track_status(parent_msg_type)``: does this status tell the kernel's execution state?
#: The echo's type as it appears in a header's raw bytes: the cheap test before decoding.
_ECHO_BYTES = COMM_ECHO_MSG_TYPE.encode()

TrackStatus = Callable[[Any], bool]


class Watcher(Protocol):
    """Sees a set's traffic without taking part in it (the server's outputs owner).

    Both are called on the event loop and must not block; an exception is logged and the
    message goes on as if there were no watcher.
    """

    def sent(self, channel: str, frames: list[Any]) -> None:
        """A client's signed frames (``[DELIMITER, signature, header, ...]``), about to be sent
        on ``channel``: after the sender's session was checked, before the kernel has them."""

    def received(self, msg: KernelMessage) -> None:
        """One kernel message (IOPub or a reply), before any client gets it."""


@dataclass
class Dispatcher:
    """Delivers each kernel message of a set of shared channels to the clients it is for.

    What it needs of the set is passed in: who is attached and owns which session
    (``members``), the channels' own requests (``own``) and readiness wait, how to decode.
    """

    members: Members
    own: OwnRequests
    readiness: Readiness
    unpack: Unpack
    track_status: TrackStatus | None
    log: logging.Logger | logging.LoggerAdapter[Any]
    #: The last tracked IOPub ``status`` (None until one, and after the sockets change).
    status: KernelMessage | None = None
    #: Shown every kernel message first (see :class:`Watcher`).
    watcher: Watcher | None = None
    #: IOPub waits (:meth:`iopub_message`): each match and its future, until done
    waiters: list[tuple[Callable[[KernelMessage], bool], asyncio.Future[KernelMessage]]] = field(
        default_factory=list
    )

    def dispatch(self, channel: str, raw: list[bytes]) -> None:
        """One message as the socket received it (``[*identities, DELIMITER, ...]``)."""
        msg = KernelMessage.from_wire(channel, raw, self.unpack)
        if msg is None:
            self.log.warning("Dropped a malformed %s message from the kernel", channel)
            return
        try:
            if channel == "iopub":
                self._fan_out(msg)
            else:
                self._route(msg)
        except Exception:
            # One undecodable message must not stop the channel for everyone.
            self.log.exception("Dropped a %s message the shared channels could not read", channel)

    def announce_status(self, client: SharedClient) -> bool:
        """Deliver the kept status to ``client``; True if there was one to give."""
        status = self.status
        if status is None or client.closed:
            return False
        self.deliver(client, status)
        return True

    def deliver(self, client: SharedClient, msg: KernelMessage) -> None:
        try:
            client.receive(msg)
        except Exception:
            self.log.exception("Delivering a %s message to %s failed", msg.channel, client.name)

    def _route(self, msg: KernelMessage) -> None:
        try:
            session = msg.parent_header.get("session")
        except Exception:
            self.log.warning("Dropped a %s message with an unreadable parent header", msg.channel)
            return
        if self.own.take_reply(msg):
            return
        self._watch(msg)
        owner = self.members.owner(session)
        if owner is None:
            # Its client left (a websocket closed mid-execution): nobody else may have it.
            self.log.debug("Dropped a %s reply for session %s: not attached", msg.channel, session)
            return
        self.deliver(owner, msg)

    def _watch(self, msg: KernelMessage) -> None:
        if self.watcher is not None:
            try:
                self.watcher.received(msg)
            except Exception:
                self.log.exception("The watcher failed on a %s message", msg.channel)

    def _fan_out(self, msg: KernelMessage) -> None:
        self.readiness.saw_iopub()
        self._watch(msg)
        skip: SharedClient | None = None
        header = msg.frames[HEADER]
        # Cheap byte tests first: only an echo or a status pays for decoding its header.
        if _ECHO_BYTES in header and msg.msg_type == COMM_ECHO_MSG_TYPE:
            skip = self.members.owner(msg.parent_header.get("session"))
            if skip is not None and not skip.skip_own_echo:
                skip = None
        elif (
            self.track_status is not None
            and b"status" in header
            and msg.msg_type == "status"
            and self.track_status(msg.parent_header.get("msg_type"))
        ):
            self.status = msg
        for client in self.members.attached:
            if client is not skip:
                self.deliver(client, msg)
        if self.waiters:
            self._resolve(msg)

    def iopub_message(
        self, match: Callable[[KernelMessage], bool]
    ) -> asyncio.Future[KernelMessage]:
        """A future done with the first IOPub message ``match`` accepts, once every client
        was given it (cancel it to stop waiting)."""
        waiter: asyncio.Future[KernelMessage] = asyncio.get_running_loop().create_future()
        self.waiters.append((match, waiter))
        return waiter

    def _resolve(self, msg: KernelMessage) -> None:
        waiting = []
        for match, waiter in self.waiters:
            if waiter.done():
                continue
            try:
                hit = match(msg)
            except Exception:
                self.log.exception("An IOPub wait failed on a %s message", msg.msg_type)
                hit = False
            if hit:
                waiter.set_result(msg)
            else:
                waiting.append((match, waiter))
        self.waiters = waiting
