"""The burst scenario's run: trials of every (condition, load, kernel), the table, the figure.

The plan comes from a preset (:mod:`benchmarks.burst.presets`) or from ``--conditions`` and
``--loads``. Every condition of a plan group is opened once (a server, a namespace,
kernelspecs) and the trials interleave: each trial runs every load under every condition,
the kernels taking turns, so that machine noise hits all rows alike. One condition failing
(a kernel that did not start) loses its rows only; a condition this machine cannot make is
skipped with the reason. Printed: a line per trial, the summary table (Markdown, for the
docs), ipykernel_ext against stock where the plan allows, and one figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.burst.catalog import parse
from benchmarks.burst.conditions import Condition, Settings, Skipped, Trial
from benchmarks.burst.outcome import Load, Outcome, summarize
from benchmarks.burst.presets import Preset
from benchmarks.plot import figure, missing
from benchmarks.trials import EXT, KERNELS, RESULTS, STOCK, fmt, print_table, ratio

Plan = list[tuple[list[Condition], list[Load]]]
NAMES = {STOCK: "stock ipykernel", EXT: "ipykernel_ext"}


def add_arguments(parser: argparse.ArgumentParser, name: str, preset: Preset) -> None:
    plot = RESULTS / f"{name}.png"
    parser.add_argument(
        "--conditions", nargs="+", type=_condition, help="read under these (default: the plan)"
    )
    parser.add_argument("--loads", nargs="+", type=_load, help="grid:N or comms:N")
    parser.add_argument(
        "--buttons", nargs="+", type=_buttons, help="grid sizes (1000 3000 or 1000,3000)"
    )
    parser.add_argument("--kernels", nargs="+", default=list(KERNELS), help="kernelspecs")
    parser.add_argument(
        "--timeout", type=float, default=preset.timeout, help="seconds per burst at most"
    )
    parser.add_argument(
        "--rss",
        action=argparse.BooleanOptionalAction,
        default=preset.rss,
        help="sample the kernel's memory during each burst",
    )
    parser.add_argument("--plot", type=Path, default=plot, help=f"the figure (default {plot})")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--replot", action="store_true", help="only plot the --json results")


def _condition(text: str) -> Condition:
    try:
        return parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _load(text: str) -> Load:
    try:
        return Load.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _buttons(text: str) -> list[Load]:
    return [_load(f"grid:{n}") for n in text.split(",") if n]


def plan_of(args: argparse.Namespace, preset: Preset) -> Plan:
    """The preset's plan, or one group of the conditions and loads given."""
    loads = [*(args.loads or []), *(load for group in args.buttons or [] for load in group)]
    groups = (preset.quick_plan or preset.plan) if args.quick else preset.plan
    if args.conditions or loads:
        conditions = args.conditions or [c for g, _ in groups for c in map(parse, g)]
        loads = loads or [Load.parse(t) for _, ls in groups for t in ls]
        return [(conditions, list(dict.fromkeys(loads)))]
    return [([parse(c) for c in cs], [Load.parse(t) for t in ls]) for cs, ls in groups]


def run(args: argparse.Namespace, preset: Preset) -> dict[str, Any] | None:
    if args.replot:
        plot(json.loads(args.json.read_text())["summary"], args.plot)
        return None
    settings = Settings(args.timeout, args.rss)
    outcomes: list[Outcome] = []
    errors: list[str] = []
    skipped: dict[str, str] = {}
    start = time.monotonic()
    for conditions, loads in plan_of(args, preset):
        with contextlib.ExitStack() as stack:
            trials: dict[str, Trial] = {}
            for condition in conditions:
                try:
                    trials[condition.name] = stack.enter_context(condition.opened(settings))
                except Skipped as why:
                    skipped[condition.name] = str(why)
                    print(f"   {condition.name}: skipped: {why}", flush=True)
            for _ in range(args.trials):
                for load in loads:
                    for condition in conditions:
                        if condition.name not in trials:
                            continue
                        for kernel_name in args.kernels:
                            if not condition.applies_to(kernel_name):
                                continue
                            trial = _attempt(trials[condition.name], kernel_name, load, errors)
                            if trial is not None:
                                outcomes.append(trial)
                                _progress(trial, time.monotonic() - start)
    rows = summarize(outcomes)
    print(f"\n{len(outcomes)} trials in {time.monotonic() - start:.0f} s\n")
    print_summary(rows)
    print_comparisons(rows)
    if rows and not args.no_plot:
        if missing():
            print(f"\nno figure: {missing()}")
        else:
            plot(rows, args.plot)
    return {
        "outcomes": [asdict(o) for o in outcomes],
        "summary": rows,
        "errors": errors,
        "skipped": skipped,
    }


def _attempt(trial: Trial, kernel_name: str, load: Load, errors: list[str]) -> Outcome | None:
    """One trial; a failure is reported and kept (the other rows go on)."""
    try:
        return trial(kernel_name, load)
    except Exception as exc:
        errors.append(f"{kernel_name} {load.label}: {exc!r}")
        print(f"   {kernel_name} {load.label}: failed: {exc!r}", file=sys.stderr, flush=True)
        return None


