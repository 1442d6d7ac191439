"""Comm messages run on the main shell, in arrival order, never beside a cell.

JupyterLab 4.4+ and Notebook 7 send every comm message (``comm_open``, ``comm_msg``,
``comm_close``) to a kernel subshell, and ipykernel 7 runs each subshell on its own thread: a
widget's callbacks then run at the same time as the cell on the main thread (garbled pyplot
figures, a cell's figures flushed under a comm message that no frontend shows). The kernel is
the one place that knows which code is the user's, so by default it routes them here:

* :class:`CommRouting` decides, on the shell-channel thread, which comm messages go to the main
  shell whatever subshell they name (all of them, but those of a comm target declared safe to
  run concurrently; none with ``ExtKernel.comms_on_subshells``, stock's routing).
* :class:`CommInbox` holds each such message for the main shell. The shell-channel thread puts
  the message here and sends a one-frame *marker* down the main shell's own queue in its place
  (one marker for a run of comm messages with nothing else for the main shell between them),
  so the main shell reaches them in arrival order among its other requests (a slider moved,
  then a cell that reads it: the cell sees the move). A marker whose messages were already
  taken is passed over.
* Before the main shell reaches the marker, the message may be handled in mid-cell, where it is
  safe because the cell is waiting: when an async cell awaits (as stock handles comm messages
  on the main shell then), and when a blocking loop asks for it (:func:`handle_waiting_comms`,
  and ``ExtKernel.do_one_iteration``, which jupyter-ui-poll's ``ui_events()`` calls). There the
  cell's ``pre_execute``/``post_execute`` are held (:mod:`.cell_events`).

The markers are ours: they never leave the kernel, and a stock handler never sees one.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...protocol import COMM_MSG_TYPES, CONTENT, HEADER, frame_bytes, peek, split_frames
from .owners import owner_subshell

#: A marker is this prefix and the sequence number of the message it stands for.
MARKER_PREFIX = b"ipykernel_ext:comm-waiting:"


@dataclass(frozen=True)
class Routed:
    """A message for the main shell: the subshell id to dispatch it with (a ``comm_open``'s
    own, else None); ``resign``: signed again without its subshell id first (a request whose
    reply the main shell sends on its own socket)."""

    subshell_id: str | None
    resign: bool = False


@dataclass(frozen=True)
class OnSubshell:
    """A comm message sent to a subshell as it is: a concurrent target's, to the frontend's
    subshell; a comm a subshell console's cell made, to that subshell (``or_main_shell``: to
    the main shell if it is gone)."""

    subshell_id: str
    or_main_shell: bool = False


@dataclass(frozen=True)
class Waiting:
    """A comm message waiting for the main shell: its arrival number, its frames as received
    and how to dispatch it."""

    number: int
    msg: list[Any]
    routed: Routed

    @property
    def signature(self) -> bytes | None:
        """Its HMAC signature frame, as ``Session.digest_history`` keeps it."""
        split = split_frames(self.msg)
        return frame_bytes(split.parts[0]) if split is not None and split.parts else None


class CommRouting:
    """Which comm messages the shell-channel thread sends to the main shell (read, unverified).

    ``enabled`` says whether the routing is on now (``not ExtKernel.comms_on_subshells``),
    ``concurrent_targets`` which comm targets keep stock's routing, and ``comm_manager`` is the
    kernel's (a ``comm_msg`` or ``comm_close`` names its comm, not its target).
    """

    def __init__(
        self,
        session: Any,
        comm_manager: Any,
        enabled: Callable[[], bool],
        concurrent_targets: Callable[[], frozenset[str]],
        inbox: CommInbox | None = None,
    ) -> None:
        self.session = session
        self.comm_manager = comm_manager
        self.enabled = enabled
        self.concurrent_targets = concurrent_targets
        #: while messages wait here, later ones join them even with the routing switched off
        #: at run time, so none overtakes one sent before it
        self.inbox = inbox
        #: comms opened by a frontend on a concurrent target, until closed (shell-channel
        #: thread only)
        self._concurrent_ids: set[str] = set()

    def route(self, frames: list[Any]) -> Routed | OnSubshell | None:
        """Where the comm message in ``frames`` goes: the main shell (:class:`Routed`), a
        subshell (:class:`OnSubshell`: a concurrent target's to the frontend's, a subshell
        console's comm to that console's), or stock's routing (None: not a comm message, or
        ``comms_on_subshells``).

        Read before verification: only the path is chosen here. A comm message without a
        subshell is the main shell's anyway; it comes through the inbox too, so that a blocking
        loop can let it through mid-cell whichever frontend sent it. The content is read at
        most once per message, and only for a ``comm_msg``/``comm_close`` or a concurrent
        target. ipykernel's note of the request a reply answers
        (``BaseComm._reply_subshell_for``) is only read here; :func:`forget_reply_route`
        consumes it once the message is verified.
        """
        enabled = self.enabled() or (self.inbox is not None and len(self.inbox) > 0)
        header = peek(self.session, frames, HEADER)
        if not isinstance(header, dict):
            return None
        msg_type = header.get("msg_type")
        subshell_id = header.get("subshell_id")
        subshell_id = subshell_id if isinstance(subshell_id, str) and subshell_id else None
        if msg_type == "comm_info_request" and subshell_id is not None and enabled:
            # Behind the comm messages waiting for the main shell, if any (even just after
            # comms_on_subshells was switched on): its reply then lists the comms they open
            # (stock answers on the subshell, after its comm_open).
            return Routed(None, resign=True) if self.inbox is not None and len(self.inbox) else None
        if msg_type not in COMM_MSG_TYPES:
            return None
        message = _Peeked(self.session, frames, self.comm_manager)
        return self._route(message, msg_type, subshell_id, enabled)

    def subshell_of(self, frames: list[Any]) -> str | None:
        """The subshell a message names (read, unverified), or None."""
        header = peek(self.session, frames, HEADER)
        found = header.get("subshell_id") if isinstance(header, dict) else None
        return found if isinstance(found, str) and found else None

    def to_main_shell(self, frames: list[Any]) -> bool:
        """Whether stock's routing may send this message (one not routed here) to the main
        shell: it names no subshell, or it is a comm message that ipykernel's reply routing
        may send there; an unreadable header counts as the main shell's."""
        header = peek(self.session, frames, HEADER)
        if not isinstance(header, dict):
            return True
        subshell_id = header.get("subshell_id")
        return not subshell_id or header.get("msg_type") in COMM_MSG_TYPES

    def _route(
        self, message: _Peeked, msg_type: str, subshell_id: str | None, enabled: bool
    ) -> Routed | OnSubshell | None:
        if not enabled:
            return None
        if self._concurrent(message, msg_type):
            # The frontend's subshell, as it asked: not stock's reply routing, which would
            # send a kernel-made comm's messages to the main shell's queue behind the cell.
            if subshell_id is not None:
                return OnSubshell(subshell_id)
        elif (
            msg_type != "comm_open"
            and (owner := owner_subshell(message.comm)) is not None
            and not message.answers_a_main_shell_request()
        ):
            # A comm a subshell console's cell made (.owners): its console's, at once, as on
            # stock; the main shell's if that subshell is gone. A reply to a request the comm
            # sent from the main shell goes to the main shell, where the request waits for it
            # (stock's reply routing, BaseComm._reply_subshell_for).
            return OnSubshell(owner, or_main_shell=True)
        # Stock's dispatch_shell requires a comm_open's subshell id to be the one it is
        # dispatched with; comm_msg and comm_close may come from any (dispatched with None).
        return Routed(subshell_id if msg_type == "comm_open" else None)

    def _concurrent(self, message: _Peeked, msg_type: str) -> bool:
        """Whether the message is of a comm whose target is declared concurrent.

        A ``comm_open`` of such a target notes its comm here: the messages that follow it may
        come before its subshell has registered the comm with the comm manager.
        """
        targets = self.concurrent_targets()
        if not targets and not self._concurrent_ids:
            return False
        comm_id = message.comm_id
        if comm_id is None:
            return False
        if msg_type == "comm_open":
            concurrent = message.content.get("target_name") in targets
            if concurrent:
                self._concurrent_ids.add(comm_id)
            return concurrent
        comm = message.comm
        concurrent = comm_id in self._concurrent_ids or (
            comm is not None and getattr(comm, "target_name", None) in targets
        )
        if msg_type == "comm_close":
            self._concurrent_ids.discard(comm_id)
        return concurrent


