"""Shared test helpers: real kernels through jupyter_client, each client with its own Session.

Every kernel here is started with ``transport_encryption="required"`` (CurveZMQ on every
socket) unless a test says otherwise. Clients come from the connection file, not
``KernelManager.client()``, so each has its own session id (clients made by one manager
share its Session, hence one DEALER identity, and take each other's replies).

Absence is shown with a barrier, not a quiet period: :func:`iopub_until_barrier` sends a
control request and collects IOPub up to that request's ``idle``. The control thread handles
requests one at a time, so whatever an earlier control request published comes first.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import queue
import secrets
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
from jupyter_client import BlockingKernelClient, KernelManager, localinterfaces
from jupyter_client.session import Session

from ipykernel_ext.endpoints import apply_curve_client, channel_endpoint, curve_keys

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
    **manager_kwargs: Any,
) -> KernelManager:
    """Start a real kernel process; the caller shuts it down.

    ``env`` is the kernel's whole environment (default: this process's);
    ``manager_kwargs`` go to ``KernelManager`` (``transport="ipc"``, ...).
    """
    if encryption:
        manager_kwargs.setdefault("transport_encryption", "required")
    km = KernelManager(kernel_name=kernel_name, **manager_kwargs)
    launch_kwargs: dict[str, Any] = {"extra_arguments": extra_arguments or []}
    if env is not None:
        launch_kwargs["env"] = env
    km.start_kernel(**launch_kwargs)
    return km


def new_client(km: KernelManager, timeout: float = 60) -> BlockingKernelClient:
    """A client with a session of its own, channels started and the kernel ready.

    ``parent=km``: jupyter_client then asks the manager whether the kernel process lives.
    A client without a manager judges that from the heartbeat, which counts one reply
    later than 1 s as a dead kernel: under load ``wait_for_ready`` then raised "Kernel died
    before replying to kernel_info" for a kernel that was starting (seen in 4 of 6 starts
    on 2 loaded cores). The session is still the client's own, not the manager's.
    """
    kc = BlockingKernelClient(parent=km, connection_file=km.connection_file)
    kc.load_connection_file()
    kc.start_channels()
    kc.wait_for_ready(timeout=timeout)
    return kc


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


def control_request(
    kc: BlockingKernelClient,
    msg_type: str,
    content: dict[str, Any] | None = None,
    timeout: float = 30,
) -> dict[str, Any]:
    """Send a control request and return its reply (the whole message)."""
    msg = kc.session.msg(msg_type, {} if content is None else content)
    kc.control_channel.send(msg)
    return get_reply(kc, msg["header"]["msg_id"], "control", timeout)


def get_reply(
    kc: BlockingKernelClient, msg_id: str, channel: str = "shell", timeout: float = 60
) -> dict[str, Any]:
    """The reply to ``msg_id`` on ``channel`` ("shell" or "control"), as ipykernel's tests do.

    Replies to other requests that come first are skipped (a barrier's, the client's own
    kernel_info); raises queue.Empty if none comes within ``timeout`` seconds.
    """
    get = getattr(kc, f"get_{channel}_msg")
    deadline = time.monotonic() + timeout
    while True:
        reply = get(timeout=max(0.01, deadline - time.monotonic()))
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply


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
    deadline = time.monotonic() + timeout
    while not done(stats := iopub_stats(kc)):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not in {timeout} s; last iopub_stats: {stats}")
        time.sleep(0.05)
    return stats


def execute_and_collect(
    kc: BlockingKernelClient,
    code: str,
    timeout: float = 120,
    keep: Callable[[dict[str, Any]], bool] | None = None,
    quiet: float | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run ``code``; return the execute_reply and the IOPub messages of this request.

    Collects until ``status: idle`` for the request; raises TimeoutError if it never comes:
    after ``timeout`` seconds, or (``quiet``, for benchmarks that expect lost idles) once the
    execute_reply has come and no IOPub message has come for ``quiet`` seconds.
    """
    msg_id = kc.execute(code)
    deadline = time.monotonic() + timeout
    messages: list[dict[str, Any]] = []
    reply: dict[str, Any] | None = None
    last = time.monotonic()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no idle status for {code[:60]!r} in {timeout} s")
        wait = remaining if quiet is None else min(remaining, 0.2)
        try:
            msg = kc.get_iopub_msg(timeout=wait)
        except Exception as exc:  # queue.Empty
            if quiet is None:
                raise TimeoutError(f"no idle status for {code[:60]!r} in {timeout} s") from exc
            if reply is None:
                with contextlib.suppress(queue.Empty):
                    candidate = kc.get_shell_msg(timeout=0)
                    if candidate["parent_header"].get("msg_id") == msg_id:
                        reply = candidate
            if reply is not None and time.monotonic() - last > quiet:
                raise TimeoutError(
                    f"no idle for {code[:60]!r}: {quiet} s quiet after its reply"
                ) from None
            continue
        last = time.monotonic()
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if keep is None or keep(msg):
            messages.append(msg)
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    if reply is None:
        reply = get_reply(kc, msg_id, "shell", timeout)
    return reply, messages


