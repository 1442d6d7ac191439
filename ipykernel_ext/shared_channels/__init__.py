"""The relay: one set of ZMQ channels to a kernel, shared by many logical clients (asyncio).

No jupyter_server import here: :mod:`ipykernel_ext.server` puts jupyter_server's websockets
on it. :mod:`.channels` (:class:`SharedChannels`) is the one module that ties the parts
together; each part gets what it needs passed in:

* :mod:`.sockets`: the kernel's four sockets and their receiving loops;
* :mod:`.messages`: a kernel message decoded once for every client, refusals;
* :mod:`.dispatch`: which attached clients get each kernel message (and the one watcher that
  sees every message first);
* :mod:`.clients`: one logical client, its ZMQStream-shaped channels, and the record of
  who is attached and owns which session id;
* :mod:`.readiness`: the channels' own requests, and when a fresh set is live.

The channels a set relays (:data:`RELAYED_CHANNELS`) are the kernel's
(:data:`ipykernel_ext.protocol.KERNEL_CHANNELS`) but the heartbeat.
"""

from .channels import DEFAULT_GRACE_PERIOD, SharedChannels
from .clients import SharedClient
from .dispatch import Watcher
from .messages import RELAYED_CHANNELS, KernelMessage, RefusedMessage, SessionInUse, Unpack
from .sockets import IOPUB_RCVHWM, RECV_BATCH

__all__ = [
    "DEFAULT_GRACE_PERIOD",
    "IOPUB_RCVHWM",
    "RECV_BATCH",
    "RELAYED_CHANNELS",
    "KernelMessage",
    "RefusedMessage",
    "SessionInUse",
    "SharedChannels",
    "SharedClient",
    "Unpack",
    "Watcher",
]
