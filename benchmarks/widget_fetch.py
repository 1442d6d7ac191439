"""Fetching every widget model's state: per-widget request_state, the control comm, and ours.

Three ways a frontend that (re)connects gets the state of every live widget model:

* ``per-widget``: one ``request_state`` comm_msg per model, answered by one ``update``
  comm_msg per model on IOPub (what the widget manager did before the control comm);
* ``control comm``: ipywidgets' ``jupyter.widget.control`` comm, ``request_states`` on shell,
  one ``update_states`` comm_msg back on IOPub (to every client). On an idle ipykernel_ext it
  is answered by the kernel's snapshot on the main shell; the benchmark also times the same
  comm answered by ipywidgets' own handler there (``answer_while_busy`` off for that trial),
  and compares the idle comm path of both kernels in a table of its own;
* ``widget_state``: ipykernel_ext's ``widget_state_request`` on control, one reply to the
  requester (``ipykernel_ext.client.fetch_widget_states``).

Each time is a client round trip: from sending the request to having the states decoded with
their buffers in place. Stock ipykernel (``python3``) and ipykernel_ext (``python3-ext``) run
side by side, with CurveZMQ on every socket; the control comm and ``widget_state`` trials are
interleaved on the same kernel. Another table times the kernel's own work (state, buffers,
JSON packing) in process, without the transport.

Scenarios: a GridBox of 1000 Buttons (3002 models), 200 Image widgets of 100 kB (400 models).
This module keeps the round trips and the run; the kernel-side and transport floors and the
tables are in ``benchmarks/widget_fetching/``.

    python -m benchmarks widget_fetch            # 7 runs (3 for per-widget)
    python -m benchmarks widget_fetch --quick    # 3 runs (1 for per-widget)
    python -m benchmarks widget_fetch --quick --only Buttons --plain
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from queue import Empty
from typing import Any

from jupyter_client import BlockingKernelClient

from benchmarks.trials import EXT, STOCK, alternate, kernel
from benchmarks.widget_fetching.floors import KERNEL_SIDE, frame_sizes, transport_floor
from benchmarks.widget_fetching.tables import report
from harness.cells import run_cell
from harness.messages import drain_iopub, send, shell_reply
from harness.widget_control import ipywidgets_answering, open_control_comm, update_states
from ipykernel_ext.client import fetch_widget_states

TRIALS, QUICK_TRIALS = 7, 3
#: Quiet seconds that end a drain of IOPub between the steps.
QUIET = 0.3


def cell_stdout(kc: BlockingKernelClient, code: str, timeout: float = 300) -> str:
    """Run ``code`` up to its idle; its stdout (an error in the cell raises)."""
    messages = run_cell(
        kc, code, timeout, keep=lambda m: m["msg_type"] in ("stream", "error")
    ).messages
    for msg in messages:
        if msg["msg_type"] == "error":
            raise RuntimeError("\n".join(msg["content"]["traceback"]))
    return "".join(msg["content"]["text"] for msg in messages)


SCENARIOS = {
    "1000 Buttons": (
        "import ipywidgets as _w\n"
        "_w.Widget.close_all()\n"
        "_b = [_w.Button(description=f'button {i}') for i in range({n})]\n"
        "_g = _w.GridBox(_b)\n"
        "print(len(_w.widgets.widget._instances))\n"
    ),
    "200 Images of 100 kB": (
        "import os, ipywidgets as _w\n"
        "_w.Widget.close_all()\n"
        "_b = [_w.Image(value=os.urandom({kb} * 1000), format='png') for i in range({n})]\n"
        "print(len(_w.widgets.widget._instances))\n"
    ),
}


def comm_ids(kc: BlockingKernelClient) -> list[str]:
    reply = shell_reply(kc, kc.comm_info(target_name="jupyter.widget"))
    return list(reply["content"]["comms"])


def put_buffers(states: dict[str, Any], paths: list[list[Any]], buffers: list[Any]) -> None:
    for path, buffer in zip(paths, buffers, strict=True):
        target = states
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = buffer


def fetch_control_comm(
    kc: BlockingKernelClient, comm_id: str, timeout: float = 60
) -> dict[str, Any] | None:
    """``request_states`` on the control comm; the states with buffers in place (None: lost)."""
    try:
        msg = update_states(kc, comm_id, timeout)
    except AssertionError:  # none within the timeout
        return None
    data = msg["content"]["data"]
    put_buffers(data["states"], data["buffer_paths"], msg["buffers"])
    return data["states"]


def fetch_per_widget(
    kc: BlockingKernelClient, ids: list[str], window: int = 200, quiet: float = 10
) -> int:
    """One ``request_state`` per model, at most ``window`` in flight; returns the lost count."""
    waiting = set(ids)
    pending = list(ids)
    in_flight = 0
    while waiting:
        while pending and in_flight < window:
            send(kc, "comm_msg", {"comm_id": pending.pop(), "data": {"method": "request_state"}})
            in_flight += 1
        try:
            msg = kc.get_iopub_msg(timeout=quiet)
        except Empty:
            return len(waiting)  # no message for `quiet` seconds: the rest is lost
        content = msg["content"]
        if msg["msg_type"] == "comm_msg" and content["data"].get("method") == "update":
            comm_id = content["comm_id"]
            if comm_id in waiting:
                state = content["data"]["state"]
                put_buffers(state, content["data"].get("buffer_paths", []), msg["buffers"])
                waiting.discard(comm_id)
                in_flight -= 1
    return 0


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def per_widget_trials(
    kc: BlockingKernelClient, ids: list[str], runs: int, window: int
) -> tuple[list[float], int]:
    """The times of the per-widget fetches that lost nothing; the models lost in all."""
    times: list[float] = []
    lost = 0
    for _ in range(runs):
        seconds, missed = timed(lambda: fetch_per_widget(kc, ids, window))
        lost += missed
        if not missed:
            times.append(seconds)
        drain_iopub(kc, QUIET)
    return times, lost


def control_trials(
    kc: BlockingKernelClient, name: str, trials: int
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The control comm (on ipykernel_ext also ipywidgets' handler and widget_state), interleaved.

    On ipykernel_ext "comm" is the idle kernel's control comm answered by our snapshot,
    "theirs" the same comm answered by ipywidgets' handler (the switch turned off for that
    trial only, outside the timing) and "ours" ``widget_state_request``. Returns the row's
    times, losses and equality checks, and the last widget_state reply (None on stock).
    """
    control_id = open_control_comm(kc)
    drain_iopub(kc, QUIET)
    methods = ["comm", "ours", "theirs"] if name == EXT else ["comm"]
    times: dict[str, list[float]] = {m: [] for m in ("comm", "ours", "theirs")}
    states: dict[str, Any] = {}
    lost = 0
    reply = None
    for _, method in alternate(trials, methods, rotate=True):
        if method == "ours":
            seconds, reply = timed(lambda: fetch_widget_states(kc, timeout=60))
            times["ours"].append(seconds)
            states["ours"] = reply["states"]
            continue
        # "theirs": ipywidgets' handler answers; the switch cells are outside the timing.
        with ipywidgets_answering(kc) if method == "theirs" else nullcontext():
            if method == "theirs":
                drain_iopub(kc, quiet=0.05)
            seconds, got = timed(lambda: fetch_control_comm(kc, control_id))
        if got is None:
            lost += 1
        else:
            times[method].append(seconds)
            states[method] = got
        drain_iopub(kc, quiet=0.05)

    def same(a: str, b: str) -> bool | None:
        return _same_states(states[a], states[b]) if a in states and b in states else None

    row = {**times, "comm_lost": lost, "equal": same("theirs", "ours")}
    return dict(row, comm_equal=same("theirs", "comm")), reply


