"""Reload-to-rendered time, JupyterLab and Voila: stock ipykernel (``python3``) vs ``python3-ext``.

What a user waits for after reloading a JupyterLab tab or opening a Voila dashboard (headless
Debian Chromium driven by Playwright, one ``jupyter lab`` server with Voila's extension and
``transport_encryption=required``):

(a) **mid-cell**: cell 1 shows a VBox of 200 IntSliders, cell 2 runs a long loop; the tab is
    reloaded while cell 2 runs. Time from just before ``page.reload()`` until all 200
    ``.widget-slider`` views are in the page (DOM polled every 0.2 s), and until the status
    bar says Busy. A kernel that does not answer while busy leaves "Loading widget..." until
    the cell ends: the benchmark ends the cell ``--window`` seconds after the reload, so for
    such a kernel the time is ``window`` + the restore after the cell.
(b) **idle**: one cell shows a GridBox of N Buttons (``--buttons``, default 1000 and 10000:
    3002 and 30002 models) and finishes; the tab is reloaded. Time until the N buttons are in
    the page. ipykernel_ext answers the page's ``jupyter.widget.control`` comm with its
    snapshot on the main shell; stock with ipywidgets' handler.
(c) **voila**: the same notebook opened with Voila (``/voila/render/``): Voila starts a kernel,
    runs the notebook, then the page's widget manager asks for every state on the control
    comm of the (idle) kernel. Time from ``page.goto`` until the N buttons are in the page.
(d) **voila-standalone**: the same with ``voila NOTEBOOK`` (standalone Voila,
    :mod:`harness.voila`): stock ipykernel with stock Voila (no config: jupyter_server's
    connection class), ours with Voila as ``python -m ipykernel_ext install`` configures it
    (``SharedChannelsConnection``). A fresh Voila per trial; time from ``page.goto``.
    ``--crossed`` also runs stock ipykernel with our class and ipykernel_ext with
    jupyter_server's, so that the kernel's share and the class's are told apart; the phases of
    every standalone trial are printed: the page's HTML (``DOMContentLoaded``: Voila has run
    the notebook), its kernel websocket opened, the states, every view.

For (b), (c) and (d) the page's own websocket also gives the control comm's round trip as the
page sees it: ``request_states`` sent to ``update_states`` received ("states").

Each trial uses a fresh notebook, a fresh JupyterLab workspace and a fresh kernel; the notebook
is saved (and the saved file checked) before the reload, since a reload reopens it from disk.
Kernels alternate trial by trial. Prints medians, ratios (stock / ext) and writes the plot.

    python -m benchmarks browser_restore               # 3 trials each, --window 30
    python -m benchmarks browser_restore --quick       # 1 trial each, --window 15, no plot
    python -m benchmarks browser_restore --scenario idle,voila --buttons 1000,10000 --trials 1
    python -m benchmarks browser_restore --scenario voila-standalone --buttons 1000,10000
    python -m benchmarks browser_restore --scenario voila-standalone --buttons 1000 --crossed
    python -m benchmarks browser_restore --trials 5 --json out.json --plot docs/browser_restore.png
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.plot import figure
from benchmarks.trials import EXT, STOCK, alternate, fmt, median, print_table, ratio
from harness.browser import (
    LAB_ARGS,
    LAB_STATUS_JS,
    chromium,
    missing_requirement,
    open_and_run_all,
    quiet_lab_settings,
    save_notebook,
    shut_down_everything,
    wait_for,
    watch_restore,
    write_notebook,
)
from harness.page_websocket import WebsocketLog
from harness.server import JupyterServer
from harness.voila import StandaloneVoila, install_prefix

TRIALS, QUICK_TRIALS = 3, 1
LABELS = {STOCK: "stock ipykernel 7.4", EXT: "ipykernel_ext"}
#: Standalone Voila's connection class: jupyter_server's ("stock", Voila unconfigured) or
#: ours ("ours", the config ``python -m ipykernel_ext install`` writes).
CLASS_LABELS = {"stock": "jupyter_server's class", "ours": "our class"}
#: What each kernel is paired with unless ``--crossed``: stock as it ships, ours as installed.
PAIRED_CLASS = {STOCK: "stock", EXT: "ours"}
N_SLIDERS, N_BUTTONS = 200, 1000
SLIDER = ".jp-OutputArea .widget-slider"
BUTTON = ".jp-OutputArea button.jupyter-button.widget-button"
VOILA_BUTTON = "button.jupyter-button.widget-button"

SLIDERS_CELL = f"""\
import ipywidgets as widgets
sliders = [widgets.IntSlider(value=i, max=1000) for i in range({N_SLIDERS})]
widgets.VBox(sliders)"""
SCENARIOS = ("mid-cell", "idle", "voila", "voila-standalone")


def grid_cell(buttons: int) -> str:
    return f"""\
