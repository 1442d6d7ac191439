"""The missed-messages notice: a cell is told, in its own output, that a frontend missed some.

When the IOPub socket gives a subscriber up (:mod:`ipykernel_ext.kernel.iopub.socket`: its queue
stayed full past the send timeout), that frontend misses messages. The kernel log says so, but a
user reading the notebook never sees the log; so a cell gets a ``stream`` message on
``stderr`` saying how many messages were missed at least and which option to raise.

**Who is told, and when** is decided from what leaves the socket, not from what was queued:
the give-up comes a whole send timeout after the queue filled, usually long after the cell
that filled it was queued to end. So :class:`MissedNotice` is the socket's
:class:`~ipykernel_ext.kernel.iopub.socket.GiveUpWatcher`:

* each give-up that cost messages owes one notice (:meth:`MissedNotice.given_up`);
* an owed notice is sent just ahead of the first ``idle`` status of the main shell to leave
  the socket after the give-up (:meth:`MissedNotice.ahead_of`), with that request as parent.
  In the common case that is the idle of the cell that filled the queue, still waiting in the
  backlog behind the message that found it full; if the give-up comes while the cell runs, it
  is that cell's idle when it comes; if no main-shell idle was behind the lost messages
  (output of a thread between cells), it is the next request's.

The main shell's idles are known by their parent ``msg_id``: the kernel announces each one
(:meth:`MissedNotice.cell_ending`) on the IOPub thread just before it queues it there. All
else runs on the IOPub thread too, in order with the sends, so nothing here needs a lock.
A frontend whose queue has room again by then shows the notice; see docs/PROTOCOL.md §1.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from jupyter_client.session import extract_header

from ...protocol import CONTENT, PARENT_HEADER, split_frames
from .settings import IOPubSettings
from .stats import IOPubStats

#: The first words of every notice (tests and users can search for them).
NOTICE_PREFIX = "[ipykernel_ext] IOPub:"


def notice_text(missed: int, settings: IOPubSettings) -> str:
    """What the told cell's stderr says."""
    return (
        f"{NOTICE_PREFIX} a frontend of this kernel missed at least {missed} output or "
        f"widget message(s) of this cell: its queue stayed full for "
        f"{settings.send_timeout_ms / 1000:g} s (--iopub-send-timeout). Reload the page to see "
        "the current state; raise that option if that frontend is alive but slow.\n"
    )


class MissedNotice:
    """Tells a cell, once per give-up, how many messages a frontend missed.

    ``session`` and ``topic`` make the ``stream`` message (the kernel's session and its
    ``stream`` topic); ``waiting`` returns how many messages wait in the IOPub socket's backlog
    now (None when the socket is not ours: one that could not be adopted); ``schedule`` runs a
    function on the IOPub thread after what is already queued there.
    """

    def __init__(
        self,
        *,
        session: Any,
        topic: bytes,
        waiting: Callable[[], int | None],
        schedule: Callable[[Callable[[], None]], None],
        enabled: bool = True,
    ) -> None:
        self._session = session
        self._topic = topic
        self._waiting = waiting
        self._schedule = schedule
        self.enabled = enabled
        #: main-shell idles queued and maybe not yet sent: parent msg_id -> parent header,
        #: oldest first (the main shell ends its requests one after the other)
        self._idles: dict[str, dict[str, Any]] = {}
        #: notices owed, one per give-up: (text, the stats that count it)
        self._due: deque[tuple[str, IOPubStats]] = deque()

    # --- on the main shell's thread ------------------------------------------------------

    def cell_ending(self, parent: dict[str, Any]) -> None:
        """The main shell is about to publish ``idle`` for ``parent`` (a request or header)."""
        header = extract_header(parent)
        self._schedule(lambda: self._expect_idle(header))

    # --- on the IOPub thread -------------------------------------------------------------

    def _expect_idle(self, header: dict[str, Any]) -> None:
        waiting = self._waiting()
        msg_id = header.get("msg_id")
        if waiting is None or not msg_id:
            return
        # Every idle announced earlier was handed to the socket before this runs, and idles
        # leave in the order they were announced: those that have not left yet are the newest
        # ones, each a message in the backlog. So no more of them are kept than messages wait.
        while len(self._idles) > waiting:
            del self._idles[next(iter(self._idles))]
        self._idles[msg_id] = header

    def given_up(self, missed: int, stats: IOPubStats, settings: IOPubSettings) -> None:
        """A subscriber was given up and missed ``missed`` messages: a notice is owed.

        The text says the send timeout in force at the give-up; ``stats`` counts the notice.
        """
        if self.enabled:
            self._due.append((notice_text(missed, settings), stats))

    def ahead_of(self, parts: Sequence[Any]) -> Sequence[list[bytes]]:
        """The owed notices, if ``parts`` is a main-shell idle about to leave; else none."""
        if not self._due or self._session is None:
            return ()
        header = self._main_shell_idle(parts)
        if header is None:
            return ()
        notices = []
        while self._due:
            text, stats = self._due.popleft()
            msg = self._session.msg("stream", {"name": "stderr", "text": text}, parent=header)
            notices.append(self._session.serialize(msg, ident=self._topic))
            stats.notices += 1
        return notices

    def _main_shell_idle(self, parts: Sequence[Any]) -> dict[str, Any] | None:
        """The parent header if ``parts`` is an announced main-shell idle (and forget it)."""
        try:
            msg_id = self._idle_parent_id(parts)
        except Exception:  # not a message of ours: it is no idle (and must not stop the send)
            return None
        if msg_id not in self._idles:
            return None  # not an idle, or the control thread's or a subshell's
        while True:  # this one and any older ones have left (or are leaving) now
            oldest = next(iter(self._idles))
            header = self._idles.pop(oldest)
            if oldest == msg_id:
                return header

    def _idle_parent_id(self, parts: Sequence[Any]) -> str | None:
        """The parent's ``msg_id`` if ``parts`` is an ``idle`` status, else None."""
        split = split_frames(parts)
        # The topic (``kernel.<id>.status``) rules out all but status messages cheaply.
        if split is None or not split.identities or not split.identities[-1].endswith(b"status"):
            return None
        if not split.whole:
            return None
        unpack = self._session.unpack
        if unpack(split.raw(CONTENT)).get("execution_state") != "idle":
            return None
        msg_id = unpack(split.raw(PARENT_HEADER)).get("msg_id")
        return msg_id if isinstance(msg_id, str) else None
