"""Time from a new server's start to a tab's exact view of a cell that ran through a kill -9.

A cell survives its server (docs/PROTOCOL.md section 9): the kernel goes on, the next server
takes it back under the same id and the kernel's journal gives what it printed while no
server was up. This measures how long that takes to reach a user. Each trial: a real
``jupyter_server`` as installed (the extension on, CurveZMQ), a notebook session on
``python3-ext``, a cell paced by barrier files (:mod:`harness.outputs_notebook`) run from a
websocket as JupyterLab sends it, printed up to ``line 2``; the server killed with ``kill
-9``; lines printed while no server is up (waited for in the kernel's journal); the server
started again on the same folders, and the clock starts there. Three ways, taking turns:

* ``running``: the same session's websocket opens as soon as the server answers (a tab whose
  reconnection try falls then); timed to the moment its view of the cell (folded as
  JupyterLab folds it) is exactly the lines printed so far, once each;
* ``ended``: the cell ended while no server was up; timed to the tab's exact view of the
  whole cell and its ``execute_reply`` (the prompt's count), whichever comes last;
* ``no tab``: the cell ended while no server was up and no tab comes back; timed to the
  ``.ipynb`` holding the whole cell and its count (after the server's ``keep_outputs_grace``
  of 2 s, for a tab that might come back).

Also timed: the server's own start to its first answer (``GET /api/status``, polled every
0.2 s), with a kernel to take back and, the first start of each trial, with none. Stock has
nothing to time: a stock server's kernels die with it, and the cell with them.

    python -m benchmarks take_back            # 5 trials each
    python -m benchmarks take_back --quick    # 2 trials each
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial
from typing import Any

from benchmarks.trials import alternate, print_table
from harness.journal import journal_of
from harness.kernel_websocket import KernelWebsocket
from harness.outputs_notebook import HANG, K, N, Notebook, lines, stream
from harness.polling import wait_until
from harness.server import JupyterServer
from harness.tab_view import TabView
from ipykernel_ext.server.lasting.records import RecordFiles

TRIALS, QUICK_TRIALS = 5, 2
RUNNING, ENDED, NO_TAB = "running", "ended", "no tab"
CONDITIONS = (RUNNING, ENDED, NO_TAB)
#: Lines the running cell has printed when the new server starts (K + 1 before the kill).
SO_FAR = K + 3


def view(messages: list[dict[str, Any]], msg_id: str) -> list[dict[str, Any]]:
    return TabView(
        [
            m
            for m in messages
            if m["channel"] == "iopub" and m["parent_header"].get("msg_id") == msg_id
        ]
    ).outputs


def is_reply(msg_id: str, msg: dict[str, Any]) -> bool:
    return bool(msg["msg_type"] == "execute_reply" and msg["parent_header"].get("msg_id") == msg_id)


def read_to_view(ws: KernelWebsocket, msg_id: str, whole: str, reply: bool) -> float:
    """The ``received`` time of the message after which the tab's view of the cell is exactly
    ``whole`` (and, with ``reply``, it has the cell's ``execute_reply``)."""
    # What came while the websocket waited for its kernel_info reply is in its backlog.
    backlog, ws.backlog = ws.backlog, []
    messages: list[dict[str, Any]] = []
    while True:
        msg = backlog.pop(0) if backlog else ws.recv(HANG)
        messages.append(msg)
        replied = not reply or any(is_reply(msg_id, m) for m in messages)
        if replied and view(messages, msg_id) == [stream(whole)]:
            return float(msg["received"])


def session_kept(server: JupyterServer, kernel_id: str) -> bool:
    """Whether the kernel's state file holds its notebook session (written within a second)."""
    record = RecordFiles(server.runtime_dir).read(kernel_id)
    return record is not None and bool(record.sessions)


def trial(condition: str) -> dict[str, float]:
    server = JupyterServer(ipykernel_ext=True, stop_timeout=30)
    t0 = time.perf_counter()
    server.start()
    out = {"first start": time.perf_counter() - t0}
    try:
        nb = Notebook(server, "take-back.ipynb")
        wait_until(partial(session_kept, server, nb.kernel_id), HANG, "the session kept")
        ws = KernelWebsocket(server, nb.kernel_id)
        msg_id, _ = nb.run_to_line_k(ws)
        record = RecordFiles(server.runtime_dir).read(nb.kernel_id)
        assert record is not None
        server.kill()
        ws.close()
        ended = condition != RUNNING
        nb.release(N if ended else SO_FAR)
        wait_until(
            partial(journal_of, record.connection_info),
            HANG,
            "the lines printed while no server was up, journaled",
            done=lambda cells: (
                [(c["state"], c["nbytes"]) for c in cells]
                == [("ended" if ended else "running", len(lines(N if ended else SO_FAR)))]
            ),
        )
        t0 = time.perf_counter()
        server.start()
        out["start"] = time.perf_counter() - t0
        if condition == NO_TAB:
            nb.wait_on_disk(lambda c: c.execution_count is not None, "the cell in the file")
            out["view"] = time.perf_counter() - t0
            assert [dict(o) for o in nb.cell_on_disk().outputs] == [stream(lines(N))]
            return out
        back = KernelWebsocket(server, nb.kernel_id, ws.session_id, ready_on="control")
        whole = lines(N if ended else SO_FAR)
        out["view"] = read_to_view(back, msg_id, whole, reply=ended) - t0
        if not ended:  # the cell ends before the server stops (not timed)
            nb.release(N)
            back.recv_until(
                lambda m: (
                    m["msg_type"] == "execute_reply" and m["parent_header"]["msg_id"] == msg_id
                ),
                timeout=HANG,
            )
        back.close()
        return out
    finally:
        server.stop()


def run(args: argparse.Namespace) -> dict[str, Any]:
    print(f"From a new server's start to the exact view (medians of {args.trials}, seconds)")
    rows: dict[str, list[dict[str, float]]] = {c: [] for c in CONDITIONS}
    for _, condition in alternate(args.trials, CONDITIONS, rotate=True):
        rows[condition].append(trial(condition))
    firsts = [r["first start"] for c in CONDITIONS for r in rows[c]]

    def med(c: str, key: str) -> str:
        return f"{statistics.median(r[key] for r in rows[c]):.2f}"

    print_table(
        ["cell", "server answers", "exact view", "slowest view"],
        [
            [c, med(c, "start"), med(c, "view"), f"{max(r['view'] for r in rows[c]):.2f}"]
            for c in CONDITIONS
        ],
    )
    first = statistics.median(firsts)
    print(f"\nThe same server with no kernel to take back answers in {first:.2f} s")
    return {"trials": rows, "first_start_median": first}


if __name__ == "__main__":  # python benchmarks/NAME.py: through the runner
    from benchmarks.runner import script

    script(__file__)
