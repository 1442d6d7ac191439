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

    python benchmarks/iopub_burst.py                  # 10 trials, 500/1000/3000 Buttons
    python benchmarks/iopub_burst.py --quick          # 3 trials
    python benchmarks/iopub_burst.py --sweep --sweep-values 1000 10000 0
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jupyter_client import BlockingKernelClient, KernelManager

from ipykernel_ext.demo import (  # the demo's burst, counted until idle (or quiet)
    BURST_CODE,
    run_cell,
)

STOCK, EXT = "python3", "python3-ext"
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PLOT_PATHS = [RESULTS / "iopub_burst.png", ROOT / "docs" / "iopub_burst.png"]

@dataclass
class Trial:
    kernel: str
    transport: str  # "tcp" or "curve"
    buttons: int
    sndhwm: int | None  # --iopub-sndhwm given to ipykernel_ext, None for its default / stock
    expected: int
    comm_open: int
    display_data: int
    idle: bool
    seconds_to_idle: float | None

    @property
    def lost(self) -> int:
        return self.expected - self.comm_open

    @property
    def lossy(self) -> bool:
        return self.lost > 0 or not self.idle or self.display_data < 1


def start(kernel: str, transport: str, extra: list[str]) -> tuple[KernelManager, Any]:
    encryption = "required" if transport == "curve" else "disabled"
    km = KernelManager(kernel_name=kernel, transport_encryption=encryption)
    km.start_kernel(extra_arguments=extra)
    # A client of its own (KernelManager.client() shares the manager's session).
    kc = BlockingKernelClient(connection_file=km.connection_file)
    kc.load_connection_file()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    return km, kc


def run_trial(
    kernel: str, transport: str, buttons: int, sndhwm: int | None, timeout: float
) -> Trial:
    extra = [] if sndhwm is None else [f"--iopub-sndhwm={sndhwm}"]
    km, kc = start(kernel, transport, extra)
    try:
        run_cell(kc, "import ipywidgets", timeout=60)  # import cost is not what we measure
        result = run_cell(kc, BURST_CODE.format(n=buttons), timeout=timeout)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    return Trial(
        kernel=kernel,
        transport=transport,
        buttons=buttons,
        sndhwm=sndhwm,
        expected=3 * buttons + 2,
        comm_open=result.comm_open,
        display_data=result.display_data,
        idle=result.idle,
        seconds_to_idle=result.seconds_to_idle,
    )


def median_time(trials: list[Trial]) -> float | None:
    times = [t.seconds_to_idle for t in trials if t.seconds_to_idle is not None]
    return statistics.median(times) if times else None


def fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def summarize(trials: list[Trial]) -> list[dict[str, Any]]:
    groups: dict[tuple[Any, ...], list[Trial]] = {}
    for t in trials:
        groups.setdefault((t.kernel, t.transport, t.sndhwm, t.buttons), []).append(t)
    rows = []
    for (kernel, transport, sndhwm, buttons), ts in sorted(
        groups.items(), key=lambda kv: (kv[0][3], kv[0][0], kv[0][1], kv[0][2] or -1)
    ):
        rows.append(
            {
                "kernel": kernel,
                "transport": transport,
                "sndhwm": sndhwm,
                "buttons": buttons,
                "expected": ts[0].expected,
                "trials": len(ts),
                "lossy_trials": sum(t.lossy for t in ts),
                "mean_lost": statistics.mean(t.lost for t in ts),
                "idle_lost": sum(not t.idle for t in ts),
                "mean_received": statistics.mean(t.comm_open for t in ts),
                "min_received": min(t.comm_open for t in ts),
                "median_s": median_time(ts),
            }
        )
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    header = (
        f"{'kernel':<12} {'transport':<9} {'sndhwm':>7} {'buttons':>7} {'comm_open':>9} "
        f"{'lossy':>7} {'mean lost':>9} {'idle lost':>9} {'median s':>8}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        sndhwm = "default" if r["sndhwm"] is None else str(r["sndhwm"])
        print(
            f"{r['kernel']:<12} {r['transport']:<9} {sndhwm:>7} {r['buttons']:>7} "
            f"{r['expected']:>9} {r['lossy_trials']:>3}/{r['trials']:<3} "
            f"{r['mean_lost']:>9.1f} {r['idle_lost']:>9} {fmt(r['median_s']):>8}"
        )


def print_ratios(rows: list[dict[str, Any]]) -> None:
    def find(kernel: str, transport: str, buttons: int) -> dict[str, Any] | None:
        for r in rows:
            if (r["kernel"], r["transport"], r["sndhwm"], r["buttons"]) == (
                kernel,
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = {
        (EXT, "curve"): ("tab:green", "o", "-", "ipykernel_ext, CurveZMQ"),
        (EXT, "tcp"): ("tab:olive", "^", "--", "ipykernel_ext, plain TCP"),
        (STOCK, "curve"): ("tab:red", "s", "-", "stock ipykernel, CurveZMQ"),
        (STOCK, "tcp"): ("tab:orange", "v", "--", "stock ipykernel, plain TCP"),
    }
    for (kernel, transport), (color, marker, line, label) in styles.items():
        sel = sorted(
            (
                r
                for r in rows
                if (r["kernel"], r["transport"], r["sndhwm"]) == (kernel, transport, None)
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
    fig.tight_layout()
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
        print(f"plot: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="3 trials")
    parser.add_argument("--buttons", type=int, nargs="+", default=[500, 1000, 3000])
    parser.add_argument("--transports", nargs="+", default=["tcp", "curve"])
    parser.add_argument("--timeout", type=float, default=300, help="seconds per cell")
    parser.add_argument(
        "--sweep", action="store_true", help="also ipykernel_ext/CurveZMQ per --sweep-values"
    )
    parser.add_argument("--sweep-values", type=int, nargs="+", default=[1000, 10_000, 0])
    parser.add_argument("--sweep-only", action="store_true", help="only the sndhwm sweep")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--replot", action="store_true", help="only plot the --json results")
    parser.add_argument("--json", type=Path, default=RESULTS / "iopub_burst.json")
    args = parser.parse_args()
    trials_n = 3 if args.quick else args.trials
    if args.replot:
        plot(json.loads(args.json.read_text())["summary"], PLOT_PATHS)
        return

    plan: list[tuple[str, str, int, int | None]] = []
    for _ in range(trials_n):
        for buttons in args.buttons:
            if not args.sweep_only:
                for transport in args.transports:
                    for kernel in (STOCK, EXT):  # alternate: noise hits both alike
                        plan.append((kernel, transport, buttons, None))
            if args.sweep or args.sweep_only:
                for value in args.sweep_values:
                    plan.append((EXT, "curve", buttons, value))

    trials: list[Trial] = []
    t0 = time.perf_counter()
    for i, (kernel, transport, buttons, sndhwm) in enumerate(plan, 1):
        trial = run_trial(kernel, transport, buttons, sndhwm, args.timeout)
        trials.append(trial)
        print(
            f"[{i}/{len(plan)} {time.perf_counter() - t0:5.0f}s] {kernel:<11} {transport:<5} "
            f"sndhwm={sndhwm if sndhwm is not None else 'default'} {buttons} Buttons: "
            f"{trial.comm_open}/{trial.expected} comm_open, display_data={trial.display_data},"
            f" idle={'yes' if trial.idle else 'LOST'}, {fmt(trial.seconds_to_idle)} s",
            flush=True,
        )

    rows = summarize(trials)
    print()
    print_table(rows)
    print_ratios(rows)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps({"trials": [asdict(t) for t in trials], "summary": rows}, indent=1)
    )
    print(f"\nraw results: {args.json}")
    if not args.no_plot and not args.sweep_only:
        plot(rows, PLOT_PATHS)


if __name__ == "__main__":
    main()
