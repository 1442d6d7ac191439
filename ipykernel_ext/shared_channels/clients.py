"""The logical clients of a set of shared channels: who is attached, and who owns which session.

* :class:`SharedClient`: one client (one websocket, say) attached to a
  :class:`~ipykernel_ext.shared_channels.SharedChannels`: how its messages reach it, how it
  sends, and how it learns that the channels went away;
* :class:`ChannelStream`: the one adapter from a channel to a client, shaped like the
  ``ZMQStream`` it replaces: what ``Session.send`` / ``send_raw`` take as ``stream``, and
  what jupyter_server's connection and offline buffer use in ``connection.channels``
  (``on_recv`` diverts the channel's messages, as a ``ZMQStream``'s; the client's
  ``skip_diverted`` keeps back those its owner would drop at the replay anyway);
* :class:`Members`: the one record of which clients are attached and which session id each
  owns. A session id belongs to one attached client at a time, and the ids of departed
  clients are refused to the others (PROTOCOL.md, shared channels).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .messages import (
    RELAYED_CHANNELS,
    ROUTED_CHANNELS,
    Deliver,
    KernelMessage,
    RefusedMessage,
    SessionInUse,
    Unpack,
    header_of_outgoing,
)

#: How many session ids of departed clients are remembered (and refused to other clients).
RETIRED_SESSIONS = 65536

#: ``on_lost(reason)``: the channels closed under an attached client.
OnLost = Callable[[str], None]


class _SocketState:
    """``stream.socket.closed``, which ``MappingKernelManager.stop_buffering`` reads."""

    def __init__(self, client: SharedClient) -> None:
        self._client = client

    @property
    def closed(self) -> bool:
        return self._client.closed


class ChannelStream:
    """One channel of a client, shaped like a ``ZMQStream``.

    ``send_multipart(frames)`` gets complete, signed frames (``Session.send`` makes them) and
    hands them to :meth:`SharedClient.send`, which checks the sender's session; IOPub is
    receive-only. ``on_recv(callback)`` makes the client hand this channel's messages to
    ``callback(KernelMessage)`` instead of delivering them (None: deliver again).
    """

    def __init__(self, client: SharedClient, channel: str) -> None:
        if channel not in RELAYED_CHANNELS:
            raise ValueError(f"unknown channel {channel!r}; one of {RELAYED_CHANNELS}")
        self.client = client
        self.channel = channel
        self.socket = _SocketState(client)
        self.recv_callback: Callable[[KernelMessage], Any] | None = None

    def send_multipart(
        self, frames: list[Any], flags: int = 0, copy: bool = True, **kw: Any
    ) -> None:
        if self.channel not in ROUTED_CHANNELS:
            raise RefusedMessage(f"messages cannot be sent on the {self.channel} channel")
        self.client.send(self.channel, frames)

    def closed(self) -> bool:
        return self.client.closed

    def close(self) -> None:
        self.client.close()

    def flush(self) -> None:
        """IOPub: deliver what the shared socket already received (as ``ZMQStream.flush``)."""
        if self.channel == "iopub" and not self.client.closed:
            self.client.flush_iopub()

    def on_recv(self, callback: Callable[[KernelMessage], Any] | None) -> None:
        self.recv_callback = callback

    on_recv_stream = on_recv


class SharedClient:
    """One logical client of a set of shared channels (one websocket, say).

    Made by :meth:`SharedChannels.attach`. ``deliver`` is called, on the event loop, with
    every :class:`KernelMessage` meant for this client (unless its channel's stream diverts
    it, :meth:`ChannelStream.on_recv`); it must not block, and an exception it raises is
    logged and does not reach the other clients. ``on_lost(reason)`` is called once if the
    channels close while this client is attached (a receiving loop failed, or the owner
    closed them): the client then gets nothing more and should reconnect.
    """

    def __init__(
        self,
        *,
        members: Members,
        send: Callable[[str, list[Any]], None],
        flush_iopub: Callable[[], int],
        unpack: Unpack,
        on_close: Callable[[SharedClient], None],
        deliver: Deliver,
        skip_own_echo: bool,
        name: str,
        on_lost: OnLost | None = None,
    ) -> None:
        # What a client needs of its channels, passed in: who owns which session, how to
        # send on the kernel's sockets and flush IOPub, how to read a header, and whom to
        # tell it left.
        self._members = members
        self._send = send
        self.flush_iopub = flush_iopub
        self._unpack = unpack
        self._on_close = on_close
        self._streams: dict[str, ChannelStream] = {}
        self.deliver = deliver
        self.skip_own_echo = skip_own_echo
        self.name = name
        self.on_lost = on_lost
        self.closed = False
        #: ``skip_diverted(msg)``: true for a message the ``on_recv`` callback must not get
        #: (its owner would drop it at the replay anyway, so an offline buffer need not
        #: hold it). None: every message is diverted.
        self.skip_diverted: Callable[[KernelMessage], bool] | None = None
        #: messages :attr:`skip_diverted` kept from the ``on_recv`` callback
        self.skipped_diverted = 0

    @property
    def sessions(self) -> set[str]:
        """Session ids this client owns: replies whose parent carries one come here."""
        return self._members.sessions_of(self)

    def stream(self, channel: str) -> ChannelStream:
        """This client's stream on ``channel`` (one per channel), for ``Session.send``."""
        stream = self._streams.get(channel)
        if stream is None:
            stream = self._streams[channel] = ChannelStream(self, channel)
        return stream

    def receive(self, msg: KernelMessage) -> None:
        """A message for this client: to its channel's ``on_recv`` callback if one is set
        (jupyter_server's offline buffer holds the client), else to ``deliver``."""
        stream = self._streams.get(msg.channel)
        if stream is not None and stream.recv_callback is not None:
            skip = self.skip_diverted
            if skip is not None and skip(msg):
                self.skipped_diverted += 1
                return
            stream.recv_callback(msg)
        else:
            self.deliver(msg)

    def send(self, channel: str, frames: list[Any]) -> None:
        """Send signed ``frames`` (``[DELIMITER, signature, header, ...]``) on ``channel``.

        The header's session becomes this client's (if no other attached client owns it);
        otherwise :class:`SessionInUse` is raised and nothing is sent.
        """
        if self.closed:
            raise RuntimeError(f"{self.name} is detached from the kernel's channels")
        header = header_of_outgoing(frames, self._unpack)
        session = header.get("session")
        if not isinstance(session, str) or not session:
            raise RefusedMessage(
                "a message sent over shared channels needs a header.session: its replies are "
                "routed by it",
                header,
            )
        try:
            self._members.claim(self, session, take_over=False)
        except SessionInUse as exc:
            exc.header = header
            raise
        self._send(channel, frames)

    def close(self) -> None:
        """Detach: no more messages; this client's sessions are released."""
        if not self.closed:
            self.closed = True
            self._on_close(self)

    def __repr__(self) -> str:
        return f"<SharedClient {self.name} sessions={sorted(self.sessions)}>"