import ipywidgets as widgets
buttons = [widgets.Button(description=str(i), layout=widgets.Layout(width="60px"))
           for i in range({buttons})]
widgets.GridBox(buttons, layout=widgets.Layout(grid_template_columns="repeat(20, 64px)"))"""


def wait_cell(stop: Path, seconds: float) -> str:
    return f"""\
import pathlib, time
deadline = time.monotonic() + {seconds}
while not pathlib.Path({str(stop)!r}).exists() and time.monotonic() < deadline:
    time.sleep(0.05)"""


@dataclass
class Trial:
    scenario: str  # "mid-cell", "idle", "voila" or "voila-standalone"
    kernel: str
    rendered_s: float | None  # reload (voila: page.goto) -> every view in the page
    busy_s: float | None  # reload -> status bar says Busy (mid-cell only)
    restored_mid_cell: bool | None  # mid-cell only: rendered before the cell was ended
    buttons: int | None = None  # idle and voila: how many Buttons
    states_s: float | None = None  # idle and voila: request_states sent -> update_states in
    failed: str | None = None  # why the trial ended without a time (e.g. the page never ready)
    connection: str | None = None  # voila-standalone: "stock" or "ours" (CLASS_LABELS)
    html_s: float | None = None  # voila-standalone: page.goto -> DOMContentLoaded
    socket_s: float | None = None  # voila-standalone: page.goto -> its kernel websocket opened

    @property
    def group(self) -> str:
        group = self.scenario if self.buttons is None else f"{self.scenario} {self.buttons}"
        crossed = self.connection is not None and self.connection != PAIRED_CLASS[self.kernel]
        return f"{group} crossed" if crossed else group


def label(kernel: str, connection: str | None) -> str:
    """The kernel's name, and standalone Voila's connection class if there is one."""
    return LABELS[kernel] if connection is None else f"{LABELS[kernel]}, {CLASS_LABELS[connection]}"


def states_round_trip(log: WebsocketLog, since: float) -> float | None:
    """The page's last ``request_states`` after ``since`` to its ``update_states`` (s)."""
    frames = log.frames(since)
    asked = [
        f
        for f in frames
        if f.direction == "sent"
        and f.msg_type == "comm_msg"
        and (f.content.get("data") or {}).get("method") == "request_states"
    ]
    for sent in reversed(asked):
        for f in frames:
            if (
                f.direction == "received"
                and f.parent_msg_id == sent.msg_id
                and (f.content.get("data") or {}).get("method") == "update_states"
            ):
                return f.t - sent.t
    return None


def standalone_trial(
    browser: Any, folder: Path, prefix: Path, kernel: str, buttons: int, connection: str
) -> Trial:
    """One standalone Voila page load: ``connection`` "stock" is Voila unconfigured, "ours"
    the config ``python -m ipykernel_ext install --prefix prefix`` wrote."""
    name = f"voila-standalone-{kernel}-{uuid.uuid4().hex[:8]}"
    path = folder / f"{name}.ipynb"
    write_notebook(path, [grid_cell(buttons)], kernel)
    setup = 180 + 0.03 * buttons
    config = prefix / "etc" / "jupyter" if connection == "ours" else None
    with StandaloneVoila(path, config_path=config) as voila:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(setup * 1000)
        log = WebsocketLog(page)
        # When they happened: wait_for spends its waits inside Playwright, which delivers each
        # event as it comes.
        seen: dict[str, float] = {}
        page.on("domcontentloaded", lambda _: seen.setdefault("html", time.perf_counter()))
        page.on("websocket", lambda ws: note_socket(seen, ws.url))
        try:
            started = time.perf_counter()
            page.goto(voila.url, wait_until="commit")
            wait_for(
                lambda: page.locator(VOILA_BUTTON).count() == buttons,
                setup,
                what="views",
                page=page,
            )
            rendered = time.perf_counter() - started
            states = states_round_trip(log, started)
            html, socket = (seen[k] - started if k in seen else None for k in ("html", "socket"))
            return Trial(
                "voila-standalone",
                kernel,
                rendered,
                None,
                None,
                buttons,
                states,
                connection=connection,
                html_s=html,
                socket_s=socket,
            )
        finally:
            context.close()


