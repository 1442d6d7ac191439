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
that scanned back through what waited made O(n^2)), ``command`` (a widget trait set to a
command then reset to ``None`` 5000 times, as plotly's ``FigureWidget`` sends each restyle:
issue 54), ``alternating`` (20000 steps of a stdout line and a stderr line, each flushed:
traffic nothing merges, issue 50), ``plotly`` (a real plotly ``FigureWidget`` whose trace data
is set 2000 times: each a restyle the page must apply; needs plotly, else the cell is left
out, saying so). Per cell and mode, medians over trials (modes and cells
interleaved; ``--cells`` runs some of them):

* ``exact``: trials whose tab ended exactly as the kernel's output (the folded outputs,
  the slider's last value: :class:`harness.tab_view.TabView`);
* ``msgs``: messages the tab received for the cell; ``peak/3s``: the most counted messages
  (all but status, comm_open, execute_input) it received in any 3 s (by its own clock);
* ``commands``: for ``command`` and ``plotly``, the commands (restyles) the tab saw (its
  change events); ``worst age``:
  the longest any message of the cell took from the kernel (its header's date) to the tab;
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
import importlib.util
import json
import threading
import time
from collections import deque
from datetime import datetime
from typing import Any

import psutil

from benchmarks.trials import EXT, fmt, median, print_table
from harness.bursts import alternating_streams_code, thread_beside_cell_code
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
LINES, SETS, UPDATES, ROWS, COMMANDS, STEPS = 200_000, 20_001, 20_000, 20_000, 5_000, 20_000
RESTYLES, CUSTOM, THREADED = 2_000, 20_000, 10_000
SETUP = "import ipywidgets as w\ns = w.IntSlider(max=30000)\ndisplay(s)\nprint(s.comm.comm_id)"
#: A widget with a trait used as a command (set, then reset to None), as plotly's FigureWidget.
COMMAND_SETUP = (
    "import traitlets\n"
    "class Commanded(w.DOMWidget):\n"
    "    command = traitlets.Any(None).tag(sync=True)\n"
    "c = Commanded()\n"
    "print(c.comm.comm_id)"
)
#: A real plotly figure (only when plotly is installed in the kernel's environment).
PLOTLY_SETUP = (
    "import plotly.graph_objects as go\n"
    "fig = go.FigureWidget(data=[go.Scatter(y=[0, 0])])\n"
    "print(fig.comm.comm_id)"
)
#: A custom comm no frontend has a target for (its messages reach the tab all the same).
CUSTOM_SETUP = (
    "from comm import create_comm\n"
    "canvas = create_comm(target_name='bench.canvas')\n"
    "print(canvas.comm_id)"
)
#: Run before each ``threads`` cell: a thread that prints under this cell once ``go`` is set;
#: the cell prints beside it.
THREAD_SETUP, THREAD_CELL = thread_beside_cell_code(THREADED)
CELLS = {
    "print": f"for i in range({LINES}): print(f'line {{i:07d}} ' + 'x' * 34)",
    "slider": f"for i in range({SETS}): s.value = i",
    "display": f"h = display('v', display_id=True)\nfor i in range({UPDATES}): h.update(f'v{{i}}')",
    "rows": f"for i in range({ROWS}):\n    display(i)\n    s.value = i % 30000",
    "command": f"for i in range({COMMANDS}):\n    c.command = {{'i': i}}\n    c.command = None",
    "plotly": f"for i in range({RESTYLES}):\n    fig.data[0].y = [i, i + 1]",
    "alternating": alternating_streams_code(STEPS),
    "custom": f"for i in range({CUSTOM}): canvas.send({{'i': i}})",
    "threads": THREAD_CELL,
}
UNCOUNTED = {"status", "comm_open", "execute_input"}
WINDOW = 3.0


def commands_seen(view: TabView, comm_id: str, key: str = "command") -> int:
    """The commands the tab's change events saw on ``key`` (a value other than ``None``)."""
    return sum(1 for v in view.changes.get((comm_id, key), []) if json.loads(v)[0])


def exact(cell: str, view: TabView, widgets: tuple[str, ...], other: TabView | None) -> bool:
    slider, commanded, figure, canvas = widgets
    if cell == "custom":
        return view.custom.get(canvas) == [{"i": i} for i in range(CUSTOM)]
    if cell == "threads":
        assert other is not None
        return view.text() == "".join(f"fg {i}\n" for i in range(THREADED)) and (
            other.text() == "".join(f"bg {i}\n" for i in range(THREADED))
        )
    if cell == "command":
        return commands_seen(view, commanded) == COMMANDS
    if cell == "plotly":
        return commands_seen(view, figure, "_py2js_restyle") == RESTYLES
    if cell == "alternating":
        return view.text() == "".join(f"out {i}\n" for i in range(STEPS)) and view.text(
            "stderr"
        ) == "".join(f"err {i}\n" for i in range(STEPS))
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


def kernel_time(msg: dict[str, Any]) -> float:
    """When the kernel made ``msg`` (its header's date), in seconds since the epoch."""
    return datetime.fromisoformat(str(msg["header"]["date"]).replace("Z", "+00:00")).timestamp()


def one_cell(
    ws: KernelWebsocket,
    probe: KernelWebsocket,
    proc: psutil.Process,
    cell: str,
    widgets: tuple[str, str, str, str],
) -> dict[str, Any]:
    _, commanded, figure, _ = widgets
    counted: list[float] = []
    ages: list[float] = []
    idle_at: list[float] = []
    done = threading.Event()
    probed: list[float] = []
    prober = threading.Thread(target=lambda: probed.extend(round_trips(probe, done)))

    def seen(msg: dict[str, Any]) -> None:
        now = time.time()
        ages.append(now - kernel_time(msg))
        if msg["msg_type"] not in UNCOUNTED:
            counted.append(now)
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            idle_at.append(now)

    setup_id = ws.run(THREAD_SETUP)[0]["parent_header"]["msg_id"] if cell == "threads" else ""
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
    view = TabView(iopub)
    other = None
    if setup_id:  # the thread's lines: under the earlier cell, kept in the backlog
        other = TabView([m for m in ws.backlog if m["parent_header"].get("msg_id") == setup_id])
        ws.backlog = [m for m in ws.backlog if m["parent_header"].get("msg_id") != setup_id]
    return {
        "exact": exact(cell, view, widgets, other),
        "commands": (
            commands_seen(view, commanded)
            if cell == "command"
            else commands_seen(view, figure, "_py2js_restyle")
            if cell == "plotly"
            else None
        ),
        "worst_age": max(ages) if ages else None,
        "msgs": len(iopub),
        "peak": peak_in_window(counted),
        "idle_to_tab": idle_at[-1] - kernel_time(idle) if idle_at else None,
        "cpu": (cpu_after.user + cpu_after.system) - (cpu.user + cpu.system),
        "rss": proc.memory_info().rss / 1e6,
        "probe": median(probed) if probed else None,
        "probe_max": max(probed) if probed else None,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cells",
        default=",".join(CELLS),
        help=f"the cells to run, comma-separated (default: all of {', '.join(CELLS)})",
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    cells = [c for c in args.cells.split(",") if c]
    unknown = [c for c in cells if c not in CELLS]
    if unknown or not cells:
        raise SystemExit(f"--cells: unknown cell(s) {unknown}; choose from {', '.join(CELLS)}")
    if "plotly" in cells and importlib.util.find_spec("plotly") is None:
        print("the plotly cell is left out: plotly is not installed (pip install plotly anywidget)")
        cells.remove("plotly")
    results: dict[str, dict[str, list[dict[str, Any]]]] = {m: {c: [] for c in cells} for m in MODES}
    servers = {m: JupyterServer(ipykernel_ext=None, extra_args=a).start() for m, a in MODES.items()}
    try:
        tabs = {}
        for mode, server in servers.items():
            kernel_id = server.start_kernel(EXT)
            ws = KernelWebsocket(server, kernel_id)
            _, iopub = ws.run(SETUP)
            slider = TabView(iopub).text().strip()
            _, iopub = ws.run(COMMAND_SETUP)
            commanded = TabView(iopub).text().strip()
            _, iopub = ws.run(CUSTOM_SETUP)
            canvas = TabView(iopub).text().strip()
            figure = ""
            if "plotly" in cells:
                _, iopub = ws.run(PLOTLY_SETUP)
                figure = TabView(iopub).text().strip()
            probe = KernelWebsocket(server, server.start_kernel(EXT))
            assert server.proc is not None
            widgets = (slider, commanded, figure, canvas)
            tabs[mode] = (ws, probe, psutil.Process(server.proc.pid), widgets)
        for trial in range(args.trials):
            for cell in cells:
                for mode, (ws, probe, proc, made) in tabs.items():
                    results[mode][cell].append(one_cell(ws, probe, proc, cell, made))
            print(f"trial {trial + 1}/{args.trials} done", flush=True)
        for ws, probe, _, _ in tabs.values():
            ws.close()
            probe.close()
    finally:
        for server in servers.values():
            server.stop()
    rows = []
    for cell in cells:
        for mode in MODES:
            rs = results[mode][cell]
            rows.append(
                [
                    cell,
                    mode,
                    f"{sum(r['exact'] for r in rs)}/{len(rs)}",
                    fmt(median(r["commands"] for r in rs), 0),
                    fmt(median(r["worst_age"] for r in rs), 2, " s"),
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
            "commands",
            "worst age",
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