def run(kc: BlockingKernelClient, code: str) -> None:
    """Run ``code`` to its idle; fail with its traceback unless it ends ``ok``."""
    reply, messages = execute_and_collect(kc, code)
    errors = [m["content"]["traceback"] for m in messages if m["msg_type"] == "error"]
    assert reply["content"]["status"] == "ok", errors


def iopub_until_barrier(kc: BlockingKernelClient, timeout: float = 30) -> list[dict[str, Any]]:
    """Every IOPub message before the ``idle`` of a barrier control ``kernel_info_request``.

    The barrier's own busy/idle are left out.
    """
    barrier = kc.session.msg("kernel_info_request", {})
    barrier_id = barrier["header"]["msg_id"]
    kc.control_channel.send(barrier)
    deadline = time.monotonic() + timeout
    messages = []
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no idle for the barrier request in {timeout} s")
        msg = kc.get_iopub_msg(timeout=remaining)
        if msg["parent_header"].get("msg_id") != barrier_id:
            messages.append(msg)
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    # Its reply, so the next control_request does not have to skip it.
    while kc.control_channel.get_msg(timeout=timeout)["parent_header"].get("msg_id") != barrier_id:
        pass
    return messages


def wait_iopub(
    kc: BlockingKernelClient,
    matches: Callable[[dict[str, Any]], bool],
    what: str,
    timeout: float = 60,
    seen: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The first IOPub message that ``matches``; every message read is added to ``seen``.

    Raises AssertionError naming ``what`` if none comes within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            msg = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"no IOPub message for {what} in {timeout} s") from None
        if seen is not None:
            seen.append(msg)
        if matches(msg):
            return msg


def is_status(state: str, msg_id: str) -> Callable[[dict[str, Any]], bool]:
    """A predicate for ``wait_iopub``: the ``status: <state>`` whose parent is ``msg_id``."""
    return lambda m: (
        m["msg_type"] == "status"
        and m["parent_header"].get("msg_id") == msg_id
        and m["content"]["execution_state"] == state
    )


def is_idle_for(msg: dict[str, Any], msg_id: str) -> bool:
    """Is ``msg`` (from :meth:`RawSubscriber.recv`: content still packed) the idle of ``msg_id``?"""
    return (
        msg["header"]["msg_type"] == "status"
        and msg["parent_header"].get("msg_id") == msg_id
        and b'"idle"' in bytes(msg["content"])
    )


def evaluate(kc: BlockingKernelClient, expression: str) -> Any:
    """The value of ``expression`` in the kernel (through repr and ast.literal_eval)."""
    import ast

    reply = kc.execute_interactive(
        "", user_expressions={"x": expression}, timeout=60, output_hook=lambda m: None
    )
    result = reply["content"]["user_expressions"]["x"]
    assert result["status"] == "ok", result
    return ast.literal_eval(result["data"]["text/plain"])


