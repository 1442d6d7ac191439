"""A tab's session back on a gateway kernel: what it missed while its websocket was away.

Enterprise Gateway (jupyter_server 1.24's handler) buffers what a kernel sends only for the
kernel's last websocket to close, and hands the buffer only to the first websocket that opens
after, if it has that websocket's session (any other drops it); a kernel's replies
(``execute_reply``, ``input_request``) go to the websocket that sent the request alone. The
server has its own websocket to the kernel (the feed, :mod:`.gateway_link`), so without care
the feed closes last, the gateway buffers for the feed, and a tab whose session comes back
after a network blip gets nothing of what the kernel sent meanwhile: its cell stays busy.

:class:`SessionReturn`, the tab's gateway websocket (a base of
:class:`~.gateway_connection.GatewayOutputsConnection`), owns the rule (docs/PROTOCOL.md
section 6, "Behind a gateway"):

* when its tab closes, its websocket to the gateway stays open, reading, for
  ``keep_outputs_grace`` seconds (*parked*); the same session's next websocket within it
  takes that websocket over with what it read, first, in order;
* after the grace it closes, after the feed (which closes with the last tab unless a followed
  cell runs): the gateway buffers for the tab's session, and what the parked websocket had
  read is held for the session's next websocket (:data:`HELD_FOR` seconds), which opens its
  own websocket to the gateway before the feed connects, so the gateway's buffer is its.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, NamedTuple

from ..outputs import OutputsOwner
from ..websocket import DEFAULT_BUDGET
from .gateway_link import GatewayLink, GatewayMessage


class FromGateway(NamedTuple):
    """One message from the gateway as its pacer holds it: the text, and its decoding
    (None: not JSON; it is passed on untouched, in its place)."""

    text: str | bytes
    msg: dict[str, Any] | None


#: Seconds what a closed tab's websocket had read from the gateway and not delivered is kept
#: for the same session's next websocket (the gateway has sent it already: it is ours alone).
HELD_FOR = 600.0


#: The most a parked websocket keeps (bytes of text): a quarter of a websocket's budget, so
#: that what it hands over at once (charged about twice, with its decoded messages) does not
#: overflow the next websocket; past it, it closes, and the gateway buffers the rest.
PARKED_BYTES = DEFAULT_BUDGET // 4


class Held(NamedTuple):
    """What a closed websocket of a kernel had not delivered, for its session's return."""

    session: str
    messages: list[FromGateway]
    expiry: asyncio.TimerHandle | None


#: By kernel: the last closed websocket's undelivered messages (one session a kernel, as
#: jupyter_server's own buffer of a local kernel's last websocket).
_held: dict[str, Held] = {}

#: By (kernel, session): a closed tab's websocket whose gateway websocket is kept open for
#: the session's return (:meth:`SessionReturn._park`).
_parked: dict[tuple[str, str], SessionReturn] = {}


def parked_websocket(kernel_id: str, session: str) -> SessionReturn | None:
    """The parked (or closing) websocket of ``session`` on the kernel, if any."""
    return _parked.get((kernel_id, session))


