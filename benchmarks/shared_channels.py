"""jupyter_server with the stock websocket connection class vs SharedChannelsConnection.

For 1, 10 and 100 websocket clients on one kernel (``python3-ext``, CurveZMQ required), each
server class in a fresh jupyter_server:

* server file descriptors (total, and without the websockets' own TCP sockets, which any
  server needs one per client), the kernel's established TCP connections, server RSS;
* fan-out time: from the execute_request to the moment the *last* client has received all
  of a burst of ``--messages`` comm_msg (IOPub) and the idle status after it;
* losses: burst messages a client never received, summed over clients.

jupyter_server's IOPub rate limit (``ZMQChannelsWebsocketConnection.limit_rate``, 1000 msg/s
by default) is turned OFF for both classes: a 10000-message burst would otherwise be cut by
design and the comparison would measure the limiter.

Clients are tornado websocket clients (``v1.kernel.websocket.jupyter.org``) spread over a few
worker processes; they only slice the binary frames (no JSON decoding) so that the clients
cost as little as possible on a machine the server and the kernel share. This module keeps
the configurations, their bursts and the tables; the server and the clients are in
``benchmarks/fanout/``.

The ``--fanout`` row: 20 clients, 2000 comm_msg of 8 kB each, behind our kernel
*and* stock ipykernel (``python3``, which drops past 1000 queued messages per subscriber),
both server classes: burst messages lost per client (min-max), clients that never saw the
idle, time to the last client's idle, server peak RSS.

    python -m benchmarks shared_channels            # 1, 10, 100 clients, 3 bursts each
    python -m benchmarks shared_channels --quick    # 1 and 10 clients, 1 burst, 2000 messages
    python -m benchmarks shared_channels --fanout   # 20 clients, 2000 x 8 kB, 1 burst
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from benchmarks.fanout.clients import burst, client_workers
from benchmarks.fanout.server import CLASSES, Server
from benchmarks.trials import EXT, STOCK, fmt, median, print_table, ratio

TRIALS, QUICK_TRIALS = 3, 1
#: The burst: ``n`` comm_msg on one comm (each padded with ``pad`` bytes), then its close.
BURST_CODE = """
from comm import create_comm
_bench_comm = create_comm(target_name="shared-channels-bench", data={{}})
_bench_pad = "x" * {pad}
for _i in range({n}):
    _bench_comm.send({{"i": _i, "pad": _bench_pad}} if {pad} else {{"i": _i}})
