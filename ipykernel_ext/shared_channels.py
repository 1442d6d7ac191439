"""One set of ZMQ channels to a kernel, shared by many logical clients (asyncio, zmq.asyncio).

A Jupyter client normally opens its own shell, control, stdin and IOPub sockets to a kernel.
A server that relays many clients (jupyter_server with many browser tabs or collaborators)
then holds four sockets per client, and the kernel encrypts and sends every IOPub message
once per client. :class:`SharedChannels` holds *one* set and multiplexes it:

* shell, control and stdin messages from the kernel go to the client whose session id is in
  the message's ``parent_header.session``. Only the parent-header frame is decoded for that,
  never the content, so routing costs the same for a 10 MB reply as for an empty one;
* IOPub goes to every client, except that a ``comm_echo`` (PROTOCOL.md section 2) is not
  delivered to the client whose session caused it (per client, configurable);
* an ``input_request`` is a stdin message whose parent is the asker's ``execute_request``,
  so it reaches only the asker;
* clients attach and detach at any time; when the last one leaves, the sockets are closed
  after a short grace period (a page reload attaches again before it ends).

Sessions are owned: a session id belongs to one attached client at a time (the client that
sent a message with it, or that attached with it). A client cannot send with a session that
another client owns or owned before (:class:`SessionInUse`; every client sees the others'
session ids in IOPub parent headers), so it cannot make the kernel address replies to someone
else's session, nor receive someone else's, not even the late replies of a client that left.
Only :meth:`SharedChannels.attach` with a session id *takes it over*: that is the same
session reconnecting (a browser tab reloading, whose old websocket may not have been noticed
closed yet); the old owner gets no more replies for it. This mirrors jupyter_server, where the
websocket's ``session_id`` is the ZMQ identity replies are routed to, and a websocket opened
with the ``session_id`` of an open one replaces it.

The library never signs or verifies client messages itself: a client sends frames its own
:class:`jupyter_client.session.Session` built and signed (``Session.send`` and ``send_raw``
accept a :meth:`SharedClient.stream` as their stream), so messages are signed exactly as if
the client owned the sockets. Requests the channels make themselves (the kernel_info requests
that check the sockets are connected) carry a session id of their own, and their replies are
consumed here, never delivered to a client.

Usage (inside a running asyncio loop)::

    channels = SharedChannels(km.get_connection_info())
    channels.start()
    client = channels.attach(on_message, session="3f1c...")  # on_message(KernelMessage)
    session.send(client.stream("shell"), "execute_request", {"code": "1+1"})
    ...
    client.close()   # the sockets close `grace_period` seconds after the last client leaves
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import zmq
import zmq.asyncio
from jupyter_client.session import DELIM, Session

#: Channels whose messages are replies routed to one client by ``parent_header.session``.
ROUTED_CHANNELS = ("shell", "control", "stdin")
#: Every channel a set holds (heartbeat stays with the kernel manager, as in jupyter_server).
CHANNELS = (*ROUTED_CHANNELS, "iopub")

_SOCKET_TYPES = {"shell": zmq.DEALER, "control": zmq.DEALER, "stdin": zmq.DEALER, "iopub": zmq.SUB}

#: Messages taken from one socket per event-loop iteration. One, as ``ZMQStream`` does: the
#: server's other streams (its IOPub activity monitor, other kernels' channels) read one
#: message per iteration too, and a larger batch starves them during a burst (measured: the
#: activity monitor's subscription overflowed, so the kernel dropped messages for it).
RECV_BATCH = 1

#: How often the readiness check re-sends its kernel_info_request (as jupyter_server's nudge).
NUDGE_INTERVAL = 0.5

DEFAULT_GRACE_PERIOD = 5.0

#: How many session ids of departed clients are remembered (and refused to other clients).
RETIRED_SESSIONS = 65536

log = logging.getLogger(__name__)


Unpack = Callable[[bytes], Any]


class RefusedMessage(ValueError):
    """A client's message was not sent to the kernel (the text says why).

    ``header`` is the refused message's header (``{}`` if it could not be decoded), so the
    caller can answer the sender with that header as parent.
    """

    def __init__(self, message: str, header: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.header = header or {}


class SessionInUse(RefusedMessage):
    """The message's ``header.session`` is owned by another attached client."""


