"""The provisioner whose kernels outlive their server, and which can take one back.

:class:`LastingProvisioner` is jupyter_client's ``LocalProvisioner`` (the default of every
kernelspec that names none), with two differences, both only for kernels whose kernelspec
declares ``metadata.ends_when_orphaned`` (:data:`ipykernel_ext.protocol.ENDS_WHEN_ORPHANED`);
any other kernel is launched and managed exactly as stock's:

* **Launch.** ``independent=True`` (jupyter_client then sets no ``JPY_PARENT_PID``, so
  ipykernel's parent poller does not end the kernel with its server; any inherited one is
  removed), and the orphan time-out in the kernel's environment
  (:data:`ipykernel_ext.kernel.orphan.ENV`). A state file (:mod:`.records`) records the kernel.
* **Taking a kernel back** (:mod:`.taking_back`): the launch of a kernel id found in
  :data:`adopting` launches nothing. It loads the recorded connection info (ports, key,
  CurveZMQ keys) before the connection file is written, and manages the recorded process by
  its pid: ``poll``, ``wait``, ``send_signal``, ``kill`` and ``terminate`` work on the pid,
  checked against its start time. Stock's versions go through a ``Popen`` object, and
  without one ``poll`` calls the kernel dead, so the restarter would start a second one.
  A restart of a taken-back kernel launches a new process as usual.

Going through jupyter_client's own ``start_kernel`` keeps what a kernel started by the
server has: its id, its launch arguments (restart works), the activity watcher, the culler
and the restarter.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import weakref
from typing import Any

from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.provisioning import LocalProvisioner

from ...protocol import ENDS_WHEN_ORPHANED, ORPHAN_TIMEOUT_ENV
from .options import LastingKernels
from .records import KernelRecord, ProcessId, RecordFiles, json_connection_info

#: The entry point name (pyproject's ``jupyter_client.kernel_provisioners``).
PROVISIONER_NAME = "ipykernel-ext-lasting-provisioner"

#: Kernel id -> the record of a kernel being taken back: its next launch launches nothing.
#: Filled and emptied by :mod:`.taking_back` around ``start_kernel`` (the provisioner is made
#: by jupyter_client's factory, so this is how it hears of the record).
adopting: dict[str, KernelRecord] = {}

#: The servers' kernel managers whose kernels last (the package's ``install`` adds the
#: server's). A kernel of any other manager in the server's process (Voila's
#: dashboards, an extension's own) is launched and managed as stock's: the next server would
#: have nobody to give it to.
lasting_managers: weakref.WeakSet[Any] = weakref.WeakSet()

#: ``poll``'s exit code for a taken-back kernel that is gone (not our child: its real exit
#: status went to its new parent).
GONE = -1


class LastingProvisioner(LocalProvisioner):
    """``LocalProvisioner`` whose kernels outlive their server (module docstring)."""

    #: the taken-back kernel's process (None: launched here, or not taken back)
    adopted: ProcessId | None = None
    _taking_back: KernelRecord | None = None

    @property
    def km(self) -> Any:
        """The kernel manager (the provisioner's parent, set by the factory)."""
        assert self.parent is not None
        return self.parent

    @property
    def lasts(self) -> bool:
        """Whether this kernel outlives its server (its kernelspec says it ends itself)."""
        spec = self.kernel_spec
        metadata = getattr(spec, "metadata", None) or {}
        return bool(metadata.get(ENDS_WHEN_ORPHANED)) and self.km.parent in lasting_managers

    @property
    def settings(self) -> LastingKernels:
        return LastingKernels(parent=self.parent)

    @property
    def records(self) -> RecordFiles:
        return RecordFiles(os.path.dirname(self.km.connection_file))

    @property
    def has_process(self) -> bool:
        return self.process is not None or self.adopted is not None

    # --- launch ------------------------------------------------------------------------

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        record = adopting.pop(self.kernel_id, None)
        if record is not None:
            # The recorded ports and keys, before stock's pre_launch writes the connection
            # file from them (it picks no ports once they are "cached").
            self.km.load_connection_info(record.connection_info)
            self.ports_cached = True
            self._taking_back = record
        return await super().pre_launch(**kwargs)

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        record, self._taking_back = self._taking_back, None
        if record is not None:
            self.adopted = record.process
            self.pid, self.pgid, self.cwd = record.process.pid, record.pgid, record.cwd
            self._record(record.session_name, record.sessions)
            return self.connection_info
        if not self.lasts:
            return await super().launch_kernel(cmd, **kwargs)
        env = dict(kwargs.get("env") or os.environ)
        env.pop("JPY_PARENT_PID", None)  # an inherited one would still tie the kernel to it
        env[ORPHAN_TIMEOUT_ENV] = repr(self.settings.orphan_timeout)
        info = await super().launch_kernel(cmd, **{**kwargs, "env": env, "independent": True})
        self.adopted = None
        # A restart keeps the kernel's id, so its sessions (.sessions keeps them).
        before = self.records.read(self.kernel_id)
        self._record(env.get("JPY_SESSION_NAME"), before.sessions if before else [])
        return info

    def _record(self, session_name: str | None, sessions: list[dict[str, Any]]) -> None:
        assert self.pid is not None
        self.records.write(
            KernelRecord(
                kernel_id=self.kernel_id,
                kernel_name=self.km.kernel_name,
                connection_info=json_connection_info(dict(self.km.get_connection_info())),
                process=self.adopted or ProcessId.of(self.pid),
                pgid=self.pgid,
                cwd=None if self.cwd is None else str(self.cwd),
                session_name=session_name,
                server=ProcessId.of(os.getpid()),
                sessions=sessions,
            )
        )

    async def cleanup(self, restart: bool = False) -> None:
        await super().cleanup(restart=restart)
        if not restart:
            self.records.remove(self.kernel_id)

    # --- a taken-back kernel, by its pid -----------------------------------------------

    async def poll(self) -> int | None:
        if self.process is None and self.adopted is not None:
            return None if self.adopted.alive() else GONE
        return await super().poll()

    async def wait(self) -> int | None:
        if self.process is None and self.adopted is not None:
            while self.adopted.alive():
                await asyncio.sleep(0.1)
            self.adopted = None
            return GONE
        return await super().wait()

    async def send_signal(self, signum: int) -> None:
        if self.process is not None or self.adopted is None:
            return await super().send_signal(signum)
        if not self.adopted.alive():
            return  # gone, or its pid is another process's now: never signal that one
        if self.pgid and hasattr(os, "killpg"):
            try:
                os.killpg(self.pgid, signum)
                return
            except OSError:
                pass
        os.kill(self.adopted.pid, signum)

    async def kill(self, restart: bool = False) -> None:
        if self.process is not None or self.adopted is None:
            return await super().kill(restart=restart)
        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
            await self.send_signal(signal.SIGKILL)

    async def terminate(self, restart: bool = False) -> None:
        if self.process is not None or self.adopted is None:
            return await super().terminate(restart=restart)
        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
            await self.send_signal(signal.SIGTERM)
