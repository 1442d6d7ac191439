"""A grid of Buttons on stock ipykernel and ipykernel_ext, plain TCP and CurveZMQ.

Each trial starts a fresh kernel through ``jupyter_client.KernelManager`` (CurveZMQ with
``transport_encryption="required"``, plain TCP with ``"disabled"``), imports ipywidgets,
then runs one cell that displays a ``GridBox`` of N Buttons: 3 N + 2 ``comm_open`` (each
Button with its layout and style, the grid and its layout), one ``display_data`` and the
``status: idle``. One client, with a session of its own, reads IOPub as fast as
jupyter_client can. A trial *lost messages* if any comm_open, the display_data or the idle
did not arrive; time to idle is from sending the execute_request to receiving its idle.

Reported per kernel, transport and N: trials that lost messages, mean comm_open lost, median
time to idle, and the ratio of ipykernel_ext's CurveZMQ time to stock's plain-TCP time
(target <= 1.05). ``--sweep`` also runs ipykernel_ext over CurveZMQ with several
``--iopub-sndhwm`` values, to choose the default. A PNG (messages received vs. Buttons) goes
to ``benchmarks/results/`` and ``docs/iopub_burst.png``. Kernels alternate trial by trial so
that machine noise hits both alike.

    python -m benchmarks iopub_burst                  # 10 trials, 500/1000/3000 Buttons
    python -m benchmarks iopub_burst --quick          # 3 trials
    python -m benchmarks iopub_burst --sweep --sweep-values 1000 10000 0
    python -m benchmarks iopub_burst --replot         # the plot again, from the --json file
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.burst import GridTrial, grid_counts, losses, run_grid
from benchmarks.plot import figure
from benchmarks.trials import (
    EXT,
    KERNELS,
    RESULTS,
    STOCK,
    fmt,
    kernel,
    print_table,
)

TRIALS, QUICK_TRIALS = 10, 3
#: Quiet after the execute_reply that means the idle was lost (as in the demo).
QUIET_S = 3.0
RESULTS_FILE = RESULTS / "iopub_burst.json"
#: Where the figure goes unless --plot says otherwise (git-ignored): the one in docs/ is
#: replaced only on purpose, with --plot docs/iopub_burst.png.
PLOT = RESULTS / "iopub_burst.png"


@dataclass
class Trial(GridTrial):
    transport: str = "curve"  # "tcp" or "curve"
    sndhwm: int | None = None  # --iopub-sndhwm given to ipykernel_ext, None: default / stock


def run_trial(name: str, transport: str, buttons: int, sndhwm: int | None, timeout: float) -> Trial:
    extra = [] if sndhwm is None else [f"--iopub-sndhwm={sndhwm}"]
    with kernel(name, extra, curve=transport == "curve") as (_, kc):
        result = run_grid(kc, buttons, timeout, quiet=QUIET_S)
    return Trial(name, buttons, **grid_counts(result), transport=transport, sndhwm=sndhwm)


def summarize(trials: list[Trial]) -> list[dict[str, Any]]:
    groups: dict[tuple[Any, ...], list[Trial]] = {}
    for t in trials:
        groups.setdefault((t.kernel, t.transport, t.sndhwm, t.buttons), []).append(t)
    return [
        {"kernel": name, "transport": transport, "sndhwm": sndhwm, "buttons": buttons}
        | losses(ts)
        for (name, transport, sndhwm, buttons), ts in sorted(
            groups.items(), key=lambda kv: (kv[0][3], kv[0][0], kv[0][1], kv[0][2] or -1)
        )
    ]


def print_summary(rows: list[dict[str, Any]]) -> None:
    header = ["kernel", "transport", "sndhwm", "buttons", "comm_open", "lossy", "mean lost"]
    print_table(
        [*header, "idle lost", "median s"],
        [
            [
                r["kernel"],
                r["transport"],
                "default" if r["sndhwm"] is None else r["sndhwm"],
                r["buttons"],
                r["expected"],
                f"{r['lossy_trials']}/{r['trials']}",
                f"{r['mean_lost']:.1f}",
                r["idle_lost"],
                fmt(r["median_s"]),
            ]
            for r in rows
        ],
        align="llrrrrrrr",
    )


def print_ratios(rows: list[dict[str, Any]]) -> None:
    def find(name: str, transport: str, buttons: int) -> dict[str, Any] | None:
        for r in rows:
            if (r["kernel"], r["transport"], r["sndhwm"], r["buttons"]) == (
                name,
                transport,
                None,
                buttons,
            ):
                return r
        return None

    print("\nipykernel_ext over CurveZMQ vs stock ipykernel over plain TCP (target <= 1.05)")
    for buttons in sorted({r["buttons"] for r in rows}):
        ours, stock_tcp = find(EXT, "curve", buttons), find(STOCK, "tcp", buttons)
        stock_curve = find(STOCK, "curve", buttons)
        if not ours or not stock_tcp or not ours["median_s"] or not stock_tcp["median_s"]:
            continue
        ratio = ours["median_s"] / stock_tcp["median_s"]
        vs_curve = ""
        if stock_curve and stock_curve["median_s"]:
            vs_curve = f", vs stock CurveZMQ {ours['median_s'] / stock_curve['median_s']:.2f}"
        print(
            f"  {buttons:>5} Buttons: {fmt(ours['median_s'])} s / {fmt(stock_tcp['median_s'])} s"
            f" = {ratio:.2f}{vs_curve}; ours lost in {ours['lossy_trials']}/{ours['trials']}"
        )


def plot(rows: list[dict[str, Any]], paths: list[Path]) -> None:
    """Share of comm_open received per trial (mean, and a bar down to the worst trial)."""
    with figure(paths, size=(7, 4.5)) as (_, [ax]):
        draw(ax, rows)


def draw(ax: Any, rows: list[dict[str, Any]]) -> None:
    styles = {
        (EXT, "curve"): ("tab:green", "o", "-", "ipykernel_ext, CurveZMQ"),
        (EXT, "tcp"): ("tab:olive", "^", "--", "ipykernel_ext, plain TCP"),
        (STOCK, "curve"): ("tab:red", "s", "-", "stock ipykernel, CurveZMQ"),
        (STOCK, "tcp"): ("tab:orange", "v", "--", "stock ipykernel, plain TCP"),
    }
    for (name, transport), (color, marker, line, label) in styles.items():
        sel = sorted(
            (
                r
                for r in rows
                if (r["kernel"], r["transport"], r["sndhwm"]) == (name, transport, None)
            ),
            key=lambda r: r["buttons"],
        )
        if not sel:
            continue
        xs = [r["buttons"] for r in sel]
        means = [100 * r["mean_received"] / r["expected"] for r in sel]
        worst = [100 * r["min_received"] / r["expected"] for r in sel]
        lossy = [f"{r['lossy_trials']}/{r['trials']}" for r in sel]
        ax.errorbar(
            xs,
            means,
            yerr=[[m - w for m, w in zip(means, worst, strict=True)], [0] * len(sel)],
            color=color,
            marker=marker,
            linestyle=line,
            capsize=4,
            label=f"{label} (trials with loss: {', '.join(lossy)})",
        )
    trials = max(r["trials"] for r in rows)
    ax.set_xlabel("Buttons in one GridBox (3 N + 2 comm_open)")
    ax.set_ylabel("comm_open received, % (bar: worst trial)")
    ax.set_xticks(sorted({r["buttons"] for r in rows}))
    ax.set_title(f"One cell, one jupyter_client reader, {trials} fresh kernels each")
    ax.legend(fontsize=7.5, loc="lower right")
    ax.grid(alpha=0.3)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--buttons", type=int, nargs="+", default=[500, 1000, 3000])
    parser.add_argument("--transports", nargs="+", default=["tcp", "curve"])
    parser.add_argument("--timeout", type=float, default=300, help="seconds per cell")
    parser.add_argument(
        "--sweep", action="store_true", help="also ipykernel_ext/CurveZMQ per --sweep-values"
    )
    parser.add_argument("--sweep-values", type=int, nargs="+", default=[1000, 10_000, 0])
    parser.add_argument("--sweep-only", action="store_true", help="only the sndhwm sweep")
    parser.add_argument("--plot", type=Path, default=PLOT, help=f"the figure (default {PLOT})")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--replot", action="store_true", help="only plot the --json results")


def run(args: argparse.Namespace) -> dict[str, Any] | None:
    if args.replot:
        plot(json.loads(args.json.read_text())["summary"], [args.plot])
        return None

    plan: list[tuple[str, str, int, int | None]] = []
    for _ in range(args.trials):
        for buttons in args.buttons:
            if not args.sweep_only:
                for transport in args.transports:
                    for name in KERNELS:  # alternate: noise hits both alike
                        plan.append((name, transport, buttons, None))
            if args.sweep or args.sweep_only:
                for value in args.sweep_values:
                    plan.append((EXT, "curve", buttons, value))

    trials: list[Trial] = []
    t0 = time.perf_counter()
    for i, (name, transport, buttons, sndhwm) in enumerate(plan, 1):
        trial = run_trial(name, transport, buttons, sndhwm, args.timeout)
        trials.append(trial)
        print(
            f"[{i}/{len(plan)} {time.perf_counter() - t0:5.0f}s] {name:<11} {transport:<5} "
            f"sndhwm={sndhwm if sndhwm is not None else 'default'} {buttons} Buttons: "
            f"{trial.comm_open}/{trial.expected} comm_open, display_data={trial.display_data},"
            f" idle={'yes' if trial.idle else 'LOST'}, {fmt(trial.seconds_to_idle)} s",
            flush=True,
        )

    rows = summarize(trials)
    print()
    print_summary(rows)
    print_ratios(rows)
    if not args.no_plot and not args.sweep_only:
        plot(rows, [args.plot])
    return {"trials": [asdict(t) for t in trials], "summary": rows}


if __name__ == "__main__":  # python benchmarks/NAME.py: through the runner
    from benchmarks.runner import script

    script(__file__)