class _Peeked:
    """A comm message's content and comm, read once, when first asked for (unverified)."""

    def __init__(self, session: Any, frames: list[Any], comm_manager: Any) -> None:
        self._session, self._frames, self._comm_manager = session, frames, comm_manager

    @functools.cached_property
    def content(self) -> dict[str, Any]:
        content = peek(self._session, self._frames, CONTENT)
        return content if isinstance(content, dict) else {}

    @property
    def comm_id(self) -> str | None:
        comm_id = self.content.get("comm_id")
        return comm_id if isinstance(comm_id, str) else None

    @functools.cached_property
    def comm(self) -> Any:
        comm_id = self.comm_id
        return self._comm_manager.comms.get(comm_id) if comm_id is not None else None

    def _request_id(self) -> str | None:
        """``data.content.id``: the request a comm message answers (ipykernel 7.4's key)."""
        data = self.content.get("data")
        request = data.get("content") if isinstance(data, dict) else None
        request_id = request.get("id") if isinstance(request, dict) else None
        return request_id if isinstance(request_id, str) else None

    def answers_a_main_shell_request(self) -> bool:
        """Whether it answers a request its comm sent under a parent naming no subshell."""
        noted = getattr(self.comm, "_reply_subshell_ids", None)
        request_id = self._request_id()
        if request_id is None or not isinstance(noted, dict):
            return False
        return request_id in noted and noted.get(request_id) is None


