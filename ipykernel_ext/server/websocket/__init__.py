"""One tab's kernel websocket: what reaches it, in which order, at which pace.

Its one concern is the path from a kernel's messages to one websocket of a tab: the
connection class that puts the websocket on the kernel's shared channels, the websocket's
bounded outgoing queue, and the IOPub pacing that merges what waits instead of dropping it.
A module per concept:

* :mod:`.connection`: :class:`SharedChannelsConnection`, the websocket's side (attach, relay;
  what it keeps from jupyter_server's class and what it changes);
* :mod:`.wire`: :class:`WebsocketWire`, how its kernel messages are encoded for the websocket
  (both protocols, once per message);
* :mod:`.outbox`: :class:`Outbox`, one websocket's bounded, ordered outgoing queue;
* :mod:`.pacer`: :class:`Pacer`, one websocket's IOPub pacing (what waits, when it goes);
* :mod:`.tally`: :class:`Tally`, how late a pacer sent, and the line the
  server logs for it at a cell's end;
* :mod:`.replay`: :class:`Replay`, what a returning session missed, let into the pacer as
  its tab reads;
* :mod:`.budgets`: the pacer's measures (the message window, the stream budget charged for
  the text a page holds, how old a waiting message may grow);
* :mod:`.reading`: what the pacer reads of a message, and what it charges for the memory a
  waiting one holds;
* :mod:`.merging`: the rules that fold what waits (how a message is read, what an entry
  becomes), and :mod:`.line`: :class:`Line`, what waits, in order, O(1) a message;
* :mod:`.paced_iopub`: :class:`PacedIOPub`, the rate options of both connection classes.

The gateway's websocket (:mod:`ipykernel_ext.server.gateway`) paces through this room's
face; the kernel's channel set and outputs owner are the server's (:mod:`..kernels`,
:mod:`..keep_outputs`).
"""

from .budgets import (
    MAX_STREAM_WAIT,
    Clock,
    LoopClock,
    MessageWindow,
    PageText,
    Rates,
    StreamBudget,
    Timer,
)
from .connection import CLOSE_INTERNAL_ERROR, SharedChannelsConnection
from .line import MAX_COUNTED_CELLS, Line
from .merging import Entry, Message, merge_widget_state
from .outbox import (
    CLOSE_TOO_SLOW,
    DEFAULT_BUDGET,
    MAX_CLOSE_REASON,
    Outbox,
    close_too_slow,
    close_websocket,
)
from .paced_iopub import PacedIOPub
from .pacer import Pacer
from .wire import V1_PROTOCOL, WebsocketWire, Wire

__all__ = [
    "CLOSE_INTERNAL_ERROR",
    "CLOSE_TOO_SLOW",
    "DEFAULT_BUDGET",
    "MAX_CLOSE_REASON",
    "MAX_COUNTED_CELLS",
    "MAX_STREAM_WAIT",
    "V1_PROTOCOL",
    "Clock",
    "Entry",
    "Line",
    "LoopClock",
    "Message",
    "MessageWindow",
    "Outbox",
    "PacedIOPub",
    "Pacer",
    "PageText",
    "Rates",
    "SharedChannelsConnection",
    "StreamBudget",
    "Timer",
    "WebsocketWire",
    "Wire",
    "close_too_slow",
    "close_websocket",
    "merge_widget_state",
]
