"""A grid of Buttons through jupyter_server, stock ipykernel vs ipykernel_ext (CurveZMQ on).

What a JupyterLab user runs, minus the browser: a real ``jupyter_server`` subprocess with
``--KernelManager.transport_encryption=required``, kernels started through its REST API, and
the cell sent and read over the kernel websocket with JupyterLab's binary
``v1.kernel.websocket.jupyter.org`` protocol (``tests/server_utils.py``).

Each trial starts a fresh kernel, runs one cell that displays a ``GridBox`` of N Buttons
(3 N + 2 ``comm_open``: each Button with its style and layout, the grid and its layout), and
reads the websocket until the cell's ``status: idle``. A trial is *lost* if any comm_open,
the display_data or the idle did not arrive (a frontend would show "Error displaying
widget", an empty output or a cell stuck at ``[*]``). Kernels alternate trial by trial so
that machine noise hits both alike.

    python benchmarks/through_server.py              # 10 trials, 1000 and 3000 Buttons
    python benchmarks/through_server.py --quick      # 3 trials
    python benchmarks/through_server.py --buttons 1000 --trials 20 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

# The server and websocket code is the end-to-end tests' own: an editable install
# (pip install -e) puts the checkout on sys.path, so tests/ is importable as ``tests``.
from tests.server_utils import JupyterServer

STOCK, EXT = "python3", "python3-ext"
RATE_LIMIT_TEXT = "IOPub message rate exceeded"

BURST_CODE = """\
import ipywidgets as widgets
buttons = [widgets.Button(description=str(i)) for i in range({n})]
display(widgets.GridBox(buttons))
"""


@dataclass
class Trial:
    kernel: str
    buttons: int
    expected_comm_open: int
    comm_open: int
    display_data: int
    idle: bool
    seconds_to_idle: float | None  # send of execute_request to receipt of its idle
    rate_limited: bool

    @property
    def lost(self) -> bool:
        return not self.idle or self.comm_open < self.expected_comm_open or self.display_data < 1


def run_trial(server: JupyterServer, kernel: str, n: int, timeout: float) -> Trial:
    kernel_id = server.start_kernel(kernel)
    try:
        with server.connect(kernel_id) as ws:
            ws.run("import ipywidgets")  # import cost is not what we measure
            start = time.perf_counter()
            msg_id = ws.execute(BURST_CODE.format(n=n))
            try:
                _, iopub = ws.collect_execution(msg_id, timeout=timeout)
                # The idle's frame was read at iopub[-1]["received"] (the reader thread's
                # clock), so the time the test spends sorting messages is not counted.
                idle, elapsed = True, iopub[-1]["received"] - start
            except TimeoutError as exc:
                iopub = getattr(exc, "messages", [])
                idle = any(
                    m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"
                    for m in iopub
                )
                elapsed = None
    finally:
        server.shutdown_kernel(kernel_id)
    types = [m["msg_type"] for m in iopub]
    stderr = "".join(
        m["content"]["text"]
        for m in iopub
        if m["msg_type"] == "stream" and m["content"]["name"] == "stderr"
    )
    return Trial(
        kernel=kernel,
        buttons=n,
        expected_comm_open=3 * n + 2,
        comm_open=types.count("comm_open"),
        display_data=types.count("display_data"),
        idle=idle,
        seconds_to_idle=elapsed,
        rate_limited=RATE_LIMIT_TEXT in stderr,
    )


def summarize(trials: list[Trial], kernels: list[str], sizes: list[int]) -> str:
    header = (
        "| kernel | buttons | lost trials | mean comm_open lost | no idle "
        "| median time to idle | vs stock |"
    )
    lines = [header, "| --- | --- | --- | --- | --- | --- | --- |"]
    for n in sizes:
        medians: dict[str, float | None] = {}
        for kernel in kernels:
            mine = [t for t in trials if t.kernel == kernel and t.buttons == n]
            times = [t.seconds_to_idle for t in mine if t.seconds_to_idle is not None]
            medians[kernel] = statistics.median(times) if times else None
        for kernel in kernels:
            mine = [t for t in trials if t.kernel == kernel and t.buttons == n]
            lost = sum(t.lost for t in mine)
            missing = statistics.mean(t.expected_comm_open - t.comm_open for t in mine)
            no_idle = sum(not t.idle for t in mine)
            median = medians[kernel]
            stock = medians.get(STOCK)
            ratio = f"{median / stock:.2f}x" if median and stock and kernel != STOCK else ""
            lines.append(
                f"| {kernel} | {n} | {lost}/{len(mine)} | {missing:.0f} | {no_idle} "
                f"| {f'{median:.2f} s' if median is not None else 'n/a'} | {ratio} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10, help="trials per kernel and size")
    parser.add_argument("--quick", action="store_true", help="3 trials (overrides --trials)")
    parser.add_argument(
        "--buttons", default="1000,3000", help="comma-separated grid sizes (default 1000,3000)"
    )
    parser.add_argument(
        "--kernels", default=f"{STOCK},{EXT}", help=f"kernelspecs (default {STOCK},{EXT})"
    )
    parser.add_argument("--timeout", type=float, default=120, help="seconds to wait for idle")
    parser.add_argument("--json", type=Path, help="also write every trial to this file")
    args = parser.parse_args(argv)
    trials_per = 3 if args.quick else args.trials
    sizes = [int(s) for s in args.buttons.split(",")]
    kernels = args.kernels.split(",")

    trials: list[Trial] = []
    with JupyterServer(encryption=True) as server:
        print(f"jupyter_server at {server.url} (CurveZMQ required), {trials_per} trials each")
        for n in sizes:
            for i in range(trials_per):
                for kernel in kernels:
                    trial = run_trial(server, kernel, n, args.timeout)
                    trials.append(trial)
                    took = f"{trial.seconds_to_idle:.2f} s" if trial.seconds_to_idle else "no idle"
                    print(
                        f"  {kernel:12} {n:5} buttons trial {i + 1:2}: "
                        f"{trial.comm_open}/{trial.expected_comm_open} comm_open, "
                        f"{trial.display_data} display_data, {took}"
                        + (" (server rate limit hit)" if trial.rate_limited else ""),
                        flush=True,
                    )
    print()
    print(summarize(trials, kernels, sizes))
    if args.json:
        args.json.write_text(json.dumps([asdict(t) for t in trials], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