#: ipywidgets' control comm: one ``request_states``, one ``update_states`` with every model.
CONTROL_TARGET = "jupyter.widget.control"


def open_control_comm(kc: BlockingKernelClient, version: str = "1.0.0") -> str:
    """Open a ``jupyter.widget.control`` comm as ipywidgets' manager does; its comm_id."""
    comm_id = uuid.uuid4().hex
    kc.shell_channel.send(
        kc.session.msg(
            "comm_open",
            {"comm_id": comm_id, "target_name": CONTROL_TARGET, "data": {}},
            metadata={"version": version},
        )
    )
    return comm_id


def request_states(kc: BlockingKernelClient, comm_id: str) -> str:
    """Send ``request_states`` on a control comm; the request's msg_id."""
    msg = kc.session.msg("comm_msg", {"comm_id": comm_id, "data": {"method": "request_states"}})
    kc.shell_channel.send(msg)
    return msg["header"]["msg_id"]


def is_update_states(comm_id: str) -> Callable[[dict[str, Any]], bool]:
    return lambda m: (
        m["msg_type"] == "comm_msg"
        and m["content"].get("comm_id") == comm_id
        and m["content"]["data"].get("method") == "update_states"
    )


def assert_closed_unanswered(
    kc: BlockingKernelClient, comm_id: str, seen: list[dict[str, Any]], what: str
) -> None:
    """The kernel closes control comm ``comm_id`` (stock's refusal); no update_states on it."""
    wait_iopub(
        kc,
        lambda m: m["msg_type"] == "comm_close" and m["content"].get("comm_id") == comm_id,
        what=what,
        seen=seen,
    )
    assert not any(is_update_states(comm_id)(m) for m in seen)


def fetch_update_states(kc: BlockingKernelClient, timeout: float = 60) -> dict[str, Any]:
    """The whole control-comm exchange as ipywidgets' manager does it (open, ask, close).

    Returns ``states``, ``buffer_paths``, ``buffers`` (bytes) and the IOPub ``msg``.
    """
    comm_id = open_control_comm(kc)
    request_id = request_states(kc, comm_id)
    msg = wait_iopub(kc, is_update_states(comm_id), what="update_states", timeout=timeout)
    assert msg["parent_header"]["msg_id"] == request_id
    kc.shell_channel.send(kc.session.msg("comm_close", {"comm_id": comm_id, "data": {}}))
    data = msg["content"]["data"]
    return {
        "states": data["states"],
        "buffer_paths": data["buffer_paths"],
        "buffers": [bytes(b) for b in msg["buffers"]],
        "msg": msg,
    }


def set_answer_while_busy(kc: BlockingKernelClient, on: bool) -> None:
    """Turn ``ExtKernel.answer_while_busy`` on or off at run time (a cell on the main shell)."""
    msg_id = kc.execute(f"get_ipython().kernel.answer_while_busy = {on!r}")
    wait_iopub(kc, is_status("idle", msg_id), what="the switch cell's idle")
    assert shell_reply(kc, msg_id)["content"]["status"] == "ok"


def fetch_ipywidgets_update_states(
    kc: BlockingKernelClient, via: BlockingKernelClient | None = None
) -> dict[str, Any]:
    """ipywidgets' own ``update_states`` (its handler, not ours), from an idle ExtKernel.

    ``answer_while_busy`` is off for the exchange (``kc`` sets it; ``via`` asks, default
    ``kc``), so the control comm is opened and answered by ipywidgets alone.
    """
    set_answer_while_busy(kc, False)
    try:
        return fetch_update_states(via or kc)
    finally:
        set_answer_while_busy(kc, True)


