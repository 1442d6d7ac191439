"""The logical clients of a set of shared channels, and who owns which session id.

* :class:`SharedClient`: one client (one websocket, say) attached to a
  :class:`~ipykernel_ext.shared_channels.SharedChannels`: how its messages reach it, how it
  sends, and how it learns that the channels went away;
* :class:`ChannelStream`: what ``Session.send`` / ``send_raw`` take as ``stream`` for one of
  the client's channels;
* :class:`SessionOwners`: a session id belongs to one attached client at a time, and the ids
  of departed clients are refused to the others (PROTOCOL.md, shared channels).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .messages import (
    CHANNELS,
    ROUTED_CHANNELS,
    Deliver,
    RefusedMessage,
    SessionInUse,
    Unpack,
    header_of_outgoing,
)

#: How many session ids of departed clients are remembered (and refused to other clients).
RETIRED_SESSIONS = 65536

#: ``on_lost(reason)``: the channels closed under an attached client.
OnLost = Callable[[str], None]


class ChannelStream:
    """What a client sends on one channel through: a ``stream`` for ``Session.send``.

    ``Session.send(stream, ...)`` and ``Session.send_raw(stream, ...)`` call
    ``stream.send_multipart(frames, ...)`` with the complete, signed frames; this object
    checks the sender's session and hands the frames to the shared socket.
    """

    def __init__(self, client: SharedClient, channel: str) -> None:
        if channel not in CHANNELS or channel == "iopub":
            raise ValueError(f"cannot send on channel {channel!r}; use one of {ROUTED_CHANNELS}")
        self.client = client
        self.channel = channel

    def send_multipart(
        self, frames: list[Any], flags: int = 0, copy: bool = True, **kw: Any
    ) -> None:
        self.client.send(self.channel, frames)

    def closed(self) -> bool:
        return self.client.closed


class SharedClient:
    """One logical client of a set of shared channels (one websocket, say).

    Made by :meth:`SharedChannels.attach`. ``deliver`` is called, on the event loop, with
    every :class:`KernelMessage` meant for this client; it must not block, and an exception
    it raises is logged and does not reach the other clients. ``on_lost(reason)`` is called
    once if the channels close while this client is attached (a receiving loop failed, or
    the owner closed them): the client then gets nothing more and should reconnect.
    """

    def __init__(
        self,
        *,
        owners: SessionOwners,
        send: Callable[[str, list[Any]], None],
        unpack: Unpack,
        on_close: Callable[[SharedClient], None],
        deliver: Deliver,
        skip_own_echo: bool,
        name: str,
        on_lost: OnLost | None = None,
    ) -> None:
        # What a client needs of its channels, passed in: who owns which session, how to
        # send on the kernel's sockets, how to read a header, and whom to tell it left.
        self._owners = owners
        self._send = send
        self._unpack = unpack
        self._on_close = on_close
        self.deliver = deliver
        self.skip_own_echo = skip_own_echo
        self.name = name
        self.on_lost = on_lost
        #: Session ids this client owns: replies whose parent carries one come here.
        self.sessions: set[str] = set()
        self.closed = False

    def stream(self, channel: str) -> ChannelStream:
        """A stream for ``Session.send`` / ``Session.send_raw`` on ``channel``."""
        return ChannelStream(self, channel)

    def claim(self, session: str) -> None:
        """Own ``session``; raise :class:`SessionInUse` if another client owns it."""
        self._owners.claim(self, session, take_over=False)

    def send(self, channel: str, frames: list[Any]) -> None:
        """Send signed ``frames`` (``[DELIM, signature, header, ...]``) on ``channel``.

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
            self._owners.claim(self, session, take_over=False)
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


class SessionOwners:
    """Session id -> the attached client that owns it, and the ids of departed clients.

    ``reserved`` is the channels' own session id, which no client may use.
    """

    def __init__(self, reserved: str, remember: int = RETIRED_SESSIONS) -> None:
        self.reserved = reserved
        self.remember = remember
        self._owners: dict[str, SharedClient] = {}
        # Sessions of departed clients, oldest first (a dict as an ordered set).
        self._retired: dict[str, None] = {}

    def get(self, session: Any) -> SharedClient | None:
        return self._owners.get(session) if isinstance(session, str) else None

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
        if owner is not None:
            owner.sessions.discard(session)
        self._owners[session] = client
        client.sessions.add(session)
        return owner

    def release(self, client: SharedClient) -> None:
        """``client`` left: its sessions are retired (refused to everyone but a takeover)."""
        for session in client.sessions:
            if self._owners.get(session) is client:
                del self._owners[session]
                self._retired[session] = None
        client.sessions.clear()
        while len(self._retired) > self.remember:
            del self._retired[next(iter(self._retired))]

    def clear(self) -> None:
        self._owners.clear()
