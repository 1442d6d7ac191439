"""A big cell whose tab closes mid-cell: server CPU, peak memory, time to its last line.

Outputs that survive the tab: the server keeps the outputs of a cell whose tab went away
(``SharedChannelsConnection.keep_outputs``, docs/PROTOCOL.md section 6). What does that cost
the server, against the same cell with the tab open, and how soon is the cell whole again?

Each trial starts a fresh ``jupyter_server`` (CurveZMQ required, the websocket class
``SharedChannelsConnection``, the IOPub rate limit off so that the open tab gets every byte),
a notebook ``bench.ipynb`` with one code cell, a notebook session (``POST /api/sessions``) and
a websocket with JupyterLab's v1 protocol (``harness/kernel_websocket.py``). It sends the cell as
JupyterLab does (``metadata.cellId``); the cell prints (a) 100000 lines or (b) 50 MB in lines
of 1000 bytes, in 50 chunks spread over ``--seconds`` (6 s: longer than the grace, so that the
server takes the cell over while it still prints). Then:

* **tab open**: the websocket reads everything up to the cell's idle;
* **tab closed**: the websocket closes after the cell's first output. The server owns the
  cell after ``keep_outputs_grace`` (2 s) and writes its outputs: with collaboration on
  (jupyter-collaboration installed, ``--collab on``) into the live document of the notebook,
  whose room the trial opens before the cell, as a tab would; with it off, into the .ipynb
  once the cell ended and no tab is connected. The trial "reopens" when the server reports
  the kernel idle (``GET /api/kernels/<id>``, every 0.25 s): it reads the document (through
  ``harness/server_extensions/outputs_extension.py``'s ``GET /outputs-test/doc``) or the file
  (``GET /api/contents``) every 0.25 s until the cell's last line is there.

The 50 MB cell passes the server's per-cell bound (``keep_outputs_cell_bytes``, 8 MiB): the
server keeps the head and a note where it cut, so for it "complete" means the note and the
execution count are there (the ``kept`` column says which). The ``keep_outputs=False`` rows
are stock behaviour: the baseline cost with the tab open, and nothing kept when it closes.

Measured on the server process (psutil; its kernel is a child and not counted): CPU time
(user + system) from the ``execute_request`` until the last line is present, and its peak
RSS (``VmHWM``: every trial has a fresh server). Medians over trials; ratios are closed/open
with the same settings.

    python -m benchmarks outputs_tab              # 3 trials, both cells, collab on and off
    python -m benchmarks outputs_tab --quick      # 1 trial
    python -m benchmarks outputs_tab --cells lines --collab off --trials 5
"""

from __future__ import annotations

import argparse
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.trials import EXT, fmt, median, print_table, ratio
from harness.kernel_websocket import KernelWebsocket, stream_text
from harness.server import JupyterServer, ServerError

TRIALS, QUICK_TRIALS = 3, 1
SHARED = "ipykernel_ext.server.SharedChannelsConnection"
NOTEBOOK = "bench.ipynb"
CELL_ID = "bench-cell"
POLL = 0.25
#: Where the fold notes a cut (ipykernel_ext.server.outputs.fold.CUT_NOTE_KEY).
CUT_NOTE_KEY = "ipykernel_ext_cut"
MB50_LINES = 50 * 1024 * 1024 // 1000

#: cell name -> (its print loop, given its pause every CHUNK lines; its last line)
CELLS = {
    "100000 lines": (
        "import time\nfor i in range(100000):\n    print(f'line {{i}}')\n"
        "    if i % {chunk} == {last}:\n        time.sleep({pause})",
        100000,
        "line 99999",
    ),
    "50 MB": (
        "import time\npad = 'x' * 988\nfor i in range({n}):\n    print(f'{{i:010d}} {{pad}}')\n"
        "    if i % {chunk} == {last}:\n        time.sleep({pause})",
        MB50_LINES,
        f"{MB50_LINES - 1:010d} " + "x" * 988,
    ),
}
#: The cell prints in this many even chunks with a pause after each: with ``--seconds`` above
#: the grace, the server owns the cell while it still prints (the live-document case).
CHUNKS = 50


def cell_code(cell: str, seconds: float) -> tuple[str, str]:
    """The cell's code spreading its output over about ``seconds``, and its last line."""
    template, n, last_line = CELLS[cell]
    chunk = max(n // CHUNKS, 1)
    code = template.format(n=n, chunk=chunk, last=chunk - 1, pause=round(seconds / CHUNKS, 4))
    return code, last_line


@dataclass
class Trial:
    cell: str
    collab: bool
    keep_outputs: bool
    tab: str  # "open" or "closed"
    kept: str  # "last line", "cut note", "lost"
    execution_count: bool  # the cell's count was there with its last line
    cpu_seconds: float
    peak_rss_mb: float
    rss_growth_mb: float  # VmHWM - RSS just before the execute_request
    to_last_line: float | None  # execute_request sent -> last line present
    reopen_to_last_line: float | None  # kernel idle (the reopen) -> last line present


def proc_status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def cpu_seconds(proc: Any) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def notebook(code: str) -> dict[str, Any]:
    cell: dict[str, Any] = {
        "cell_type": "code",
        "id": CELL_ID,
        "source": code,
        "metadata": {},
        "outputs": [],
        "execution_count": None,
    }
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "cells": [cell],
        "metadata": {"kernelspec": {"name": EXT, "display_name": EXT, "language": "python"}},
    }


