"""The jupyter_server side: kernel websockets on shared channels, and outputs that survive the tab.

Its one concern is jupyter_server's kernel websockets. :class:`SharedChannelsConnection` puts
every websocket of a kernel on one set of ZMQ channels (:mod:`.websocket.connection` says
what it keeps from the stock class and what it changes); :class:`GatewayOutputsConnection`
is its gateway counterpart (``--gateway-url``); the installed server extension picks one, and
both keep a departed tab's outputs. A module per concept:

* :mod:`.websocket`: a tab's kernel websocket: :class:`SharedChannelsConnection`, its
  outgoing queue, its IOPub pacing and the rules that fold what waits, their options
  (:class:`PacedIOPub`, both classes' mixin);
* :mod:`.kernels`: what the server process keeps per kernel (its channel set and its outputs
  owner: the registries), and the server events they are told of;
* :mod:`.keep_outputs`: :class:`KeepOutputs`, the options of outputs that survive the tab, and
  how both classes find, open and close their kernel's outputs owner;
* :mod:`.gateway`: the same in gateway mode: :class:`GatewayOutputsConnection`, and the
  server's own websocket to a gateway kernel;
* :mod:`.extension`: the server extension that picks the class;
* :mod:`.outputs`: the server's model of followed cells' outputs, and its writers.

They build on :mod:`ipykernel_ext.shared_channels`, which knows nothing of jupyter_server.
"""

from .gateway import GatewayOutputsConnection
from .keep_outputs import KeepOutputs
from .websocket import (
    CLOSE_INTERNAL_ERROR,
    CLOSE_TOO_SLOW,
    MAX_CLOSE_REASON,
    V1_PROTOCOL,
    PacedIOPub,
    SharedChannelsConnection,
)

__all__ = [
    "CLOSE_INTERNAL_ERROR",
    "CLOSE_TOO_SLOW",
    "MAX_CLOSE_REASON",
    "V1_PROTOCOL",
    "GatewayOutputsConnection",
    "KeepOutputs",
    "PacedIOPub",
    "SharedChannelsConnection",
]
