"""What one IOPub socket counts and reports: the content of ``iopub_stats_reply``.

:class:`IOPubStats` holds the settings the socket runs with and its counters (waits, stalls,
give-ups, missed messages, the backlog). The socket (:mod:`ipykernel_ext.kernel.iopub`)
writes them on the IOPub thread; the control thread answers ``iopub_stats_request`` with
:meth:`IOPubStats.as_reply`, and :mod:`ipykernel_ext.kernel.iopub_notice`, told of each
give-up, counts ``notices``. The fields are part of the wire contract (docs/PROTOCOL.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .iopub_options import DEFAULT_BACKLOG_LIMIT_BYTES

#: ``iopub_stats_reply["socket"]``: who made the socket the send path runs on.
BOUND_BY_EXT_APP = "bound-by-ext-app"
ADOPTED = "adopted"


@dataclass
class IOPubStats:
    """Counters and settings of one IOPub socket.

    Written only by the IOPub thread; read from any thread (each field is a plain int or
    bool, so a read never sees a torn value).
    """

    sndhwm: int
    nodrop: bool
    send_timeout_ms: int
    backlog_limit_bytes: int = DEFAULT_BACKLOG_LIMIT_BYTES
    #: BOUND_BY_EXT_APP or ADOPTED (see the module docstring)
    socket: str = BOUND_BY_EXT_APP
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
    #: messages and bytes waiting now, and the most bytes that ever waited
    backlog_messages: int = 0
    backlog_bytes: int = 0
    backlog_peak_bytes: int = 0

    def as_reply(self) -> dict[str, Any]:
        """The content of an ``iopub_stats_reply``."""
        return {"status": "ok", **asdict(self)}