def text_of(output: dict[str, Any]) -> str:
    text = output.get("text", "")
    return "".join(text) if isinstance(text, list) else str(text)


def verdict(cell: dict[str, Any] | None, last_line: str) -> str | None:
    """What a cell read from the document or the file holds: None while incomplete."""
    if cell is None:
        return None
    outputs = cell.get("outputs") or []
    stdout = "".join(text_of(o) for o in outputs if o.get("output_type") == "stream")
    if stdout.rstrip("\n").endswith(last_line):
        return "last line"
    cut = any(CUT_NOTE_KEY in (o.get("metadata") or {}) for o in outputs)
    if cut and cell.get("execution_count") is not None:
        return "cut note"
    return None


def find_cell(cells: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((c for c in cells if c.get("id") == CELL_ID), None)


class Bench:
    """One fresh server, notebook, session (and room) for one trial."""

    def __init__(self, collab: bool, keep: bool, code: str) -> None:
        # a Python literal on the command line (traitlets parses it so)
        extensions = repr({"outputs_extension": True, "jupyter_server_ydoc": collab})
        self.collab = collab
        self.server = JupyterServer(
            encryption=True,
            extra_args=[
                f"--ServerApp.kernel_websocket_connection_class={SHARED}",
                "--ZMQChannelsWebsocketConnection.limit_rate=False",
                f"--ServerApp.jpserver_extensions={extensions}",
                f"--SharedChannelsConnection.keep_outputs={keep}",
            ],
        )
        self.code = code

    def __enter__(self) -> Bench:
        import psutil

        self.server.start()
        assert self.server.proc is not None  # start() made it
        self.proc = psutil.Process(self.server.proc.pid)
        self.server.api(
            "PUT",
            f"api/contents/{NOTEBOOK}",
            {"type": "notebook", "format": "json", "content": notebook(self.code)},
        )
        session = self.server.api(
            "POST",
            "api/sessions",
            {"path": NOTEBOOK, "name": NOTEBOOK, "type": "notebook", "kernel": {"name": EXT}},
            timeout=120,
        )
        self.kernel_id = session["kernel"]["id"]
        if self.collab:  # the room a tab of the notebook would have open
            self.server.api(
                "POST",
                "outputs-test/collab",
                {"path": NOTEBOOK, "cell_id": CELL_ID, "messages": [], "create": True},
            )
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    def read_cell(self) -> dict[str, Any] | None:
        if self.collab:
            cells = self.server.api("GET", f"outputs-test/doc?path={NOTEBOOK}")["cells"]
        else:
            cells = self.server.api("GET", f"api/contents/{NOTEBOOK}?content=1")["content"]["cells"]
        return find_cell(cells)

    def wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.server.kernel_model(self.kernel_id)["execution_state"] != "idle":
            if time.monotonic() > deadline:
                raise TimeoutError(f"kernel not idle in {timeout} s")
            time.sleep(POLL)


def run_trial(
    cell: str, collab: bool, keep: bool, tab: str, seconds: float, timeout: float
) -> Trial:
    code, last_line = cell_code(cell, seconds)
    with Bench(collab, keep, code) as bench:
        ws = KernelWebsocket(bench.server, bench.kernel_id, session_id=uuid.uuid4().hex)
        rss_before = bench.proc.memory_info().rss / 2**20
        cpu0, start = cpu_seconds(bench.proc), time.perf_counter()
        msg_id = ws.execute(code, metadata={"cellId": CELL_ID})
        reopen = None
        if tab == "open":
            with ws:
                reply, iopub = ws.collect_execution(msg_id, timeout=timeout)
            done = time.perf_counter()
            text = stream_text(iopub)
            kept = "last line" if text.rstrip("\n").endswith(last_line) else "lost"
            count = reply["content"].get("execution_count") is not None
        else:
            ws.recv_until(
                lambda m: m["msg_type"] == "stream" and m["parent_header"].get("msg_id") == msg_id,
                timeout,
            )
            ws.close()
            bench.wait_idle(timeout)
            reopen = time.perf_counter()
            # Without keep_outputs nothing will come: look once the server would have written.
            deadline = reopen + (timeout if keep else 5)
            kept, count = "lost", False
            while time.perf_counter() < deadline:
                try:
                    found = bench.read_cell()
                except ServerError:
                    found = None  # the file mid-write, or no room: read again
                if verdict(found, last_line):
                    kept = verdict(found, last_line) or "lost"
                    count = found is not None and found.get("execution_count") is not None
                    break
                time.sleep(POLL)
            done = time.perf_counter()
        cpu = cpu_seconds(bench.proc) - cpu0
        peak = proc_status_kb(bench.proc.pid, "VmHWM") / 1024
    lost = kept == "lost"
    return Trial(
        cell=cell,
        collab=collab,
        keep_outputs=keep,
        tab=tab,
        kept=kept,
        execution_count=count,
        cpu_seconds=cpu,
        peak_rss_mb=peak,
        rss_growth_mb=peak - rss_before,
        to_last_line=None if lost else done - start,
        reopen_to_last_line=None if lost or reopen is None else done - reopen,
    )


def summarize(trials: list[Trial]) -> None:
    keys = sorted(
        {(t.cell, t.collab, t.keep_outputs) for t in trials},
        key=lambda k: (list(CELLS).index(k[0]), not k[1], not k[2]),
    )
    rows = []
    for cell, collab, keep in keys:
        group = {
            tab: [
                t
                for t in trials
                if (t.cell, t.collab, t.keep_outputs, t.tab) == (cell, collab, keep, tab)
            ]
            for tab in ("open", "closed")
        }
        med = {
            tab: {
                f: median(getattr(t, f) for t in mine)
                for f in (
                    "cpu_seconds",
                    "peak_rss_mb",
                    "rss_growth_mb",
                    "to_last_line",
                    "reopen_to_last_line",
                )
            }
            for tab, mine in group.items()
        }
        for tab, mine in group.items():
            if not mine:
                continue
            m, o = med[tab], med["open"]
            closed = tab == "closed"
            kept = sorted({t.kept for t in mine})
            rows.append(
                [
                    cell,
                    "on" if collab else "off",
                    str(keep),
                    tab,
                    f"{'/'.join(kept)} ({sum(t.kept != 'lost' for t in mine)}/{len(mine)})",
                    fmt(m["cpu_seconds"], 2, " s"),
                    fmt(ratio(m["cpu_seconds"], o["cpu_seconds"]), 2, "x") if closed else "",
                    fmt(m["peak_rss_mb"], 0, " MB"),
                    fmt(m["rss_growth_mb"], 0, " MB"),
                    fmt(ratio(m["rss_growth_mb"], o["rss_growth_mb"]), 2, "x") if closed else "",
                    fmt(m["to_last_line"], 1, " s"),
                    fmt(m["reopen_to_last_line"], 2, " s") if closed else "",
                ]
            )
    print_table(
        [
            "cell",
            "collab",
            "keep_outputs",
            "tab",
            "kept (trials)",
            "server CPU",
            "closed/open",
            "peak RSS",
            "RSS growth",
            "closed/open",
            "execute to last line",
            "reopen to last line",
        ],
        rows,
        markdown=True,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cells",
        default="lines,50mb",
        help="comma-separated: lines (100000 lines), 50mb (default both)",
    )
    parser.add_argument(
        "--collab",
        default="on,off",
        help="collaboration rows: on, off or on,off (default on,off; on needs "
        "jupyter-collaboration, pip install '.[collab]')",
    )
    parser.add_argument(
        "--keep", default="true,false", help="keep_outputs values (default true,false)"
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=6,
        help="how long the cell spreads its output over, in 50 chunks "
        "(default 6 s: past the 2 s grace; 0: as fast as it can print)",
    )
    parser.add_argument("--timeout", type=float, default=300, help="hang guard per step, s")


def run(args: argparse.Namespace) -> dict[str, Any]:
    names = {"lines": "100000 lines", "50mb": "50 MB"}
    cells = [names[c.strip().lower()] for c in args.cells.split(",")]
    collabs = [c.strip() == "on" for c in args.collab.split(",")]
    keeps = [k.strip().lower() == "true" for k in args.keep.split(",")]
    if True in collabs:
        try:
            import jupyter_server_ydoc  # noqa: F401
        except ImportError:
            print("jupyter-collaboration is not installed: the collab rows are skipped")
            collabs = [c for c in collabs if not c]
    trials: list[Trial] = []
    print(f"{args.trials} trial(s) per row, a fresh server each (kernel {EXT}, CurveZMQ)")
    for i in range(args.trials):
        for cell in cells:
            for collab in collabs:
                for keep in keeps:
                    for tab in ("open", "closed"):
                        t = run_trial(cell, collab, keep, tab, args.seconds, args.timeout)
                        trials.append(t)
                        print(
                            f"  trial {i + 1} {cell:12} collab={'on' if collab else 'off':3} "
                            f"keep={keep!s:5} tab {tab:6}: {t.kept}, CPU {t.cpu_seconds:.2f} s, "
                            f"peak {t.peak_rss_mb:.0f} MB (+{t.rss_growth_mb:.0f}), "
                            f"last line {fmt(t.to_last_line, 1, ' s')}"
                            + (
                                f" (reopen +{fmt(t.reopen_to_last_line, 2, ' s')})"
                                if tab == "closed"
                                else ""
                            ),
                            flush=True,
                        )
    print()
    summarize(trials)
    return {"trials": [asdict(t) for t in trials]}


if __name__ == "__main__":  # python benchmarks/NAME.py: through the runner
    from benchmarks.runner import script

    script(__file__)
