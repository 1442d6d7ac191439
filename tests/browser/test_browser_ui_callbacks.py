"""The stop button pressed while a ``ui_events()`` callback runs, in a real page (issue 51).

A ``jupyter lab`` server as installed, Debian's Chromium driven by Playwright, JupyterLab 4.6
and Notebook 7 as they ship, real jupyter-ui-poll, our kernel. A cell waits for a button's
clicks in jupyter-ui-poll's ``ui_events()`` loop and catches ``KeyboardInterrupt`` around it;
the user clicks three times and presses the toolbar's stop button (■, "Interrupt the kernel")
while the first click's callback runs, with the other two waiting in the kernel; then runs
the next cell. Every wait is a barrier: files the cells and the callback write, what the page
shows, the frames of the page's own kernel websocket; the kernel's waits are loops on a
condition (the clicks waiting, the main thread taking the interrupt), each with a hang
guard.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from harness.browser import require_browser, wait_for
from harness.browser_subshell import (
    FRONTENDS,
    cell_output_text,
    comm_msgs_sent,
    open_notebook,
    run_cell,
    start_beside_a_widget,
)
from harness.callback_cells import CALLBACK_PRELUDE
from harness.kernels import EXT_KERNEL
from harness.page_websocket import Frame, WebsocketLog
from harness.server import JupyterServer

pytestmark = [pytest.mark.server, pytest.mark.timeout(300)]

BUTTON = ".jp-OutputArea .widget-button"
#: The notebook toolbar's stop button (JupyterLab's and Notebook 7's).
STOP = '.jp-NotebookPanel-toolbar [data-command="notebook:interrupt-kernel"]'
CLICKS = 3


def cells(running: Path, started: Path) -> list[str]:
    """Cell 0: a button whose callback counts its click (``started`` in order, ``finished``,
    the most that ran at once); the first click's callback waits until the other two wait in
    the kernel's inbox, touches ``running``, then runs on until the main thread has taken the
    interrupt (it is in jupyter-ui-poll's ``terminate``, joining the poll thread). Cell 1: the
    ``ui_events()`` loop, ``KeyboardInterrupt`` caught. Cell 2: the next cell, which collects
    garbage first (what only the collector would put back shows before it, not at some later
    collection) and prints the counters."""
    button = (
        CALLBACK_PRELUDE
        + f"""\
import pathlib
_kernel = get_ipython().kernel

def _clicked(_):
    n = len(started) + 1
    started.append(n)
    active[0] += 1
    most[0] = max(most[0], active[0])
    try:
        if n == 1:
            _deadline = _time.monotonic() + 60  # a hang guard
            while len(_kernel.comm_inbox) < {CLICKS - 1} and _time.monotonic() < _deadline:
                _time.sleep(0.005)
            pathlib.Path({str(running)!r}).touch()
            while not _main_in("terminate") and _time.monotonic() < _deadline:
                _time.sleep(0.005)
    finally:
        active[0] -= 1
        finished.append(n)

b = _w.Button(description="Click")
b.on_click(_clicked)
b"""
    )
    polling = f"""\
import pathlib, time as _time
from jupyter_ui_poll import ui_events
pathlib.Path({str(started)!r}).touch()
_deadline = _time.monotonic() + 60  # a hang guard
try:
    with ui_events() as _poll:
        while len(finished) < {CLICKS} and _time.monotonic() < _deadline:
            _poll(10)
            _time.sleep(0.01)
except KeyboardInterrupt:
    print("CAUGHT")"""
    following = "import gc\ngc.collect()\nprint('NEXT', started, finished, most[0])"
    return [button, polling, following]


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_stop_during_a_ui_events_callback_then_the_next_cell(
    lab: JupyterServer, page: Any, frontend: str
) -> None:
    """Three clicks on a button while a cell waits in ``ui_events()``, the stop button pressed
    while the first click's callback runs (the other two waiting in the kernel), the cell
    catching the interrupt; then the next cell: its output shows in its own cell and nothing
    of it under the polling cell, and it reads every click counted once, in order, one
    callback at a time (``NEXT [1, 2, 3] [1, 2, 3] 1``).

    On 19e7e8a (main before issue 51's fix) it fails, in both frontends: the next cell's
    output went out under the polling cell's msg_id (jupyter-ui-poll's ``_reset_output()`` ran
    there), so the page showed it under the polling cell, after ``Task was destroyed but it is
    pending!``, and nothing in its own cell; and it read 2 of the 3 clicks
    (``NEXT [1, 2] [1, 2] 1``: the third was taken for a loop that was ending, its dispatch
    task left pending)."""
    require_browser(("jupyter_ui_poll", "ipywidgets"))
    name = f"ui-callbacks-{frontend}-{uuid.uuid4().hex[:8]}"
    running, started = (lab.root_dir / f"{name}.{ext}" for ext in ("running", "started"))
    log, status_js = open_notebook(
        page, lab, frontend, name, cells(running, started), EXT_KERNEL, run_all=False
    )
    button = page.locator(BUTTON)
    start_beside_a_widget(page, status_js, button, started, "the button")
    for _ in range(CLICKS):
        button.click()
    wait_for(running.exists, 60, what="the first callback, the others waiting", page=page)
    page.locator(STOP).click()
    wait_for(
        lambda: "CAUGHT" in cell_output_text(page, 1), 60, what="the interrupt caught", page=page
    )
    run_cell(page, 2)
    nxt = wait_for(
        lambda: _received_stream(log, "NEXT"), 60, what="the next cell's print", page=page
    )
    requests = [
        f.msg_id for f in log.frames() if f.direction == "sent" and f.msg_type == "execute_request"
    ]
    shown = [cell_output_text(page, i) for i in range(3)]
    under = requests.index(nxt.parent_msg_id) if nxt.parent_msg_id in requests else None
    detail = {"next": nxt.content["text"], "under_cell": under, "shown": shown}
    assert len(comm_msgs_sent(log, "custom")) == CLICKS  # the premise: three clicks sent
    # Its output under its own request (the page shows output under the cell whose msg_id it
    # carries), shown in its own cell, nothing of it under the polling cell.
    assert under == 2, detail
    wait_for(lambda: "NEXT" in cell_output_text(page, 2), 30, what="NEXT in its cell", page=page)
    assert "NEXT" not in cell_output_text(page, 1)
    # Every click counted once, in order, one callback at a time, before the next cell.
    assert cell_output_text(page, 2).strip() == "NEXT [1, 2, 3] [1, 2, 3] 1"
    # No dispatch left pending by the interrupt (what the old main printed in the page).
    shown = [cell_output_text(page, i) for i in range(3)]
    assert not [t for t in shown if "destroyed" in t or "never awaited" in t], shown


def _received_stream(log: WebsocketLog, text: str) -> Frame | None:
    """The first stream message the page received whose text holds ``text``, or None."""
    return next(
        (
            f
            for f in log.frames()
            if f.direction == "received" and f.msg_type == "stream" and text in f.content["text"]
        ),
        None,
    )
