"""A jupyter_server whose kernel websockets share one set of channels per kernel, and what it
holds open to its kernels.

:class:`SharedChannelsServer` is the harness's :class:`harness.server.JupyterServer` with
``ipykernel_ext.server.SharedChannelsConnection`` as its websocket connection class and a
short grace period. :class:`KernelConnections` counts the TCP connections each kernel
process holds (per channel), so a test or a benchmark can wait until a server, with either
connection class, has as many sets of channels as it should.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psutil

from . import server as server_utils
from .kernels import EXT_KERNEL
from .polling import wait_until

#: The connection class under test (``--ServerApp.kernel_websocket_connection_class``).
CLASS = "ipykernel_ext.server.SharedChannelsConnection"
#: Seconds the channels outlive a kernel's last websocket: short, so tests need not wait.
GRACE = 0.5


class KernelConnections:
    """What a jupyter_server's kernels hold open, per kernel process (for a server class).

    Mixed into a :class:`harness.server.JupyterServer`; reads ``self.proc``.
    """

    proc: Any

    def kernel_process(self, kernel_id: str) -> psutil.Process:
        assert self.proc is not None
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                if any(kernel_id in arg for arg in child.cmdline()):
                    return child
            except psutil.Error:
                continue
        raise LookupError(f"no process for kernel {kernel_id}")

    def kernel_connections(self, kernel_id: str) -> int:
        """ESTABLISHED TCP connections held by the kernel process (one per peer socket)."""
        proc = self.kernel_process(kernel_id)
        return sum(1 for c in proc.net_connections("tcp") if c.status == psutil.CONN_ESTABLISHED)

    def channel_connections(self, kernel_id: str) -> Counter[str]:
        """The kernel's ESTABLISHED TCP connections per channel (shell, iopub, stdin, ...).

        jupyter_server's own sockets (its activity watcher on IOPub, the kernel manager's
        control socket) count too; nothing of the server but a websocket's channels ever
        connects to **stdin**, so its count alone tells how many sets of channels there are.
        """
        proc = self.kernel_process(kernel_id)
        connection_file = next(a for a in proc.cmdline() if a.endswith(".json"))
        info = json.loads(Path(connection_file).read_text())
        channel_of = {info[f"{c}_port"]: c for c in ("shell", "iopub", "stdin", "control", "hb")}
        return Counter(
            channel_of[c.laddr.port]
            for c in proc.net_connections("tcp")
            if c.status == psutil.CONN_ESTABLISHED and c.laddr.port in channel_of
        )

    def wait_stdin_connections(
        self, kernel_id: str, count: int, timeout: float = 60
    ) -> Counter[str]:
        """The kernel's connections per channel once ``count`` sockets are on its stdin.

        A barrier, not a window: ``timeout`` only guards against a hang.
        """
        return wait_until(
            lambda: self.channel_connections(kernel_id),
            timeout,
            f"{count} connections on the kernel's stdin",
            0.1,
            done=lambda now: now["stdin"] == count,
        )


class SharedChannelsServer(KernelConnections, server_utils.JupyterServer):
    """The harness's jupyter_server with our connection class and a short grace period.

    Started on construction; :meth:`stop` ends it.
    """

    def __init__(
        self,
        extra_args: Iterable[str] = (),
        env: dict[str, str] | None = None,
        connection_class: str = CLASS,
        grace: float = GRACE,
    ) -> None:
        super().__init__(
            extra_args=[
                f"--ServerApp.kernel_websocket_connection_class={connection_class}",
                f"--SharedChannelsConnection.shared_channels_grace_period={grace}",
                *extra_args,
            ],
            env=env,
            startup_timeout=60,
            stop_timeout=20,
        )
        self.start()

    def start_kernel(self, name: str = EXT_KERNEL, timeout: float = 60) -> str:
        return super().start_kernel(name, timeout)

    async def stdin_connections_become(
        self, kernel_id: str, count: int, timeout: float = 60
    ) -> Counter[str]:
        """:meth:`wait_stdin_connections` from a test's event loop, which keeps running (its
        websocket clients keep reading) while this waits."""
        return await asyncio.to_thread(self.wait_stdin_connections, kernel_id, count, timeout)

    def websocket_reports(self) -> dict[str, dict[str, int]]:
        """session -> what the class logged when that websocket closed (SharedChannelsConnection.
        disconnect): messages queued for it, written to it, left, peak bytes buffered."""
        reports = {}
        pattern = re.compile(
            r"Websocket (\S+) of kernel \S+ closed: (\d+) messages queued, (\d+) written, "
            r"(\d+) left; peak (\d+) bytes buffered \(budget \d+\); the channels read (\d+)"
        )
        for m in pattern.finditer(self.log_text()):
            session, *numbers = m.groups()
            reports[session] = dict(
                zip(("queued", "written", "left", "peak", "read"), map(int, numbers), strict=True)
            )
        return reports
