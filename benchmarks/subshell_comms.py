"""Comm messages sent on a subshell as JupyterLab 4.4+ sends them: round trip, wait behind a cell.

Stock ipykernel 7 (``python3``) runs them on the subshell's thread, beside a running cell;
ipykernel_ext (``python3-ext``) runs them on the main shell, never beside a cell (PROTOCOL.md
section 7). Two figures, ours against stock in one run, CurveZMQ on:

Ours runs twice: as installed, and with ``--no-comm-echo`` (comm_echo publishes one IOPub
message more per comm message: the routing's own cost is the second column).

* ``round trip``: an idle kernel; a ``comm_msg`` sent on a subshell to a comm whose handler
  sends its data back, until that answer arrives on IOPub; the median of ``--messages`` round
  trips per trial, then the median over the trials (the kernels take turns, trial by trial).
  Ours goes through the main shell's queue instead of the subshell's thread: target <= 1.05x.
* ``round trip mid-cell``: the same round trips while a cell waits in a jupyter-ui-poll loop
  (``ui_events()``, polled every millisecond), as a dashboard cell waits for a click. Stock
  runs them on the subshell's thread beside the loop; ours lets them through from the loop, on
  the main shell (issue 44's target: at most 1.1x ours at rest).
* ``round trip mid-cell (awaiting async cell)``: the same while a cell awaits
  ``asyncio.sleep`` in a loop: ours handles them on the main shell's own loop as they come,
  with no poll to wait for (the path's own cost mid-cell).
* ``kernel CPU per round trip, by thread``: for both round trips, the kernel process's CPU
  time thread by thread (``harness.thread_cpu``, from ``/proc``), summed over the trials and
  divided by the round trips: a profile that sees every thread, where cProfile sees the main
  one only (ours handles a message at rest on the main thread, mid-cell on
  jupyter-ui-poll's; stock on the subshell's; CurveZMQ is libzmq's I/O threads).
* ``wait behind a cell of S s``: a cell that runs S seconds; the ``comm_msg`` sent as soon as
  the cell has started; the time until its answer. Stock answers at once (beside the cell,
  which is what garbles figures); ours after the cell: the price of safety, about S.

    python -m benchmarks subshell_comms            # 9 trials, 50 messages, cells of 1 and 3 s
    python -m benchmarks subshell_comms --quick    # 3 trials
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from jupyter_client import BlockingKernelClient, KernelManager

from benchmarks.trials import (
    EXT,
    KERNELS,
    STOCK,
    alternate,
    fmt,
    kernel,
    median,
    print_table,
    ratio,
)
from harness.messages import control_request
from harness.thread_cpu import named, since, thread_names, thread_times

TRIALS, QUICK_TRIALS = 9, 3
TIMEOUT = 60.0

ECHO_TARGET = """
from comm import create_comm
echo = create_comm(target_name='bench-echo')
echo.on_msg(lambda msg: echo.send(msg['content']['data']))
echo.comm_id
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=50, help="round trips per trial")
    parser.add_argument(
        "--cells", type=float, nargs="+", default=[1.0, 3.0], help="cell lengths (s)"
    )


def _comm_id(kc: BlockingKernelClient) -> str:
    reply = kc.execute_interactive(
        "", user_expressions={"x": "echo.comm_id"}, timeout=TIMEOUT, output_hook=lambda m: None
    )
    return reply["content"]["user_expressions"]["x"]["data"]["text/plain"].strip("'")


def _send(kc: BlockingKernelClient, subshell: str, comm_id: str, n: int) -> str:
    msg = kc.session.msg("comm_msg", {"comm_id": comm_id, "data": {"n": n}})
    msg["header"]["subshell_id"] = subshell
    kc.shell_channel.send(msg)
    return msg["header"]["msg_id"]


def _answer(kc: BlockingKernelClient, comm_id: str, n: int) -> None:
    deadline = time.monotonic() + TIMEOUT
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
        content = msg["content"]
        if (
            msg["msg_type"] == "comm_msg"
            and content.get("comm_id") == comm_id
            and content.get("data") == {"n": n}
        ):
            return


