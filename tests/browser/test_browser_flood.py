"""A flood that nothing merges, in a real page: every line once, in order, never far behind,
and the page answers a key meanwhile (issue 50).

A ``jupyter lab`` server as installed (the package's extension on: ``SharedChannelsConnection``)
with a message rate of :data:`RATE` a second (``iopub_msg_rate_limit``; the rest as
jupyter_server ships it), Debian's Chromium driven by Playwright, JupyterLab 4.6 as it ships,
our kernel. One notebook: a cell whose print and log lines alternate (a ``print`` to stdout
and a ``logging`` line to stderr per step, each flushed: two streams that take turns, so
every message is an output of its own and nothing merges), below an empty cell to type into
(above it, it stays where it is while the outputs grow).

The server's rate is set low so that a few seconds of this flood are far above it, and the
pacer's catch-up (``CATCH_UP_AGE``, 2.5 s) and its bound (``MAX_AGE``, 5 s) are what decide
when the lines reach the page: the shared session ``lab`` has jupyter_server's default rate
(1000 a second), above which a kernel's flushed loop would put tens of thousands of outputs
in the page within the same few seconds.

The verdicts are what the page shows, the times the page and the kernel read on their own
clocks (the machine's one wall clock), and the time the page's main thread spent working
(Chromium's own ``TaskDuration`` metric); the waits are barriers on the page, the kernel's
marker files and the page's kernel status, with hang guards.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.browser import (
    LAB_ARGS,
    LAB_STATUS_JS,
    quiet_lab_settings,
    require_browser,
    wait_for,
)
from harness.browser_subshell import CODE_CELL, open_notebook, run_cell, wait_idle
from harness.kernels import EXT_KERNEL
from harness.server import JupyterServer
from ipykernel_ext.server.websocket.budgets import CATCH_UP_AGE, MAX_AGE

# A module server of its own (about 10 s to start) and, on the old main, over a minute of lines
# at the rate before the verdict: the hang guard of the whole test, fixture included.
pytestmark = [pytest.mark.server, pytest.mark.timeout(300)]

#: The server's message rate (a second): the kernel writes up to 20 times as many.
RATE = 10
#: The kernel's pause after each step (two messages): about 200 messages a second at most.
#: It keeps the flood far above :data:`RATE` while the page holds hundreds of outputs, not
#: the tens of thousands an unpaced loop writes.
PACE = 0.01
#: Seconds of kernel time the cell floods before the key is typed (longer than
#: ``CATCH_UP_AGE``: by then the first lines are late, and the pacer sends them as fast as the
#: page takes them). No ``--full-size`` run of the issue's 30 s: JupyterLab renders each of
#: these lines as an output of its own, and in a trial the page had not shown the last of the
#: 12000 of 30 s 4 minutes on (the page's own work, which the verdict allows, not the pacer's).
FLOOD_S = 3.0
#: Steps the cell writes after the page answered the key.
TAIL = 100
#: Outputs a cell renders before "Show more outputs" (more than any run writes).
MAX_OUTPUTS = 1_000_000
#: What is typed into the empty cell.
TYPED = "typed42"


def flood_cell(flood_s: float, flooded: Path, typed: Path) -> str:
    """The cell: steps of a printed ``out N`` and a logged ``err N``, each flushed, for
    ``flood_s`` s; it touches ``flooded``, goes on until ``typed`` exists (the page has shown
    the typed key), writes :data:`TAIL` more steps, then ``END <steps> <time.time()>``."""
    return f"""\
import logging, pathlib, sys, time
log = logging.getLogger("flood")
log.propagate = False
log.setLevel(logging.INFO)
log.handlers[:] = [logging.StreamHandler(sys.stderr)]  # flushes after each line
step = 0
def one():
    global step
    print(f"out {{step}}", flush=True)
    log.info(f"err {{step}}")
    step += 1
    time.sleep({PACE})
until = time.monotonic() + {flood_s}
while time.monotonic() < until:
    one()
pathlib.Path({str(flooded)!r}).touch()
typed = pathlib.Path({str(typed)!r})
while not typed.exists():
    one()
for _ in range({TAIL}):
    one()
print(f"END {{step}} {{time.time():.6f}}", flush=True)
"""


#: In the page: note (``window.__endShownAt``, the page's ``Date.now()``) when the last output
#: of the flood cell (the second) holds ``END``, as the page renders it (a mutation observer runs
#: right after the change, on the page's own clock, whenever the test polls).
WATCH_END_JS = """() => {
  window.__endShownAt = 0;
  const notebook = document.querySelector('.jp-Notebook');
  const observer = new MutationObserver(() => {
    const cell = document.querySelectorAll('.jp-Notebook .jp-CodeCell')[1];
    const area = cell && cell.querySelector('.jp-OutputArea');
    // The area's last output (its last child may be the prompt overlay, not an output).
    let last = area && area.lastElementChild;
    while (last && !last.classList.contains('jp-OutputArea-child')) {
      last = last.previousElementSibling;
    }
    if (last && last.textContent.includes('END ')) {
      window.__endShownAt = Date.now();
      observer.disconnect();
    }
  });
  observer.observe(notebook, {childList: true, subtree: true, characterData: true});
}"""
#: The text of cell ``index``'s output area.
OUTPUT_JS = """(index) => {
  const cell = document.querySelectorAll('.jp-Notebook .jp-CodeCell')[index];
  const area = cell && cell.querySelector('.jp-OutputArea');
  return area ? area.textContent : '';
}"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    """``jupyter lab`` as installed (our extension on), its message rate :data:`RATE`, every
    output of a cell rendered."""
    require_browser(("playwright", "jupyterlab"))
    root = tmp_path_factory.mktemp("root")
    args = [*LAB_ARGS, f"--ZMQChannelsWebsocketConnection.iopub_msg_rate_limit={RATE}"]
    with JupyterServer(app="lab", root_dir=root, extra_args=args, ipykernel_ext=None) as srv:
        quiet_lab_settings(srv)
        # Every output in the page (a user's setting): by default JupyterLab renders a cell's
        # first 50 outputs and trims the rest behind "Show more outputs" (the setting's "0 for
        # all" trims them all in JupyterLab 4.6: its output area takes 0 as the count).
        tracker = srv.lab_settings_dir / "@jupyterlab" / "notebook-extension"
        tracker.mkdir(parents=True, exist_ok=True)
        settings = json.dumps({"maxNumberOutputs": MAX_OUTPUTS})
        (tracker / "tracker.jupyterlab-settings").write_text(settings)
        yield srv


def task_seconds(cdp: Any) -> float:
    """Seconds the page's renderer main thread has spent running tasks (Chromium's
    ``Performance.getMetrics`` ``TaskDuration``): all the page did, the lines' rendering in."""
    metrics = cdp.send("Performance.getMetrics")["metrics"]
    return float(next(m["value"] for m in metrics if m["name"] == "TaskDuration"))


