"""The ``widget_fetch`` benchmark's summary: the tables it prints from its rows.

Four tables: the client round trips (per-widget, control comm, ``widget_state``) per kernel
and scenario; the control comm on an idle kernel, stock against ipykernel_ext (our snapshot,
and ipywidgets' own handler); the transport floor; the kernel's own work in process
(:mod:`benchmarks.widget_fetching.floors`). A row is a dict ``benchmarks/widget_fetch.py``
builds (times in seconds, lists of runs); missing values print as ``-``.
"""

from __future__ import annotations

import argparse
from typing import Any

from benchmarks.trials import EXT, STOCK, fmt, median, print_table, ratio


def ms(values: list[float]) -> str:
    """The median in milliseconds, ``-`` if there is none."""
    seconds = median(values)
    return fmt(None if seconds is None else seconds * 1000, 1)


def ratio_of_medians(a: list[float], b: list[float], digits: int = 2, unit: str = "") -> str:
    value = ratio(median(a), median(b))
    return "" if value is None else fmt(value, digits) + unit


SAME = {True: "yes", False: "NO", None: "-"}


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print()
    transport = "plain TCP" if args.plain else "CurveZMQ"
    print(f"Client round trip, request sent to states usable (median ms; {transport})")
    header = ["kernel", "scenario", "models", "per-widget", "lost", "ctrl comm", "lost"]
    print_table(
        [*header, "widget_state", "ours/comm", "per-widget/ours", "same"],
        [
            [
                row["kernel"],
                row["scenario"],
                row["models"],
                ms(row["per_widget"]),
                row["per_widget_lost"],
                ms(row["comm"]),
                row["comm_lost"],
                ms(row["ours"]),
                # ours/comm: widget_state against ipywidgets' own handler, on the same kernel.
                ratio_of_medians(row["ours"], row["theirs"]),
                ratio_of_medians(row["per_widget"], row["ours"], 1, "x"),
                SAME[row["equal"]],
            ]
            for row in rows
        ],
        align="llrrrrrrrrr",
    )
    print(
        f"\nruns: {args.trials} (control comm, widget_state, interleaved), "
        f"{args.per_widget_runs} (per-widget); ctrl comm on ipykernel_ext: our idle snapshot; "
        "ours/comm and 'same': widget_state against ipywidgets' own handler on that kernel; "
        "'lost' counts replies that never came "
        "(per-widget: models; control comm: trials); "
        f"per-widget keeps {args.window} requests in flight"
    )
    print(f"\nControl comm on an idle kernel, client round trip (median ms; {transport})")
    print("(ipykernel_ext answers it with its snapshot on the main shell; stock and the")
    print(" ext kernel with answer_while_busy off, with ipywidgets' own handler)")
    stock_comm = {row["scenario"]: row["comm"] for row in rows if row["kernel"] == STOCK}
    print_table(
        ["scenario", "stock", "ext", "stock/ext", "ext, ipywidgets", "same"],
        [
            [
                row["scenario"],
                ms(stock_comm.get(row["scenario"], [])),
                ms(row["comm"]),
                ratio_of_medians(stock_comm.get(row["scenario"], []), row["comm"]),
                ms(row["theirs"]),
                SAME[row["comm_equal"]],
            ]
            for row in rows
            if row["kernel"] == EXT
        ],
    )
    print("('same': the ext kernel's two control comm answers carry the same states)")
    print("\nTransport floor: the same bytes once over a bare ROUTER/DEALER pair (median ms)")
    print_table(
        ["scenario", "MB", "floor ms"],
        [
            [
                row["scenario"],
                fmt(sum(row["reply_frames"]) / 1e6, 1),
                fmt(row["transport_floor_s"] * 1000, 1),
            ]
            for row in rows
            if row.get("transport_floor_s") is not None
        ],
    )
    print("\nIn the kernel, same process (median ms): state + buffers + JSON packing")
    print("(straightforward: get_state per widget, ipywidgets' _remove_buffers, pack)")
    header = ["scenario", "comm handler", "straightforward", "widget_state", "ours/comm"]
    print_table(
        [*header, "ours/straightforward"],
        [kernel_side_row(row) for row in rows if row.get("kernel_side")],
    )


def kernel_side_row(row: dict[str, Any]) -> list[str]:
    comm, plain, ours = (median(row["kernel_side"][k]) for k in ("comm", "plain", "ours"))
    in_ms = [fmt(None if x is None else x * 1000, 1) for x in (comm, plain, ours)]
    return [row["scenario"], *in_ms, fmt(ratio(ours, comm)), fmt(ratio(ours, plain))]
