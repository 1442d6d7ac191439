"""The cell journal's cost: a lasting kernel (journal on) against the same kernel without it.

A kernel launched to outlive its server keeps a journal of its cells (docs/PROTOCOL.md
section 9, "The cell journal"); this measures what that costs the kernel. ``python3-ext``
three ways, CurveZMQ on every socket, taking turns in every trial: as a server launches it to
last (``IPYKERNEL_EXT_ORPHAN_TIMEOUT`` set: journal on), the same with no journal
(``IPYKERNEL_EXT_JOURNAL_BYTES=0``: what the journal alone costs), and as any other launcher
starts it (not lasting). Loads, each a cell timed from its ``execute_request`` to its
``idle`` with a client reading every IOPub message:

* ``lines``: 20000 ``print(i, flush=True)`` (one stream message each: the journal folds each);
* ``displays``: 2000 ``display(i)``;
* ``widgets``: a GridBox of 1000 Buttons (3002 ``comm_open``: journaled cell, not outputs);
* ``comm``: 500 round trips of a small comm message (a client's ``comm_msg``, the kernel's
  reply), the median round trip.

And the memory the journal holds through a long log: a cell printing ``--log-mb`` MB (default
600: ten minutes of a 1 MB/s log, as fast as the kernel prints it) in 100-byte lines, flushed
every 1000 lines; the kernel's resident memory after it (journal on and off) and the bytes
the journal says it holds (bounded at 32 MiB).

And, with ``--in-place ROUNDS``, the journal on against off in one lasting kernel: the same
kernel runs smaller loads (5000 prints, 1000 displays, 300 Buttons, 200 comm round trips)
``ROUNDS`` times each with its journal on and off in turn (a cell sets the IOPub thread's tap
and the kernel's journal, ``ExtKernelApp._start_journal``'s two wires, to the journal or to
``None``), so that what else the machine does hits both alike: the machine's drift between
kernels and trials, which the first table cannot tell from the journal, cancels out.

    python -m benchmarks journal            # 5 trials
    python -m benchmarks journal --quick    # 3 trials, a 60 MB log
    python -m benchmarks journal --in-place 16   # only the in-place comparison, 16 rounds
    python -m benchmarks journal --in-place 60 --loads comm   # one load, more rounds
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import psutil
from jupyter_client import BlockingKernelClient, KernelManager

from benchmarks.trials import alternate, print_table
from harness.journal import journal_of
from harness.kernels import EXT_KERNEL, new_client, start_kernel
from ipykernel_ext.protocol import JOURNAL_BYTES_ENV, ORPHAN_TIMEOUT_ENV

TRIALS, QUICK_TRIALS = 5, 3
ON, OFF, PLAIN = "journal on", "journal off", "not lasting"
#: The kernel as a server launches it to last, with its journal and with none; and as any
#: other launcher starts it (no orphan time-out, no journal).
CONDITIONS = (ON, OFF, PLAIN)

LOADS = {
    "lines": "for i in range(20000):\n    print(i, flush=True)\n",
    "displays": "for i in range(2000):\n    display(i)\n",
    "widgets": (
        "import ipywidgets as w\nw.GridBox([w.Button(description=str(i)) for i in range(1000)])\n"
    ),
}
COMM_TARGET = """\
def _echo(comm, msg):
    comm.on_msg(lambda m: comm.send({"n": m["content"]["data"]["n"]}))
get_ipython().kernel.comm_manager.register_target("journal-bench", _echo)
"""
COMM_ROUNDS = 500
#: The in-place loads: smaller, so that many rounds take turns in one kernel.
IN_PLACE_LOADS = {
    "lines": "for i in range(5000):\n    print(i, flush=True)\n",
    "displays": "for i in range(1000):\n    display(i)\n",
    "widgets": (
        "import ipywidgets as w\nw.GridBox([w.Button(description=str(i)) for i in range(300)])\n"
    ),
}
IN_PLACE_COMM_ROUNDS = 200
#: A cell that turns the journal on or off in the running kernel (both of its wires).
TOGGLE = """\
_app = get_ipython().kernel.parent
if not hasattr(_app, "_bench_journal"):
    _app._bench_journal = _app.kernel.journal