def bench_kernel(name: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    with kernel(name, curve=not args.plain) as (_, kc):
        for scenario, template in SCENARIOS.items():
            if args.only not in scenario:
                continue
            n = args.buttons if scenario.startswith("1000") else args.images
            code = template.replace("{n}", str(n)).replace("{kb}", str(args.image_kb))
            models = int(cell_stdout(kc, code).strip())
            drain_iopub(kc, QUIET)
            ids = comm_ids(kc)
            label = scenario.replace("1000", str(args.buttons)).replace("200", str(args.images))
            label = label.replace("100 kB", f"{args.image_kb} kB")
            per_widget, per_widget_lost = per_widget_trials(
                kc, ids, args.per_widget_runs, args.window
            )
            control, reply = control_trials(kc, name, args.trials)
            row = {"kernel": name, "scenario": label, "models": models, **control}
            row.update(per_widget=per_widget, per_widget_lost=per_widget_lost)
            if name == EXT:
                out = cell_stdout(kc, KERNEL_SIDE.format(runs=args.trials))
                row["kernel_side"] = json.loads(out.strip().splitlines()[-1])
            if reply is not None:
                row["reply_frames"] = frame_sizes(reply)
            rows.append(row)
            print(f"  {name:12} {label}: done", file=sys.stderr, flush=True)
    return rows


def _same_states(a: dict[str, Any], b: dict[str, Any]) -> bool:
    def plain(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [plain(v) for v in x]
        if isinstance(x, memoryview | bytearray):
            return bytes(x)
        return x

    return plain(a) == plain(b)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runs",
        type=int,
        dest="trials",
        metavar="N",
        default=argparse.SUPPRESS,
        help="control comm / widget_state runs (the same as --trials)",
    )
    parser.add_argument(
        "--per-widget-runs", type=int, help="per-widget fetches (default 3; 1 with --quick)"
    )
    parser.add_argument(
        "--window", type=int, default=200, help="per-widget: request_state messages in flight"
    )
    parser.add_argument("--buttons", type=int, default=1000)
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--image-kb", type=int, default=100)
    parser.add_argument("--only", default="", help="run the scenarios whose name has this")
    parser.add_argument("--plain", action="store_true", help="no CurveZMQ (default: required)")
    parser.add_argument(
        "--kernels", default=f"{STOCK},{EXT}", help="comma-separated kernelspec names"
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.per_widget_runs is None:
        args.per_widget_runs = 1 if args.quick else 3
    rows: list[dict[str, Any]] = []
    for name in args.kernels.split(","):
        rows += bench_kernel(name, args)
    for row in rows:
        if row.get("reply_frames"):  # ipykernel_ext's rows: the widget_state reply's frames
            row["transport_floor_s"] = transport_floor(row["reply_frames"], args.trials, args.plain)
    report(rows, args)
    return {"plain": args.plain, "rows": rows}


if __name__ == "__main__":  # python benchmarks/NAME.py: through the runner
    from benchmarks.runner import script

    script(__file__)