class Members:
    """The attached clients, which session id each owns, and the ids of departed clients.

    ``reserved`` is the channels' own session id, which no client may use. Ownership is kept
    once, here (session id -> client); a client's sessions are read from it.
    """

    def __init__(self, reserved: str, remember: int = RETIRED_SESSIONS) -> None:
        self.reserved = reserved
        self.remember = remember
        #: The attached clients, oldest first. Replaced, never changed in place: a fan-out
        #: iterates the tuple it read while a delivery may detach a client.
        self.attached: tuple[SharedClient, ...] = ()
        self._owners: dict[str, SharedClient] = {}
        # Sessions of departed clients, oldest first (a dict as an ordered set).
        self._retired: dict[str, None] = {}

    def add(self, client: SharedClient) -> None:
        self.attached = (*self.attached, client)

    def remove(self, client: SharedClient) -> None:
        """``client`` left: its sessions are retired (refused to everyone but a takeover)."""
        self.attached = tuple(c for c in self.attached if c is not client)
        for session in self.sessions_of(client):
            del self._owners[session]
            self._retired[session] = None
        while len(self._retired) > self.remember:
            del self._retired[next(iter(self._retired))]

    def clear(self) -> tuple[SharedClient, ...]:
        """Forget every client (the channels closed); return the ones that were attached."""
        lost = self.attached
        self.attached = ()
        self._owners.clear()
        return lost

    def owner(self, session: Any) -> SharedClient | None:
        return self._owners.get(session) if isinstance(session, str) else None

    def sessions_of(self, client: SharedClient) -> set[str]:
        return {session for session, owner in self._owners.items() if owner is client}

    def claim(self, client: SharedClient, session: str, take_over: bool) -> SharedClient | None:
        """Give ``session`` to ``client``; return the client it was taken from, if any.

        Without ``take_over`` a session another client owns or owned raises
        :class:`SessionInUse`.
        """
        if session == self.reserved:
            raise SessionInUse(f"session {session!r} is reserved by the shared channels")
        owner = self._owners.get(session)
        if owner is client:
            return None
        if not take_over and session in self._retired:
            raise SessionInUse(
                f"session {session!r} belonged to another client of this kernel; only a "
                "reconnection with that session id (the websocket's session_id) takes it over"
            )
        if owner is not None and not take_over:
            raise SessionInUse(f"session {session!r} is in use by another client of this kernel")
        self._retired.pop(session, None)
        self._owners[session] = client
        return owner
