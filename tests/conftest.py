"""What every test shares: the layer markers, and the kernel, server and websocket fixtures.

The folders under ``tests/`` are the layers (CONTRIBUTING.md, "Tests"); each test is marked
with its folder's layer here, so ``-m kernel`` or ``-m "not browser"`` select by layer. The
fixtures are the real parts the layers above ``unit`` stand up: a kernel through
jupyter_client.KernelManager with CurveZMQ required, a jupyter_server subprocess, and a
websocket client on a fresh kernel of that server. Module-scoped ones are made once per test
module that asks for them; a module that needs a variant (other options, widgets made first)
builds on them with its own fixture.

Sizes: a test whose count only has to pass the point where its bug showed runs that smaller
count; under ``--full-size`` it runs the full one (the report's, a seed's). Such a test asks
for the :func:`full_size` fixture, which marks it ``full_size``: ``.ci/run`` runs
``-m full_size --full-size`` after the README's command.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client import BlockingKernelClient, KernelManager

from harness.browser import ARTIFACTS, chromium, shut_down_everything
from harness.kernel_websocket import KernelWebsocket
from harness.kernels import EXT_KERNEL, STOCK_KERNEL, running_kernel
from harness.server import JupyterServer

# Kernels started by the tests must not pick up a developer's own Jupyter config.
os.environ.setdefault("JUPYTER_PLATFORM_DIRS", "1")
# Each test process (each of the two workers) gives its kernels an IPython directory of its
# own, removed at its exit. IPython keeps one history database per directory, and a "tail"
# history request reads the latest entries of every session in it: a kernel of the other
# worker running cells meanwhile showed in the conformance suite's history check (once, in
# .ci/run's floors leg). Nor do the tests' cells land in a developer's own history.
_IPYTHONDIR = tempfile.mkdtemp(prefix="ipykernel-ext-ipython-")
os.environ["IPYTHONDIR"] = _IPYTHONDIR
atexit.register(shutil.rmtree, _IPYTHONDIR, ignore_errors=True)

_HERE = Path(__file__).resolve().parent

#: Each folder of tests/ and the marker its tests get (declared in pyproject.toml).
LAYERS = ("unit", "kernel", "client", "shared_channels", "server", "browser", "package", "upstream")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--full-size",
        action="store_true",
        help="run the tests that ask for the full_size fixture at their full size (the "
        "report's count, not the smaller one past where the bug showed); .ci/run runs "
        "-m full_size --full-size",
    )


#: The order the layers' files are handed to the two test workers (``--no-loadscope-reorder``
#: in pyproject keeps it). xdist's own order, most tests first, left the upstream file (two
#: tests, about 4 minutes) to start 20 minutes in and run alone at the end while the other
#: worker had nothing left. So: the upstream file first, beside the server layer's files
#: (about 15 minutes of a worker in all); then the browser layer's; the many short files of
#: the other layers fill in at the end. Not the browser layer beside the upstream file: the
#: first browser test's page once never saw its kernel connect while the upstream suite
#: started its kernels beside it (an earlier trial of this order, not understood since).
WORKER_ORDER = (
    "upstream",
    "server",
    "browser",
    "kernel",
    "shared_channels",
    "client",
    "package",
    "unit",
)


def _layer_of(item: pytest.Item) -> str | None:
    parts = Path(item.path).resolve().relative_to(_HERE).parts
    return parts[0] if len(parts) > 1 and parts[0] in LAYERS else None


def _worker_rank(item: pytest.Item) -> int:
    layer = _layer_of(item)
    return WORKER_ORDER.index(layer) if layer in WORKER_ORDER else len(WORKER_ORDER)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        layer = _layer_of(item)
        if layer is not None:
            item.add_marker(getattr(pytest.mark, layer))
        # Given by the fixture, so that `-m full_size` selects exactly the tests it changes.
        if "full_size" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.full_size)
    items.sort(key=_worker_rank)  # stable: each file's tests keep their order


@pytest.fixture
def full_size(request: pytest.FixtureRequest) -> bool:
    """True under ``--full-size``: the test runs its full size, not the smaller one it runs
    by default (its docstring says what the smaller one still proves)."""
    return bool(request.config.getoption("--full-size"))


KernelPair = tuple[KernelManager, BlockingKernelClient]


@pytest.fixture(scope="module")
def ext_kernel() -> Iterator[KernelPair]:
    """An ipykernel_ext kernel with default options, CurveZMQ required, one ready client."""
    with running_kernel(EXT_KERNEL) as pair:
        yield pair


@pytest.fixture(scope="module")
def stock_kernel() -> Iterator[KernelPair]:
    """Stock ipykernel (the ``python3`` kernelspec), CurveZMQ required, one ready client."""
    with running_kernel(STOCK_KERNEL) as pair:
        yield pair


@pytest.fixture(scope="module")
def jupyter_server() -> Iterator[JupyterServer]:
    """A jupyter_server subprocess with its defaults (token auth, CurveZMQ for its kernels)."""
    with JupyterServer() as server:
        yield server


@pytest.fixture
def server_kernel(jupyter_server: JupyterServer) -> Iterator[str]:
    """A fresh ipykernel_ext kernel started by :func:`jupyter_server`: its id; shut down after."""
    kernel_id = jupyter_server.start_kernel(EXT_KERNEL)
    try:
        yield kernel_id
    finally:
        jupyter_server.shutdown_kernel(kernel_id)


@pytest.fixture
def ws(jupyter_server: JupyterServer, server_kernel: str) -> Iterator[KernelWebsocket]:
    """A ready websocket client on :func:`server_kernel`, through the server's kernel handler."""
    with KernelWebsocket(jupyter_server, server_kernel) as client:
        yield client


# --- the browser layer: pages in headless Chromium on a module's own ``lab`` server ----------


@pytest.fixture(scope="module")
def browser(lab: JupyterServer) -> Iterator[Any]:
    with chromium() as chromium_browser:
        yield chromium_browser


@pytest.fixture
def after_page(lab: JupyterServer) -> Callable[[], None]:
    """What :func:`page` does once its context is closed: shut the sessions and kernels of the
    module's ``lab`` down (a frontend that finds kernels running asks which one to use). A
    module whose pages are served by no ``lab`` overrides it."""
    return lambda: shut_down_everything(lab)


@pytest.fixture
def page(
    browser: Any, after_page: Callable[[], None], request: pytest.FixtureRequest
) -> Iterator[Any]:
    """A fresh browser context; a screenshot of the page as the test left it goes to
    ``artifacts/``; then :func:`after_page` (the kernels it started are shut down)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    new_page = context.new_page()
    new_page.set_default_timeout(120_000)
    try:
        yield new_page
    finally:
        ARTIFACTS.mkdir(exist_ok=True)
        with contextlib.suppress(Exception):
            new_page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"))
        context.close()
        after_page()