_bench_comm.close()
"""


def run_config(
    name: str,
    n_clients: int,
    messages: int,
    trials: int,
    timeout: float,
    kernel: str = EXT,
    pad: int = 0,
) -> dict[str, Any]:
    with Server(CLASSES[name]) as server:  # stop() shuts its kernels down first
        kernel_id = server.start_kernel(kernel)
        with client_workers(server, kernel_id, n_clients) as pipes:
            # Counted once every websocket's channels are up: a set of channels per client
            # with the stock class, one for them all with ours (only channels use stdin).
            server.wait_stdin_connections(kernel_id, 1 if name == "shared" else n_clients)
            fds, fds_wo_ws = server.fds()
            kernel_conns = server.kernel_connections(kernel_id)
            burst(pipes, BURST_CODE.format(n=10, pad=pad), timeout)  # warm-up (imports, comm)
            cpu_before = server.cpu_seconds()
            code = BURST_CODE.format(n=messages, pad=pad)
            bursts = [burst(pipes, code, timeout) for _ in range(trials)]
            cpu = server.cpu_seconds() - cpu_before
            # What the server's own activity monitor (one IOPub subscription, one message per
            # loop turn) made of the burst: "busy" here means it missed the idle.
            time.sleep(1)
            state = server.kernel_model(kernel_id).get("execution_state")
            rss, peak = server.rss_mb()
            stats: dict[str, Any] = {}
            if kernel == EXT:  # stock ipykernel has no iopub_stats_request
                pipes[0].send(("stats",))
                stats = pipes[0].recv()
    per_client = [messages - count for counts, _ in bursts for count, _ in counts]
    times: list[float] = []
    incomplete = 0
    for counts, sent_at in bursts:
        idles = [t for _, t in counts if t is not None]
        incomplete += len(counts) - len(idles)
        if len(idles) == len(counts):
            times.append(max(idles) - sent_at)
    return {
        "class": name,
        "clients": n_clients,
        "fds": fds,
        "fds_wo_ws": fds_wo_ws,
        "kernel_conns": kernel_conns,
        "rss": rss,
        "peak": peak,
        "time": median(times),
        "times": times,
        "lost": sum(per_client),
        "cpu": cpu / max(1, trials),
        "state": state,
        "lost_per_client": (min(per_client), max(per_client)) if per_client else (0, 0),
        "incomplete": incomplete,
        "kernel": kernel,
        # messages the kernel sent with NODROP off after a full wait: some subscriber (a server
        # socket: client channels or the activity monitor) missed each
        "stalls": stats.get("missed", -1),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--clients", default=None, help="comma-separated, default 1,10,100")
    parser.add_argument(
        "--messages", type=int, default=None, help="burst size (10000; 2000 with --quick)"
    )
    parser.add_argument("--timeout", type=float, default=300, help="seconds per burst")
    parser.add_argument(
        "--fanout",
        action="store_true",
        help="20 clients, 2000 x 8 kB, both kernels (1 burst unless --trials)",
    )
    parser.add_argument("--kernels", default=None, help="--fanout: python3,python3-ext")
    parser.add_argument("--classes", default=None, help="--fanout: stock,shared")
    parser.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="an extra jupyter_server option, e.g. --SharedChannelsConnection.shared_recv_batch=64",
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    Server.extra = list(args.server_arg)
    if args.fanout:
        return fanout(args)
    clients = [int(c) for c in (args.clients or ("1,10" if args.quick else "1,10,100")).split(",")]
    messages = args.messages or (2000 if args.quick else 10000)

    print(
        f"{messages}-message IOPub burst (comm_msg), kernel {EXT} with CurveZMQ, "
        f"IOPub rate limit off, median of {args.trials} burst(s)"
    )
    rows = []
    for n in clients:
        for name in CLASSES:
            row = run_config(name, n, messages, args.trials, args.timeout)
            rows.append(row)
            print(
                f"  {name:6} {n:4} clients: {fmt(row['time'])} s "
                f"{[round(t, 2) for t in row['times']]} lost {row['lost']}",
                flush=True,
            )
    print()
    table = []
    for n in clients:
        mine = {r["class"]: r for r in rows if r["clients"] == n}
        for row in mine.values():
            table.append(
                [
                    n,
                    row["class"],
                    row["fds"],
                    row["fds_wo_ws"],
                    row["kernel_conns"],
                    fmt(row["rss"], 1),
                    fmt(row["peak"], 1),
                    fmt(row["time"]),
                    row["lost"],
                    row["stalls"],
                    fmt(ratio(row["time"], mine["stock"]["time"])),
                ]
            )
    header = ["clients", "class", "fds", "fds-ws", "kernel conns", "RSS MB", "peak MB"]
    print_table([*header, "fan-out s", "lost", "stalls", "ratio"], table, align="r" * 11)
    print(
        "\nfds-ws: server descriptors minus its websocket connections (one per client in any "
        "server).\nratio: fan-out time / stock's. lost: burst messages never received, all "
        "clients and bursts.\nstalls: the kernel's iopub_stats missed: messages it "
        "dropped for a server socket (client channels or the server's activity monitor) "
        "that stayed full for its 2 s send timeout."
    )
    if any(r["incomplete"] for r in rows):
        print(
            "some clients never saw the burst's idle status:",
            {(r["class"], r["clients"]): r["incomplete"] for r in rows if r["incomplete"]},
        )
    return {"messages": messages, "rows": rows}


def fanout(args: argparse.Namespace) -> dict[str, Any]:
    """The 20-tab 8 kB fan-out row: both kernels behind both server classes."""
    n_clients = int(args.clients or 20)
    messages = args.messages or 2000
    trials = args.trials if args.trials_given else 1
    timeout = min(args.timeout, 60)
    print(
        f"{n_clients} clients, {messages} comm_msg of 8 kB, CurveZMQ, IOPub rate limit off, "
        f"{trials} burst(s); a client missing the idle waits {timeout:.0f} s"
    )
    kernels = args.kernels.split(",") if args.kernels else [STOCK, EXT]
    classes = args.classes.split(",") if args.classes else list(CLASSES)
    rows = []
    for kernel in kernels:
        for name in classes:
            row = run_config(name, n_clients, messages, trials, timeout, kernel, pad=8000)
            rows.append(row)
            print(f"  {kernel:12} {name:6}: done", flush=True)
    print()
    header = ["kernel", "class", "lost/client", "no idle", "last idle s", "server CPU s"]
    print_table(
        [*header, "peak MB", "REST state"],
        [
            [
                row["kernel"],
                row["class"],
                "{}-{}".format(*row["lost_per_client"]),
                row["incomplete"],
                fmt(row["time"]),
                fmt(row["cpu"]),
                fmt(row["peak"], 1),
                row["state"],
            ]
            for row in rows
        ],
        align="r" * 8,
    )
    print(
        "\nlost/client: burst messages a client never received (fewest-most over clients). "
        "no idle: clients that never saw the burst's idle status. last idle: execute_request "
        "to the last client's idle (- if one never came). server CPU: per burst (the "
        "machine's load moves the wall times; this less so). REST state: the kernel's "
        "execution_state 1 s after, from the server's activity monitor (busy: it missed the "
        "idle)."
    )
    return {"fanout": True, "messages": messages, "rows": rows}


if __name__ == "__main__":  # python benchmarks/NAME.py: through the runner
    from benchmarks.runner import script

    script(__file__)
