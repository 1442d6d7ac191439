"""A widget moved hundreds of times while a cell waits in a UI loop, in a real page (issue 44).

A ``jupyter lab`` server as installed, Debian's Chromium driven by Playwright, JupyterLab 4.6
and Notebook 7 as they ship, our kernel. A cell waits in jupyter-ui-poll's ``ui_events()``
loop; the page moves a slider :data:`MOVES` times through ipywidgets' own model (``set`` and
``save_changes``, as a drag does), each move once the page has no message pending, as
ipywidgets paces a drag. The kernel's callback sees every value while the cell waits, in
order, and the page and the kernel end on the last; and a subshell console (JupyterLab's and
Notebook 7's "New Subshell Console for Notebook") answers while the loop runs (the main before
559a567 held the console's cell until the loop ended). The waits are barriers (the kernel's
record file, what the page shows) with hang guards.

Sizes: on the main before issue 44 the kernel's shell-channel thread blocked after about 2000
such messages (the page stopped, and so did every other channel). The README's run catches
that stall with tests/kernel/test_comms_long_sessions.py's UI-loop test (3000 messages paced as
the page paces them, the same stall at 2002 on the old main); here the default 300 moves (a
move takes about 70 ms in a page, so 3000 took 3.5 minutes a frontend) prove what only a page
shows: ipywidgets' own pacing through JupyterLab's and Notebook 7's kernel connection, every
value in the kernel mid-cell, page and kernel agreeing at the end, the console answering.
``--full-size`` (.ci/run) moves 3000 times, past the stall, in the page too.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from harness.browser import require_browser, wait_for
from harness.browser_subshell import (
    FRONTENDS,
    SLIDER_READOUT,
    cell_output_text,
    console_output_text,
    open_notebook,
    open_subshell_console,
    read_records,
    run_cell,
    run_in_console,
    scenario_files,
    slider_and_waiting_cells,
    wait_idle,
)
from harness.kernels import EXT_KERNEL
from harness.server import JupyterServer

pytestmark = [pytest.mark.server, pytest.mark.timeout(600)]

#: The moves by default, and under ``--full-size`` (past the old main's stall at ~2000).
MOVES, MOVES_FULL = 300, 3000

#: Set the value of the slider shown by cell 0 from ``first`` to ``last`` through its model in
#: the page's widget manager, one value once no message of the model is pending (as ipywidgets
#: paces a drag). Returns the number of values set.
MOVE_JS = """async ([first, last]) => {
  const nb = window.jupyterapp.shell.currentWidget.content;
  const area = nb.widgets[0].outputArea;
  const view = area.model.get(0).data['application/vnd.jupyter.widget-view+json'];
  // The widget renderer holds its manager as a promise (ipywidgets 8's jupyterlab-manager).
  let renderer = null;
  const find = (widget) => {
    if (renderer || !widget) return;
    if (widget._manager && widget._manager.promise) { renderer = widget; return; }
    for (const child of (widget.widgets || [])) find(child);
  };
  find(area);
  const manager = await renderer._manager.promise;
  const model = await manager.get_model(view.model_id);
  const idle = () => new Promise((resolve) => {
    const check = () => (model._pending_msgs > 0 ? setTimeout(check, 1) : resolve());
    check();
  });
  let moved = 0;
  for (let value = first; value <= last; value++) {
    await idle();
    model.set('value', value);
    model.save_changes();
    moved++;
  }
  await idle();
  return moved;
}"""


#: The cell's UI loop: a poll every millisecond, as a dashboard cell waits for its widgets.
UI_LOOP = """\
from jupyter_ui_poll import ui_events
with ui_events() as poll:
    while not release.exists() and time.monotonic() < deadline:
        poll(10)
        time.sleep(0.001)"""


def cells(record: Any, started: Any, release: Any, moves: int) -> list[str]:
    return slider_and_waiting_cells(
        record, started, release, slider_max=moves, wait=UI_LOOP, guard_s=400
    )


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_moves_during_a_ui_loop_end_where_the_page_is(
    lab: JupyterServer, page: Any, frontend: str, full_size: bool
) -> None:
    moves = MOVES_FULL if full_size else MOVES
    require_browser(("jupyter_ui_poll",))
    name = f"ui-loop-{frontend}-{uuid.uuid4().hex[:8]}"
    record, started, release = scenario_files(lab, name)
    try:
        _, status_js = open_notebook(
            page,
            lab,
            frontend,
            name,
            cells(record, started, release, moves),
            EXT_KERNEL,
            run_all=False,
        )
        run_cell(page, 0)
        wait_for(
            lambda: page.locator(SLIDER_READOUT).count() == 1, 60, what="the slider", page=page
        )
        wait_idle(page, status_js)
        run_cell(page, 1)
        wait_for(started.exists, 60, what="the UI loop's cell started", page=page)
        moved = page.evaluate(MOVE_JS, [1, moves])
        wait_for(
            lambda: bool(read_records(record)) and read_records(record)[-1]["value"] == moves,
            120,
            what=f"the kernel's callback for value {moves}",
            page=page,
        )
        page_value = page.locator(SLIDER_READOUT).inner_text().strip()
        records = read_records(record)
        # A subshell console answers while the loop still runs (jupyter-ui-poll holds the
        # main shell's cells back; on stock and the old main it held the console's too).
        run_in_console(page, open_subshell_console(page), 'print("CONSOLE", running)')
        wait_for(
            lambda: "CONSOLE" in console_output_text(page),
            60,
            what="the subshell console's answer while the UI loop runs",
            page=page,
        )
        console = console_output_text(page)
    finally:
        release.touch()
    wait_for(lambda: "RELEASED True" in cell_output_text(page, 1), 120, what="cell 1's print")
    assert moved == moves
    assert [r["value"] for r in records] == list(range(1, moves + 1))
    assert all(r["running"] for r in records)  # every move was handled while the cell waited
    assert page_value == str(moves)
    assert "CONSOLE True" in console, console
