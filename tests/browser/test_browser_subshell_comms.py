"""Widgets used while a cell runs, in JupyterLab and Notebook 7 as they ship (PROTOCOL.md s. 7).

JupyterLab 4.4+ and Notebook 7 send every comm message on a kernel subshell
(``commsOverSubshells`` defaults to ``perCommTarget``); stock ipykernel 7 runs it on its own
thread, beside the running cell (pyplot's one global state, the cell's figure flushed under
the comm message). ``python3-ext`` runs comm messages on the main shell, in arrival order,
never while a cell runs except where the cell waits for them (jupyter-ui-poll, ``await``).

One real ``jupyter lab`` with default settings, Chromium via Playwright, mouse and keyboard on
the widgets. Each test checks its premise: the page sent its comm messages on a subshell (its
own websocket) and the kernel ran them under one (the callback records ``subshell_id``). The
slider scenario is ``harness/browser_subshell.py`` (``python -m benchmarks browser_subshell``
runs it on stock too, which fails it). Waits are barriers; bounds are hang guards.
"""

from __future__ import annotations

import contextlib
import functools
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from harness.browser import (
    LAB_ARGS,
    quiet_lab_settings,
    require_browser,
    wait_for,
)
from harness.browser_subshell import (
    CELL_LINES,
    FRONTENDS,
    MOVES,
    RECORD_HELPER,
    SLIDER_HANDLE,
    SLIDER_MAX,
    SLIDER_READOUT,
    cell_output_text,
    drag_slider,
    last_recorded,
    move_during_the_cell,
    open_notebook,
    open_subshell_console,
    read_records,
    run_cell,
    run_in_console,
    run_slider_scenario,
    scenario_files,
    sent_and_detail,
    slider_and_waiting_cells,
    start_beside_a_widget,
    wait_idle,
)
from harness.kernels import EXT_KERNEL
from harness.server import JupyterServer

# Hang guard per test (each takes about 10-20 s here).
pytestmark = [pytest.mark.server, pytest.mark.timeout(300)]

KERNEL = EXT_KERNEL
#: Clicks on the button while the cell polls with jupyter-ui-poll.
CLICKS = 5
BUTTON = ".jp-OutputArea button.jupyter-button.widget-button"
CODE_CELL = ".jp-Notebook .jp-CodeCell"


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    """One ``jupyter lab`` (Notebook 7 loads with it), default settings, curve required."""
    require_browser(("playwright", "jupyterlab", "notebook", "ipywidgets", "matplotlib"))
    root = tmp_path_factory.mktemp("root")
    with JupyterServer(app="lab", root_dir=root, extra_args=LAB_ARGS) as server:
        quiet_lab_settings(server)  # no news toast; commsOverSubshells stays the default
        yield server


# --- 1. a slider moved while a cell draws with pyplot ------------------------------------------


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_slider_moved_while_a_cell_draws_with_pyplot(
    lab: JupyterServer, page: Any, frontend: str
) -> None:
    run = run_slider_scenario(page, lab, frontend, KERNEL)
    detail = run.detail()
    print(detail)
    # The premise: the page sent its moves on a subshell, and the kernel got them with it.
    assert run.on_subshells, f"moves not sent on a subshell: {detail}"
    assert run.page_value == 1 + MOVES, detail
    # The verdicts.
    assert run.cell_lines == CELL_LINES and run.released, f"the cell's figure: {detail}"
    assert run.figure_right, f"the cell's figure not shown: {detail}"
    assert run.before_release == 0, f"a callback ran before the cell was released: {detail}"
    assert run.mid_cell_callbacks == 0, f"a callback ran mid-cell: {detail}"
    assert run.threads == ["MainThread"], detail
    assert run.wrong_drawings == 0, f"a garbled drawing: {detail}"
    assert run.kernel_value == run.page_value, detail


# --- 2. a jupyter-ui-poll loop counts every click -----------------------------------------------


def test_jupyter_ui_poll_loop_counts_every_click(lab: JupyterServer, page: Any) -> None:
    require_browser(("jupyter_ui_poll",))
    name = f"uipoll-{uuid.uuid4().hex[:8]}"
    record, started = lab.root_dir / f"{name}.jsonl", lab.root_dir / f"{name}.started"
    setup = (
        "import ipywidgets as widgets\nrunning = False\nclicks = []\n"
        + RECORD_HELPER
        + f"""
button = widgets.Button(description="Click me")

def clicked(_):
    clicks.append(1)
    _record({str(record)!r}, click=len(clicks))

button.on_click(clicked)
button"""
    )
    # 60 s: a hang guard inside the loop, not a verdict; the clicks come long before.
    loop = f"""\
import pathlib, time
from jupyter_ui_poll import ui_events
pathlib.Path({str(started)!r}).touch()
deadline = time.monotonic() + 60
with ui_events() as poll:
    while len(clicks) < {CLICKS} and time.monotonic() < deadline:
        poll(10)
        time.sleep(0.01)
print("CLICKS", len(clicks))"""
    log, status_js = open_notebook(page, lab, "lab", name, [setup, loop], KERNEL)
    button = page.locator(BUTTON)
    wait_for(lambda: button.count() == 1, 60, what="the button rendered", page=page)
    wait_for(started.exists, 60, what="the polling cell started", page=page)
    for _ in range(CLICKS):
        button.click()
    wait_for(lambda: "CLICKS" in cell_output_text(page, 1), 90, what="the loop's print", page=page)
    wait_idle(page, status_js)
    text = cell_output_text(page, 1)
    records = read_records(record)
    sent, detail = sent_and_detail(log, "custom", kernel=KERNEL, records=records, cell_output=text)
    assert len(sent) == CLICKS and all(f.subshell_id for f in sent), detail
    assert records and all(r["subshell_id"] for r in records), detail
    assert f"CLICKS {CLICKS}" in text, detail
    assert [r["click"] for r in records] == list(range(1, CLICKS + 1)), detail