class BusyCell:
    """A cell that runs until :meth:`release`; its execute request's id is ``msg_id``."""

    def __init__(self, kc: BlockingKernelClient, release_file: Path, msg_id: str) -> None:
        self.kc = kc
        self.release_file = release_file
        self.msg_id = msg_id

    def release(self) -> None:
        self.release_file.touch()


@contextmanager
def busy_cell(kc: BlockingKernelClient, tmp_path: Path, then: str = "") -> Iterator[BusyCell]:
    """Run a cell that prints a marker, runs ``then``, and waits for a file; return once the
    marker is seen."""
    release_file = tmp_path / f"release-{uuid.uuid4().hex}"
    code = (
        f"import os as _os, time as _time\nprint('CELL STARTED', flush=True)\n{then}\n"
        f"while not _os.path.exists({str(release_file)!r}):\n    _time.sleep(0.01)\n"
    )
    msg_id = kc.execute(code)
    wait_iopub(
        kc,
        lambda m: (
            m["msg_type"] == "stream"
            and m["parent_header"].get("msg_id") == msg_id
            and "CELL STARTED" in m["content"]["text"]
        ),
        what="the cell's start marker",
    )
    cell = BusyCell(kc, release_file, msg_id)
    try:
        yield cell
    finally:
        cell.release()
        wait_iopub(
            kc,
            is_status("idle", msg_id),
            what="the cell's idle",
        )


def shell_reply(kc: BlockingKernelClient, msg_id: str, timeout: float = 60) -> dict[str, Any]:
    """The shell reply to ``msg_id`` (see :func:`get_reply`)."""
    return get_reply(kc, msg_id, "shell", timeout)


def send(kc: BlockingKernelClient, msg_type: str, content: dict[str, Any], **kw: Any) -> str:
    msg = kc.session.msg(msg_type, content, **kw)
    kc.shell_channel.send(msg)
    return msg["header"]["msg_id"]


def drain_iopub(kc: BlockingKernelClient, quiet: float = 0.5) -> list[dict[str, Any]]:
    """Every IOPub message until none arrives for ``quiet`` seconds: a quiet period, for
    benchmarks. A test empties the queue, or shows that something was *not* sent, with
    :func:`iopub_until_barrier`."""
    messages = []
    while True:
        try:
            messages.append(kc.get_iopub_msg(timeout=quiet))
        except queue.Empty:
            return messages