class KernelMessage:
    """One message received from the kernel, shared by every client it is delivered to.

    ``frames`` is the message without routing identities and delimiter, as jupyter_server's
    websocket code expects it: ``[signature, header, parent_header, metadata, content,
    *buffers]``. Decoded parts are computed on first use and kept, so a message fanned out to
    a hundred clients is decoded once. ``cache`` holds what recipients derive from the message
    (a websocket encoding, say) so that they, too, compute it once.
    """

    __slots__ = ("_header", "_parent", "cache", "channel", "frames", "unpack")

    def __init__(self, channel: str, frames: list[bytes], unpack: Unpack = json.loads) -> None:
        self.channel = channel
        self.frames = frames
        self.unpack = unpack
        self._header: dict[str, Any] | None = None
        self._parent: dict[str, Any] | None = None
        self.cache: dict[str, Any] = {}

    @property
    def parts(self) -> list[bytes]:
        """``[header, parent_header, metadata, content, *buffers]`` (no signature)."""
        return self.frames[1:]

    @property
    def header(self) -> dict[str, Any]:
        if self._header is None:
            self._header = self.unpack(self.frames[1])
        return self._header

    @property
    def parent_header(self) -> dict[str, Any]:
        if self._parent is None:
            self._parent = self.unpack(self.frames[2])
        return self._parent

    @property
    def msg_type(self) -> str:
        return self.header.get("msg_type", "")

    def memo(self, key: str, compute: Callable[[], Any]) -> Any:
        """``cache[key]``, computed by ``compute()`` the first time."""
        try:
            return self.cache[key]
        except KeyError:
            value = self.cache[key] = compute()
            return value

    def __repr__(self) -> str:
        return f"<KernelMessage {self.channel} {len(self.frames)} frames>"


Deliver = Callable[[KernelMessage], None]


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
    """One logical client of a :class:`SharedChannels` (one websocket, say).

    Made by :meth:`SharedChannels.attach`. ``deliver`` is called, on the event loop, with
    every :class:`KernelMessage` meant for this client; it must not block, and an exception
    it raises is logged and does not reach the other clients.
    """

    def __init__(
        self, channels: SharedChannels, deliver: Deliver, skip_own_echo: bool, name: str
    ) -> None:
        self.channels = channels
        self.deliver = deliver
        self.skip_own_echo = skip_own_echo
        self.name = name
        #: Session ids this client owns: replies whose parent carries one come here.
        self.sessions: set[str] = set()
        self.closed = False

    def stream(self, channel: str) -> ChannelStream:
        """A stream for ``Session.send`` / ``Session.send_raw`` on ``channel``."""
        return ChannelStream(self, channel)

    def claim(self, session: str) -> None:
        """Own ``session``; raise :class:`SessionInUse` if another client owns it."""
        self.channels._claim(self, session, take_over=False)

    def send(self, channel: str, frames: list[Any]) -> None:
        """Send signed ``frames`` (``[DELIM, signature, header, ...]``) on ``channel``.

        The header's session becomes this client's (if no other attached client owns it);
        otherwise :class:`SessionInUse` is raised and nothing is sent.
        """
        if self.closed:
            raise RuntimeError(f"{self.name} is detached from the kernel's channels")
        self.channels._send(self, channel, frames)

    def close(self) -> None:
        """Detach: no more messages; this client's sessions are released."""
        if not self.closed:
            self.closed = True
            self.channels._detach(self)

    def __repr__(self) -> str:
        return f"<SharedClient {self.name} sessions={sorted(self.sessions)}>"