class SessionReturn(GatewayLink):
    """The tab's websocket to the gateway, kept for its session's return (module docstring)."""

    #: while parked (its tab gone, its gateway websocket kept for the grace): what it read
    _parked: list[FromGateway] | None = None
    _parked_bytes = 0
    _park_timer: asyncio.TimerHandle | None = None
    #: done once parked no more (taken over, or closed and what it read held)
    park_over: asyncio.Future[None]
    #: the same session's next websocket, which took this one's gateway websocket over
    _successor: SessionReturn | None = None
    _reconnecting: asyncio.Future[None] | None = None

    if TYPE_CHECKING:  # the connection class's (KeepOutputs, PacedIOPub, its pacing)
        owner: OutputsOwner | None
        keep_outputs_grace: float

        @property
        def paces_iopub(self) -> bool: ...

        def _pace(self, original: FromGateway) -> None: ...

        def _as_from_gateway(self, item: Any) -> FromGateway: ...

        def _replaying(self) -> AbstractContextManager[None]: ...

    def _keep_parked(self, incoming_msg: str | bytes, msg: dict[str, Any] | None) -> bool:
        """A message from the gateway: kept (True) while parked."""
        if self._parked is None:
            return False
        self._parked.append(FromGateway(incoming_msg, msg))
        self._parked_bytes += len(incoming_msg)
        if self._parked_bytes > PARKED_BYTES:
            self._unpark()  # the gateway buffers the rest, if this closes last
        return True

    def _park(self, waiting: list[Any]) -> None:
        """Keep this gateway websocket open, reading, for ``keep_outputs_grace`` seconds: the
        same session's next websocket takes it over with what it read, in order, replies
        included (which no other websocket of the kernel gets: the gateway routes them to
        this one); after the grace it closes (:meth:`_unpark`)."""
        self._parked = [self._as_from_gateway(item) for item in waiting]
        self._parked_bytes = sum(len(item.text) for item in self._parked)
        self.park_over = asyncio.get_event_loop().create_future()
        key = (self.kernel_id, self.session_id)
        previous = _parked.get(key)
        if previous is not None and previous is not self:
            previous._unpark()
        _parked[key] = self
        self._park_timer = asyncio.get_event_loop().call_later(
            self.keep_outputs_grace, self._unpark
        )
        self.log.info(
            "Websocket %s of gateway kernel %s closed: its websocket to the gateway stays "
            "open %g s for the session's return",
            self.session_id,
            self.kernel_id,
            self.keep_outputs_grace,
        )
        if self._parked_bytes > PARKED_BYTES:
            self._unpark()

    def take_over(self, successor: SessionReturn) -> bool:
        """The session is back within the grace: ``successor`` gets this gateway websocket
        and what it read, which it delivers first, in order; False once it is closing."""
        held = self._parked
        if held is None or self._park_timer is None or self.ws is None:
            return False
        self._leave_park()
        self._parked = None
        self.park_over.set_result(None)
        self._successor = successor
        successor.ws, successor.ws_future = self.ws, self.ws_future
        self.log.info(
            "Session %s of gateway kernel %s is back: its websocket to the gateway, with %d "
            "messages read meanwhile, is handed on",
            self.session_id,
            self.kernel_id,
            len(held),
        )
        successor._deliver_held(held)
        return True

    def _unpark(self) -> None:
        """The grace is over (or the session closed again): close the gateway websocket, and
        read what it still sends until the close completes (:meth:`reading_ended`)."""
        if self._park_timer is None:
            return
        # Still found (closing) by the session's next websocket, which waits for the close:
        # what this one read is held by then (:meth:`_end_park`).
        self._park_timer.cancel()
        self._park_timer = None
        if self.ws is not None:
            self.ws.close()
        else:
            self._end_park()

    def _leave_park(self) -> None:
        if self._park_timer is not None:
            self._park_timer.cancel()
            self._park_timer = None
        key = (self.kernel_id, self.session_id)
        if _parked.get(key) is self:
            del _parked[key]

    def _end_park(self) -> None:
        """Closed: what it read is kept for the session's next websocket (as any close's)."""
        held, self._parked = self._parked or [], None
        self._leave_park()
        self.disconnected = True
        self._hold_for_session(held)
        if not self.park_over.done():
            self.park_over.set_result(None)

    def reading_ended(self) -> bool:
        if self._successor is None and self._parked is None:
            return False  # its own tab's: stock's reconnect
        self._gateway_websocket_ended()
        return True

    def _gateway_websocket_ended(self) -> None:
        """The gateway websocket this one holds (its own, parked, or one it took over)
        closed: the websocket that now holds it deals with it."""
        if self._successor is not None:
            self._successor._gateway_websocket_ended()
        elif self._parked is not None:
            self._end_park()
        elif not self.disconnected:
            self.ws = None  # stock's reading loop then reconnects, as for its own websocket
            self._reconnecting = asyncio.ensure_future(self._read_messages())

    def _deliver_held(self, held: list[FromGateway]) -> None:
        owner = self.owner
        with self._replaying():  # let in as the tab reads (Pacer.replaying)
            for item in held:
                if (
                    owner is not None
                    and item.msg is not None
                    and owner.hides(GatewayMessage(item.msg), self.session_id)
                ):
                    continue  # the owner wrote it into the live document this tab shows
                if self.paces_iopub:
                    self._pace(item)
                elif self.websocket_handler.ws_connection is not None:
                    binary = isinstance(item.text, bytes)
                    self.websocket_handler.write_message(item.text, binary=binary)

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
        self._deliver_held(held.messages)
