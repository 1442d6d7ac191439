"""What comm_echo costs: comm_msg round trips with echo on and off, next to stock ipykernel.

A client opens a comm to a target whose kernel-side handler answers every ``comm_msg`` with a
small ``comm_msg``, then sends N ``comm_msg`` and waits for all of them to finish. A round
trip is finished when the request's ``status: idle`` arrives on IOPub (after its echo, if any,
and the handler's reply). Three kernels configurations, CurveZMQ on every socket:

* ``stock``: ipykernel (kernelspec ``python3``), which has no echo;
* ``ext echo off`` / ``ext echo on``: one ipykernel_ext kernel (``python3-ext``), switched at
  run time (``kernel.echo_enabled``) between the trials, so both columns come from
  the same process.

Two scenarios: 10000 small messages (``{"i": n}``, no buffers) and 200 messages each carrying a
1 MB buffer (past ``ExtKernel.comm_echo_max_buffer_bytes``, 64 KiB: the echo tells the other
frontends the message was sent, ``comm_echo_omitted`` in its metadata, without the megabyte).

A third, through a real jupyter_server with two tabs (websockets): tab 1 uploads a file (50 MB;
``--upload-size``) into an ipywidgets ``FileUpload`` as ipywidgets 8's view sends it (a
``comm_msg`` ``update`` with ``state.value`` and the bytes in a buffer at
``value.0.content``), ``--trials`` times. Stock: stock ipykernel behind stock's websocket
connection; ours: ipykernel_ext behind ``SharedChannelsConnection`` (the installed extension).
Figures: the kernel's CPU for the upload (median), the bytes the kernel publishes on IOPub for
it (what one raw subscriber reads; stock's server subscribes once per tab, ours once) and the
bytes each tab receives (v1 frames), all up to the upload's ``status: idle``. Both servers take
websocket messages of up to 128 MiB (tornado's default is 10 MiB), as a user who uploads big
files must configure.

Pipelining: the client keeps a window of requests in flight (100 small ones, 4 large ones):
each time a round trip finishes it sends the next. Sending all 10000 at once would not measure
anything useful: a single-threaded client blocked in send (shell queues full) stops reading
IOPub, and stock ipykernel's IOPub then drops everything past its 1000-message queue. A window
of 100 keeps the kernel busy all the time (there is always a request waiting on shell, so the
figure is the kernel's throughput, not the network latency) while the IOPub backlog stays at a
few hundred messages. The client is lean but honest: raw pyzmq sockets from the connection
file, every received message's signature verified and its header unpacked (Session.deserialize
with content=False), nothing else.

Figures (round trips): median over the trials of the time for all N round trips; the
``on/off`` ratio (the target: at most 1.15 for small messages) and the echo's cost per echoed
message,
``(median on - median off) / N`` in microseconds, with the kernel process's own share (its
CPU time, all threads, from psutil). ``lost`` counts missing replies plus missing
(or unexpected) echoes plus round trips that never finished; it must be 0.

    python -m benchmarks comm_echo            # 7 trials of each
    python -m benchmarks comm_echo --quick    # 5 trials, fewer large messages
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import psutil
import zmq
from jupyter_client import BlockingKernelClient, KernelManager

from benchmarks.trials import EXT, STOCK, alternate, fmt, kernel, median, print_table, ratio
from harness.kernel_websocket import KernelWebsocket, stream_text
from harness.kernels import shell_and_control_client
from harness.server import JupyterServer
from harness.ws_protocol import encode_message
from ipykernel_ext.endpoints import apply_curve_client, channel_endpoint, client_session, curve_keys

TRIALS, QUICK_TRIALS = 7, 5

#: The kernel-side target: answers every comm_msg with a small comm_msg.
SETUP = r"""
def _bench_target(comm, open_msg):
    @comm.on_msg
    def _reply(msg):
        comm.send({"i": msg["content"]["data"]["i"]})

