"""What the server layer's modules share: one jupyter_server as a user's, and its kernels.

``server`` is the venv's configuration (the installed extension on, jupyter_server's default
rates), started once for the session: the modules that need nothing else share it (each one
costs a server's start, about 3 s on 2 cores, otherwise). A module that needs other options
builds its own ``server`` fixture, which overrides this one for its tests. Their tests start
their own kernels and read their own cells' messages and log lines (by msg_id), so they do not
see each other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from harness.server import JupyterServer

#: Our kernel and stock ipykernel, each through the same server.
KERNELS = ["python3-ext", "python3"]


@pytest.fixture(scope="session")
def server() -> Iterator[JupyterServer]:
    with JupyterServer(ipykernel_ext=None) as srv:  # as installed
        yield srv


@pytest.fixture(params=KERNELS)
def kernel(request: pytest.FixtureRequest, server: JupyterServer) -> Iterator[str]:
    """A fresh kernel of ``server`` (ours, then stock's): its id; shut down after."""
    kernel_id = server.start_kernel(request.param)
    yield kernel_id
    with contextlib.suppress(Exception):
        server.shutdown_kernel(kernel_id)
