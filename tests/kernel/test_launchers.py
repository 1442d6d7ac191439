"""Which IOPub path is active, with which options, under each app that can start ExtKernel.

* ExtKernelApp (``python -m ipykernel_ext``): the socket it made, unchanged
  (``"socket": "bound-by-ext-app"``); ``c.ExtKernel.iopub_*`` apply there too, its own flags win;
* stock ``IPKernelApp`` with ``--IPKernelApp.kernel_class=ipykernel_ext.kernel.ExtKernel``:
  the adopted socket (``"adopted"``), ``c.ExtKernel.iopub_*`` reach it, a queue size it cannot
  honour is reported in the log and in the reply, a bad value stops the kernel with a message;
* ``embed_kernel(kernel_class=ExtKernel)``: adopted as well;
* in-process, with ipykernel's own ``IOPubThread`` over a real XPUB socket: the swap, sends
  through the adopted socket, and a shutdown that closes the libzmq socket once.

The cluster launcher (gateway_provisioners) and the full feature checks are in test_cluster.py.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq
from ipykernel.iostream import IOPubThread
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.session import Session

from harness.cells import run_cell
from harness.kernels import EXT_KERNEL, iopub_stats, running_kernel
from ipykernel_ext.kernel.iopub.adoption import AdoptedXPubSocket, adopt_iopub_socket
from ipykernel_ext.kernel.iopub.settings import DEFAULT_SEND_TIMEOUT_MS, IOPubSettings
from ipykernel_ext.kernel.iopub.stats import ADOPTED, BOUND_BY_EXT_APP

EXT_KERNEL_CLASS = "ipykernel_ext.kernel.ExtKernel"
STOCK_APP_ARGV = [
    sys.executable,
    "-m",
    "ipykernel_launcher",
    f"--IPKernelApp.kernel_class={EXT_KERNEL_CLASS}",
]
EMBED_CODE = (
    "import sys; from ipykernel.embed import embed_kernel; "
    "from ipykernel_ext.kernel import ExtKernel; "
    "embed_kernel(kernel_class=ExtKernel, connection_file=sys.argv[1])"
)

#: The first words of the warning for a queue size the adopted socket cannot take.
SNDHWM_WARNING = "libzmq fixes each subscriber's queue at bind time"


def settings(stats: dict[str, Any]) -> tuple[int, bool, int, str]:
    return stats["sndhwm"], stats["nodrop"], stats["send_timeout_ms"], stats["socket"]


@pytest.fixture(scope="module")
def kernelspecs(tmp_path_factory: pytest.TempPathFactory) -> KernelSpecManager:
    """Kernelspecs for ExtKernel under stock IPKernelApp and under embed_kernel."""
    kernels = tmp_path_factory.mktemp("launcher-kernelspecs")
    for name, argv in [
        ("ext_ipkernelapp", [*STOCK_APP_ARGV, "-f", "{connection_file}"]),
        ("ext_embedded", [sys.executable, "-c", EMBED_CODE, "{connection_file}"]),
    ]:
        (kernels / name).mkdir()
        (kernels / name / "kernel.json").write_text(
            json.dumps(
                {
                    "argv": argv,
                    "display_name": name,
                    "language": "python",
                    "metadata": {"supported_encryption": ["curve"]},
                }
            )
        )
    return KernelSpecManager(kernel_dirs=[str(kernels)])


def stats_and_log(
    kernel_name: str, ksm: KernelSpecManager | None, args: list[str], log_path: Path
) -> dict[str, Any]:
    """Start a kernel (its stderr to ``log_path``), return its iopub_stats, stop it."""
    kwargs: dict[str, Any] = {} if ksm is None else {"kernel_spec_manager": ksm}
    with (
        log_path.open("wb") as log,
        running_kernel(kernel_name, args, launch={"stderr": log}, **kwargs) as (_km, kc),
    ):
        return iopub_stats(kc)


T, STOCK_APP = DEFAULT_SEND_TIMEOUT_MS, "ext_ipkernelapp"
#: name: (kernel, arguments, the IPython profile's ipython_kernel_config.py (what a cluster
#: image can carry) or None, the settings in force, whether the log says a queue size cannot
#: be honoured). Under ExtKernelApp the queue size is honoured (the socket is made before
#: bind) and its flags win; under stock's app the reply says what is in force.
SETTINGS_CASES = {
    "ext app": (EXT_KERNEL, [], None, (1000, True, T, BOUND_BY_EXT_APP), False),
    "ext app, options": (
        EXT_KERNEL,
        ["--ExtKernel.iopub_sndhwm=321", "--ExtKernel.iopub_send_timeout=1234"],
        None,
        (321, True, 1234, BOUND_BY_EXT_APP),
        False,
    ),
    "ext app, its flag wins": (
        EXT_KERNEL,
        ["--ExtKernel.iopub_send_timeout=1234", "--iopub-send-timeout=999"],
        None,
        (1000, True, 999, BOUND_BY_EXT_APP),
        False,
    ),
    "stock app": (STOCK_APP, [], None, (1000, True, T, ADOPTED), False),
    "stock app, options": (
        STOCK_APP,
        ["--ExtKernel.iopub_send_timeout=1234", "--ExtKernel.iopub_nodrop=False"],
        None,
        (1000, False, 1234, ADOPTED),
        False,
    ),
    "stock app, ipython config": (
        STOCK_APP,
        [],
        "c.ExtKernel.iopub_send_timeout = 4321\n",
        (1000, True, 4321, ADOPTED),
        False,
    ),
    "stock app, sndhwm": (
        STOCK_APP,
        ["--ExtKernel.iopub_sndhwm=5000"],
        None,
        (1000, True, T, ADOPTED),
        True,
    ),
}


@pytest.mark.parametrize("case", list(SETTINGS_CASES))
def test_options_in_force(
    kernelspecs: KernelSpecManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    kernel, args, ipython_config, expected, warned = SETTINGS_CASES[case]
    if ipython_config is not None:
        profile = tmp_path / "ipython" / "profile_default"
        profile.mkdir(parents=True)
        (profile / "ipython_kernel_config.py").write_text(ipython_config)
        monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    log = tmp_path / "log"
    ksm = None if kernel == EXT_KERNEL else kernelspecs
    assert settings(stats_and_log(kernel, ksm, args, log)) == expected
    text = log.read_text()
    assert (SNDHWM_WARNING in text) == warned, text
    if warned:
        assert "5000" in text and "python -m ipykernel_ext" in text


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            [sys.executable, "-m", "ipykernel_ext", "--ExtKernel.iopub_send_timeout=0"],
            "ExtKernel.iopub_send_timeout",
        ),
        (
            [*STOCK_APP_ARGV, "--ExtKernel.iopub_sndhwm=-1"],
            "ExtKernel.iopub_sndhwm must be 0 (unbounded) or more, not -1",
        ),
    ],
    ids=["ext app", "stock app"],
)
def test_a_bad_kernel_option_stops_the_app_before_binding(
    tmp_path: Path, argv: list[str], says: str
) -> None:
    connection_file = tmp_path / "kernel.json"
    proc = subprocess.run(
        [*argv, "-f", str(connection_file)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0
    assert says in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert not connection_file.exists()


# --- embed_kernel ---------------------------------------------------------------------------


def test_embed_kernel_adopts_and_a_burst_arrives_whole(kernelspecs: KernelSpecManager) -> None:
    with running_kernel("ext_embedded", kernel_spec_manager=kernelspecs) as (_km, kc):
        assert iopub_stats(kc)["socket"] == ADOPTED
        # No comprehension: in an embedded kernel the cell's names are locals of the caller,
        # which a comprehension's scope does not see.
        code = (
            "import ipywidgets as w\nfrom IPython.display import display\nbuttons = []\n"
            "for i in range(1000):\n    buttons.append(w.Button(description=str(i)))\n"
            "display(w.GridBox(buttons))\n"
        )
        cell = run_cell(kc, code)
        reply, messages = cell.reply, cell.messages
        assert reply is not None
        assert reply["content"]["status"] == "ok", reply["content"]
        assert sum(m["msg_type"] == "comm_open" for m in messages) == 3 * 1000 + 2


# --- in-process: ipykernel's IOPubThread over a real XPUB ----------------------------------


#: The adopt function's logger; pytest's ``caplog`` keeps its records.
ADOPT_LOG = logging.getLogger("test_launchers.adopt")


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def stop_iopub_thread(thread: IOPubThread) -> None:
    """Stop the thread's loop, wait for the thread, then ``stop()`` (which marks it stopped).

    ``IOPubThread.stop()`` sets ``_stopped`` before it stops the loop, and ``_thread_main``
    then cancels its event-pipe gc task without running the loop again, so the task is
    never finished: asyncio prints "Task was destroyed but it is pending!" when it is
    collected (three such lines at the end of every pytest run). With the loop stopped
    first, ``_thread_main`` takes its other branch and runs the cancel on the loop. The
    event pipes ``stop()`` would close are closed with the context by the caller.
    """
    if thread.thread.is_alive():
        thread.io_loop.add_callback(thread.io_loop.stop)
        thread.thread.join(timeout=30)
        assert not thread.thread.is_alive(), "IOPub thread did not stop in 30 s"
    thread.stop()


@pytest.fixture
def iopub_pair() -> Iterator[tuple[IOPubThread, zmq.Socket[Any], zmq.Socket[Any]]]:
    """A started IOPubThread over a bound XPUB (as IPKernelApp makes it), and a SUB on it
    that has had its iopub_welcome (so the stock socket has sent all it will send)."""
    ctx = zmq.Context()
    xpub = ctx.socket(zmq.XPUB)
    xpub.linger = 0
    port = xpub.bind_to_random_port("tcp://127.0.0.1")
    thread = IOPubThread(xpub, pipe=False, session=Session())
    thread.start()
    sub = ctx.socket(zmq.SUB)
    sub.linger = 0
    sub.subscribe(b"")
    sub.connect(f"tcp://127.0.0.1:{port}")
    try:
        assert sub.poll(30_000), "no iopub_welcome in 30 s"
        sub.recv_multipart()
        yield thread, xpub, sub
    finally:
        sub.close()
        stop_iopub_thread(thread)
        thread.close()
        ctx.destroy(linger=0)


def adopt(thread: IOPubThread, sndhwm: int = 1000) -> AdoptedXPubSocket | None:
    return adopt_iopub_socket(
        thread,
        settings=IOPubSettings(sndhwm=sndhwm, nodrop=True, send_timeout_ms=1500),
        log=ADOPT_LOG,
        bound_by="App",
    )


def test_adopted_socket_sends_for_the_iopub_thread(
    iopub_pair: Any, caplog: pytest.LogCaptureFixture
) -> None:
    thread, xpub, sub = iopub_pair
    adopted = adopt(thread)
    assert isinstance(adopted, AdoptedXPubSocket)
    assert thread.socket is adopted and adopted.owner is xpub
    assert adopted.underlying == xpub.underlying  # the same libzmq socket
    assert adopted.settings.send_timeout_ms == 1500
    assert xpub.getsockopt(zmq.SNDHWM) == 1000
    thread.send_multipart([b"topic", b"hello"])
    assert sub.poll(30_000)
    assert sub.recv_multipart() == [b"topic", b"hello"]
    assert adopted.stats.sent == 1
    assert adopted.stats_reply()["socket"] == ADOPTED
    assert warnings(caplog) == []
    # Adopting again changes nothing.
    assert adopt(thread) is None
    assert thread.socket is adopted


def test_adopted_socket_closes_the_libzmq_socket_once(iopub_pair: Any) -> None:
    thread, xpub, _sub = iopub_pair
    adopted = adopt(thread)
    assert adopted is not None
    stop_iopub_thread(thread)  # ipykernel's loop closes the socket it watches (the app's)
    assert xpub.closed and adopted.closed
    # A late send (an output flush at exit) after the loop is gone: refused, not a crash.
    thread.send_multipart([b"late"])
    thread.close()  # closes through the adopted socket: the owner, already closed
    assert thread.closed
    with pytest.raises(zmq.ZMQError):
        adopted.send_multipart([b"after close"])


def test_a_queue_size_that_cannot_be_honoured_is_logged(
    iopub_pair: Any, caplog: pytest.LogCaptureFixture
) -> None:
    thread, _xpub, _sub = iopub_pair
    adopted = adopt(thread, sndhwm=5000)
    assert adopted is not None and adopted.settings.sndhwm == 1000
    assert any(SNDHWM_WARNING in w and "App" in w and "5000" in w for w in warnings(caplog))


def test_a_socket_that_is_not_xpub_is_left_alone_and_said_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    thread = IOPubThread(pub, pipe=False)
    try:
        assert adopt(thread) is None
        assert thread.socket is pub
        assert any("not a zmq XPUB socket" in w for w in warnings(caplog))
    finally:
        thread.close()
        ctx.destroy(linger=0)