# --- 3. an ipympl figure made while a slider moves ----------------------------------------------

#: Steps the slider is dragged by while the ipympl cell waits.
IPYMPL_MOVES = 3
#: An ipympl figure's view on the page: the widget holding its canvases.
IPYMPL_FIGURE = ".jupyter-matplotlib:has(canvas)"


def ipympl_cells(record: Any, started: Any, release: Any) -> list[str]:
    """Cell 0: ``%matplotlib widget`` and a counting slider; cell 1 waits for ``release``, then
    plots on a new figure without ``plt.show()`` (ipympl shows it at ``post_execute``)."""
    setup = (
        "%matplotlib widget\n"
        "import matplotlib.pyplot as plt\n"
        "import ipywidgets as widgets\n"
        "running = False\n"
        "moves = 0\n"
        + RECORD_HELPER
        + f"""
slider = widgets.IntSlider(value=0, min=0, max=30)

def moved(change):
    global moves
    moves += 1
    _record({str(record)!r}, value=change["new"])

slider.observe(moved, "value")
slider"""
    )
    cell = f"""\
import pathlib, time
running = True
try:
    pathlib.Path({str(started)!r}).touch()
    release = pathlib.Path({str(release)!r})
    deadline = time.monotonic() + 60
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    print("RELEASED", release.exists())
finally:
    running = False"""
    return [setup, cell]


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_ipympl_figure_shown_in_its_cell_while_a_slider_moves(
    lab: JupyterServer, page: Any, frontend: str
) -> None:
    require_browser(("ipympl",))
    name = f"ipympl-{frontend}-{uuid.uuid4().hex[:8]}"
    record, started, release = scenario_files(lab, name)
    cells = ipympl_cells(record, started, release)
    try:
        log, status_js = open_notebook(page, lab, frontend, name, cells, KERNEL, run_all=False)
        move_during_the_cell(page, log, status_js, record, started, IPYMPL_MOVES)
        release.touch()
        wait_for(
            lambda: last_recorded(record, 1 + IPYMPL_MOVES),
            60,
            what=f"the kernel's callback for value {1 + IPYMPL_MOVES}",
            page=page,
        )
        wait_idle(page, status_js)
        figure = page.locator(CODE_CELL).nth(1).locator(IPYMPL_FIGURE)
        # A bound, not a verdict: the assertion below says what the cell shows instead.
        with contextlib.suppress(TimeoutError):
            wait_for(lambda: figure.count() >= 1, 30, what="the ipympl figure", page=page)
        text = cell_output_text(page, 1)
        shown = figure.count()
        elsewhere = page.locator(CODE_CELL).nth(0).locator(IPYMPL_FIGURE).count()
    finally:
        release.touch()

    records = read_records(record)
    sent, detail = sent_and_detail(
        log,
        "update",
        kernel=KERNEL,
        records=records,
        cell_output=text,
        figures_in_cell=shown,
        figures_under_the_slider=elsewhere,
    )
    # The premise: the page sent its moves on a subshell, and the kernel got them with it.
    assert sent and all(f.subshell_id for f in sent), f"moves not sent on a subshell: {detail}"
    assert records and all(r["subshell_id"] for r in records), detail
    # The verdicts: the cell ran to its end, and its figure is in its own output.
    assert "RELEASED True" in text, detail
    assert shown == 1 and elsewhere == 0, f"the ipympl figure not in its cell: {detail}"
    assert not [r for r in records if r["running"]], f"a callback ran mid-cell: {detail}"


# --- 4. a slider dragged while a cell waits for it (issue 37) -----------------------------------

#: Separate drags of the slider, one step each, while the cell waits.
DRAGS = 5

#: How the cell waits, letting the slider's messages through, until the test releases it
#: (90 s: a hang guard, not a verdict).
WAITING = {
    "ui_events": """\
from jupyter_ui_poll import ui_events
with ui_events() as poll:
    while not release.exists() and time.monotonic() < deadline:
        poll(10)
        time.sleep(0.01)""",
    "async": """\
import asyncio
while not release.exists() and time.monotonic() < deadline:
    await asyncio.sleep(0.01)""",
}


