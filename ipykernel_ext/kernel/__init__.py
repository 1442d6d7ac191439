"""Everything that runs in the kernel process.

* :class:`ExtKernel` (:mod:`.ipkernel`): the IPython kernel with the additions of
  docs/PROTOCOL.md, wiring the rooms below; :class:`ExtKernelApp` (:mod:`.kernelapp`), its
  launcher (``python -m ipykernel_ext``);
* :mod:`.iopub`: IOPub without silent loss;
* :mod:`.comms`: ``comm_echo``, and comm messages run on the main shell, never beside a cell;
* :mod:`.widgets`: every widget state in one reply;
* :mod:`.busy`: a frontend answered while the main shell runs a cell;
* :mod:`.router_identity`: the opt-in ROUTER identity.

The rooms import nothing of :mod:`.ipkernel` or :mod:`.kernelapp`; ``busy`` builds on
``widgets``, nothing else on another room (tests/package/test_layering.py).
``ipykernel_ext.kernel.ExtKernel`` is the path cluster kernelspecs and images name.
"""

from .comms.comm_routing import handle_waiting_comms
from .ipkernel import ExtKernel
from .kernelapp import ExtKernelApp

__all__ = ["ExtKernel", "ExtKernelApp", "handle_waiting_comms"]