def count_types(messages: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for msg in messages:
        counts[msg["msg_type"]] = counts.get(msg["msg_type"], 0) + 1
    return counts


class RawSubscriber:
    """A bare ``zmq.SUB`` on a kernel's IOPub, with the kernel's CurveZMQ keys if it has any.

    ``rcvhwm`` and ``rcvbuf`` (0: the OS default) are set before connect (libzmq sizes a
    pipe when it is made), so a subscriber that stops reading holds at most that much on its
    side. The constructor returns once the kernel has the subscription (its
    ``iopub_welcome`` came). Used by the IOPub tests and ``benchmarks/iopub_stall.py``.
    """

    def __init__(self, km: KernelManager, rcvhwm: int = 1, rcvbuf: int = 4096) -> None:
        self.session = Session(key=km.session.key, signature_scheme=km.session.signature_scheme)
        self.socket = zmq.Context.instance().socket(zmq.SUB)
        self.socket.linger = 0
        self.socket.rcvhwm = rcvhwm
        if rcvbuf:
            self.socket.rcvbuf = rcvbuf
        info = km.get_connection_info()
        apply_curve_client(self.socket, curve_keys(info))
        self.socket.subscribe(b"")
        # XPUB passes on only the first subscription to a topic, so b"" from a second client
        # brings no iopub_welcome; a topic of our own does, and proves both are in place.
        self.token = os.urandom(8).hex().encode()
        self.socket.subscribe(self.token)
        self.socket.connect(channel_endpoint(info, "iopub"))
        deadline = time.monotonic() + 30
        while True:
            msg = self.recv(timeout=max(0.0, deadline - time.monotonic()))
            if msg is None:
                raise TimeoutError("no iopub_welcome for a raw subscriber in 30 s")
            if msg["header"]["msg_type"] == "iopub_welcome":
                break

    def recv(self, timeout: float) -> dict[str, Any] | None:
        """One message (content left packed), or None after ``timeout`` seconds."""
        if not self.socket.poll(int(timeout * 1000)):
            return None
        _idents, frames = self.session.feed_identities(self.socket.recv_multipart())
        return self.session.deserialize(frames, content=False)

    def drain(self, quiet: float = 2) -> int:
        """Read what this subscriber holds, until nothing comes for ``quiet`` s; how many.

        A quiet period: for benchmarks. A test counts with :meth:`read_to_barrier`.
        """
        held = 0
        while self.recv(timeout=quiet) is not None:
            held += 1
        return held

    def read_to_barrier(
        self, kc: BlockingKernelClient, timeout: float = 120, resend: float = 1.0
    ) -> list[dict[str, Any]]:
        """Every message before the ``idle`` of a barrier control ``kernel_info_request``.

        Whatever the kernel handed to its socket before the barrier comes first (one socket,
        in order), so this is all this subscriber holds or will get of it. A subscriber whose
        queue is full (a stalled one, one given up) loses the barrier's own messages, so a new
        barrier is sent whenever nothing came for ``resend`` s: that only paces the barriers,
        the end is still a barrier's idle. The barriers' busy/idle are left out; their
        control replies are left for :func:`get_reply` to skip. ``timeout`` is a hang guard.
        """
        barriers: set[str] = set()

        def send_barrier() -> None:
            barrier = kc.session.msg("kernel_info_request", {})
            barriers.add(barrier["header"]["msg_id"])
            kc.control_channel.send(barrier)

        send_barrier()
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(
                    f"no barrier's idle reached the subscriber in {timeout} s "
                    f"({len(barriers)} barriers sent, {len(seen)} other messages read)"
                )
            msg = self.recv(timeout=min(resend, remaining))
            if msg is None:
                send_barrier()
            elif msg["parent_header"].get("msg_id") not in barriers:
                seen.append(msg)
            elif msg["header"]["msg_type"] == "status" and b'"idle"' in bytes(msg["content"]):
                return seen

    def read_until(
        self, done: Callable[[dict[str, Any]], bool], timeout: float
    ) -> list[dict[str, Any]]:
        """Messages up to and including the first for which ``done`` is true.

        Stops early, without such a message, when none comes within what is left of
        ``timeout`` s: the caller's assertions then say what was missing.
        """
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while (msg := self.recv(timeout=max(0.0, deadline - time.monotonic()))) is not None:
            seen.append(msg)
            if done(msg):
                break
        return seen

    def close(self) -> None:
        self.socket.close(linger=0)

    def __enter__(self) -> RawSubscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- a network namespace behind a veth pair (the SSH hop, the rate-limited link) ----------


def can_make_namespaces() -> bool:
    """Can :func:`veth_namespace` work here (see :func:`namespaces_missing`)?"""
    return namespaces_missing() is None


@functools.cache
def namespaces_missing(shaping: bool = False) -> str | None:
    """Why :func:`veth_namespace` (and, with ``shaping``, :func:`limit_rate` on it) cannot
    work on this machine, or None; for a test to skip with.

    Root and iproute2 are not enough (a container may lack the capability, a kernel the tbf
    qdisc), so a namespace and veth pair are made and removed once, for real.
    """
    if os.geteuid() != 0:
        return "a network namespace needs root"
    for tool in ("ip", "tc") if shaping else ("ip",):
        if shutil.which(tool) is None:
            return f"iproute2's {tool!r} is not installed (apt-get install iproute2)"
    try:
        with veth_namespace() as net:
            if shaping:
                limit_rate(net.host_if, 1_000_000)
    except subprocess.CalledProcessError as exc:
        detail = (exc.stderr or b"").decode(errors="replace").strip()
        return f"cannot make a network namespace and veth pair here: {exc.cmd}: {detail}"
    except OSError as exc:
        return f"cannot make a network namespace and veth pair here: {exc}"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _free_subnet() -> str:
    """A 10.213.N.0/30 no interface of this machine uses (the test's own wire)."""
    in_use = subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True).stdout
    for n in secrets.SystemRandom().sample(range(256), 256):
        if f"10.213.{n}." not in in_use:
            return f"10.213.{n}"
    raise RuntimeError("no free 10.213.N.0/30 subnet")