def _setup(kc: BlockingKernelClient) -> tuple[str, str]:
    kc.execute_interactive(ECHO_TARGET, timeout=TIMEOUT, output_hook=lambda m: None)
    subshell = control_request(kc, "create_subshell_request")["content"]["subshell_id"]
    return subshell, _comm_id(kc)


def round_trips(
    kc: BlockingKernelClient, subshell: str, comm_id: str, n: int, pid: int
) -> tuple[float, dict[int, float]]:
    """The median of ``n`` round trips, and the kernel's CPU seconds by thread id meanwhile."""
    times = []
    before = thread_times(pid)
    for i in range(n):
        start = time.perf_counter()
        _send(kc, subshell, comm_id, i)
        _answer(kc, comm_id, i)
        times.append(time.perf_counter() - start)
    return statistics.median(times), since(before, thread_times(pid))


#: A cell that waits in jupyter-ui-poll's loop until its release file exists.
UI_LOOP = """
import pathlib, time
from jupyter_ui_poll import ui_events
_release = pathlib.Path({release!r})
print('STARTED', flush=True)
with ui_events() as poll:
    while not _release.exists():
        poll(10)
        time.sleep(0.001)
"""


def _started(kc: BlockingKernelClient, cell: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
        if msg["msg_type"] == "stream" and msg["parent_header"].get("msg_id") == cell:
            return


#: A cell that awaits until its release file exists (the kernel's own loop runs meanwhile).
AWAITING = """
import asyncio, pathlib
_release = pathlib.Path({release!r})
print('STARTED', flush=True)
while not _release.exists():
    await asyncio.sleep(0.05)
"""


def round_trips_mid_cell(
    kc: BlockingKernelClient,
    subshell: str,
    comm_id: str,
    n: int,
    pid: int,
    release: Path,
    cell: str,
) -> tuple[float, dict[int, float]]:
    """:func:`round_trips` while ``cell`` (:data:`UI_LOOP` or :data:`AWAITING`) waits (measured
    before it ends: jupyter-ui-poll's thread, which handles ours, ends with its loop)."""
    release.unlink(missing_ok=True)
    _started(kc, kc.execute(cell.format(release=str(release))))
    try:
        return round_trips(kc, subshell, comm_id, n, pid)
    finally:
        release.touch()
        kc.get_shell_msg(timeout=TIMEOUT)  # the cell's reply, before the next figure


def wait_behind(kc: BlockingKernelClient, subshell: str, comm_id: str, seconds: float) -> float:
    _started(
        kc, kc.execute(f"print('STARTED', flush=True)\nimport time as _t\n_t.sleep({seconds})")
    )
    start = time.perf_counter()
    _send(kc, subshell, comm_id, -1)
    _answer(kc, comm_id, -1)
    waited = time.perf_counter() - start
    kc.get_shell_msg(timeout=TIMEOUT)  # the cell's reply, before the next trial
    return waited


#: Ours without comm_echo (one IOPub message more per comm message a client sends): what the
#: routing itself costs, apart from that feature.
NO_ECHO = f"{EXT} --no-comm-echo"
VARIANTS = (*KERNELS, NO_ECHO)
AT_REST, MID_CELL = "round trip", "round trip mid-cell (ui_events)"
MID_AWAIT = "round trip mid-cell (awaiting async cell)"
#: The round-trip figures, each with the cell that waits meanwhile (None: at rest).
ROUND_TRIPS = {AT_REST: None, MID_CELL: UI_LOOP, MID_AWAIT: AWAITING}


def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, dict[str, list[float]]] = {k: {} for k in VARIANTS}
    # Kernel CPU seconds by variant, figure and thread id, summed over the trials.
    spent: dict[str, dict[str, Counter[int]]] = {k: {} for k in VARIANTS}
    with (
        kernel(STOCK) as (stock_km, stock),
        kernel(EXT) as (ext_km, ext),
        kernel(EXT, ["--no-comm-echo"]) as (no_echo_km, no_echo),
    ):
        clients = {STOCK: stock, EXT: ext, NO_ECHO: no_echo}
        pids = {STOCK: _pid(stock_km), EXT: _pid(ext_km), NO_ECHO: _pid(no_echo_km)}
        setups = {name: _setup(kc) for name, kc in clients.items()}
        release = Path(tempfile.mkdtemp(prefix="subshell-comms-")) / "release"
        for _, name in alternate(args.trials, VARIANTS):
            kc, (subshell, comm_id) = clients[name], setups[name]
            rows = results[name]
            pid = pids[name]
            for figure, cell in ROUND_TRIPS.items():
                if cell is None:
                    median_s, cpu = round_trips(kc, subshell, comm_id, args.messages, pid)
                else:
                    median_s, cpu = round_trips_mid_cell(
                        kc, subshell, comm_id, args.messages, pid, release, cell
                    )
                rows.setdefault(figure, []).append(median_s)
                spent[name].setdefault(figure, Counter()).update(cpu)
            for seconds in args.cells:
                rows.setdefault(f"wait behind a cell of {seconds:g} s", []).append(
                    wait_behind(kc, subshell, comm_id, seconds)
                )
        # Names after the trials: jupyter-ui-poll's thread starts with the first loop.
        by_thread = {
            name: {
                figure: named(cpu, thread_names(clients[name]), thread_times(pids[name]))
                for figure, cpu in figs.items()
            }
            for name, figs in spent.items()
        }
    table = []
    for figure in results[EXT]:
        theirs = median(results[STOCK][figure])
        ours, quiet = median(results[EXT][figure]), median(results[NO_ECHO][figure])
        digits = 2 if figure.startswith("wait") else 5
        table.append([figure, fmt(theirs, digits, " s"), fmt(ours, digits, " s"),
                      fmt(ratio(ours, theirs), 2, "x"), fmt(quiet, digits, " s"),
                      fmt(ratio(quiet, theirs), 2, "x")])  # fmt: skip
    print(f"comm messages on a subshell, {args.trials} trials, medians (CurveZMQ)")
    print_table(
        ["figure", "stock ipykernel", "ipykernel_ext", "ratio", "--no-comm-echo", "ratio"], table
    )
    print_thread_cpu(by_thread, args.trials * args.messages)
    for name in (EXT, NO_ECHO):
        at_rest = median(results[name][AT_REST])
        costs = ", ".join(
            f"{fmt(ratio(median(results[name][figure]), at_rest), 2, 'x')} ({figure})"
            for figure in (MID_CELL, MID_AWAIT)
        )
        print(f"{name}: a round trip mid-cell against one at rest: {costs}")
    return {
        "trials": args.trials,
        "messages": args.messages,
        "results": results,
        "kernel_cpu_s_by_thread": by_thread,
    }


def _pid(km: KernelManager) -> int:
    process = km.provisioner.process  # type: ignore[union-attr]  # a started kernel's
    return int(process.pid)


def print_thread_cpu(by_thread: dict[str, dict[str, dict[str, float]]], trips: int) -> None:
    """Kernel CPU per round trip, µs, by thread: one column per kernel and figure (threads
    under 5 µs in every column left out, but counted in "all threads")."""
    columns = [by_thread[name][figure] for name in VARIANTS for figure in ROUND_TRIPS]
    threads = sorted({t for c in columns for t, s in c.items() if s * 1e6 / trips >= 5})
    table = [[t, *(fmt(c.get(t, 0.0) * 1e6 / trips, 0, " µs") for c in columns)] for t in threads]
    table.append(["all threads", *(fmt(sum(c.values()) * 1e6 / trips, 0, " µs") for c in columns)])
    print(f"kernel CPU per round trip, by thread ({trips} round trips each)")
    short = {AT_REST: "rest", MID_CELL: "ui_events", MID_AWAIT: "await"}
    heads = [f"{name}, {short[figure]}" for name in VARIANTS for figure in ROUND_TRIPS]
    print_table(["thread", *heads], table)
