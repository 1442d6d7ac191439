"""The pacer holds nothing hostage, in a real page (issue 46).

A ``jupyter lab`` server as installed (``SharedChannelsConnection`` with jupyter_server's
default rates), Debian's Chromium driven by Playwright, JupyterLab 4.6 and Notebook 7 as they
ship, our kernel. The verdicts are what the page shows and what its websocket received; the
waits are barriers on the page, the kernel or marker files, with hang guards.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.browser import wait_for
from harness.browser_subshell import FRONTENDS, open_notebook, run_cell
from harness.iopub_witness import IOPubWitness
from harness.kernels import EXT_KERNEL
from harness.polling import wait_until
from harness.server import JupyterServer

pytestmark = [pytest.mark.server, pytest.mark.timeout(600)]

#: 6 MB of log as 300 stream messages of 20 kB.
LOG = (
    "import sys, pathlib, time\n"
    "for i in range(300):\n"
    "    print(''.join(f'line {i:03d} {j:03d} ' + 'x' * 86 + '\\n' for j in range(200)), end='')\n"
    "    sys.stdout.flush()\n"
)

#: Whether cell ``index``'s output area holds the text (read in the page: it is 6 MB).
HOLDS_JS = """([index, text]) => {
  const cell = document.querySelectorAll('.jp-Notebook .jp-CodeCell')[index];
  const area = cell && cell.querySelector('.jp-OutputArea');
  return Boolean(area && area.textContent.includes(text));
}"""
#: The width (percent) of the progress bar in cell ``index``'s output.
BAR_JS = """(index) => {
  const cell = document.querySelectorAll('.jp-Notebook .jp-CodeCell')[index];
  const bar = cell && cell.querySelector('.progress-bar');
  return bar ? parseFloat(bar.style.width || '0') : -1;
}"""


def kernel_of(lab: JupyterServer, name: str) -> str:
    session = next(s for s in lab.api("GET", "api/sessions") if s["path"] == f"{name}.ipynb")
    return str(session["kernel"]["id"])


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_a_dead_kernels_last_line_shows_in_its_cell(
    lab: JupyterServer, page: Any, frontend: str
) -> None:
    """A cell prints a long log, then its last line, then its kernel process dies (once a
    client of the kernel itself has that line): the cell shows the last line."""
    name = f"dies-{frontend}"
    marker = lab.root_dir / f"{name}.die"
    cell = (
        LOG + "print('THE LAST LINE', flush=True)\n"
        f"while not pathlib.Path({str(marker)!r}).exists(): time.sleep(0.01)\n"
        "import os; os._exit(1)\n"
    )
    open_notebook(page, lab, frontend, name, [cell], EXT_KERNEL, run_all=False)
    kernel_id = kernel_of(lab, name)
    with IOPubWitness(lab.runtime_dir / f"kernel-{kernel_id}.json") as kernel_iopub:
        run_cell(page, 0)
        kernel_iopub.wait_published("THE LAST LINE")
    restarts = lab.log_text().count("restarting kernel")
    marker.write_text("")
    wait_until(
        lambda: lab.log_text().count("restarting kernel") > restarts,
        timeout=120,
        what="the server restarting the dead kernel",
    )
    wait_for(
        lambda: page.evaluate(HOLDS_JS, [0, "THE LAST LINE"]),
        120,
        what="the dead cell's last line in the page",
        page=page,
    )


#: The bar's steps, and under ``--full-size``. Each step waits for the page to render the bar
#: beside the 6 MB log (about 3.5 s a step in a loaded page, 40 steps took 148 s a frontend).
#: Every step is the same check, the next only once the page showed the one before: a bar
#: held behind the log until the cell ends fails at the first, so 10 prove what 40 did.
STEPS, STEPS_FULL = 10, 40


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_a_progress_bar_beside_a_long_log_moves_while_the_cell_runs(
    lab: JupyterServer, page: Any, frontend: str, tmp_path: Path, full_size: bool
) -> None:
    """After 6 MB of log, a progress bar moves :data:`STEPS` steps (40 under ``--full-size``),
    a short print each, each step once the page shows the bar at the step before (a marker file
    per step): the bar moves in the page while the cell runs, and the page ends with the log
    and every step's print. How few stream messages the steps' prints take is the server
    test's verdict (tests/server/test_pacer_server.py): here the page's own rendering of the
    6 MB output paces the steps, and that depends on the machine."""
    steps = STEPS_FULL if full_size else STEPS
    name = f"progress-{frontend}"
    cells = [
        f"import ipywidgets as w\nbar = w.IntProgress(max={steps})\nbar",
        LOG + f"for step in range({steps}):\n"
        "    bar.value = step + 1\n"
        "    print(f'step {step}', flush=True)\n"
        f"    while not pathlib.Path({str(tmp_path)!r}, str(step + 1)).exists():\n"
        "        time.sleep(0.01)\n",
    ]
    open_notebook(page, lab, frontend, name, cells, EXT_KERNEL, run_all=False)
    run_cell(page, 0)
    wait_for(lambda: page.evaluate(BAR_JS, 0) == 0, 120, what="the bar, empty", page=page)
    run_cell(page, 1)
    for step in range(1, steps + 1):
        width = step * 100 / steps

        def shown(width: float = width) -> bool:
            return bool(page.evaluate(BAR_JS, 0) >= width - 0.01)

        wait_for(shown, 120, what=f"the bar at step {step} in the page", page=page)
        (tmp_path / str(step)).write_text("")
    wait_for(
        lambda: page.evaluate(HOLDS_JS, [1, f"step {steps - 1}"]),
        120,
        what="the last step's print in the page",
        page=page,
    )