def forget_reply_route(comm_manager: Any, msg: dict[str, Any]) -> None:
    """Consume what ipykernel 7.4 noted on a comm for a reply to one of its requests, as its
    own routing does when the reply comes. Called with the verified message (a forged one must
    not consume the note of a real request): ours routes the reply itself, and an entry never
    consumed stays for the comm's lifetime. A note stock's routing consumed is gone already."""
    content = msg.get("content")
    if not isinstance(content, dict):
        return
    comm_id = content.get("comm_id")
    if not isinstance(comm_id, str):
        return
    comm = comm_manager.comms.get(comm_id)
    if comm is not None and getattr(comm, "_reply_subshell_ids", None):
        comm._reply_subshell_for(content.get("data"), None)


class CommInbox:
    """Comm messages waiting for the main shell, in arrival order; thread-safe.

    Put by the shell-channel thread; taken by the main thread (at a marker, or mid-cell) or by
    the thread a blocking loop polls from (jupyter-ui-poll's own). Each is taken once.

    Markers are coalesced: the messages that arrive one after another, with nothing else sent
    to the main shell between them, form one *batch* behind a single marker, and the main
    shell handles the whole batch when it meets that marker. So the main shell's queue (an
    inproc PAIR that blocks the shell-channel thread when full) holds at most one marker per
    other message sent to the main shell, however many comm messages wait or were handled
    mid-cell, and a UI loop that lets thousands through mid-cell leaves one marker behind.
    A batch is closed once its marker is met or once anything else is queued for the main
    shell (:meth:`passed_to_main_shell`): the next message then gets a marker of its own, behind
    that request, which keeps arrival order.
    """

    def __init__(self) -> None:
        self._waiting: deque[Waiting] = deque()
        self._lock = threading.Lock()
        self._numbers = itertools.count()
        #: the first number of each batch whose marker the main shell has not met yet, sorted
        self._unmet: list[int] = []
        #: whether the last batch of ``_unmet`` still takes the messages that arrive
        self._open = False

    def put(self, msg: list[Any], routed: Routed) -> list[bytes] | None:
        """Keep ``msg`` (its frames as received); the marker to queue for it, or None if it
        joins the batch whose marker is queued already."""
        with self._lock:
            number = next(self._numbers)
            self._waiting.append(Waiting(number, msg, routed))
            if self._open:
                return None
            self._unmet.append(number)
            self._open = True
        return _marker(number)

    @property
    def batch_open(self) -> bool:
        """Whether a message put now would join a queued marker's batch. Read unlocked by the
        shell-channel thread, the only one that opens a batch: a stale True (the main shell
        just met the marker) only costs :meth:`passed_to_main_shell` a call."""
        return self._open

    def passed_to_main_shell(self) -> None:
        """The shell-channel thread queued something else for the main shell: the messages
        that come after it wait behind it (a marker of their own)."""
        with self._lock:
            self._open = False

    @staticmethod
    def marker_number(msg: list[Any]) -> int | None:
        """The number a marker stands for, or None if ``msg`` is not one of ours."""
        if len(msg) != 1:
            return None
        frame = msg[0]
        data = frame_bytes(frame)
        if not data.startswith(MARKER_PREFIX):
            return None
        try:
            return int(data[len(MARKER_PREFIX) :])
        except ValueError:
            return None

    def met(self, number: int) -> None:
        """The main shell met marker ``number``: its batch takes no more messages, and
        :meth:`take_next` (``met_only``) hands out its messages."""
        with self._lock:
            if number in self._unmet:
                self._unmet.remove(number)
                if not self._unmet:
                    self._open = False

    def take_next(self, met_only: bool = False) -> Waiting | None:
        """The oldest waiting message, or None. One at a time: a callback that takes more
        itself goes on from the next, and whatever stops one leaves the rest waiting.
        ``met_only``: only a message whose batch's marker was met (the main shell at a marker
        never takes one that arrived after a request still queued before its own marker)."""
        with self._lock:
            if not self._waiting:
                return None
            if met_only and self._unmet and self._waiting[0].number >= self._unmet[0]:
                return None
            return self._waiting.popleft()

    def put_back(self, waiting: Waiting) -> list[bytes] | None:
        """Return ``waiting``, taken but never dispatched (an interrupt, a cancelled task), to
        the front. The marker to queue for it if its batch's marker was met already (else
        nobody would come for it); None if a queued marker will reach it."""
        with self._lock:
            self._waiting.appendleft(waiting)
            if self._unmet and self._unmet[0] <= waiting.number:
                return None
            bisect.insort(self._unmet, waiting.number)
        return _marker(waiting.number)

    def mark_leftovers(self) -> list[bytes] | None:
        """A marker for the messages whose marker was met but that are still waiting (the
        main shell's pass over them stopped: ``SystemExit`` from a handler), or None if there
        are none or a queued marker will reach them."""
        with self._lock:
            if not self._waiting:
                return None
            number = self._waiting[0].number
            if self._unmet and self._unmet[0] <= number:
                return None
            bisect.insort(self._unmet, number)
        return _marker(number)

    def __len__(self) -> int:
        return len(self._waiting)  # (one read of a deque's length: atomic)