_app.kernel.journal = _app._bench_journal if {on} else None
_app.iopub_thread.tap = _app._bench_journal if {on} else None
"""
LOG_CELL = """\
import sys
line = "x" * 99 + "\\n"
for block in range({blocks}):
    sys.stdout.write(line * 1000)
    sys.stdout.flush()
"""


def start(condition: str) -> tuple[KernelManager, BlockingKernelClient]:
    env = dict(os.environ)
    env.pop(ORPHAN_TIMEOUT_ENV, None)
    env.pop(JOURNAL_BYTES_ENV, None)
    if condition != PLAIN:
        env[ORPHAN_TIMEOUT_ENV] = "3600"
    if condition == OFF:
        env[JOURNAL_BYTES_ENV] = "0"
    km = start_kernel(EXT_KERNEL, env=env)
    return km, new_client(km)


def timed_cell(kc: BlockingKernelClient, code: str, timeout: float = 600) -> float:
    """Seconds from the request to its ``idle``, reading every IOPub message."""
    t0 = time.perf_counter()
    msg_id = kc.execute(code)
    deadline = t0 + timeout
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.1, deadline - time.perf_counter()))
        if (
            msg["parent_header"].get("msg_id") == msg_id
            and msg["msg_type"] == "status"
            and msg["content"]["execution_state"] == "idle"
        ):
            return time.perf_counter() - t0


def comm_round_trip_ms(kc: BlockingKernelClient) -> float:
    """The median round trip of a small comm message."""
    timed_cell(kc, COMM_TARGET)
    return statistics.median(comm_round_trips_ms(kc, "journal-bench-comm", COMM_ROUNDS))


def comm_round_trips_ms(
    kc: BlockingKernelClient, comm_id: str, count: int = IN_PLACE_COMM_ROUNDS
) -> list[float]:
    """``count`` round trips of a small comm message on a new comm (its target registered)."""
    kc.shell_channel.send(
        kc.session.msg(
            "comm_open", {"comm_id": comm_id, "target_name": "journal-bench", "data": {}}
        )
    )
    rounds = []
    for n in range(count):
        t0 = time.perf_counter()
        kc.shell_channel.send(kc.session.msg("comm_msg", {"comm_id": comm_id, "data": {"n": n}}))
        while True:
            msg = kc.get_iopub_msg(timeout=60)
            if msg["msg_type"] == "comm_msg" and msg["content"]["data"].get("n") == n:
                break
        rounds.append((time.perf_counter() - t0) * 1000)
    return rounds


def cost_trial(condition: str) -> dict[str, float]:
    km, kc = start(condition)
    try:
        out = {name: timed_cell(kc, code) for name, code in LOADS.items()}
        out["comm"] = comm_round_trip_ms(kc)
        return out
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def memory_trial(condition: str, log_mb: int) -> tuple[float, float, int]:
    """The log's seconds, the kernel's RSS after it (MB), and the journal's bytes."""
    km, kc = start(condition)
    try:
        pid = km.provisioner.pid  # type: ignore[union-attr]  # a local kernel: it has one
        seconds = timed_cell(kc, LOG_CELL.format(blocks=log_mb * 10), timeout=3600)
        rss = psutil.Process(pid).memory_info().rss / 1e6
        cells = journal_of(dict(km.get_connection_info())) if condition == ON else []
        return seconds, rss, sum(c["nbytes"] for c in cells)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


IN_PLACE_NAMES = (*IN_PLACE_LOADS, "comm")


