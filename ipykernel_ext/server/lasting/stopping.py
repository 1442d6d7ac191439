"""How a server stop treats the kernels that outlive their server.

A server that dies without stopping (a crash, ``kill -9``, an out-of-memory kill, SIGHUP
from a hung-up SSH session) stops nothing: those kernels go on (:mod:`.provisioner`
launched them so) and the next server takes them back. Of the stops jupyter_server handles:

* a clean stop (File > Shut Down, ``POST /api/shutdown``, a confirmed Ctrl-C) reaches
  ``ServerApp.stop`` and stops every kernel, as stock does: nothing here changes that;
* **SIGTERM** (JupyterHub's stop of a single-user server, a service manager's stop or
  restart) does what ``LastingKernels.on_sigterm`` says: ``stop`` (the default: as stock) or
  ``keep``;
* **SIGUSR2** always keeps them: the one way to restart a server (to upgrade it, say) and
  keep its running cells, whatever the setting (``kill -USR2 <server pid>``).

Keeping means: before the server's own stop, each lasting kernel is let go of
(``remove_kernel``: the public way to drop a kernel from the manager without a shutdown,
its restarter stopped first), so ``shutdown_all`` no longer sees it and its state file
stays for the next server. The handlers are put in from the extension's load hook, after
``ServerApp.init_signal`` put in stock's.
"""

from __future__ import annotations

import logging
import signal
from typing import Any

from .provisioner import LastingProvisioner

Log = logging.Logger | logging.LoggerAdapter[Any]


class KeepOnStop:
    """The signal handlers that stop the server and keep its lasting kernels."""

    def __init__(self, serverapp: Any, log: Log) -> None:
        self.serverapp = serverapp
        self.log = log

    def install(self, on_sigterm: str) -> None:
        if on_sigterm == "keep":
            signal.signal(signal.SIGTERM, self._on_signal)
        if hasattr(signal, "SIGUSR2"):
            signal.signal(signal.SIGUSR2, self._on_signal)

    def _on_signal(self, sig: int, frame: Any) -> None:
        self.log.critical("received signal %s, stopping; lasting kernels keep running", sig)
        # The kernel manager is touched on the loop only (not between two bytecodes of it).
        self.serverapp.io_loop.add_callback_from_signal(self.release_then_stop)

    def release_then_stop(self) -> None:
        kept = release_lasting_kernels(self.serverapp.kernel_manager)
        if kept:
            self.log.info("Left %d kernel(s) running for the next server: %s", len(kept), kept)
        self.serverapp.stop()


def release_lasting_kernels(kernel_manager: Any) -> list[str]:
    """Drop every lasting kernel from ``kernel_manager`` without stopping it; their ids."""
    kept = []
    for kernel_id in list(kernel_manager.list_kernel_ids()):
        km = kernel_manager.get_kernel(kernel_id)
        provisioner = getattr(km, "provisioner", None)
        if not (isinstance(provisioner, LastingProvisioner) and provisioner.lasts):
            continue
        km.stop_restarter()
        kernel_manager.remove_kernel(kernel_id)
        kept.append(kernel_id)
    return kept
