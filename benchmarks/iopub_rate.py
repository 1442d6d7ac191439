"""The server's IOPub rate: stock's dropping limiter, the limit off, and ours (merged, paced).

One ``jupyter_server`` per mode, as installed (``SharedChannelsConnection``; CurveZMQ
required), a ``python3-ext`` kernel and one websocket in JupyterLab's v1 protocol reading as
fast as it can (:mod:`harness.kernel_websocket`):

* **stock limiter**: ``--SharedChannelsConnection.iopub_merge=False`` (jupyter_server's
  ``_limit_rate``: drops over 1000 msg/s or 1 MB/s of stream over 3 s);
* **limit off**: ``--ZMQChannelsWebsocketConnection.limit_rate=False`` (every message, as it
  comes: what "IOPub data rate exceeded" tells users to do);
* **ours**: the defaults (docs/PROTOCOL.md section 8).

The cells: ``print`` (200000 lines of 48 bytes, 9.6 MB), ``slider`` (an ``IntSlider`` set
20001 times), ``display`` (a display updated 20000 times), ``rows`` (20000 rows of
``display(i); bar.value = i``: an output and a progress bar's update each, the case a line
that scanned back through what waited made O(n^2)). Per cell and mode, medians over trials
(modes and cells interleaved):

* ``exact``: trials whose tab ended exactly as the kernel's output (the folded outputs,
  the slider's last value: :class:`harness.tab_view.TabView`);
* ``msgs``: messages the tab received for the cell; ``peak/3s``: the most counted messages
  (all but status, comm_open, execute_input) it received in any 3 s (by its own clock);
* ``idle->tab``: from the kernel's ``idle`` (its header's date) to the tab receiving it; every
  output of the cell is before it, so this is when the tab's view is final;
* ``server CPU``: the server process's user+system seconds for the cell; ``RSS``: its
  resident set after the cell (MB);
* ``other kernel``: while the cell runs, a second kernel of the same server answers
  ``kernel_info`` round trips through its own websocket, one after another: their median and
  slowest (one tab's flood must not hold the server's other kernels).

Then, in process, the cost of one message added to a waiting line (``Line.add``, the real
one) with 1000, 10000 and 100000 rows waiting (the ``rows`` cell's messages): flat, O(1).

    python -m benchmarks iopub_rate            # 3 trials
    python -m benchmarks iopub_rate --quick    # 1 trial
"""

from __future__ import annotations

import argparse
import gc
import threading
import time
from collections import deque
from datetime import datetime
from typing import Any

import psutil

from benchmarks.trials import EXT, fmt, median, print_table
from harness.cell_messages import display, widget_update
from harness.kernel_websocket import KernelWebsocket
from harness.server import JupyterServer
from harness.tab_view import TabView
from ipykernel_ext.server.websocket import Line

TRIALS, QUICK_TRIALS = 3, 1

MODES = {
    "stock limiter": ["--SharedChannelsConnection.iopub_merge=False"],
    "limit off": ["--ZMQChannelsWebsocketConnection.limit_rate=False"],
    "ours": [],
}
LINES, SETS, UPDATES, ROWS = 200_000, 20_001, 20_000, 20_000
SETUP = "import ipywidgets as w\ns = w.IntSlider(max=30000)\ndisplay(s)\nprint(s.comm.comm_id)"
CELLS = {
    "print": f"for i in range({LINES}): print(f'line {{i:07d}} ' + 'x' * 34)",
    "slider": f"for i in range({SETS}): s.value = i",
    "display": f"h = display('v', display_id=True)\nfor i in range({UPDATES}): h.update(f'v{{i}}')",
    "rows": f"for i in range({ROWS}):\n    display(i)\n    s.value = i % 30000",
}
UNCOUNTED = {"status", "comm_open", "execute_input"}
WINDOW = 3.0


def exact(cell: str, view: TabView, slider: str) -> bool:
    if cell == "rows":
        shown = [o.get("data", {}).get("text/plain") for o in view.outputs]
        return shown == [str(i) for i in range(ROWS)] and (
            view.widgets.get(slider, {}).get("value") == ROWS - 1
        )
    if cell == "print":
        return view.text() == "".join(f"line {i:07d} " + "x" * 34 + "\n" for i in range(LINES))
    if cell == "slider":
        return view.widgets.get(slider, {}).get("value") == SETS - 1
    return [o.get("data", {}).get("text/plain") for o in view.outputs] == [f"'v{UPDATES - 1}'"]


def peak_in_window(times: list[float]) -> int:
    recent: deque[float] = deque()
    peak = 0
    for t in times:
        recent.append(t)
        while recent[0] <= t - WINDOW:
            recent.popleft()
        peak = max(peak, len(recent))
    return peak


def round_trips(probe: KernelWebsocket, until: threading.Event) -> list[float]:
    """``kernel_info`` round trips on ``probe``, one after another, until ``until`` is set."""
    times: list[float] = []
    while not until.is_set():
        start = time.perf_counter()
        probe.request("shell", "kernel_info_request", timeout=120)
        times.append(time.perf_counter() - start)
    return times