def in_place(rounds: int, names: tuple[str, ...]) -> dict[str, dict[str, list[float]]]:
    """Each load of ``names`` ``rounds`` times with the journal on and off in turn, in one
    lasting kernel."""
    km, kc = start(ON)
    times: dict[str, dict[str, list[float]]] = {ON: {}, OFF: {}}
    try:
        timed_cell(kc, COMM_TARGET)
        for r in range(rounds):
            for condition in (ON, OFF) if r % 2 == 0 else (OFF, ON):
                timed_cell(kc, TOGGLE.format(on=condition == ON))
                for name, code in IN_PLACE_LOADS.items():
                    if name in names:
                        times[condition].setdefault(name, []).append(timed_cell(kc, code))
                if "comm" in names:
                    rounds_ms = comm_round_trips_ms(kc, f"bench-{r}-{condition}")
                    times[condition].setdefault("comm", []).append(statistics.median(rounds_ms))
        return times
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-mb", type=int, help="MB the long log prints (600; 60 quick)")
    parser.add_argument(
        "--in-place",
        type=int,
        metavar="ROUNDS",
        help="only the journal on against off in one kernel, ROUNDS times in turn",
    )
    parser.add_argument(
        "--loads",
        nargs="+",
        choices=IN_PLACE_NAMES,
        default=list(IN_PLACE_NAMES),
        help="with --in-place: which loads (all by default)",
    )


def run_in_place(rounds: int, names: tuple[str, ...]) -> dict[str, Any]:
    print(f"The journal on against off in one lasting kernel ({rounds} rounds in turn, medians)")
    times = in_place(rounds, names)
    units = {n: "s" for n in IN_PLACE_LOADS if n in names} | (
        {"comm": "ms"} if "comm" in names else {}
    )
    # Each round's on/off ratio (the two ran back to back): their median and spread.
    paired = {
        n: sorted(a / b for a, b in zip(times[ON][n], times[OFF][n], strict=True)) for n in units
    }
    print_table(
        ["load", OFF, ON, "on/off", "round ratios: median (quartiles)"],
        [
            [
                n,
                *(f"{statistics.median(times[c][n]):.4f} {units[n]}" for c in (OFF, ON)),
                f"{statistics.median(times[ON][n]) / statistics.median(times[OFF][n]):.3f}x",
                f"{statistics.median(paired[n]):.3f}x ({paired[n][len(paired[n]) // 4]:.3f}"
                f"-{paired[n][(3 * len(paired[n])) // 4]:.3f})",
            ]
            for n in units
        ],
    )
    return {"in_place": times}


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.in_place:
        return run_in_place(args.in_place, tuple(args.loads))
    log_mb = args.log_mb or (60 if args.quick else 600)
    print(f"The cell journal's cost (python3-ext, CurveZMQ, medians of {args.trials})")
    costs: dict[str, list[dict[str, float]]] = {c: [] for c in CONDITIONS}
    for _, condition in alternate(args.trials, CONDITIONS, rotate=True):
        costs[condition].append(cost_trial(condition))
    names = [*LOADS, "comm"]
    medians = {
        c: {n: statistics.median(t[n] for t in rows) for n in names} for c, rows in costs.items()
    }
    units = {n: "s" for n in LOADS} | {"comm": "ms"}
    print_table(
        ["load", PLAIN, OFF, ON, "on/off", "on/not lasting"],
        [
            [
                n,
                *(f"{medians[c][n]:.3f} {units[n]}" for c in (PLAIN, OFF, ON)),
                f"{medians[ON][n] / medians[OFF][n]:.3f}x",
                f"{medians[ON][n] / medians[PLAIN][n]:.3f}x",
            ]
            for n in names
        ],
    )
    print(f"\nA {log_mb} MB log in 100-byte lines (one trial each)")
    memory = {c: memory_trial(c, log_mb) for c in (ON, OFF)}
    print_table(
        ["kernel", "log", "RSS after", "journal holds"],
        [
            [c, f"{s:.1f} s", f"{rss:.0f} MB", f"{held / 2**20:.1f} MiB" if c == ON else "-"]
            for c, (s, rss, held) in memory.items()
        ],
    )
    return {
        "costs": costs,
        "medians": medians,
        "log_mb": log_mb,
        "memory": {c: list(v) for c, v in memory.items()},
    }


if __name__ == "__main__":  # python benchmarks/NAME.py: through the runner
    from benchmarks.runner import script

    script(__file__)