def note_socket(seen: dict[str, float], url: str) -> None:
    """The page's first kernel websocket: when it opened."""
    if "/channels" in url:
        seen.setdefault("socket", time.perf_counter())


def run_trial(
    browser: Any, lab: JupyterServer, scenario: str, kernel: str, window: float, buttons: int
) -> Trial:
    name = f"{scenario}-{kernel}-{uuid.uuid4().hex[:8]}"
    path = lab.root_dir / f"{name}.ipynb"
    stop = lab.root_dir / f"{name}.stop"
    if scenario == "mid-cell":
        write_notebook(path, [SLIDERS_CELL, wait_cell(stop, window + 120)], kernel)
        selector, expected = SLIDER, N_SLIDERS
    else:
        write_notebook(path, [grid_cell(buttons)], kernel)
        # Voila's page renders outputs in its own template (no JupyterLab output area needed).
        selector, expected = (VOILA_BUTTON if scenario == "voila" else BUTTON), buttons
    # How long the page may take to get ready (run the cell, render it): more for more views.
    setup = 180 + 0.03 * expected
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(setup * 1000)
    log = WebsocketLog(page)
    try:
        if scenario == "voila":
            started = time.perf_counter()
            page.goto(
                lab.http_url(f"voila/render/{path.name}?token={lab.token}"), wait_until="commit"
            )
            wait_for(
                lambda: page.locator(selector).count() == expected, setup, what="views", page=page
            )
            rendered = time.perf_counter() - started
            return Trial(
                scenario, kernel, rendered, None, None, buttons, states_round_trip(log, started)
            )
        url = f"lab/workspaces/{name}/tree/{path.name}?token={lab.token}"
        open_and_run_all(page, lab, log, url, LAB_STATUS_JS)
        wait_for(lambda: page.locator(selector).count() == expected, setup, what="views", page=page)
        if scenario == "idle":
            page.wait_for_function(f"() => ({LAB_STATUS_JS})().toLowerCase() === 'idle'")
        save_notebook(page, path)
        if scenario == "mid-cell":
            restore = watch_restore(page, log, selector, expected, LAB_STATUS_JS, window)
            restored_mid_cell = restore.views_at is not None
            stop.touch()  # end the cell; a kernel that waited answers now
            if restore.views_at is None:
                wait_for(
                    lambda: page.locator(selector).count() == expected, 120, what="views", page=page
                )
                restore.views_at = time.perf_counter() - restore.reload_at
            return Trial(scenario, kernel, restore.views_at, restore.busy_at, restored_mid_cell)
        restore = watch_restore(page, log, selector, expected, None, setup)
        states = states_round_trip(log, restore.reload_at)
        trial = Trial(scenario, kernel, restore.views_at, None, None, buttons, states)
        if restore.views_at is None:  # say what the page showed instead
            text = page.inner_text("body")
            shown = [t for t in ("Loading widget...", "Error displaying widget") if t in text]
            trial.failed = (
                f"{page.locator(selector).count()} of {expected} views after {setup:.0f} s"
                f"{'; the page shows ' + ', '.join(shown) if shown else ''}"
            )
        return trial
    finally:
        stop.touch()
        context.close()
        shut_down_everything(lab)


def summarize(trials: list[Trial]) -> list[dict[str, Any]]:
    rows = []
    groups = list(dict.fromkeys(t.group for t in trials))
    for group in groups:
        medians: dict[str, dict[str, float | None]] = {}
        for kernel in (STOCK, EXT):
            mine = [t for t in trials if t.group == group and t.kernel == kernel]
            if not mine:
                continue
            medians[kernel] = {
                "rendered": median(t.rendered_s for t in mine),
                "states": median(t.states_s for t in mine),
            }
            rows.append(
                {
                    "scenario": mine[0].scenario,
                    "group": group,
                    "kernel": kernel,
                    "connection": mine[0].connection,
                    "trials": len(mine),
                    "rendered_s": [t.rendered_s for t in mine],
                    "median_rendered_s": medians[kernel]["rendered"],
                    "median_busy_s": median(t.busy_s for t in mine),
                    "states_s": [t.states_s for t in mine],
                    "median_states_s": medians[kernel]["states"],
                    "failed": [t.failed for t in mine if t.failed],
                    "restored_mid_cell": sum(bool(t.restored_mid_cell) for t in mine)
                    if mine[0].scenario == "mid-cell"
                    else None,
                    "median_html_s": median(t.html_s for t in mine),
                    "median_socket_s": median(t.socket_s for t in mine),
                }
            )
        if STOCK in medians and EXT in medians:
            for key in ("rendered", "states"):
                value = ratio(medians[STOCK][key], medians[EXT][key])
                if value is not None:
                    for row in rows[-2:]:
                        row[f"ratio_{key}_stock_over_ext"] = value
    return rows


