"""The settings of kernels that outlive their server (``c.LastingKernels.*``)."""

from __future__ import annotations

from traitlets import Bool, CaselessStrEnum, Float
from traitlets.config import Configurable


class LastingKernels(Configurable):
    """Kernels that outlive a server that dies, and the next server taking them back."""

    enabled = Bool(
        True,
        help="""Launch the kernels whose kernelspec declares metadata.ends_when_orphaned
        (ipykernel_ext's) so that a server that dies (a crash, kill -9, an out-of-memory
        kill, the SSH session that ran it hung up) leaves them running, and take such
        kernels back, under the same id and with their sessions, when a server starts in
        the same runtime dir. False: every kernel dies with its server, as with stock.""",
    ).tag(config=True)

    on_sigterm = CaselessStrEnum(
        ["stop", "keep"],
        default_value="stop",
        help="""What SIGTERM does to the kernels that outlive their server: 'stop' them, as
        a clean stop (File > Shut Down, POST /api/shutdown, a confirmed Ctrl-C) always does
        (the default: JupyterHub stops a server with SIGTERM to free what it holds), or
        'keep' them running for the next server (a service manager's restart). SIGUSR2
        always keeps them.""",
    ).tag(config=True)

    orphan_timeout = Float(
        3600.0,
        min=1.0,
        help="""Seconds a kernel left without a server waits for one, with no subscriber
        and no running cell, before it shuts itself down. A running cell is never cut: the
        time counts from when the cell ended.""",
    ).tag(config=True)