@dataclass
class VethNamespace:
    """A network namespace joined to this one by a veth pair on a private /30.

    ``host_ip`` is on ``host_if`` (this side), ``remote_ip`` on ``remote_if`` (inside). Run a
    command inside with ``[*exec_prefix, ...]``. Nothing else is reachable from inside: its
    default route is the veth pair, and this side routes nowhere new.
    """

    namespace: str
    host_if: str
    remote_if: str
    host_ip: str
    remote_ip: str

    @property
    def exec_prefix(self) -> tuple[str, ...]:
        return ("ip", "netns", "exec", self.namespace)

    def pids(self) -> set[int]:
        out = subprocess.run(
            ["ip", "netns", "pids", self.namespace], capture_output=True, text=True, check=True
        ).stdout
        return {int(pid) for pid in out.split()}


@contextmanager
def veth_namespace() -> Iterator[VethNamespace]:
    """Make a namespace and veth pair; on exit kill what runs inside and remove both."""
    namespace = f"ipkx{secrets.token_hex(3)}"
    subnet = _free_subnet()
    net = VethNamespace(namespace, f"{namespace}h", f"{namespace}r", f"{subnet}.1", f"{subnet}.2")
    _ip("netns", "add", namespace)
    try:
        _ip("link", "add", net.host_if, "type", "veth", "peer", "name", net.remote_if)
        _ip("link", "set", net.remote_if, "netns", namespace)
        _ip("addr", "add", f"{net.host_ip}/30", "dev", net.host_if)
        _ip("link", "set", net.host_if, "up")
        # jupyter_client lists this machine's addresses once per process and will not start
        # a kernel on any other (LocalProvisioner): have it list them again, with host_ip.
        localinterfaces._load_ips_psutil()
        _ip("-n", namespace, "addr", "add", f"{net.remote_ip}/30", "dev", net.remote_if)
        _ip("-n", namespace, "link", "set", net.remote_if, "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        # A process inside reaches this machine's own addresses (a kernel's, a provisioner's
        # response address) through the veth pair.
        _ip("-n", namespace, "route", "add", "default", "via", net.host_ip)
        yield net
    finally:
        # Everything left inside was started by the caller: sshd, kernels, readers.
        for pid in net.pids() if _namespace_exists(namespace) else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        subprocess.run(["ip", "link", "del", net.host_if], capture_output=True)


def _namespace_exists(namespace: str) -> bool:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return any(line.split()[0] == namespace for line in out.splitlines() if line.strip())


def limit_rate(dev: str, rate_bit: int, burst_bytes: int = 16_000, latency_ms: int = 500) -> None:
    """Shape what leaves ``dev`` to ``rate_bit`` bit/s with tbf (a slow link, for real).

    ``latency_ms`` bounds tbf's own queue: the sender's TCP then feels the limit quickly
    instead of filling a big qdisc buffer first.
    """
    subprocess.run(
        [
            "tc",
            "qdisc",
            "replace",
            "dev",
            dev,
            "root",
            "tbf",
            "rate",
            f"{rate_bit}bit",
            "burst",
            str(burst_bytes),
            "latency",
            f"{latency_ms}ms",
        ],
        check=True,
        capture_output=True,
    )