def print_summary(rows: list[dict[str, Any]], window: float) -> None:
    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{fmt(value)} s"

    def times(value: float | None) -> str:
        return "" if value is None else f"{fmt(value, 1)}x"

    print()
    header = ["scenario", "kernel", "trials", "median rendered", "median Busy", "mid-cell"]
    print_table(
        [*header, "stock/ext", "states", "stock/ext", "rendered (each trial)"],
        [
            [
                row["group"],
                label(row["kernel"], row["connection"]),
                row["trials"],
                seconds(row["median_rendered_s"]),
                seconds(row["median_busy_s"]),
                ""
                if row["restored_mid_cell"] is None
                else f"{row['restored_mid_cell']}/{row['trials']}",
                times(row.get("ratio_rendered_stock_over_ext")),
                seconds(row["median_states_s"]),
                times(row.get("ratio_states_stock_over_ext")),
                ", ".join(seconds(v) for v in row["rendered_s"]),
            ]
            for row in rows
        ],
        align="llrrrrrrrl",
    )
    for row in rows:
        for reason in row["failed"]:
            print(f"failed: {row['group']}, {label(row['kernel'], row['connection'])}: {reason}")
    phases = [row for row in rows if row["connection"] is not None]
    if phases:
        print("\nstandalone Voila, medians from page.goto:")
        print_table(
            ["scenario", "kernel, connection class", "HTML", "websocket", "rendered", "states"],
            [
                [
                    row["group"],
                    label(row["kernel"], row["connection"]),
                    seconds(row["median_html_s"]),
                    seconds(row["median_socket_s"]),
                    seconds(row["median_rendered_s"]),
                    seconds(row["median_states_s"]),
                ]
                for row in phases
            ],
            align="llrrrr",
        )
    print(
        f"(mid-cell: the cell is ended {window:.0f} s after the reload when the views are not "
        "there by then; 'mid-cell' counts trials restored while the cell still ran; "
        "'states': the page's request_states to update_states, idle and both voila; voila: "
        "rendered counts from page.goto, the notebook's run included)"
    )


def plot(trials: list[Trial], window: float, path: Path) -> None:
    groups = list(dict.fromkeys(t.group for t in trials))
    with figure(path, len(groups), size=(4.5 * len(groups), 3.8)) as (fig, axes):
        draw(fig, axes, trials, groups, window)


def draw(fig: Any, axes: list[Any], trials: list[Trial], groups: list[str], window: float) -> None:
    titles = {
        "mid-cell": f"reload mid-cell, {N_SLIDERS} IntSliders",
        "idle": "reload, idle kernel, {} Buttons",
        "voila": "Voila page load, {} Buttons",
        "voila-standalone": "standalone Voila page load, {} Buttons",
    }
    crossed = {"crossed": ", kernel and class crossed"}
    colors = {STOCK: "#9e9e9e", EXT: "#1f77b4"}
    for ax, group in zip(axes, groups, strict=True):
        scenario, _, rest = group.partition(" ")
        buttons, _, suffix = rest.partition(" ")
        connections = {t.kernel: t.connection for t in trials if t.group == group}
        for x, kernel in enumerate((STOCK, EXT)):
            values = [
                t.rendered_s
                for t in trials
                if t.group == group and t.kernel == kernel and t.rendered_s is not None
            ]
            if not values:
                continue
            mid = statistics.median(values)
            ax.bar(x, mid, color=colors[kernel], width=0.6)
            ax.scatter([x] * len(values), values, color="black", s=12, zorder=3)
            ax.annotate(f"{mid:.1f} s", (x, mid), ha="center", va="bottom", fontsize=9)
        if scenario == "mid-cell":
            ax.axhline(window, color="#d62728", linestyle="--", linewidth=1)
            ax.text(
                1.45, window, "cell ended", color="#d62728", fontsize=8, ha="right", va="bottom"
            )
        ax.set_xticks([0, 1], [label(k, connections.get(k)) for k in (STOCK, EXT)], fontsize=8)
        ax.set_title(titles[scenario].format(buttons) + crossed.get(suffix, ""), fontsize=10)
        ax.set_ylabel("to all widgets rendered (s)")
    fig.suptitle("JupyterLab 4.6 and Voila, headless Chromium, CurveZMQ required", fontsize=10)


def positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {text}")
    return value


def scenario_list(text: str) -> list[str]:
    scenarios = ["mid-cell", "idle"] if text == "both" else text.split(",")
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown scenario(s) {unknown}; choose from {', '.join(SCENARIOS)}"
        )
    return scenarios


def counts(text: str) -> list[int]:
    return [int(n) for n in text.split(",")]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--window",
        type=positive,
        help="seconds after the reload before the cell ends (default 30; 15 with --quick)",
    )
    parser.add_argument(
        "--scenario",
        type=scenario_list,
        default=",".join(SCENARIOS),
        help=f"comma-separated, of {', '.join(SCENARIOS)} ('both': mid-cell,idle)",
    )
    parser.add_argument(
        "--buttons",
        type=counts,
        default=f"{N_BUTTONS},10000",
        help="idle and voila: comma-separated counts",
    )
    parser.add_argument(
        "--crossed",
        action="store_true",
        help="voila-standalone: also stock ipykernel with our connection class and "
        "ipykernel_ext with jupyter_server's (the kernel's share told from the class's)",
    )
    parser.add_argument("--plot", type=Path, help="write the plot here (PNG)")


def pairings(scenario: str, crossed: bool) -> list[tuple[str, str | None]]:
    """The (kernel, standalone Voila's connection class) of each trial of a round: the class
    is None outside voila-standalone; ``crossed`` adds the two mixed pairs."""
    if scenario != "voila-standalone":
        return [(kernel, None) for kernel in (STOCK, EXT)]
    pairs: list[tuple[str, str | None]] = [(k, PAIRED_CLASS[k]) for k in (STOCK, EXT)]
    if crossed:
        pairs += [(STOCK, PAIRED_CLASS[EXT]), (EXT, PAIRED_CLASS[STOCK])]
    return pairs


def run(args: argparse.Namespace) -> dict[str, Any]:
    window = args.window or (15.0 if args.quick else 30.0)
    reason = missing_requirement()
    if reason:
        print(f"cannot run: {reason}", file=sys.stderr)
        raise SystemExit(2)

    runs = [
        (s, n) for s in args.scenario for n in ([N_BUTTONS] if s == "mid-cell" else args.buttons)
    ]
    trials: list[Trial] = []
    with JupyterServer(app="lab", extra_args=LAB_ARGS) as lab:
        quiet_lab_settings(lab)
        prefix = install_prefix(lab.root_dir / "voila-prefix")
        with chromium() as browser:
            for scenario, buttons in runs:
                pairs = pairings(scenario, args.crossed)
                for i, (kernel, connection) in alternate(args.trials, pairs, rotate=True):
                    try:
                        if connection is not None:
                            trial = standalone_trial(
                                browser, lab.root_dir, prefix, kernel, buttons, connection
                            )
                        else:
                            trial = run_trial(browser, lab, scenario, kernel, window, buttons)
                    except Exception as exc:  # a page that never got ready: say so, go on
                        count = None if scenario == "mid-cell" else buttons
                        why = f"{type(exc).__name__}: {str(exc)[:200]}"
                        trial = Trial(
                            scenario,
                            kernel,
                            None,
                            None,
                            None,
                            count,
                            failed=why,
                            connection=connection,
                        )
                    trials.append(trial)
                    print(f"{trial.group:12} {kernel:12} trial {i + 1}: {trial}", flush=True)
    rows = summarize(trials)
    print_summary(rows, window)
    if args.plot:
        plot(trials, window, args.plot)
    return {"trials": [asdict(t) for t in trials], "summary": rows}


if __name__ == "__main__":  # python benchmarks/NAME.py: through the runner
    from benchmarks.runner import script

    script(__file__)
