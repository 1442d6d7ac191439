"""A frontend reconnecting to a busy kernel: how long until it has kernel_info and every widget.

Stock ipykernel (``python3``) and ipykernel_ext (``python3-ext``) side by side, CurveZMQ on
every socket. Each trial starts a kernel, displays a GridBox of 1000 Buttons (3002 models),
starts a cell that sleeps ``--cell`` seconds, then connects a new client (the reloaded page)
and times, from its first request:

* ``kernel_info``: the kernel_info_reply;
* ``update_states``: ipywidgets' control comm (open, ``request_states``), until the
  ``update_states`` comm_msg has arrived.

Stock answers both when the cell ends; ipykernel_ext answers them on the shell-channel thread.

A second table is the cost of those answers to the other shell traffic that thread routes:
kernel_info round trips (answered on that thread too) timed alone and while ten 3002-model
``request_states`` are being answered back to back (their snapshot runs on a worker thread).

    python benchmarks/busy_answers.py            # 5 trials
    python benchmarks/busy_answers.py --quick    # 3 trials, shorter cell
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from queue import Empty
from typing import Any

from jupyter_client import BlockingKernelClient, KernelManager

from tests.helpers import fetch_update_states

STOCK, EXT = "python3", "python3-ext"
BUTTONS = """\
import ipywidgets as w
w.GridBox([w.Button(description=str(i)) for i in range(1000)])
"""


def client(km: KernelManager) -> BlockingKernelClient:
    kc = BlockingKernelClient(connection_file=km.connection_file)
    kc.load_connection_file()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    return kc


def wait_iopub(kc: BlockingKernelClient, match: Any, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
        if match(msg):
            return msg


def shell_reply(kc: BlockingKernelClient, msg_id: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        reply = kc.get_shell_msg(timeout=max(0.01, deadline - time.monotonic()))
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply


def start_busy(kernel: str, cell_s: float) -> tuple[KernelManager, BlockingKernelClient]:
    km = KernelManager(kernel_name=kernel, transport_encryption="required")
    km.start_kernel()
    kc = client(km)
    kc.execute_interactive(BUTTONS, timeout=120, output_hook=lambda m: None)
    msg_id = kc.execute(f"print('started', flush=True); import time; time.sleep({cell_s})")
    wait_iopub(
        kc, lambda m: m["msg_type"] == "stream" and m["parent_header"].get("msg_id") == msg_id, 60
    )
    return km, kc


def reconnect_trial(kernel: str, cell_s: float) -> tuple[float, float]:
    km, kc = start_busy(kernel, cell_s)
    page = client_nowait(km)
    try:
        # As a reloaded page does: both requests at once, each timed from the first send.
        t0 = time.perf_counter()
        info_id = page.kernel_info()
        states_done: list[float] = []

        def fetch() -> None:
            fetch_update_states(page, timeout=cell_s + 60)
            states_done.append(time.perf_counter() - t0)

        fetcher = threading.Thread(target=fetch)
        fetcher.start()
        shell_reply(page, info_id, cell_s + 60)
        info_s = time.perf_counter() - t0
        fetcher.join()
        return info_s, states_done[0]
    finally:
        page.stop_channels()
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def client_nowait(km: KernelManager) -> BlockingKernelClient:
    """A client that does not wait_for_ready (that would wait for the cell on stock)."""
    kc = BlockingKernelClient(connection_file=km.connection_file)
    kc.load_connection_file()
    kc.start_channels()
    time.sleep(0.3)  # let the IOPub subscription settle before asking anything
    return kc


def routing_cost(cell_s: float, rounds: int) -> tuple[list[float], list[float]]:
    """kernel_info round trips mid-cell, alone and during ten request_states."""
    km, kc = start_busy(EXT, cell_s)
    pinger, asker = client(km), client_nowait(km)
    try:
        alone = [ping(pinger) for _ in range(rounds)]
        done = threading.Event()

        def ask() -> None:
            for _ in range(10):
                fetch_update_states(asker)
            done.set()

        thread = threading.Thread(target=ask)
        thread.start()
        during: list[float] = []
        while not done.is_set():
            during.append(ping(pinger))
        thread.join()
        return alone, during
    finally:
        for c in (pinger, asker, kc):
            c.stop_channels()
        km.shutdown_kernel(now=True)


def ping(kc: BlockingKernelClient) -> float:
    t0 = time.perf_counter()
    shell_reply(kc, kc.kernel_info(), 30)
    # Drain this request's status messages so the IOPub queue does not grow.
    try:
        while True:
            kc.get_iopub_msg(timeout=0)
    except Empty:
        pass
    return (time.perf_counter() - t0) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--trials", type=int)
    parser.add_argument("--cell", type=float, help="seconds the busy cell sleeps")
    args = parser.parse_args()
    trials = args.trials or (3 if args.quick else 5)
    cell_s = args.cell or (5.0 if args.quick else 10.0)

    print(f"Reconnect to a kernel busy for {cell_s:g} s with 3002 widget models "
          f"(CurveZMQ, medians of {trials})")
    results: dict[str, list[tuple[float, float]]] = {STOCK: [], EXT: []}
    for _ in range(trials):
        for kernel in (STOCK, EXT):
            results[kernel].append(reconnect_trial(kernel, cell_s))
    print(f"{'kernel':<12} {'kernel_info':>12} {'update_states':>14}")
    medians = {}
    for kernel, rows in results.items():
        info = statistics.median(r[0] for r in rows)
        states = statistics.median(r[1] for r in rows)
        medians[kernel] = (info, states)
        print(f"{kernel:<12} {info:>10.3f} s {states:>12.3f} s")
    print(
        f"ratio ext/stock: kernel_info {medians[EXT][0] / medians[STOCK][0]:.4f}, "
        f"update_states {medians[EXT][1] / medians[STOCK][1]:.4f}"
    )

    alone, during = routing_cost(cell_s=max(cell_s, 30.0), rounds=30)
    print("\nkernel_info round trip mid-cell on python3-ext (ms): "
          f"alone median {statistics.median(alone):.1f} max {max(alone):.1f}; "
          f"during 10 request_states median {statistics.median(during):.1f} "
          f"max {max(during):.1f} ({len(during)} pings)")


if __name__ == "__main__":
    main()
