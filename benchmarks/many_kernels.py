"""What one client process holds to drive many kernels, and how fast it asks them all.

N kernels (default 20), CurveZMQ on every socket. One client process drives all of them over
shell and control, three ways:

* ``jupyter_client``: a ``BlockingKernelClient`` per kernel with the shell and control channels
  started (a DEALER per kernel per channel; each client makes its own zmq Context, as
  jupyter_client does by default);
* ``jupyter_client, one Context``: the same, all clients sharing one zmq Context;
* ``RouterClient``: :class:`ipykernel_ext.client.router.RouterClient`, one ROUTER per channel
  for all kernels, which needs kernels started with ``--router-identity=endpoint``.

The jupyter_client client runs against N stock ipykernel kernels (``python3``) and against N
ipykernel_ext ones (``python3-ext --router-identity=endpoint``), all running at once; the
RouterClient can only run against the latter (stock kernels' routing ids are random, there is
nothing to address).

Resources are what the client process gains when the clients are created and connected
(after one round trip to every kernel): open file descriptors from ``/proc/self/fd`` (split
into network sockets, eventfds, epoll fds and the rest), threads, ESTABLISHED TCP
connections (psutil), and libzmq sockets and contexts still open (pyzmq's per-Context socket
registry). Time: ``kernel_info_request`` sent to every kernel, then every reply awaited; the
median over the trials (the four variants take turns, trial by trial, so load from elsewhere
on the machine hits them alike), and the client process's CPU time for it (all its
threads, libzmq's I/O threads included). ``lost``: replies that never came (must be 0).

    python -m benchmarks many_kernels            # 20 kernels, 15 trials
    python -m benchmarks many_kernels --quick    # 5 kernels, 5 trials
    python -m benchmarks many_kernels --quick --kernels 2
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil
import zmq
from jupyter_client import BlockingKernelClient, KernelManager

from benchmarks.trials import EXT, STOCK, print_table
from harness.kernels import start_kernel
from ipykernel_ext.client.router import RouterClient

TRIALS, QUICK_TRIALS = 15, 5
FLAG = "--router-identity=endpoint"
REPLY_TIMEOUT = 60.0


def fd_census() -> dict[str, int]:
    """Open file descriptors of this process by kind."""
    kinds = {"sockets": 0, "eventfd": 0, "epoll": 0, "other": 0}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the fd listdir itself used, closed again
            continue
        if target.startswith("socket:"):
            kinds["sockets"] += 1
        elif "eventfd" in target:
            kinds["eventfd"] += 1
        elif "eventpoll" in target:
            kinds["epoll"] += 1
        else:
            kinds["other"] += 1
    kinds["total"] = sum(kinds.values())
    return kinds


def census() -> dict[str, int]:
    proc = psutil.Process()
    counts = fd_census()
    counts["threads"] = len(os.listdir("/proc/self/task"))
    counts["tcp"] = sum(c.status == psutil.CONN_ESTABLISHED for c in proc.net_connections("tcp"))
    return counts


def open_zmq(contexts: list[zmq.Context[Any]]) -> tuple[int, int]:
    """(open libzmq sockets, open contexts) among ``contexts``."""
    live = [c for c in {id(c): c for c in contexts}.values() if not c.closed]
    return sum(sum(not s.closed for s in list(c._sockets)) for c in live), len(live)


class Variant:
    """A way of driving all the kernels: create, ask all once, close."""

    name: str

    def round_trip(self) -> tuple[float, int]:
        """Seconds for kernel_info to every kernel, and how many replies never came."""
        raise NotImplementedError

    def contexts(self) -> list[zmq.Context[Any]]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class DealerClients(Variant):
    """A jupyter_client BlockingKernelClient per kernel, shell and control channels."""

    def __init__(self, kms: list[KernelManager], shared: zmq.Context[Any] | None) -> None:
        self.name = "jupyter_client, one Context" if shared is not None else "jupyter_client"
        self.clients: list[BlockingKernelClient] = []
        for km in kms:
            kwargs = {"context": shared} if shared is not None else {}
            kc = BlockingKernelClient(connection_file=km.connection_file, **kwargs)
            kc.load_connection_file()
            kc.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=True)
            self.clients.append(kc)

    def round_trip(self) -> tuple[float, int]:
        start = time.perf_counter()
        msg_ids = [kc.kernel_info() for kc in self.clients]
        lost = 0
        for kc, msg_id in zip(self.clients, msg_ids, strict=True):
            deadline = time.monotonic() + REPLY_TIMEOUT
            try:
                while (
                    kc.get_shell_msg(timeout=deadline - time.monotonic())["parent_header"].get(
                        "msg_id"
                    )
                    != msg_id
                ):
                    pass
            except Exception:  # queue.Empty: no reply in time
                lost += 1
        return time.perf_counter() - start, lost

    def contexts(self) -> list[zmq.Context[Any]]:
        return [kc.context for kc in self.clients]

    def close(self) -> None:
        for kc in self.clients:
            kc.stop_channels()
            if kc._created_context:
                kc.context.destroy(linger=0)
        self.clients.clear()


class RouterClients(Variant):
    """One RouterClient for all kernels."""

    name = "RouterClient"

    def __init__(self, kms: list[KernelManager]) -> None:
        self.client = RouterClient(connect_timeout=REPLY_TIMEOUT)
        self.ids = [self.client.add_kernel(km.connection_file) for km in kms]

    def round_trip(self) -> tuple[float, int]:
        start = time.perf_counter()
        try:
            replies = self.client.gather(
                self.ids, "shell", "kernel_info_request", timeout=REPLY_TIMEOUT
            )
        except TimeoutError:
            return time.perf_counter() - start, len(self.ids)
        return time.perf_counter() - start, len(self.ids) - len(replies)

    def contexts(self) -> list[zmq.Context[Any]]:
        return [self.client.context]

    def close(self) -> None:
        self.client.close(linger=0)


@dataclass
class Row:
    kernel: str
    name: str
    resources: dict[str, int]
    times: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    lost: int = 0


def start_kernels(kernel_name: str, n: int, extra: list[str]) -> list[KernelManager]:
    """Start ``n`` kernels and return once every one has answered."""
    kms: list[KernelManager] = []
    try:
        for _ in range(n):
            kms.append(start_kernel(kernel_name, extra))
        # Until a kernel listens, its manager's own control socket is still reconnecting:
        # wait, so that connection is not counted as the first client's.
        probe = DealerClients(kms, None)
        _, lost = probe.round_trip()
        probe.close()
        if lost:
            raise RuntimeError(f"{lost} of {n} {kernel_name} kernels did not answer")
    except BaseException:
        stop_kernels(kms)
        raise
    time.sleep(1.0)
    return kms


def stop_kernels(kms: list[KernelManager]) -> None:
    for km in kms:
        km.shutdown_kernel(now=True)


def open_variant(kernel: str, make: Callable[[], Variant]) -> tuple[Variant, Row]:
    """Create a variant, connect it (one round trip) and record what the process gained."""
    gc.collect()
    before = census()
    variant = make()
    _, lost = variant.round_trip()  # every connection made
    after = census()
    variant.round_trip()  # a warm-up, not counted
    resources = {k: after[k] - before[k] for k in after}
    resources["zmq sockets"], resources["zmq contexts"] = open_zmq(variant.contexts())
    row = Row(kernel, variant.name, resources, lost=lost)
    return variant, row


def run_trials(pairs: list[tuple[Variant, Row]], trials: int) -> None:
    for _ in range(trials):
        for variant, row in pairs:
            cpu = time.process_time()  # the whole process: all threads, libzmq's included
            seconds, lost = variant.round_trip()
            row.cpu.append(time.process_time() - cpu)
            row.times.append(seconds)
            row.lost += lost


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kernels", type=int, default=None, help="kernels (default 20; 5 quick)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    n = args.kernels or (5 if args.quick else 20)

    print(f"{n} stock + {n} ipykernel_ext kernels ({FLAG}), CurveZMQ, {args.trials} trials ...")
    stock_kms = start_kernels(STOCK, n, [])
    ext_kms: list[KernelManager] = []
    shared: zmq.Context[Any] = zmq.Context()
    pairs: list[tuple[Variant, Row]] = []
    try:
        ext_kms += start_kernels(EXT, n, [FLAG])
        pairs.append(open_variant("stock", lambda: DealerClients(stock_kms, None)))
        pairs.append(open_variant("ext", lambda: DealerClients(ext_kms, None)))
        pairs.append(open_variant("ext", lambda: DealerClients(ext_kms, shared)))
        pairs.append(open_variant("ext", lambda: RouterClients(ext_kms)))
        run_trials(pairs, args.trials)
    finally:
        for variant, _ in pairs:
            variant.close()
        shared.destroy(linger=0)
        stop_kernels(stock_kms + ext_kms)
    rows = [row for _, row in pairs]

    print_summary(rows, n)
    return {"kernels": n, "rows": [asdict(row) for row in rows]}


def print_summary(rows: list[Row], n: int) -> None:
    print(f"\nWhat the client process gains to drive {n} kernels (shell + control), and")
    print(f"kernel_info_request to all {n}, every reply awaited:\n")
    header = ["kernel", "client", "fds", "sock", "evfd", "epoll", "other", "thr", "tcp"]
    table = []
    for row in rows:
        r = row.resources
        table.append(
            [
                row.kernel,
                row.name,
                *(r[k] for k in ("total", "sockets", "eventfd", "epoll", "other", "threads")),
                *(r[k] for k in ("tcp", "zmq sockets", "zmq contexts")),
                f"{statistics.median(row.times) * 1000:.1f}",
                f"{min(row.times) * 1000:.1f}",
                f"{statistics.median(row.cpu) * 1000:.1f}",
                row.lost,
            ]
        )
    header += ["zmq s", "ctx", "median ms", "min ms", "cpu ms", "lost"]
    print_table(header, table, align="ll" + "r" * (len(header) - 2))
    stock = rows[0]
    by_name = {row.name: row for row in rows[1:]}
    router = by_name["RouterClient"]
    print("\nratios, RouterClient / jupyter_client:")
    for base in (stock, by_name["jupyter_client"], by_name["jupyter_client, one Context"]):
        fds = router.resources["total"] / max(1, base.resources["total"])
        socks = router.resources["zmq sockets"] / max(1, base.resources["zmq sockets"])
        t = statistics.median(router.times) / statistics.median(base.times)
        cpu = statistics.median(router.cpu) / statistics.median(base.cpu)
        print(
            f"  vs {base.name} on {base.kernel}: fds x{fds:.2f}, zmq sockets x{socks:.2f}, "
            f"time x{t:.2f}, client CPU x{cpu:.2f}"
        )
    print(
        "\nfds = sock + evfd + epoll + other; sock: network sockets (the TCP connections "
        "and libzmq's internal socketpairs); evfd: one per libzmq socket mailbox and per "
        "Context I/O thread; thr: threads; tcp: ESTABLISHED TCP connections; cpu: the "
        "client process's CPU time per round trip (median), all threads."
    )


if __name__ == "__main__":  # python benchmarks/NAME.py: through the runner
    from benchmarks.runner import script

    script(__file__)
