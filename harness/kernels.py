"""Real kernels for the tests and benchmarks: started, connected, shut down; their IOPub counters.

Every kernel here is started through ``jupyter_client.KernelManager`` with
``transport_encryption="required"`` (CurveZMQ on every socket) unless a caller says
otherwise. Clients come from the connection file, not ``KernelManager.client()``, so each has
its own session id (clients made by one manager share its Session, hence one DEALER
identity, and take each other's replies).
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import zmq
from jupyter_client import BlockingKernelClient, KernelManager

from .messages import control_request
from .polling import wait_until

EXT_KERNEL = "python3-ext"
STOCK_KERNEL = "python3"
#: The kernel class cluster launchers are given (``--ipykernel-subclass-name``).
EXT_KERNEL_CLASS = "ipykernel_ext.kernel.ExtKernel"


def install_ssh_spec(
    prefix: Path, name: str, *options: str, kernel_class: str | None = EXT_KERNEL_CLASS
) -> tuple[Path, dict[str, Any]]:
    """``jupyter-ssh-spec install`` for ExtKernel, as an operator runs it; its kernel.json.

    ``kernel_class=None``: the launcher's default kernel class (stock ipykernel).
    """
    subclass = [] if kernel_class is None else [f"--ipykernel-subclass-name={kernel_class}"]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "gateway_provisioners.cli.ssh_specapp",
            "install",
            f"--prefix={prefix}",
            f"--kernel-name={name}",
            *options,
            *subclass,
        ],
        check=True,
        capture_output=True,
    )
    spec_file = prefix / "share" / "jupyter" / "kernels" / name / "kernel.json"
    return spec_file, json.loads(spec_file.read_text())


def start_kernel(
    kernel_name: str = EXT_KERNEL,
    extra_arguments: list[str] | None = None,
    encryption: bool = True,
    env: dict[str, str] | None = None,
    launch: dict[str, Any] | None = None,
    **manager_kwargs: Any,
) -> KernelManager:
    """Start a real kernel process; the caller shuts it down.

    ``env`` is the kernel's whole environment (default: this process's); ``launch`` goes to
    ``start_kernel`` (``cwd``, ``stdout``, ``stderr``); ``manager_kwargs`` go to
    ``KernelManager`` (``transport="ipc"``, ...).
    """
    if encryption:
        manager_kwargs.setdefault("transport_encryption", "required")
    km = KernelManager(kernel_name=kernel_name, **manager_kwargs)
    launch_kwargs: dict[str, Any] = {"extra_arguments": extra_arguments or [], **(launch or {})}
    if env is not None:
        launch_kwargs["env"] = env
    km.start_kernel(**launch_kwargs)
    return km


def new_client(
    km: KernelManager, timeout: float = 60, *, rcvhwm: int | None = None
) -> BlockingKernelClient:
    """A client with a session of its own, channels started and the kernel ready.

    ``parent=km``: jupyter_client then asks the manager whether the kernel process lives.
    A client without a manager judges that from the heartbeat, which counts one reply
    later than 1 s as a dead kernel: under load ``wait_for_ready`` would raise "Kernel died
    before replying to kernel_info" for a kernel that is starting. The session is still the
    client's own, not the manager's. ``rcvhwm``: its sockets' ``RCVHWM`` (set as its
    context's default before they connect; None: libzmq's).
    """
    kc = BlockingKernelClient(parent=km, connection_file=km.connection_file)
    if rcvhwm is not None:
        kc.context.setsockopt(zmq.RCVHWM, rcvhwm)
    kc.load_connection_file()
    kc.start_channels()
    kc.wait_for_ready(timeout=timeout)
    return kc


def unbounded_client(km: KernelManager, timeout: float = 60) -> BlockingKernelClient:
    """:func:`new_client` whose sockets take every message the kernel sends into memory,
    read or not (``RCVHWM`` 0).

    For a reading client beside a subscriber that never reads, under a short send timeout:
    the client's libzmq thread empties the kernel's queue for it at once, so the kernel
    never finds it full, however late the test's own thread comes to read (a busy machine
    starved it past 2 s once, and the client was given up too).
    """
    return new_client(km, timeout, rcvhwm=0)


@contextmanager
def running_kernel(
    kernel_name: str = EXT_KERNEL,
    extra_arguments: list[str] | None = None,
    client: Callable[[KernelManager], BlockingKernelClient] | None = None,
    **kwargs: Any,
) -> Iterator[tuple[KernelManager, BlockingKernelClient]]:
    """A started kernel and one ready client; both torn down on exit.

    ``client`` makes the client (default :func:`new_client`; :func:`shell_and_control_client`
    for one that leaves IOPub to a :class:`RawSubscriber`). ``kwargs`` go to
    :func:`start_kernel`.
    """
    km = start_kernel(kernel_name, extra_arguments, **kwargs)
    kc = None
    try:
        kc = (client or new_client)(km)
        yield km, kc
    finally:
        if kc is not None:
            kc.stop_channels()
        km.shutdown_kernel(now=True)


def shell_and_control_client(km: KernelManager) -> BlockingKernelClient:
    """A client that does not subscribe to IOPub, so a raw subscriber can be the only one.

    ``parent=km`` for the same reason as in :func:`new_client`.
    """
    kc = BlockingKernelClient(parent=km, connection_file=km.connection_file)
    kc.load_connection_file()
    kc.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=True)
    # Asked again each second until one is answered: a request sent before the kernel's
    # shell socket was connected is never answered. Under load the answer to one can come
    # after the next was sent (waiting for the newest only would then never end), so the
    # first answer to any of them is the barrier; every request sent after that one is
    # answered too (in order), and those answers are read here, not left for the test.
    deadline = time.monotonic() + 60
    sent: list[str] = []
    pending: list[str] | None = None
    while time.monotonic() < deadline:
        if pending is None:
            sent.append(kc.kernel_info())
        elif not pending:
            return kc
        try:
            reply = kc.get_shell_msg(timeout=1)
        except queue.Empty:
            continue
        answered = reply["parent_header"].get("msg_id")
        if pending is None and answered in sent:
            pending = sent[sent.index(answered) + 1 :]
        elif pending and answered in pending:
            pending.remove(answered)
    raise TimeoutError("no kernel_info_reply in 60 s")


def iopub_stats(kc: BlockingKernelClient) -> dict[str, Any]:
    """The kernel's ``iopub_stats_reply`` content."""
    return control_request(kc, "iopub_stats_request")["content"]


def wait_stats(
    kc: BlockingKernelClient,
    done: Callable[[dict[str, Any]], bool],
    what: str,
    timeout: float = 60,
) -> dict[str, Any]:
    """Ask ``iopub_stats`` until ``done(stats)``; those stats. ``timeout`` is a hang guard.

    A barrier on the kernel's own counters: the IOPub thread gives a subscriber up, or empties
    its backlog, after the cell's reply may already have come.
    """
    return wait_until(lambda: iopub_stats(kc), timeout, what, done=done)
