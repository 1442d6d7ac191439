"""A tab's kernel websocket in gateway mode (``--gateway-url``), beside :mod:`..websocket`.

Its one concern is jupyter_server's websocket to a kernel that runs behind a gateway: the
tab's websocket class and the server's own websocket to the gateway, which feeds the
kernel's outputs owner. A module per concept:

* :mod:`.gateway_connection`: :class:`GatewayOutputsConnection`, the tab's websocket: paced
  and merged through :mod:`ipykernel_ext.server.websocket`'s pacer, its outputs kept;
* :mod:`.gateway_link`: the server's own websocket to a gateway kernel (:class:`GatewayFeed`,
  :class:`GatewayLink`), and the gateway's messages as the owner reads them.
* :mod:`.session_return`: :class:`SessionReturn`, the tab's websocket to the gateway kept
  for its session's return (what the kernel sent while the tab was away).
"""

from .gateway_connection import GatewayOutputsConnection
from .gateway_link import GatewayFeed, GatewayLink, GatewayMessage, decode

__all__ = ["GatewayFeed", "GatewayLink", "GatewayMessage", "GatewayOutputsConnection", "decode"]