def _progress(o: Outcome, elapsed: float) -> None:
    print(
        f"[{elapsed:5.0f}s] {o.condition:<22} {o.load:<12} {o.kernel:<12}"
        f" {o.comm_open}/{o.expected} comm_open, display_data={o.display_data},"
        f" idle={'yes' if o.idle else 'LOST'}, {fmt(o.seconds_to_idle)} s"
        + "".join(f" ({n})" for n in o.notes),
        flush=True,
    )


def _find(rows: list[dict[str, Any]], condition: str, load: str, kernel: str) -> Any:
    for r in rows:
        if (r["condition"], r["load"], r["kernel"]) == (condition, load, kernel):
            return r
    return None


def print_summary(rows: list[dict[str, Any]]) -> None:
    def vs_stock(r: dict[str, Any]) -> str:
        stock = _find(rows, r["condition"], r["load"], STOCK)
        value = ratio(r["median_s"], stock and stock["median_s"])
        return f"{value:.2f}x" if value is not None and r["kernel"] != STOCK else ""

    def counters(r: dict[str, Any]) -> str:
        return "" if r["given_up"] is None else f"{r['given_up']} / {r['missed']}"

    print_table(
        [
            *("condition", "load", "kernel", "trials with loss", "mean comm_open lost"),
            *("display lost", "idle lost", "median time to idle", "vs stock"),
            *("kernel RSS growth", "given up / missed"),
        ],
        [
            [
                r["condition"],
                r["load"],
                NAMES.get(r["kernel"], r["kernel"]),
                f"{r['lossy_trials']}/{r['trials']}",
                f"{r['mean_lost']:.1f} of {r['expected']}",
                "-" if r["display_lost"] is None else r["display_lost"],
                r["idle_lost"],
                fmt(r["median_s"], 2, " s"),
                vs_stock(r),
                fmt(r["rss_growth_mb"], 1, " MB"),
                counters(r),
            ]
            for r in rows
        ],
        align="lllrrrrrrrr",
        markdown=True,
    )


def print_comparisons(rows: list[dict[str, Any]]) -> None:
    """ipykernel_ext over CurveZMQ against stock over plain TCP (the drop-in target), and
    what a co-subscriber that never reads adds to the same burst, where the plan has both."""
    loads = list(dict.fromkeys(r["load"] for r in rows))
    lines = []
    for load in loads:
        ours, stock_tcp = _find(rows, "curve", load, EXT), _find(rows, "tcp", load, STOCK)
        if ours and stock_tcp and ratio(ours["median_s"], stock_tcp["median_s"]):
            lines.append(
                f"  {load}: ipykernel_ext CurveZMQ {fmt(ours['median_s'])} s / stock plain TCP"
                f" {fmt(stock_tcp['median_s'])} s ="
                f" {ratio(ours['median_s'], stock_tcp['median_s']):.2f} (target <= 1.05)"
            )
        for kernel_name in KERNELS:
            alone, cosub = (
                _find(rows, "curve", load, kernel_name),
                _find(rows, "cosub", load, kernel_name),
            )
            if alone and cosub and alone["median_s"] and cosub["median_s"]:
                lines.append(
                    f"  {load}: a co-subscriber that never reads adds"
                    f" {cosub['median_s'] - alone['median_s']:+.1f} s on"
                    f" {NAMES.get(kernel_name, kernel_name)}"
                )
    if lines:
        print("\n" + "\n".join(lines))


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """comm_open received (mean, bar down to the worst trial) and median time to idle, one
    group of bars per condition and load, one bar per kernel."""
    groups = list(dict.fromkeys((r["condition"], r["load"]) for r in rows))
    kernels = list(dict.fromkeys(r["kernel"] for r in rows))
    width = 0.8 / len(kernels)
    with figure(path, 2, size=(max(8, 1.2 * len(groups) + 4), 4.8)) as (fig, axes):
        for i, kernel_name in enumerate(kernels):
            xs, received, worst, took = [], [], [], []
            for j, (condition, load) in enumerate(groups):
                r = _find(rows, condition, load, kernel_name)
                if r is None:
                    continue
                xs.append(j + (i - (len(kernels) - 1) / 2) * width)
                received.append(100 * r["mean_received"] / r["expected"])
                worst.append(100 * r["min_received"] / r["expected"])
                took.append(r["median_s"] or 0)
                if r["idle_lost"]:
                    axes[1].text(xs[-1], 0.5, "idle\nlost", ha="center", fontsize=7, color="red")
            label = NAMES.get(kernel_name, kernel_name)
            errors = [[m - w for m, w in zip(received, worst, strict=True)], [0] * len(xs)]
            axes[0].bar(xs, received, width, yerr=errors, capsize=3, label=label)
            axes[1].bar(xs, took, width, label=label)
        titles = ("comm_open received, % (bar: worst trial)", "median time to idle (s)")
        for ax, title in zip(axes, titles, strict=True):
            ax.set_title(title)
            ax.set_xticks(range(len(groups)))
            ax.set_xticklabels([f"{c}\n{ld}" for c, ld in groups], fontsize=7, rotation=30)
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3, axis="y")
        trials = max(r["trials"] for r in rows)
        fig.suptitle(f"One cell's burst, fresh kernel per trial, {trials} trial(s) per bar")


def preset_benchmark(name: str, preset: Preset) -> tuple[Callable[..., None], Callable[..., Any]]:
    """The runner's ``add_arguments`` and ``run`` for preset ``name``."""
    return (
        lambda parser: add_arguments(parser, name, preset),
        lambda args: run(args, preset),
    )
