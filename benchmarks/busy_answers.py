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

    python -m benchmarks busy_answers            # 5 trials
    python -m benchmarks busy_answers --quick    # 3 trials, shorter cell
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from queue import Empty
from typing import Any

from jupyter_client import BlockingKernelClient, KernelManager

from benchmarks.trials import EXT, STOCK, alternate, print_table
from harness.kernels import new_client, start_kernel
from harness.messages import shell_reply, wait_iopub
from harness.widget_control import fetch_update_states

TRIALS, QUICK_TRIALS = 5, 3
BUTTONS = """\
import ipywidgets as w
w.GridBox([w.Button(description=str(i)) for i in range(1000)])
"""


def start_busy(kernel: str, cell_s: float) -> tuple[KernelManager, BlockingKernelClient]:
    km = start_kernel(kernel)
    kc = new_client(km)
    kc.execute_interactive(BUTTONS, timeout=120, output_hook=lambda m: None)
    msg_id = kc.execute(f"print('started', flush=True); import time; time.sleep({cell_s})")
    wait_iopub(
        kc,
        lambda m: m["msg_type"] == "stream" and m["parent_header"].get("msg_id") == msg_id,
        "the busy cell's first output",
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
    pinger, asker = new_client(km), client_nowait(km)
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cell", type=float, help="seconds the busy cell sleeps")


def run(args: argparse.Namespace) -> dict[str, Any]:
    cell_s = args.cell or (5.0 if args.quick else 10.0)

    print(
        f"Reconnect to a kernel busy for {cell_s:g} s with 3002 widget models "
        f"(CurveZMQ, medians of {args.trials})"
    )
    results: dict[str, list[tuple[float, float]]] = {STOCK: [], EXT: []}
    for _, kernel in alternate(args.trials):
        results[kernel].append(reconnect_trial(kernel, cell_s))
    medians = {
        kernel: (statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows))
        for kernel, rows in results.items()
    }
    print_table(
        ["kernel", "kernel_info", "update_states"],
        [[k, f"{info:.3f} s", f"{states:.3f} s"] for k, (info, states) in medians.items()],
    )
    print(
        f"ratio ext/stock: kernel_info {medians[EXT][0] / medians[STOCK][0]:.4f}, "
        f"update_states {medians[EXT][1] / medians[STOCK][1]:.4f}"
    )

    alone, during = routing_cost(cell_s=max(cell_s, 30.0), rounds=30)
    print(
        "\nkernel_info round trip mid-cell on python3-ext (ms): "
        f"alone median {statistics.median(alone):.1f} max {max(alone):.1f}; "
        f"during 10 request_states median {statistics.median(during):.1f} "
        f"max {max(during):.1f} ({len(during)} pings)"
    )
    return {
        "cell_s": cell_s,
        "reconnect_s": {k: [list(r) for r in rows] for k, rows in results.items()},
        "kernel_info_ms_alone": alone,
        "kernel_info_ms_during_request_states": during,
    }


if __name__ == "__main__":  # python benchmarks/NAME.py: through the runner
    from benchmarks.runner import script

    script(__file__)
