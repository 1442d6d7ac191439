"""The ``shared_channels`` benchmark's jupyter_server: one per websocket connection class.

:data:`CLASSES` names the two classes the tables compare (jupyter_server's own and
ipykernel_ext's ``SharedChannelsConnection``); :class:`Server` is the harness's
:class:`harness.server.JupyterServer` with one of them, the IOPub rate limit off, the kernel
connection counts of :class:`harness.shared_channels_server.KernelConnections`, and what the
benchmark reads off the server process: file descriptors, CPU time, RSS.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import psutil

from harness.server import JupyterServer
from harness.shared_channels_server import CLASS as SHARED_CLASS
from harness.shared_channels_server import KernelConnections

#: The server's websocket connection classes, by the name the tables give them.
CLASSES = {
    "stock": "jupyter_server.services.kernels.connection.channels.ZMQChannelsWebsocketConnection",
    "shared": SHARED_CLASS,
}


class Server(KernelConnections, JupyterServer):
    """The tests' jupyter_server launcher, plus what this benchmark measures on it."""

    #: More command-line options for every server (``--server-arg``).
    extra: ClassVar[list[str]] = []

    def __init__(self, connection_class: str) -> None:
        super().__init__(
            extra_args=[
                f"--ServerApp.kernel_websocket_connection_class={connection_class}",
                # the IOPub rate limit off, for both classes: a 10000-message burst would
                # otherwise be cut by design (see benchmarks/shared_channels.py)
                "--ZMQChannelsWebsocketConnection.limit_rate=False",
                *self.extra,
            ],
            startup_timeout=60,
        )

    def __enter__(self) -> Server:
        self.start()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def fds(self) -> tuple[int, int]:
        """(all descriptors, descriptors that are not accepted websocket connections)."""
        proc = psutil.Process(self.pid)
        websockets = sum(
            1
            for c in proc.net_connections("tcp")
            if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == self.port
        )
        total = proc.num_fds()
        return total, total - websockets

    def cpu_seconds(self) -> float:
        """CPU time the server process has used (user + system, all its threads)."""
        times = psutil.Process(self.pid).cpu_times()
        return times.user + times.system

    def rss_mb(self) -> tuple[float, float]:
        """(current RSS, peak RSS) in MB."""
        status = Path(f"/proc/{self.pid}/status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        return (
            int(fields["VmRSS"].split()[0]) / 1024,
            int(fields["VmHWM"].split()[0]) / 1024,
        )
