"""A slider dragged while a cell draws with pyplot, JupyterLab and Notebook 7: stock vs ext.

The scenario of ``tests/browser/test_browser_subshell_comms.py`` (``harness/browser_subshell.py``),
counted on stock ipykernel (``python3``) and ipykernel_ext (``python3-ext``): one ``jupyter lab``
server (JupyterLab 4.6 and Notebook 7) with default settings, so the page sends every comm
message on a kernel subshell (``commsOverSubshells``: ``perCommTarget``), headless Debian
Chromium driven by Playwright. Per trial, a fresh notebook and kernel: a slider whose callback
draws ``value`` lines on a new pyplot figure, moved once while idle; then a cell that draws 60
lines on its own figure while the slider is dragged 8 steps, and waits to be released.

Per frontend and kernel, over the trials:

* **figure right**: the cell printed 60 lines on its figure and its output shows one image
  (no "with 0 Axes", no figure lost under a comm message);
* **wrong drawings**: callbacks whose figure's line count differs from the slider's value
  (pyplot's one current figure shared with the cell);
* **callbacks mid-cell**: callbacks that ran while the cell ran;
* **kernel at page's value**: trials where the kernel's last callback had the value the page
  shows;
* **cell: lines, images**: what the cell printed as its figure's line count (60 unless a
  callback drew on it or it drew on a callback's figure) and the images in its output, trial
  by trial;
* **on subshells**: trials where the page sent its moves on a subshell and the kernel got them
  so (the premise; a trial without it proves nothing).

Kernels alternate trial by trial (the order flips every trial).

    python -m benchmarks browser_subshell             # 5 trials per frontend and kernel
    python -m benchmarks browser_subshell --quick     # 2 trials
    python -m benchmarks browser_subshell --frontend lab --trials 3 --json out.json
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.trials import EXT, STOCK, alternate, print_table
from harness.browser import (
    LAB_ARGS,
    chromium,
    missing_requirement,
    quiet_lab_settings,
    shut_down_everything,
)
from harness.browser_subshell import FRONTENDS, SliderRun, run_slider_scenario
from harness.server import JupyterServer

TRIALS, QUICK_TRIALS = 5, 2
LABELS = {STOCK: "stock ipykernel 7.4", EXT: "ipykernel_ext"}
FRONTEND_LABELS = {"lab": "JupyterLab 4.6", "notebook7": "Notebook 7"}
REQUIRED = ("playwright", "jupyterlab", "notebook", "ipywidgets", "matplotlib")


@dataclass
class Trial:
    frontend: str
    kernel: str
    run: SliderRun | None  # None: the trial failed before the page had its result
    failed: str | None = None


def run_trial(browser: Any, lab: JupyterServer, frontend: str, kernel: str) -> Trial:
    """One scenario in a fresh browser context; its kernels shut down afterwards."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(120_000)
    try:
        return Trial(frontend, kernel, run_slider_scenario(page, lab, frontend, kernel))
    except Exception as exc:  # a page that never got ready: say so, go on
        return Trial(frontend, kernel, None, f"{type(exc).__name__}: {str(exc)[:200]}")
    finally:
        context.close()
        shut_down_everything(lab)


def summarize(trials: list[Trial]) -> list[dict[str, Any]]:
    rows = []
    for frontend in dict.fromkeys(t.frontend for t in trials):
        for kernel in (STOCK, EXT):
            mine = [t for t in trials if t.frontend == frontend and t.kernel == kernel]
            runs = [t.run for t in mine if t.run is not None]
            if not mine:
                continue
            rows.append(
                {
                    "frontend": frontend,
                    "kernel": kernel,
                    "trials": len(mine),
                    "figure_right": sum(r.figure_right for r in runs),
                    "wrong_drawings": sum(r.wrong_drawings for r in runs),
                    "callbacks_mid_cell": sum(r.mid_cell_callbacks for r in runs),
                    "kernel_at_page_value": sum(r.kernel_value == r.page_value for r in runs),
                    "on_subshells": sum(r.on_subshells for r in runs),
                    "cell_lines_images": [(r.cell_lines, r.cell_images) for r in runs],
                    "failed": [t.failed for t in mine if t.failed],
                }
            )
    return rows


def print_summary(rows: list[dict[str, Any]]) -> None:
    def of(row: dict[str, Any], key: str) -> str:
        return f"{row[key]}/{row['trials']}"

    print()
    print_table(
        [
            "frontend",
            "kernel",
            "figure right",
            "wrong drawings",
            "callbacks mid-cell",
            "kernel at page's value",
            "on subshells",
            "cell: lines, images (each trial)",
        ],
        [
            [
                FRONTEND_LABELS[row["frontend"]],
                LABELS[row["kernel"]],
                of(row, "figure_right"),
                row["wrong_drawings"],
                row["callbacks_mid_cell"],
                of(row, "kernel_at_page_value"),
                of(row, "on_subshells"),
                "; ".join(f"{lines}, {images}" for lines, images in row["cell_lines_images"]),
            ]
            for row in rows
        ],
        align="llrrrrrl",
        markdown=True,
    )
    for row in rows:
        for reason in row["failed"]:
            print(f"failed: {row['frontend']}, {LABELS[row['kernel']]}: {reason}")
    print(
        "(figure right: the cell's figure has its 60 lines and is the one image in its output; "
        "wrong drawings and callbacks mid-cell are totals over the trials; on subshells: the "
        "page sent the moves on a subshell and the kernel got them so, the premise)"
    )


def frontend_list(text: str) -> list[str]:
    frontends = text.split(",")
    unknown = [f for f in frontends if f not in FRONTENDS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown frontend(s) {unknown}; choose from {', '.join(FRONTENDS)}"
        )
    return frontends


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--frontend",
        type=frontend_list,
        default=",".join(FRONTENDS),
        help=f"comma-separated, of {', '.join(FRONTENDS)}",
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    reason = missing_requirement(REQUIRED)
    if reason:
        print(f"cannot run: {reason}", file=sys.stderr)
        raise SystemExit(2)
    trials: list[Trial] = []
    with JupyterServer(app="lab", extra_args=LAB_ARGS) as lab:
        quiet_lab_settings(lab)  # no news toast; commsOverSubshells stays the default
        with chromium() as browser:
            for frontend in args.frontend:
                for i, kernel in alternate(args.trials, rotate=True):
                    trial = run_trial(browser, lab, frontend, kernel)
                    trials.append(trial)
                    print(f"{frontend:10} {kernel:12} trial {i + 1}: {trial.run or trial.failed}")
    rows = summarize(trials)
    print_summary(rows)
    return {"trials": [asdict(t) for t in trials], "summary": rows}


if __name__ == "__main__":  # python benchmarks/NAME.py: through the runner
    from benchmarks.runner import script

    script(__file__)
