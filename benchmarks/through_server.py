"""A grid of Buttons through jupyter_server, stock ipykernel vs ipykernel_ext (CurveZMQ on).

What a JupyterLab user runs, minus the browser: a real ``jupyter_server`` subprocess with
``--KernelManager.transport_encryption=required``, kernels started through its REST API, and
the cell sent and read over the kernel websocket with JupyterLab's binary
``v1.kernel.websocket.jupyter.org`` protocol (``harness/kernel_websocket.py``).

Each trial starts a fresh kernel, runs one cell that displays a ``GridBox`` of N Buttons
(3 N + 2 ``comm_open``: each Button with its style and layout, the grid and its layout), and
reads the websocket until the cell's ``status: idle``. A trial is *lost* if any comm_open,
the display_data or the idle did not arrive (a frontend would show "Error displaying
widget", an empty output or a cell stuck at ``[*]``). Kernels alternate trial by trial so
that machine noise hits both alike.

    python -m benchmarks through_server              # 10 trials, 1000 and 3000 Buttons
    python -m benchmarks through_server --quick      # 3 trials
    python -m benchmarks through_server --buttons 1000 --trials 20 --json out.json
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.burst import GridTrial, collect_ws, grid_counts, losses
from benchmarks.trials import EXT, STOCK, alternate, print_table, ratio
from harness.bursts import widget_grid_code
from harness.server import JupyterServer

TRIALS, QUICK_TRIALS = 10, 3
RATE_LIMIT_TEXT = "IOPub message rate exceeded"


@dataclass
class Trial(GridTrial):
    rate_limited: bool = False  # the server's IOPub rate limit printed its warning


def run_trial(server: JupyterServer, kernel: str, n: int, timeout: float) -> Trial:
    kernel_id = server.start_kernel(kernel)
    try:
        with server.connect(kernel_id) as ws:
            ws.run("import ipywidgets")  # import cost is not what we measure
            # Seconds to the idle's frame as the reader thread read it, so the time spent
            # sorting messages is not counted; a lost idle ends after QUIET_S.
            burst = collect_ws(ws, widget_grid_code(n), timeout)
    finally:
        server.shutdown_kernel(kernel_id)
    return Trial(kernel, n, **grid_counts(burst), rate_limited=RATE_LIMIT_TEXT in burst.stderr)


def summarize(trials: list[Trial], kernels: list[str], sizes: list[int]) -> None:
    rows = []
    for n in sizes:
        medians = {
            kernel: losses([t for t in trials if (t.kernel, t.buttons) == (kernel, n)])["median_s"]
            for kernel in kernels
        }
        for kernel in kernels:
            mine = losses([t for t in trials if t.kernel == kernel and t.buttons == n])
            seconds, vs_stock = medians[kernel], ratio(medians[kernel], medians.get(STOCK))
            rows.append(
                [
                    kernel,
                    n,
                    f"{mine['lossy_trials']}/{mine['trials']}",
                    f"{mine['mean_lost']:.0f}",
                    mine["idle_lost"],
                    f"{seconds:.2f} s" if seconds is not None else "n/a",
                    f"{vs_stock:.2f}x" if vs_stock and kernel != STOCK else "",
                ]
            )
    header = ["kernel", "buttons", "lost trials", "mean comm_open lost", "no idle"]
    # Markdown, as in the docs' tables of this benchmark.
    print_table([*header, "median time to idle", "vs stock"], rows, markdown=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--buttons", default="1000,3000", help="comma-separated grid sizes (default 1000,3000)"
    )
    parser.add_argument(
        "--kernels", default=f"{STOCK},{EXT}", help=f"kernelspecs (default {STOCK},{EXT})"
    )
    parser.add_argument("--timeout", type=float, default=120, help="seconds to wait for idle")


def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = [int(s) for s in args.buttons.split(",")]
    kernels = args.kernels.split(",")

    trials: list[Trial] = []
    with JupyterServer(encryption=True) as server:
        print(f"jupyter_server at {server.url} (CurveZMQ required), {args.trials} trials each")
        for n in sizes:
            for i, kernel in alternate(args.trials, kernels):
                trial = run_trial(server, kernel, n, args.timeout)
                trials.append(trial)
                took = f"{trial.seconds_to_idle:.2f} s" if trial.seconds_to_idle else "no idle"
                print(
                    f"  {kernel:12} {n:5} buttons trial {i + 1:2}: "
                    f"{trial.comm_open}/{trial.expected} comm_open, "
                    f"{trial.display_data} display_data, {took}"
                    + (" (server rate limit hit)" if trial.rate_limited else ""),
                    flush=True,
                )
    print()
    summarize(trials, kernels, sizes)
    return {"trials": [asdict(t) for t in trials]}


if __name__ == "__main__":  # python benchmarks/NAME.py: through the runner
    from benchmarks.runner import script

    script(__file__)
