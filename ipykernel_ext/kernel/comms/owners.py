"""Comms made by a cell on a user subshell (JEP 91's subshell console) stay that subshell's.

JupyterLab's "New subshell console" runs cells on a subshell, beside the main cell, as JEP 91
defines. A widget such a cell makes belongs to that console: on stock ipykernel its callbacks
run on a subshell at once, while the main cell runs. The main shell's routing
(:mod:`.comm_routing`) must not take them behind the main cell, so a kernel-made comm notes, as it
is made, the subshell whose cell made it: :class:`OwnedComm`, made by :func:`create_owned_comm`,
which the kernel installs as ``comm.create_comm`` (the ``comm`` package's hook for the kernel
to say what a comm is; ipykernel installs its own, ``_create_comm``, the same way, and
ipywidgets calls it).
Messages of such a comm go to that subshell (:meth:`.comm_routing.CommRouting.route`).
"""

from __future__ import annotations

from typing import Any

from ipykernel.comm.comm import BaseComm
from ipykernel.kernelbase import Kernel


def cell_subshell() -> str | None:
    """The subshell whose ``execute_request`` is being run in this context, or None (the main
    shell, a comm message, no kernel)."""
    if not Kernel.initialized():
        return None
    parent = Kernel.instance().get_parent("shell")
    header = parent.get("header") if isinstance(parent, dict) else None
    if not isinstance(header, dict) or header.get("msg_type") != "execute_request":
        return None
    subshell_id = header.get("subshell_id")
    return subshell_id if isinstance(subshell_id, str) and subshell_id else None


class OwnedComm(BaseComm):
    """ipykernel's comm, noting the user subshell whose cell made it (``owner_subshell``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        #: the subshell whose cell made this comm, or None (the main shell's, or a frontend's)
        self.owner_subshell = cell_subshell()
        super().__init__(*args, **kwargs)


def create_owned_comm(*args: Any, **kwargs: Any) -> OwnedComm:
    """``comm.create_comm`` for this kernel: ipykernel's comm, with its owner noted."""
    return OwnedComm(*args, **kwargs)


def owner_subshell(comm: Any) -> str | None:
    """The user subshell that made ``comm`` (an :class:`OwnedComm`), or None."""
    owner = getattr(comm, "owner_subshell", None)
    return owner if isinstance(owner, str) else None
