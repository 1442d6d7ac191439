"""One set of ZMQ channels to a kernel, shared by many logical clients (asyncio, zmq.asyncio).

A server that relays many clients (jupyter_server with many browser tabs) normally holds
four sockets per client, and the kernel sends every IOPub message once per client.
:class:`SharedChannels` holds *one* set and multiplexes it. It owns the set's life and wires
the parts, each of which gets what it needs passed in:

* shell, control and stdin messages go to the client whose session id is in the message's
  ``parent_header.session`` (only that frame is decoded), so an ``input_request`` reaches
  only the asker; IOPub goes to every client, except that a ``comm_echo`` (PROTOCOL.md
  section 2) skips the client whose session caused it (per client, configurable)
  (:mod:`.dispatch`);
* a session id belongs to one client at a time; attaching with a session id takes it over
  (:mod:`.clients`);
* a client that attaches to running channels gets the kernel's last tracked ``status``
  (``track_status``): it joins an IOPub subscription the kernel already knows;
* if a receiving loop stops for any reason (:mod:`.sockets`), the set closes and every
  attached client is told (``on_lost``): nobody waits on a deaf channel;
* the sockets close a grace period after the last client leaves (a reload comes back).

Clients sign their own messages (``Session.send`` accepts :meth:`SharedClient.stream`);
the channels' own requests (:mod:`.readiness`) have their own session, whose replies are
consumed before routing. Usage (inside a running asyncio loop)::

    channels = SharedChannels(km.get_connection_info())
    channels.start()
    client = channels.attach(on_message, session="3f1c...")  # on_message(KernelMessage)
    session.send(client.stream("shell"), "execute_request", {"code": "1+1"})
    client.close()   # the sockets close `grace_period` seconds after the last client leaves
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

import zmq
import zmq.asyncio

from ..endpoints import channel_endpoint, client_session
from .clients import Members, OnLost, SharedClient
from .dispatch import Dispatcher, TrackStatus, Watcher
from .messages import Deliver, KernelMessage, Unpack
from .readiness import OwnRequests, Readiness
from .sockets import IOPUB_RCVHWM, RECV_BATCH, KernelSockets, ports_of

__all__ = ["DEFAULT_GRACE_PERIOD", "SharedChannels"]

DEFAULT_GRACE_PERIOD = 5.0

#: What attached clients are told when the channels close without a more precise reason.
CLOSED_REASON = "the kernel's shared channels were closed"

log = logging.getLogger(__name__)


class SharedChannels:
    """One shell/control/stdin/IOPub socket set to a kernel, multiplexed over many clients.

    ``connection_info`` is a jupyter_client connection dict (``KernelManager.
    get_connection_info()``): transport, ip, the ports, ``key`` and ``signature_scheme``, and
    for an encrypted kernel ``curve_publickey``/``curve_secretkey``. The sockets are made by
    jupyter_client's own connect rule (:mod:`ipykernel_ext.endpoints`).

    ``unpack`` decodes a header frame: the kernel's ``Session.unpack`` (JSON by default).
    ``grace_period``: seconds the sockets stay open after the last client leaves.
    ``skip_own_echo``: default for :meth:`attach` (a ``comm_echo`` is not delivered to the
    client that caused it). ``on_close`` is called once the sockets are closed.
    ``track_status(parent_msg_type)``: when given, the last IOPub ``status`` whose parent's
    msg_type it accepts is remembered and given to every client that attaches later
    (jupyter_server's ``track_message_type``: the statuses that set its execution state), so a
    client joining a busy kernel learns it is busy.
    ``iopub_rcvhwm``: the IOPub socket's receive queue, in messages (0: no limit), and
    ``recv_batch``: messages read per socket per loop turn (:mod:`.sockets`).
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
        track_status: TrackStatus | None = None,
        iopub_rcvhwm: int = IOPUB_RCVHWM,
        recv_batch: int = RECV_BATCH,
    ) -> None:
        self.grace_period = grace_period
        self.skip_own_echo = skip_own_echo
        self.unpack = unpack
        self.context = context or zmq.asyncio.Context.instance()
        self.log = logger or log
        self.on_close = on_close
        # Our own session: signs the readiness kernel_info requests; replies that carry its
        # id are consumed here and never reach a client.
        self.session = client_session(connection_info)
        # One identity on shell and stdin: the kernel sends an input_request to the stdin
        # peer whose identity is the shell identity of the execute_request.
        self.identity = f"shared-{uuid.uuid4()}".encode()
        self.kernel_sockets = KernelSockets(
            connection_info,
            self.context,
            self.identity,
            self._dispatch,
            self.close,
            self.log,
            iopub_rcvhwm=iopub_rcvhwm,
            recv_batch=recv_batch,
        )
        self.members = Members(self.session.session)
        self._own = OwnRequests(self.session, self.kernel_sockets.send)
        self._readiness = Readiness(self._own.request, self.log)
        self._dispatcher = Dispatcher(
            self.members, self._own, self._readiness, unpack, track_status, self.log
        )
        self._close_handle: asyncio.TimerHandle | None = None
        self._counter = 0
        self.closed = False
        self.started = False
        #: Why the channels closed, once they did.
        self.close_reason: str | None = None

    @property
    def connection_info(self) -> dict[str, Any]:
        """The kernel's connection dict the sockets are connected with (kept by them)."""
        return self.kernel_sockets.connection_info

    @property
    def ports(self) -> tuple[int, ...]:
        return self.kernel_sockets.ports

    @property
    def received(self) -> dict[str, int]:
        """Messages read from each channel's socket since :meth:`start`."""
        return self.kernel_sockets.received

    @property
    def sockets(self) -> dict[str, zmq.asyncio.Socket]:
        return self.kernel_sockets.sockets

    def start(self) -> None:
        """Connect the sockets and start receiving, on the running loop (idempotent)."""
        if self.closed:
            raise RuntimeError(f"these shared channels are closed: {self.close_reason}")
        if self.started:
            return
        self.started = True
        self.kernel_sockets.open()

    def _close_sockets(self) -> None:
        self.kernel_sockets.close()
        self._readiness.reset()
        self._own.cancel_all()

    def reconnect(self, connection_info: dict[str, Any] | None = None) -> None:
        """Replace the sockets (after a restart on new ports); clients stay attached."""
        if self.closed:
            raise RuntimeError(f"these shared channels are closed: {self.close_reason}")
        if connection_info is not None:
            self.kernel_sockets.connection_info = dict(connection_info)
        self.log.info(
            "Reconnecting shared channels to %s", channel_endpoint(self.connection_info, "shell")
        )
        self._dispatcher.status = None  # the old kernel's state says nothing about the new one
        self._close_sockets()
        self.kernel_sockets.open()

    def kernel_restarted(self) -> None:
        """The kernel restarted (through the API or its restarter), on the same ports or not:
        the old process's status says nothing of the new one, and the next :meth:`ready`
        nudges the new process until its IOPub reached this set (stock opens new sockets, and
        nudges, for each websocket after a restart; a set kept open must not skip it)."""
        if self.closed:
            return
        self._dispatcher.status = None
        self._readiness.stale()

    def follow(self, connection_info: dict[str, Any]) -> bool:
        """:meth:`reconnect` if the kernel listens on other ports now (it restarted on new
        ones); True if it did."""
        if ports_of(connection_info) == self.ports:
            return False
        self.reconnect(connection_info)
        return True

    def flush_iopub(self) -> int:
        """Deliver every IOPub message already received by the socket; return how many.

        As ``ZMQStream.flush``: called before the server writes a status of its own
        (``restarting``, ``dead``), so it follows what the old kernel published.
        """
        return self.kernel_sockets.flush_iopub()

    def ready(
        self,
        nudge: bool = True,
        timeout: float = 60,
        keep_trying: Callable[[], bool] | None = None,
        settled: Callable[[], bool] | None = None,
    ) -> asyncio.Future[Any]:
        """A future done once the kernel answered on shell or control and IOPub delivered.

        Like jupyter_server's nudge (:mod:`ipykernel_ext.shared_channels.readiness`): kernel_info
        requests are sent every half second until then (and until ``settled()`` is true, if
        given). Shared by every caller until the sockets change. ``nudge=False`` (a busy
        kernel, whose queued shell would delay the answer) resolves at once.
        ``keep_trying()`` returning False (the kernel was shut down) ends the wait early.
        """
        return self._readiness.ready(nudge, timeout, keep_trying, settled)

    def request(
        self, channel: str, msg_type: str, content: dict[str, Any] | None = None
    ) -> asyncio.Future[dict[str, Any]]:
        """Send a request with the channels' own session; the future gets the reply.

        The reply (and only it) is consumed here. For server-side requests whose replies no
        client must see.
        """
        return self._own.request(channel, msg_type, content)

    def attach(
        self,
        deliver: Deliver,
        session: str | None = None,
        *,
        skip_own_echo: bool | None = None,
        name: str | None = None,
        on_lost: OnLost | None = None,
        announce_status: bool = True,
    ) -> SharedClient:
        """A new client; ``session`` (optional) is taken over if another client owns it.

        ``on_lost(reason)`` is called if the channels close while the client is attached.
        ``announce_status``: deliver the remembered kernel status at once
        (:meth:`announce_status`; the caller may rather do it later, after a replay).
        """
        if self.closed:
            raise RuntimeError(f"these shared channels are closed: {self.close_reason}")
        if self._close_handle is not None:
            self._close_handle.cancel()
            self._close_handle = None
        self._counter += 1
        client = SharedClient(
            members=self.members,
            send=self._client_send,
            flush_iopub=self.flush_iopub,
            unpack=self.unpack,
            on_close=self._detach,
            deliver=deliver,
            skip_own_echo=self.skip_own_echo if skip_own_echo is None else skip_own_echo,
            name=name or f"client-{self._counter}",
            on_lost=on_lost,
        )
        self.members.add(client)
        if session:
            previous = self.members.claim(client, session, take_over=True)
            if previous is not None:
                self.log.info("Session %s moves from %s to %s", session, previous.name, client.name)
        if announce_status:
            self.announce_status(client)
        return client

    @property
    def watcher(self) -> Watcher | None:
        """Shown every kernel message before any client, and every client's message before
        the kernel (:class:`~.dispatch.Watcher`; one per set, None: none)."""
        return self._dispatcher.watcher

    @watcher.setter
    def watcher(self, watcher: Watcher | None) -> None:
        self._dispatcher.watcher = watcher

    def _client_send(self, channel: str, frames: list[Any]) -> None:
        watcher = self._dispatcher.watcher
        if watcher is not None:
            try:
                watcher.sent(channel, frames)
            except Exception:
                self.log.exception("The watcher failed on a client's %s message", channel)
        self.kernel_sockets.send(channel, frames)

    @property
    def status(self) -> KernelMessage | None:
        """The last tracked IOPub ``status`` the kernel published (see ``track_status``)."""
        return self._dispatcher.status

    def announce_status(self, client: SharedClient) -> bool:
        """Deliver the remembered status message to ``client``, as the kernel sent it.

        A client that joins an existing IOPub subscription never sees the kernel's welcome
        nor the ``busy`` of a running cell: this tells it. True if there was one to give.
        """
        return self._dispatcher.announce_status(client)

    @property
    def clients(self) -> tuple[SharedClient, ...]:
        return self.members.attached

    def owner(self, session: str) -> SharedClient | None:
        return self.members.owner(session)

    def _detach(self, client: SharedClient) -> None:
        self.members.remove(client)
        if not self.members.attached and not self.closed:
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
        if not self.members.attached:
            self.close()

    async def aclose(self) -> None:
        """:meth:`close`, then wait for the receiving tasks to end."""
        pumps = list(self.kernel_sockets.pumps)
        self.close()
        await asyncio.gather(*pumps, return_exceptions=True)

    def close(self, reason: str | None = None) -> None:
        """Close the sockets now; attached clients get nothing more, and ``on_lost(reason)``."""
        if self.closed:
            return
        self.closed = True
        self.close_reason = reason or CLOSED_REASON
        self.log.info(
            "Closing shared channels %s (%s); messages read: %s",
            self.ports,
            self.close_reason,
            ", ".join(f"{c} {n}" for c, n in self.received.items()),
        )
        if self._close_handle is not None:
            self._close_handle.cancel()
            self._close_handle = None
        self._close_sockets()
        lost = self.members.clear()
        for client in lost:
            client.closed = True
        self._dispatcher.status = None
        if self.on_close is not None:
            self.on_close(self)
        for client in lost:
            if client.on_lost is not None:
                try:
                    client.on_lost(self.close_reason)
                except Exception:
                    self.log.exception("Telling %s that the channels closed failed", client.name)

    def iopub_message(
        self, match: Callable[[KernelMessage], bool]
    ) -> asyncio.Future[KernelMessage]:
        """A future done with the first IOPub message ``match`` accepts from now on, once
        every attached client was given it (cancel it to stop waiting)."""
        return self._dispatcher.iopub_message(match)

    def deliver_as_kernel(
        self,
        channel: str,
        msg_type: str,
        content: dict[str, Any],
        parent_header: dict[str, Any],
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """Deliver a message the kernel sent to a server before this one (a journaled cell's
        ``execute_reply``, its waiting ``input_request``: docs/PROTOCOL.md section 9) as if
        these channels had received it: routed by ``parent_header.session``, seen by the
        watcher. Signed with the channels' own session (the kernel's key)."""
        msg = self.session.msg(msg_type, content, parent=parent_header, metadata=metadata)
        self._dispatch(channel, self.session.serialize(msg))

    def _dispatch(self, channel: str, raw: list[bytes]) -> None:
        self._dispatcher.dispatch(channel, raw)

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self.members.attached)} clients"
        return f"<SharedChannels {self.connection_info.get('ip')} {self.ports} {state}>"
