"""Kernels that outlive a server that dies, and the next server taking them back.

* :mod:`.options`: ``LastingKernels`` (on or off, SIGTERM's choice, the orphan time-out);
* :mod:`.records`: a kernel's state file (what the next server needs), owner-only;
* :mod:`.provisioner`: the launch that outlives the server, and the take-back mode that
  launches nothing and manages the recorded process by its pid;
* :mod:`.taking_back`: at the server's start, before it listens, every recorded kernel still
  alive and answering is taken back under its id, with its sessions;
* :mod:`.resuming`: a taken-back kernel's journaled cells (what ran while no server was up)
  given again to its outputs owner and to the tabs that come back;
* :mod:`.sessions`: each lasting kernel's sessions kept in its state file;
* :mod:`.stopping`: which stops keep the kernels (SIGUSR2; SIGTERM if so set).

:func:`install` wires them for one server (the extension's load hook calls it). The kernel's
side, ending itself once no server is left, is :mod:`ipykernel_ext.kernel.orphan`.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from jupyter_client.provisioning import KernelProvisionerFactory

from .options import LastingKernels
from .provisioner import PROVISIONER_NAME, LastingProvisioner, lasting_managers
from .records import RecordFiles
from .resuming import Hearing
from .sessions import SessionKeeper
from .stopping import KeepOnStop
from .taking_back import adopt_at_start

__all__ = ["LastingKernels", "LastingProvisioner", "install"]


def provisioner_configured(serverapp: Any) -> bool:
    """Whether the user chose the default provisioner (config or its environment variable)."""
    section = serverapp.config.get("KernelProvisionerFactory")
    return bool(
        (section is not None and "default_provisioner_name" in section)
        or os.environ.get(KernelProvisionerFactory.default_provisioner_name_env)
    )


def install(
    serverapp: Any,
    log: logging.Logger | logging.LoggerAdapter[Any],
    hearing: Hearing | None = None,
) -> str:
    """Make kernels outlive this server and take back those a server before it left (with
    ``hearing``, the server hears a taken-back kernel's journaled cells itself: their tabs may
    never come back); what is on, in words for the log."""
    settings = LastingKernels(parent=serverapp)
    if not settings.enabled:
        return "off (LastingKernels.enabled=False)"
    if provisioner_configured(serverapp):
        return "off (KernelProvisionerFactory.default_provisioner_name is configured)"
    factory = KernelProvisionerFactory.instance(parent=serverapp.kernel_manager)
    factory.default_provisioner_name = PROVISIONER_NAME
    lasting_managers.add(serverapp.kernel_manager)
    adopt_at_start(serverapp, log, hearing)
    keeper = SessionKeeper(serverapp.session_manager, RecordFiles(serverapp.runtime_dir), log)
    keeper.start(serverapp.io_loop.asyncio_loop)
    KeepOnStop(serverapp, log).install(settings.on_sigterm)
    return f"on (SIGTERM: {settings.on_sigterm} them; SIGUSR2: keep them)"