get_ipython().kernel.comm_manager.register_target("bench", _bench_target)
"""


def is_idle(msg: dict[str, Any]) -> bool:
    """A ``status: idle`` (content left packed: a status content holds nothing else)."""
    return msg["msg_type"] == "status" and b'"idle"' in bytes(msg["content"])


class Client:
    """One frontend: a shell DEALER and an IOPub SUB with its own Session, single-threaded."""

    def __init__(self, km: KernelManager) -> None:
        kc = BlockingKernelClient(connection_file=km.connection_file)
        kc.load_connection_file()
        self.session = kc.session
        self.shell = kc.connect_shell(identity=self.session.bsession)
        self.iopub = kc.connect_iopub()
        self.poller = zmq.Poller()
        self.poller.register(self.iopub, zmq.POLLIN)
        self._ready()

    def close(self) -> None:
        self.shell.close(linger=0)
        self.iopub.close(linger=0)

    def send(self, msg_type: str, content: dict[str, Any], buffers: list[Any] | None = None) -> str:
        msg = self.session.send(self.shell, msg_type, content, buffers=buffers)
        assert msg is not None
        return msg["header"]["msg_id"]

    def recv(self, timeout_s: float) -> dict[str, Any] | None:
        """The next IOPub message (signature checked, header unpacked), or None on timeout."""
        if not self.poller.poll(int(timeout_s * 1000)):
            return None
        frames = self.iopub.recv_multipart(copy=False)
        _, frames = self.session.feed_identities(frames, copy=False)
        return self.session.deserialize(frames, content=False, copy=False)

    def wait_idle(self, msg_id: str, timeout_s: float = 60) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        seen = []
        while time.monotonic() < deadline:
            msg = self.recv(deadline - time.monotonic())
            if msg is None or msg["parent_header"].get("msg_id") != msg_id:
                continue
            seen.append(msg)
            if is_idle(msg):
                return seen
        raise TimeoutError(f"no idle for {msg_id}")

    def execute(self, code: str) -> None:
        msg_id = self.send("execute_request", {"code": code, "silent": False})
        for msg in self.wait_idle(msg_id):
            if msg["msg_type"] == "error":
                raise RuntimeError(f"{code!r} failed in the kernel")

    def _ready(self, timeout_s: float = 60) -> None:
        # A SUB socket's subscription takes a moment to reach the kernel: repeat a request
        # until its status shows up on IOPub.
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg_id = self.send("kernel_info_request", {})
            end = time.monotonic() + 1
            while time.monotonic() < end:
                msg = self.recv(end - time.monotonic())
                if msg is not None and msg["parent_header"].get("msg_id") == msg_id:
                    if not is_idle(msg):
                        self.wait_idle(msg_id)
                    return
        raise TimeoutError("kernel not ready")


@dataclass
class Run:
    seconds: float
    kernel_cpu: float
    echoes: int
    replies: int
    unfinished: int


def cpu_seconds(process: psutil.Process) -> float:
    """User + system CPU time of the kernel process, all its threads."""
    times = process.cpu_times()
    return times.user + times.system


def round_trips(
    client: Client,
    comm_id: str,
    n: int,
    window: int,
    buffers: list[Any],
    kernel: psutil.Process,
    timeout_s: float = 30,
) -> Run:
    """Send ``n`` comm_msg with at most ``window`` in flight; wait until all are idle."""
    in_flight: set[str] = set()
    sent = echoes = replies = 0
    cpu_start = cpu_seconds(kernel)
    start = time.perf_counter()
    while sent < n or in_flight:
        while sent < n and len(in_flight) < window:
            in_flight.add(
                client.send("comm_msg", {"comm_id": comm_id, "data": {"i": sent}}, buffers=buffers)
            )
            sent += 1
        msg = client.recv(timeout_s)
        if msg is None:
            break  # the rest never finished: counted as lost
        parent = msg["parent_header"].get("msg_id")
        if parent not in in_flight:
            continue
        kind = msg["msg_type"]
        if kind == "comm_echo":
            echoes += 1
        elif kind == "comm_msg":
            replies += 1
        elif is_idle(msg):
            in_flight.discard(parent)
    elapsed = time.perf_counter() - start
    kernel_cpu = cpu_seconds(kernel) - cpu_start
    return Run(elapsed, kernel_cpu, echoes, replies, unfinished=len(in_flight) + (n - sent))


@dataclass
class Config:
    label: str
    client: Client
    comm_id: str
    kernel: psutil.Process
    echo: bool
    prepare: Callable[[], None]


@contextmanager
def echo_kernel(name: str) -> Iterator[tuple[Client, str, psutil.Process]]:
    """A kernel with the bench target and a comm open to it: its raw client, comm, process.

    The harness's own client asks on shell and control only, so the raw client is the one
    IOPub reader (and the one whose time is measured).
    """
    with kernel(name, client=shell_and_control_client) as (km, _), closing(Client(km)) as client:
        client.execute(SETUP)
        comm_id = uuid.uuid4().hex
        client.wait_idle(
            client.send("comm_open", {"comm_id": comm_id, "target_name": "bench", "data": {}})
        )
        yield client, comm_id, psutil.Process(km.provisioner.pid)  # type: ignore[union-attr]  # a started LocalProvisioner's; the base has no pid


def measure(
    configs: list[Config], n: int, window: int, buffers: list[Any], trials: int
) -> dict[str, list[Run]]:
    runs: dict[str, list[Run]] = {c.label: [] for c in configs}
    for config in configs:  # warm-up, not counted
        config.prepare()
        round_trips(config.client, config.comm_id, max(1, n // 10), window, buffers, config.kernel)
    # Each trial starts with another column, so a slow phase of the machine hits every one.
    for _, config in alternate(trials, configs, rotate=True):
        config.prepare()
        runs[config.label].append(
            round_trips(config.client, config.comm_id, n, window, buffers, config.kernel)
        )
    return runs


def lost(run: Run, n: int, echo: bool) -> int:
    return (n - run.replies) + abs((n if echo else 0) - run.echoes) + run.unfinished


def per_message_us(on: float | None, off: float | None, n: int) -> float | None:
    """``(on - off) / n`` in microseconds: what each echoed message added."""
    return None if on is None or off is None else (on - off) / n * 1e6


def report(title: str, configs: list[Config], runs: dict[str, list[Run]], n: int) -> None:
    print(f"\n{title}: {n} round trips, median of {len(next(iter(runs.values())))} trials")
    seconds = {c.label: median(r.seconds for r in runs[c.label]) for c in configs}
    cpus = {c.label: median(r.kernel_cpu for r in runs[c.label]) for c in configs}
    rows = []
    for c in configs:
        times = [r.seconds for r in runs[c.label]]
        mid = seconds[c.label]
        rows.append(
            [
                c.label,
                fmt(mid, 3),
                fmt(None if mid is None else mid / n * 1e6, 1),
                fmt(min(times), 3),
                fmt(max(times), 3),
                fmt(cpus[c.label], 3),
                sum(lost(r, n, c.echo) for r in runs[c.label]),
            ]
        )
    header = ["kernel", "median s", "us/round trip", "min s", "max s", "kernel CPU s", "lost"]
    print_table(header, rows)
    on, off, stock = seconds["ext echo on"], seconds["ext echo off"], seconds["stock"]
    print(
        f"ratio echo on / echo off: {fmt(ratio(on, off), 3)}   "
        f"echo on / stock: {fmt(ratio(on, stock), 3)}   "
        f"echo off / stock: {fmt(ratio(off, stock), 3)}"
    )
    cpu_on, cpu_off = cpus["ext echo on"], cpus["ext echo off"]
    print(f"kernel CPU echo on / echo off: {fmt(ratio(cpu_on, cpu_off), 3)}")
    print(
        f"echo cost per echoed message: {fmt(per_message_us(on, off, n), 1)} us of wall time "
        f"(kernel and client), {fmt(per_message_us(cpu_on, cpu_off, n), 1)} us of kernel CPU"
    )


# --- a FileUpload through a real jupyter_server, two tabs -----------------------------------

#: Tornado's websocket limit for both servers: a 50 MB upload is one websocket message.
MAX_WS_MESSAGE = 128 * 1024 * 1024

UPLOAD_SETUP = "import os, ipywidgets as w\nup = w.FileUpload()\nprint(os.getpid(), up.model_id)"


@dataclass
class Upload:
    kernel_cpu: float
    iopub_bytes: int
    tab_bytes: list[int]
    kernel_got: int


class IOPubCounter:
    """A raw SUB on the kernel's IOPub (CurveZMQ keys from the server's connection file) that
    counts the bytes of every message up to the ``status: idle`` of a given request."""

    def __init__(self, info: dict[str, Any]) -> None:
        self.session = client_session(info)
        context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self.socket = context.socket(zmq.SUB)
        self.socket.linger = 0
        apply_curve_client(self.socket, curve_keys(info))
        self.socket.subscribe(b"")
        self.socket.connect(channel_endpoint(info, "iopub"))

    def close(self) -> None:
        self.socket.close(linger=0)

    def bytes_until_idle(self, msg_id: str | None, timeout_s: float = 120) -> int:
        """Bytes of the messages read until the idle of ``msg_id`` (None: until anything)."""
        total = 0
        while self.socket.poll(int(timeout_s * 1000)):
            frames = self.socket.recv_multipart(copy=False)
            total += sum(len(f) for f in frames)
            _, parts = self.session.feed_identities(frames, copy=False)
            msg = self.session.deserialize(parts, content=False, copy=False)
            if msg_id is None or (msg["parent_header"].get("msg_id") == msg_id and is_idle(msg)):
                return total
        raise TimeoutError(f"no idle for {msg_id} on IOPub")


def tab_bytes_until_idle(tab: KernelWebsocket, msg_id: str, timeout_s: float = 120) -> int:
    """Bytes of the v1 frames the tab receives until the idle of ``msg_id``."""
    total = 0
    while True:
        msg = tab.recv(timeout_s)
        total += len(encode_message(msg["channel"], msg))
        parent = msg["parent_header"].get("msg_id")
        state = msg["content"].get("execution_state")
        if parent == msg_id and msg["msg_type"] == "status" and state == "idle":
            return total


@contextmanager
def upload_tabs(
    ours: bool,
) -> Iterator[tuple[KernelWebsocket, KernelWebsocket, str, psutil.Process, IOPubCounter]]:
    """A server (stock's, or ours) with a kernel and two tabs; tab 1 made a FileUpload."""
    tornado = f"--ServerApp.tornado_settings={{'websocket_max_message_size': {MAX_WS_MESSAGE}}}"
    with JupyterServer(ipykernel_ext=ours, extra_args=[tornado]) as server:
        kernel_id = server.start_kernel(EXT if ours else STOCK)
        with (
            KernelWebsocket(server, kernel_id) as tab1,
            KernelWebsocket(server, kernel_id) as tab2,
            closing(IOPubCounter(server.connection_info(kernel_id))) as counter,
        ):
            _, messages = tab1.run(UPLOAD_SETUP)
            pid, model_id = stream_text(messages).split()
            # The counter's subscription is live once it reads something a request caused.
            while True:
                tab1.run("pass")
                try:
                    counter.bytes_until_idle(None, timeout_s=1)
                    break
                except TimeoutError:
                    continue
            tab2.run("pass")  # both tabs past the setup
            while counter.socket.poll(0):
                counter.socket.recv_multipart()
            yield tab1, tab2, model_id, psutil.Process(int(pid)), counter


def upload_once(
    tabs: tuple[KernelWebsocket, KernelWebsocket, str, psutil.Process, IOPubCounter], data: bytes
) -> Upload:
    tab1, tab2, model_id, process, counter = tabs
    entry = {"name": "upload.bin", "type": "", "size": len(data), "last_modified": 1.7e12}
    update = {
        "method": "update",
        "state": {"value": [entry], "error": ""},
        "buffer_paths": [["value", 0, "content"]],
    }
    cpu_start = cpu_seconds(process)
    sent = tab1.send("shell", "comm_msg", {"comm_id": model_id, "data": update}, buffers=[data])
    msg_id = sent["header"]["msg_id"]
    tab_bytes = [tab_bytes_until_idle(tab, msg_id) for tab in (tab1, tab2)]
    iopub_bytes = counter.bytes_until_idle(msg_id)
    kernel_cpu = cpu_seconds(process) - cpu_start
    _, messages = tab1.run("print(len(up.value[0].content))")
    return Upload(kernel_cpu, iopub_bytes, tab_bytes, int(stream_text(messages)))


def upload(size: int, trials: int) -> dict[str, list[Upload]]:
    data = os.urandom(size)
    runs: dict[str, list[Upload]] = {}
    for label, ours in (("stock", False), ("ours", True)):
        with upload_tabs(ours) as tabs:
            upload_once(tabs, data)  # warm-up, not counted
            runs[label] = [upload_once(tabs, data) for _ in range(trials)]
    return runs


def report_upload(runs: dict[str, list[Upload]], size: int) -> None:
    print(f"\nFileUpload of {size / 1e6:g} MB, two tabs, median of {len(runs['stock'])} uploads")
    rows = []
    for label, uploads in runs.items():
        cpus = [u.kernel_cpu for u in uploads]
        last = uploads[-1]
        rows.append(
            [
                label,
                fmt(median(cpus), 3),
                fmt(min(cpus), 3),
                fmt(max(cpus), 3),
                f"{last.iopub_bytes:,}",
                f"{last.tab_bytes[0]:,}",
                f"{last.tab_bytes[1]:,}",
                "yes" if all(u.kernel_got == size for u in uploads) else "NO",
            ]
        )
    header = ["server+kernel", "kernel CPU s", "min", "max", "IOPub bytes", "tab 1 bytes"]
    print_table([*header, "tab 2 bytes", "kernel got the file"], rows)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=10_000, help="small round trips per trial")
    parser.add_argument("--window", type=int, default=100, help="small requests in flight")
    parser.add_argument(
        "--big-n", type=int, help="1 MB round trips per trial (default 200; 50 with --quick)"
    )
    parser.add_argument("--big-window", type=int, default=4, help="1 MB requests in flight")
    parser.add_argument("--big-size", type=int, default=1_000_000, help="buffer size, bytes")
    parser.add_argument(
        "--upload-size", type=int, default=50_000_000, help="FileUpload's file, bytes"
    )
    parser.add_argument(
        "--no-upload", action="store_true", help="skip the FileUpload through jupyter_server"
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    big_n = args.big_n or (50 if args.quick else 200)
    with echo_kernel(STOCK) as stock, echo_kernel(EXT) as (ext_client, ext_comm, ext_proc):

        def switch(on: bool) -> Callable[[], None]:
            return lambda: ext_client.execute(f"get_ipython().kernel.echo_enabled = {on}")

        configs = [
            Config("stock", *stock, False, lambda: None),
            Config("ext echo off", ext_client, ext_comm, ext_proc, False, switch(False)),
            Config("ext echo on", ext_client, ext_comm, ext_proc, True, switch(True)),
        ]
        print("comm_msg round trips, CurveZMQ, one client; the kernel replies with a comm_msg")
        small = measure(configs, args.n, args.window, [], args.trials)
        report(f"small messages (window {args.window})", configs, small, args.n)
        big = measure(configs, big_n, args.big_window, [b"\xab" * args.big_size], args.trials)
        report(
            f"{args.big_size / 1e6:g} MB buffer each (window {args.big_window})",
            configs,
            big,
            big_n,
        )
    results: dict[str, Any] = {
        "small": {"n": args.n, "window": args.window, "runs": as_json(small)},
        "big": {"n": big_n, "window": args.big_window, "size": args.big_size, "runs": as_json(big)},
    }
    if not args.no_upload:
        uploads = upload(args.upload_size, args.trials)
        report_upload(uploads, args.upload_size)
        results["upload"] = {"size": args.upload_size, "runs": as_json(uploads)}
    return results


def as_json(
    runs: dict[str, list[Run]] | dict[str, list[Upload]],
) -> dict[str, list[dict[str, Any]]]:
    return {label: [asdict(r) for r in rs] for label, rs in runs.items()}


if __name__ == "__main__":  # python benchmarks/NAME.py: through the runner
    from benchmarks.runner import script

    script(__file__)
