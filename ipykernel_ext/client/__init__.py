"""Helpers for clients of an ipykernel_ext kernel: frontends, scripts, servers.

Client side only: nothing here imports the kernel side (tests/package/test_layering.py).

* :func:`is_own_echo` (:mod:`.comm_echo`): a client's own ``comm_echo`` from the others';
* :func:`fetch_widget_states` (:mod:`.widget_state`): every widget model in one round trip;
* :class:`RouterClient` (:mod:`.router`, :mod:`.reach`): one ROUTER socket per channel for
  many kernels started with ``--router-identity=endpoint``;
"""

from .comm_echo import is_own_echo
from .reach import KernelUnreachable
from .router import RouterClient
from .widget_state import WidgetStateError, async_fetch_widget_states, fetch_widget_states

__all__ = [
    "KernelUnreachable",
    "RouterClient",
    "WidgetStateError",
    "async_fetch_widget_states",
    "fetch_widget_states",
    "is_own_echo",
]