class SharedChannels:
    """One shell/control/stdin/IOPub socket set to a kernel, multiplexed over many clients.

    ``connection_info`` is a jupyter_client connection dict (``KernelManager.
    get_connection_info()``): transport, ip, the ports, ``key`` and ``signature_scheme``, and
    for an encrypted kernel ``curve_publickey``/``curve_secretkey`` (the kernel's keypair,
    which a client uses as its own and as the server key, as jupyter_client does).

    ``unpack`` decodes a header frame: the kernel's ``Session.unpack`` (JSON by default).
    ``grace_period``: seconds the sockets stay open after the last client leaves.
    ``skip_own_echo``: default for :meth:`attach` (a ``comm_echo`` is not delivered to the
    client that caused it). ``on_close`` is called once the sockets are closed.
    """

    def __init__(
        self,
        connection_info: dict[str, Any],
        *,
        grace_period: float = DEFAULT_GRACE_PERIOD,
        skip_own_echo: bool = True,
        unpack: Unpack = json.loads,
        context: zmq.asyncio.Context | None = None,
        logger: logging.Logger | logging.LoggerAdapter[Any] | None = None,
        on_close: Callable[[SharedChannels], None] | None = None,
    ) -> None:
        self.connection_info = dict(connection_info)
        self.grace_period = grace_period
        self.skip_own_echo = skip_own_echo
        self.unpack = unpack
        self.context = context or zmq.asyncio.Context.instance()
        self.log = logger or log
        self.on_close = on_close
        # Our own session: signs the readiness kernel_info requests; replies that carry its
        # id are consumed here and never reach a client.
        self.session = Session(
            key=_as_bytes(connection_info.get("key", b"")),
            signature_scheme=connection_info.get("signature_scheme", "hmac-sha256"),
        )
        # One identity on shell and stdin: the kernel sends an input_request to the stdin
        # peer whose identity is the shell identity of the execute_request.
        self.identity = f"shared-{uuid.uuid4()}".encode()
        self.sockets: dict[str, zmq.asyncio.Socket] = {}
        self._owners: dict[str, SharedClient] = {}
        # Sessions of departed clients, oldest first (a dict as an ordered set).
        self._retired: dict[str, None] = {}
        self._clients: list[SharedClient] = []
        self._snapshot: tuple[SharedClient, ...] = ()
        self._pumps: list[asyncio.Task[None]] = []
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._ready: asyncio.Future[None] | None = None
        self._close_handle: asyncio.TimerHandle | None = None
        self._counter = 0
        self.closed = False
        self.started = False

    # --- sockets -------------------------------------------------------------------------

    @property
    def ports(self) -> tuple[int, ...]:
        info = self.connection_info
        return tuple(int(info[f"{c}_port"]) for c in CHANNELS)

    def _url(self, channel: str) -> str:
        info = self.connection_info
        port = info[f"{channel}_port"]
        if info.get("transport", "tcp") == "tcp":
            return f"tcp://{info['ip']}:{port}"
        return f"{info['transport']}://{info['ip']}-{port}"

    def _connect_socket(self, channel: str) -> zmq.asyncio.Socket:
        sock = self.context.socket(_SOCKET_TYPES[channel])
        sock.linger = 1000
        if channel != "iopub":
            sock.identity = self.identity
        public = self.connection_info.get("curve_publickey")
        secret = self.connection_info.get("curve_secretkey")
        if public and secret:
            sock.curve_secretkey = _as_bytes(secret)
            sock.curve_publickey = _as_bytes(public)
            sock.curve_serverkey = _as_bytes(public)
        if channel == "iopub":
            sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.connect(self._url(channel))
        return sock

    def start(self) -> None:
        """Connect the sockets and start receiving, on the running loop (idempotent)."""
        if self.closed:
            raise RuntimeError("these shared channels are closed")
        if self.started:
            return
        self.started = True
        self._open_sockets()

    def _open_sockets(self) -> None:
        for channel in CHANNELS:
            self.sockets[channel] = self._connect_socket(channel)
        self._ready = None
        self._pumps = [
            asyncio.ensure_future(self._pump(channel, sock))
            for channel, sock in self.sockets.items()
        ]

    def _close_sockets(self) -> None:
        for task in self._pumps:
            task.cancel()
        self._pumps = []
        for sock in self.sockets.values():
            sock.close(linger=0)
        self.sockets = {}
        if self._ready is not None and not self._ready.done():
            self._ready.cancel()
        self._ready = None
        for fut in self._pending.values():
            if not fut.done():
                fut.cancel()
        self._pending.clear()

    def reconnect(self, connection_info: dict[str, Any] | None = None) -> None:
        """Replace the sockets (after a restart on new ports); clients stay attached."""
        if self.closed:
            raise RuntimeError("these shared channels are closed")
        if connection_info is not None:
            self.connection_info = dict(connection_info)
        self.log.info("Reconnecting shared channels to %s", self._url("shell"))
        self._close_sockets()
        self._open_sockets()

    async def _pump(self, channel: str, sock: zmq.asyncio.Socket) -> None:
        # Wait with the asyncio socket only when it is empty; read with its synchronous
        # shadow (no Future per message), RECV_BATCH messages per loop iteration.
        sync = zmq.Socket.shadow(sock.underlying)
        try:
            while True:
                for _ in range(RECV_BATCH):
                    try:
                        frames = sync.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        await sock.poll(flags=zmq.POLLIN)
                        break
                    self._dispatch(channel, frames)
                else:
                    await asyncio.sleep(0)
        except asyncio.CancelledError:
            raise
        except zmq.ZMQError as exc:
            if not sock.closed:
                self.log.error("Shared %s channel stopped receiving: %s", channel, exc)
        except Exception:
            self.log.exception("Shared %s channel stopped receiving", channel)

    def flush_iopub(self) -> int:
        """Deliver every IOPub message already received by the socket; return how many.

        As ``ZMQStream.flush``: called before the server writes a status of its own
        (``restarting``, ``dead``), so it follows what the old kernel published.
        """
        sock = self.sockets.get("iopub")
        if sock is None or sock.closed:
            return 0
        sync = zmq.Socket.shadow(sock.underlying)
        count = 0
        while True:
            try:
                frames = sync.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return count
            self._dispatch("iopub", frames)
            count += 1

    # --- readiness -----------------------------------------------------------------------

    def ready(
        self,
        nudge: bool = True,
        timeout: float = 60,
        keep_trying: Callable[[], bool] | None = None,
        settled: Callable[[], bool] | None = None,
    ) -> asyncio.Future[None]:
        """A future done once the kernel answered on shell or control and IOPub delivered.

        Like jupyter_server's nudge: kernel_info requests are sent every half second until
        then (and until ``settled()`` is true, if given: jupyter_server waits for its own
        activity monitor to have seen a status), so the IOPub subscription is known to be
        live. Shared by every caller until the sockets change. ``nudge=False`` (a busy
        kernel, whose queued shell would delay the answer) resolves at once.
        ``keep_trying()`` returning False (the kernel was shut down) ends the wait early.
        """
        if not nudge:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        if self._ready is None:
            self._ready = asyncio.ensure_future(self._nudge(timeout, keep_trying, settled))
        return self._ready

    async def _nudge(
        self,
        timeout: float,
        keep_trying: Callable[[], bool] | None,
        settled: Callable[[], bool] | None,
    ) -> None:
        loop = asyncio.get_running_loop()
        iopub_seen: asyncio.Future[None] = loop.create_future()
        self._iopub_seen = iopub_seen
        replies: list[asyncio.Future[dict[str, Any]]] = []
        deadline = loop.time() + timeout
        next_send = loop.time()
        try:
            while True:
                if keep_trying is not None and not keep_trying():
                    self.log.debug("Shared channels: the kernel is gone, not waiting for it")
                    break
                answered = any(f.done() and not f.cancelled() for f in replies)
                if answered and iopub_seen.done() and (settled is None or settled()):
                    return
                now = loop.time()
                if now >= deadline:
                    self.log.warning("Kernel did not answer the shared channels in %s s", timeout)
                    break
                if now >= next_send:
                    for channel in ("shell", "control"):
                        replies.append(self.request(channel, "kernel_info_request"))
                    next_send = now + NUDGE_INTERVAL
                waiting = [f for f in (*replies, iopub_seen) if not f.done()]
                if (answered and iopub_seen.done()) or not waiting:
                    await asyncio.sleep(0.05)  # only `settled` is missing: poll it
                else:
                    await asyncio.wait(
                        waiting,
                        timeout=max(0.01, next_send - loop.time()),
                        return_when=asyncio.FIRST_COMPLETED,
                    )
            if self._ready is asyncio.current_task():
                self._ready = None  # not ready: the next caller tries again
        finally:
            self._iopub_seen = None
            for fut in replies:
                fut.cancel()  # its done-callback forgets the msg_id

    _iopub_seen: asyncio.Future[None] | None = None

    def request(
        self, channel: str, msg_type: str, content: dict[str, Any] | None = None
    ) -> asyncio.Future[dict[str, Any]]:
        """Send a request with the channels' own session; the future gets the reply.

        The reply (and only it) is consumed here. For server-side requests whose replies no
        client must see.
        """
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[dict[str, Any]] = loop.create_future()
        msg = self.session.msg(msg_type, content or {})
        msg_id = msg["header"]["msg_id"]
        self._pending[msg_id] = fut
        frames = self.session.serialize(msg)
        self._send_frames(channel, frames)
        fut.add_done_callback(lambda _: self._pending.pop(msg_id, None))
        return fut

    # --- clients -------------------------------------------------------------------------

    def attach(
        self,
        deliver: Deliver,
        session: str | None = None,
        *,
        skip_own_echo: bool | None = None,
        name: str | None = None,
    ) -> SharedClient:
        """A new client; ``session`` (optional) is taken over if another client owns it."""
        if self.closed:
            raise RuntimeError("these shared channels are closed")
        if self._close_handle is not None:
            self._close_handle.cancel()
            self._close_handle = None
        self._counter += 1
        client = SharedClient(
            self,
            deliver,
            self.skip_own_echo if skip_own_echo is None else skip_own_echo,
            name or f"client-{self._counter}",
        )
        self._clients.append(client)
        self._snapshot = tuple(self._clients)
        if session:
            self._claim(client, session, take_over=True)
        return client

    @property
    def clients(self) -> tuple[SharedClient, ...]:
        return self._snapshot

    def owner(self, session: str) -> SharedClient | None:
        return self._owners.get(session)

    def _claim(self, client: SharedClient, session: str, take_over: bool) -> None:
        if session == self.session.session:
            raise SessionInUse(f"session {session!r} is reserved by the shared channels")
        owner = self._owners.get(session)
        if owner is client:
            return
        if not take_over and session in self._retired:
            raise SessionInUse(
                f"session {session!r} belonged to another client of this kernel; only a "
                "reconnection with that session id (the websocket's session_id) takes it over"
            )
        self._retired.pop(session, None)
        if owner is not None:
            if not take_over:
                raise SessionInUse(
                    f"session {session!r} is in use by another client of this kernel"
                )
            self.log.info("Session %s moves from %s to %s", session, owner.name, client.name)
            owner.sessions.discard(session)
        self._owners[session] = client
        client.sessions.add(session)

    def _detach(self, client: SharedClient) -> None:
        for session in client.sessions:
            if self._owners.get(session) is client:
                del self._owners[session]
                self._retired[session] = None
        client.sessions.clear()
        while len(self._retired) > RETIRED_SESSIONS:
            del self._retired[next(iter(self._retired))]
        with contextlib.suppress(ValueError):
            self._clients.remove(client)
        self._snapshot = tuple(self._clients)
        if not self._clients and not self.closed:
            self._schedule_close()

    def _schedule_close(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.close()
            return
        if self._close_handle is None:
            self._close_handle = loop.call_later(self.grace_period, self._close_if_unused)

    def _close_if_unused(self) -> None:
        self._close_handle = None
        if not self._clients:
            self.close()

    async def aclose(self) -> None:
        """:meth:`close`, then wait for the receiving tasks to end."""
        pumps = list(self._pumps)
        self.close()
        await asyncio.gather(*pumps, return_exceptions=True)

    def close(self) -> None:
        """Close the sockets now; attached clients get nothing more."""
        if self.closed:
            return
        self.closed = True
        if self._close_handle is not None:
            self._close_handle.cancel()
            self._close_handle = None
        self._close_sockets()
        for client in self._clients:
            client.closed = True
        self._clients.clear()
        self._snapshot = ()
        self._owners.clear()
        if self.on_close is not None:
            self.on_close(self)

    # --- sending -------------------------------------------------------------------------

    def _send(self, client: SharedClient, channel: str, frames: list[Any]) -> None:
        header = _header_of_outgoing(frames, self.unpack)
        session = header.get("session")
        if not isinstance(session, str) or not session:
            raise RefusedMessage(
                "a message sent over shared channels needs a header.session: its replies are "
                "routed by it",
                header,
            )
        try:
            self._claim(client, session, take_over=False)
        except SessionInUse as exc:
            exc.header = header
            raise
        self._send_frames(channel, frames)

    def _send_frames(self, channel: str, frames: list[Any]) -> None:
        sock = self.sockets.get(channel)
        if sock is None or sock.closed:
            raise RuntimeError(f"the shared {channel} channel is not open")
        # zmq.asyncio sends at once when the socket has room, else queues in order.
        fut = sock.send_multipart(frames, copy=True)
        if not fut.done():
            fut.add_done_callback(self._log_send_error)
        elif fut.exception() is not None:
            raise fut.exception()  # type: ignore[misc]

    def _log_send_error(self, fut: asyncio.Future[Any]) -> None:
        if not fut.cancelled() and fut.exception() is not None:
            self.log.error("Sending to the kernel failed: %s", fut.exception())

    # --- receiving -----------------------------------------------------------------------

    def _dispatch(self, channel: str, raw: list[bytes]) -> None:
        try:
            start = raw.index(DELIM) + 1
        except ValueError:
            self.log.warning("Dropped a %s message without delimiter from the kernel", channel)
            return
        msg = KernelMessage(channel, raw[start:], self.unpack)
        if len(msg.frames) < 5:
            self.log.warning("Dropped a truncated %s message from the kernel", channel)
            return
        try:
            if channel == "iopub":
                self._fan_out(msg)
            else:
                self._route(msg)
        except Exception:
            # One undecodable message must not stop the channel for everyone.
            self.log.exception("Dropped a %s message the shared channels could not read", channel)

    def _route(self, msg: KernelMessage) -> None:
        try:
            session = msg.parent_header.get("session")
        except Exception:
            self.log.warning("Dropped a %s message with an unreadable parent header", msg.channel)
            return
        if session == self.session.session:
            fut = self._pending.get(msg.parent_header.get("msg_id", ""))
            if fut is not None and not fut.done():
                fut.set_result({"channel": msg.channel, "frames": msg.frames})
            return
        owner = self._owners.get(session) if isinstance(session, str) else None
        if owner is None:
            # Its client left (a websocket closed mid-execution): nobody else may have it.
            self.log.debug("Dropped a %s reply for session %s: not attached", msg.channel, session)
            return
        self._deliver(owner, msg)

    def _fan_out(self, msg: KernelMessage) -> None:
        if self._iopub_seen is not None and not self._iopub_seen.done():
            self._iopub_seen.set_result(None)
        skip: SharedClient | None = None
        # Cheap byte test first: only an echo pays for decoding its header and parent.
        if b"comm_echo" in msg.frames[1] and msg.msg_type == "comm_echo":
            sender = msg.parent_header.get("session")
            skip = self._owners.get(sender) if isinstance(sender, str) else None
            if skip is not None and not skip.skip_own_echo:
                skip = None
        for client in self._snapshot:
            if client is not skip:
                self._deliver(client, msg)

    def _deliver(self, client: SharedClient, msg: KernelMessage) -> None:
        try:
            client.deliver(msg)
        except Exception:
            self.log.exception("Delivering a %s message to %s failed", msg.channel, client.name)

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self._clients)} clients"
        return f"<SharedChannels {self.connection_info.get('ip')} {self.ports} {state}>"


def _as_bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value


def _header_of_outgoing(frames: Iterable[Any], unpack: Unpack) -> dict[str, Any]:
    """The decoded header of signed outgoing frames ``[*idents, DELIM, sig, header, ...]``."""
    frames = list(frames)
    try:
        raw = frames[frames.index(DELIM) + 2]
        header = unpack(bytes(raw))
    except Exception as exc:
        raise RefusedMessage(f"malformed message header: {exc}") from exc
    if not isinstance(header, dict):
        raise RefusedMessage("malformed message header: not an object")
    return header