def waiting_cells(record: Any, started: Any, release: Any, wait: str) -> list[str]:
    return slider_and_waiting_cells(
        record, started, release, slider_max=SLIDER_MAX, wait=WAITING[wait], guard_s=90
    )


def recorded(record: Any, value: int) -> bool:
    return any(r["value"] == value for r in read_records(record))


@pytest.mark.parametrize("wait", list(WAITING))
@pytest.mark.parametrize("frontend", FRONTENDS)
def test_slider_dragged_while_a_cell_waits_reaches_the_kernel_every_time(
    lab: JupyterServer, page: Any, frontend: str, wait: str
) -> None:
    """Each move handled mid-cell gets its own idle, so the page sends the next one: the kernel
    sees every drag's value and ends at the page's (before: the first move only, for good)."""
    if wait == "ui_events":
        require_browser(("jupyter_ui_poll",))
    name = f"waiting-{wait}-{frontend}-{uuid.uuid4().hex[:8]}"
    record, started, release = scenario_files(lab, name)
    cells = waiting_cells(record, started, release, wait)
    try:
        log, status_js = open_notebook(page, lab, frontend, name, cells, KERNEL, run_all=False)
        handle = page.locator(SLIDER_HANDLE)
        start_beside_a_widget(page, status_js, handle, started, "the slider rendered")
        for value in range(1, DRAGS + 1):
            drag_slider(page, value - 1, 1)
            wait_for(
                functools.partial(recorded, record, value),
                30,
                what=f"the kernel's callback for drag {value}",
                page=page,
            )
        kernel_value = read_records(record)[-1]["value"]
        page_value = page.locator(SLIDER_READOUT).inner_text().strip()
        release.touch()
        wait_for(lambda: "RELEASED" in cell_output_text(page, 1), 60, what="cell 1's print")
        wait_idle(page, status_js)
        text = cell_output_text(page, 1)
    finally:
        release.touch()
    records = read_records(record)
    sent, detail = sent_and_detail(log, "update", records=records, cell_output=text)
    # The premise: the page sent its moves on a subshell, and the kernel got them mid-cell.
    assert sent and all(f.subshell_id for f in sent), f"moves not sent on a subshell: {detail}"
    assert records and all(r["subshell_id"] and r["running"] for r in records), detail
    assert "RELEASED True" in text, detail
    assert [r["value"] for r in records] == list(range(1, DRAGS + 1)), detail
    assert kernel_value == DRAGS and page_value == str(DRAGS), detail


# --- 5. a slider made in a subshell console answers while the main cell runs (JEP 91) -------------


def test_slider_made_in_a_subshell_console_answers_while_the_main_cell_runs(
    lab: JupyterServer, page: Any
) -> None:
    """JupyterLab's "New Subshell Console for Notebook": a slider made there runs its callback
    on that subshell at once while the notebook's cell runs, as on stock."""
    name = f"console-{uuid.uuid4().hex[:8]}"
    record, started, release = scenario_files(lab, name)
    main_cell = (
        f"import pathlib, time\nrunning = True\npathlib.Path({str(started)!r}).touch()\n"
        f"release = pathlib.Path({str(release)!r})\ndeadline = time.monotonic() + 90\n"
        "while not release.exists() and time.monotonic() < deadline:\n    time.sleep(0.01)\n"
        'running = False\nprint("RELEASED", release.exists())'
    )
    console_code = (
        "import ipywidgets as widgets\n"
        + RECORD_HELPER
        + f"c = widgets.IntSlider(value=0, min=0, max={SLIDER_MAX})\n"
        f'c.observe(lambda change: _record({str(record)!r}, value=change["new"]), "value")\n'
        "c"
    )
    try:
        log, _ = open_notebook(page, lab, "lab", name, [main_cell], KERNEL, run_all=False)
        run_cell(page, 0)
        wait_for(started.exists, 60, what="the notebook's cell started", page=page)
        run_in_console(page, open_subshell_console(page), console_code)
        handle = page.locator(SLIDER_HANDLE)
        wait_for(lambda: handle.count() == 1, 60, what="the console's slider", page=page)
        drag_slider(page, 0, 3)
        wait_for(
            lambda: last_recorded(record, 3),
            60,
            what="the console slider's callback for value 3",
            page=page,
        )
        page_value = page.locator(SLIDER_READOUT).inner_text().strip()
        records = read_records(record)
    finally:
        release.touch()
    sent, detail = sent_and_detail(log, "update", records=records, page_value=page_value)
    # The premise: the page sent the moves on a subshell, as for any widget.
    assert sent and all(f.subshell_id for f in sent), detail
    # The verdicts: it ran while the notebook's cell ran, not on the main thread.
    assert all(r["running"] for r in records), detail
    assert "MainThread" not in {r["thread"] for r in records}, detail
    assert page_value == "3", detail