def _marker(number: int) -> list[bytes]:
    return [MARKER_PREFIX + str(number).encode("ascii")]


def handle_waiting_comms(kernel: Any = None) -> int:
    """Handle the comm messages waiting for the main shell now; return how many.

    For a cell that blocks (a loop waiting for a button, a long computation that wants to see
    a slider): call it at the points where a widget callback may safely run. The callbacks run
    here, on the main thread, while the cell waits, one after another in arrival order, each
    with its own ``busy``/``idle`` and with the cell's ``pre_execute``/``post_execute`` held,
    so the cell's figures stay the cell's; what they schedule on the event loop runs once the
    cell awaits or ends. An interrupt that reaches a callback stops the cell too. From an async
    cell, ``await kernel.do_one_iteration()`` instead (or just ``await`` something: an awaiting
    async cell lets them through by itself). Only the main cell lets them through: from a
    subshell console's cell (its jupyter-ui-poll loop included) or a thread of the user's,
    nothing is handled, 0; the messages wait for the main shell. Outside a kernel of ours
    (stock ipykernel, ``comms_on_subshells`` set): returns 0, nothing is waiting here.
    """
    if kernel is None:
        from IPython import get_ipython

        shell = get_ipython()
        kernel = getattr(shell, "kernel", None)
    inbox = getattr(kernel, "comm_inbox", None)
    if not isinstance(inbox, CommInbox) or not len(inbox):
        return 0
    handled: int = kernel.handle_waiting_comms_now()
    return handled