def one_cell(
    ws: KernelWebsocket, probe: KernelWebsocket, proc: psutil.Process, cell: str, slider: str
) -> dict[str, Any]:
    counted: list[float] = []
    idle_at: list[float] = []
    done = threading.Event()
    probed: list[float] = []
    prober = threading.Thread(target=lambda: probed.extend(round_trips(probe, done)))

    def seen(msg: dict[str, Any]) -> None:
        now = time.time()
        if msg["msg_type"] not in UNCOUNTED:
            counted.append(now)
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            idle_at.append(now)

    cpu = proc.cpu_times()
    msg_id = ws.execute(CELLS[cell])
    prober.start()
    try:
        _, iopub = ws.collect_execution(msg_id, timeout=900, on_message=seen)
    finally:
        done.set()
        prober.join()
    cpu_after = proc.cpu_times()
    idle = next(m for m in reversed(iopub) if m["msg_type"] == "status")
    kernel_idle = datetime.fromisoformat(str(idle["header"]["date"]).replace("Z", "+00:00"))
    view = TabView(iopub)
    return {
        "exact": exact(cell, view, slider),
        "msgs": len(iopub),
        "peak": peak_in_window(counted),
        "idle_to_tab": idle_at[-1] - kernel_idle.timestamp() if idle_at else None,
        "cpu": (cpu_after.user + cpu_after.system) - (cpu.user + cpu.system),
        "rss": proc.memory_info().rss / 1e6,
        "probe": median(probed) if probed else None,
        "probe_max": max(probed) if probed else None,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, dict[str, list[dict[str, Any]]]] = {m: {c: [] for c in CELLS} for m in MODES}
    servers = {m: JupyterServer(ipykernel_ext=None, extra_args=a).start() for m, a in MODES.items()}
    try:
        tabs = {}
        for mode, server in servers.items():
            kernel_id = server.start_kernel(EXT)
            ws = KernelWebsocket(server, kernel_id)
            _, iopub = ws.run(SETUP)
            slider = TabView(iopub).text().strip()
            probe = KernelWebsocket(server, server.start_kernel(EXT))
            assert server.proc is not None
            tabs[mode] = (ws, probe, psutil.Process(server.proc.pid), slider)
        for trial in range(args.trials):
            for cell in CELLS:
                for mode, (ws, probe, proc, slider) in tabs.items():
                    results[mode][cell].append(one_cell(ws, probe, proc, cell, slider))
            print(f"trial {trial + 1}/{args.trials} done", flush=True)
        for ws, probe, _, _ in tabs.values():
            ws.close()
            probe.close()
    finally:
        for server in servers.values():
            server.stop()
    rows = []
    for cell in CELLS:
        for mode in MODES:
            rs = results[mode][cell]
            rows.append(
                [
                    cell,
                    mode,
                    f"{sum(r['exact'] for r in rs)}/{len(rs)}",
                    fmt(median(r["msgs"] for r in rs), 0),
                    fmt(median(r["peak"] for r in rs), 0),
                    fmt(median(r["idle_to_tab"] for r in rs), 2, " s"),
                    fmt(median(r["cpu"] for r in rs), 2, " s"),
                    fmt(median(r["rss"] for r in rs), 0, " MB"),
                    f"{fmt(median(r['probe'] for r in rs), 3, ' s')}"
                    f" / {fmt(median(r['probe_max'] for r in rs), 3, ' s')}",
                ]
            )
    print_table(
        [
            "cell",
            "server",
            "exact",
            "msgs",
            "peak/3s",
            "idle->tab",
            "server CPU",
            "RSS",
            "other kernel (median / max)",
        ],
        rows,
    )
    costs = line_costs()
    print_table(
        ["rows waiting", "Line.add per message"],
        [[f"{n}", f"{cost * 1e6:.2f} us"] for n, cost in costs.items()],
    )
    return {"results": results, "line_add": costs}


def line_costs(added: int = 20_000) -> dict[int, float]:
    """Seconds per message added to a :class:`Line` with ``n`` rows waiting (a row: an output
    and the bar's update, which folds into the bar's waiting update wherever it stands)."""
    costs = {}
    for n in (1_000, 10_000, 100_000):
        line = Line()
        rows = [row_messages(i) for i in range(n + added // 2)]
        for output, update in rows[:n]:
            line.add(output, output, 100, True)
            line.add(update, update, 100, True)
        gc.disable()  # as timeit does: a collection's cost grows with the heap, not the line
        try:
            start = time.perf_counter()
            for output, update in rows[n:]:
                line.add(output, output, 100, True)
                line.add(update, update, 100, True)
            costs[n] = (time.perf_counter() - start) / added
        finally:
            gc.enable()
    return costs


def row_messages(i: int) -> tuple[dict[str, Any], dict[str, Any]]:
    return display(str(i), parent="cell"), widget_update("bar", {"value": i}, parent="cell")