def test_alternating_print_and_log_lines_reach_the_page_whole_in_order_and_in_time(
    lab: JupyterServer, page: Any, tmp_path: Path
) -> None:
    """A cell alternates a flushed print and a flushed log line, about 20 times the server's
    message rate, for 3 s, then on until the page has shown a key typed
    into the cell above, then 100 steps more, then an ``END`` line with the kernel's time:

    * the page answers the key while the cell runs (the typed text shows; the cell cannot end
      before the test has seen it: it waits for the marker the test writes then);
    * the page ends with every line once, in order (its output text is exactly the steps'
      ``out N``/``err N`` lines, alternating, then ``END``);
    * the page shows ``END`` within twice ``MAX_AGE`` (5 s) of the kernel writing it, plus the
      time the page's own main thread spent working meanwhile (Chromium's ``TaskDuration``
      from the cell's start: whatever the page took to take and render the lines, however
      loaded the machine, is allowed; what is not allowed is time the server held the lines).

    Why the verdict does not depend on the machine: with the pacer's bound, ``END`` waits in
    the server at most ``CATCH_UP_AGE`` (2.5 s) and then goes as fast as the page takes what
    is before it, so its delay is 2.5 s plus the page's own work on that backlog (counted in
    the allowance, however slow a loaded page is) plus the transport; without the bound it
    waits for the rate, about (lines / 10) s minus the time the kernel took to write them,
    whatever the page does, and the page sits idle between lines. The old main could pass
    only with a page that took fewer than 10 lines a second, where the rate decides nothing.

    Why a few seconds prove what the issue's 30 s do: the server's rate is set low (10 a
    second), so 3 s of this flood are already about a minute of sending at the rate, and by the
    time the key is typed the flood's first lines are past ``CATCH_UP_AGE`` and the page is
    taking the backlog at its own pace; each further second is the same steady state. The
    bound is measured on the last line, behind all the others.

    On the old main (19e7e8a), lines that cannot merge went at the rate whatever their age:
    the last assertion fails (372 steps: ``END`` shown 69.98 s after the kernel wrote it,
    against 10 s plus the 11.71 s the page worked)."""
    flooded, typed = tmp_path / "flooded", tmp_path / "typed"
    cells = ["", flood_cell(FLOOD_S, flooded, typed)]
    open_notebook(page, lab, "lab", "flood", cells, EXT_KERNEL, run_all=False)
    page.evaluate(WATCH_END_JS)
    cdp = page.context.new_cdp_session(page)
    cdp.send("Performance.enable")
    busy_before = task_seconds(cdp)
    run_cell(page, 1)

    wait_for(flooded.exists, 120, what="the kernel flooding past CATCH_UP_AGE", page=page)
    assert FLOOD_S > CATCH_UP_AGE
    editor = page.locator(CODE_CELL).nth(0).locator(".cm-content")
    editor.click()
    page.keyboard.type(TYPED)
    wait_for(lambda: TYPED in editor.inner_text(), 60, what="the typed key in the page", page=page)
    # The cell is still running: it loops until this marker exists.
    typed.touch()

    shown_ms = wait_for(
        lambda: page.evaluate("() => window.__endShownAt"),
        240,
        what="the cell's END line in the page",
        page=page,
    )
    busy = task_seconds(cdp) - busy_before
    wait_idle(page, LAB_STATUS_JS)
    text = page.evaluate(OUTPUT_JS, 1)
    end = text[text.rindex("END ") :]
    _, steps_text, written_text = end.split()
    steps, written_at = int(steps_text), float(written_text)
    expected = "".join(f"out {i}\nerr {i}\n" for i in range(steps)) + end
    assert end.endswith("\n") and text == expected, "lines lost, repeated or out of order"
    lag = shown_ms / 1000 - written_at
    print(f"{steps} steps ({2 * steps} lines); END shown {lag:.2f} s after the kernel wrote it;")
    print(f"the page's main thread worked {busy:.2f} s from the cell's start")
    # Twice the bound: the server's and the transport's own scheduling on a loaded machine
    # is not measured (the page's is); the old main was minutes late, not seconds.
    assert lag <= 2 * MAX_AGE + busy, (
        f"END shown {lag:.2f} s after the kernel wrote it: more than twice MAX_AGE "
        f"({MAX_AGE} s) plus the {busy:.2f} s the page worked ({steps} steps at a rate of {RATE})"
    )
