"""What one IOPub socket counts, and the reply that reports it: ``iopub_stats_reply``.

:class:`IOPubStats` only counts (sends, waits, stalls, give-ups, missed messages, notices).
The socket (:mod:`ipykernel_ext.kernel.iopub.socket`) writes the counts on the IOPub thread, and
:mod:`ipykernel_ext.kernel.iopub.notice`, told of each give-up, counts ``notices``. The reply
(:meth:`IOPubStats.as_reply`, built on the control thread) puts beside them the settings the
socket runs with and what waits in its backlog now. Its fields are part of the wire contract
(docs/PROTOCOL.md §1).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol

from .settings import IOPubSettings

#: ``iopub_stats_reply["socket"]``: who made the socket the send path runs on.
BOUND_BY_EXT_APP = "bound-by-ext-app"
ADOPTED = "adopted"


class BacklogSize(Protocol):
    """What the reply reads of a backlog (:class:`~.backlog.Backlog`)."""

    nbytes: int
    peak_bytes: int

    def __len__(self) -> int: ...


@dataclass
class IOPubStats:
    """The counters of one IOPub socket, all 0 when it is made.

    Written only by the IOPub thread; read from any thread (each field is a plain int, so a
    read never sees a torn value).
    """

    #: messages handed to the XPUB socket
    sent: int = 0
    #: sends that found a subscriber's queue full
    waits: int = 0
    #: episodes in which messages waited in the backlog (a queue stayed full past one slice)
    stalls: int = 0
    #: the longest such episode so far, ms
    longest_stall_ms: int = 0
    #: give-ups because a queue stayed full for the whole send timeout
    timeouts: int = 0
    #: times the backlog reached backlog_limit_bytes and the kernel's output was held back
    #: (the IOPub thread waited) until it was under the budget again: nothing is lost for it
    over_budget: int = 0
    #: messages a given-up subscriber missed, at least: the one sent with NODROP off and the
    #: backlog behind it. It goes on missing messages, uncounted, until it has read about
    #: half its queue.
    missed: int = 0
    #: stderr notices put ahead of a main-shell idle, one per give-up (see iopub_notice)
    notices: int = 0

    def as_reply(
        self, settings: IOPubSettings, *, socket: str, backlog: BacklogSize
    ) -> dict[str, Any]:
        """The content of an ``iopub_stats_reply``, in the order docs/PROTOCOL.md lists it.

        ``socket`` is BOUND_BY_EXT_APP or ADOPTED; ``backlog`` gives the messages and bytes
        waiting now and the most bytes that ever waited.
        """
        return {
            "status": "ok",
            **asdict(settings),
            "socket": socket,
            **asdict(self),
            "backlog_messages": len(backlog),
            "backlog_bytes": backlog.nbytes,
            "backlog_peak_bytes": backlog.peak_bytes,
        }
