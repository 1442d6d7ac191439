"""Widgets used while a cell runs, in JupyterLab and Notebook 7 as they ship (PROTOCOL.md
section 8).

JupyterLab 4.4+ and Notebook 7 send every comm message on a kernel subshell (their setting
``commsOverSubshells``, default ``perCommTarget``), and stock ipykernel 7 runs a subshell on its
own thread: a slider's callback then runs beside the running cell, both drawing with pyplot's
one global state, and the callback's ``post_execute`` flushes the cell's figure under the comm
message, where no frontend shows it. ``python3-ext`` runs every comm message on the main shell,
in arrival order, never while a cell runs, except where the cell waits for them (jupyter-ui-poll's
``ui_events()`` here).

Everything is real: one ``jupyter lab`` server (JupyterLab 4.6 and Notebook 7) with default
settings (``commsOverSubshells`` is not set), Debian's Chromium driven by Playwright, the user's
keyboard and mouse on the widgets. Each test checks that the page did send its comm messages on
a subshell, from the page's own websocket (:class:`WebsocketLog`) and from the kernel's side
(the callback records the ``subshell_id`` of the message it runs under); without that the tests
would prove nothing.

The verdicts are what the page shows and what the kernel recorded in a file; the waits are
barriers (a file the cell writes, the page's slider readout, the messages the page sent, the file
the test writes to release the cell), never sleeps; the bounds are hang guards.

Debugging knob (not for CI): ``IPYKERNEL_EXT_SUBSHELL_KERNEL=python3`` runs them on stock
ipykernel, where the slider test fails (the callbacks run mid-cell, off the main thread).
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.browser import (
    ARTIFACTS,
    INDICATOR_STATUS_JS,
    LAB_ARGS,
    LAB_STATUS_JS,
    chromium,
    open_and_run_all,
    quiet_lab_settings,
    require_browser,
    shut_down_everything,
    wait_for,
    write_notebook,
)
from harness.page_websocket import WebsocketLog
from harness.server import JupyterServer

# Hang guard per test: a JupyterLab server (module-wide), Chromium, a kernel start and a cell
# that waits for the test; each test takes about 10-20 s here.
pytestmark = [pytest.mark.server, pytest.mark.timeout(300)]

KERNEL = os.environ.get("IPYKERNEL_EXT_SUBSHELL_KERNEL", "python3-ext")

#: Steps the slider is dragged by while the cell draws, one at a time (of SLIDER_MAX).
MOVES = 8
SLIDER_MAX = 30
#: Lines the cell draws on its own figure.
CELL_LINES = 60
#: Clicks on the button while the cell polls with jupyter-ui-poll.
CLICKS = 5

SLIDER_HANDLE = ".jp-OutputArea .widget-slider .noUi-handle"
SLIDER_TRACK = ".jp-OutputArea .widget-slider .noUi-base"
SLIDER_READOUT = ".jp-OutputArea .widget-slider .widget-readout"
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


@pytest.fixture(scope="module")
def browser(lab: JupyterServer) -> Iterator[Any]:
    with chromium() as chromium_browser:
        yield chromium_browser


@pytest.fixture
def page(browser: Any, lab: JupyterServer, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh browser context; a screenshot of the page as the test left it goes to
    ``artifacts/``; the kernels it started are shut down afterwards."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    new_page = context.new_page()
    new_page.set_default_timeout(120_000)
    try:
        yield new_page
    finally:
        ARTIFACTS.mkdir(exist_ok=True)
        with contextlib.suppress(Exception):
            new_page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"))
        context.close()
        shut_down_everything(lab)


# --- helpers ---------------------------------------------------------------------------------


def open_notebook(
    page: Any, lab: JupyterServer, frontend: str, name: str, cells: list[str], run_all: bool = True
) -> tuple[WebsocketLog, str]:
    """Write ``cells`` to ``<name>.ipynb``, open it in ``frontend`` and (``run_all``) run all
    its cells; otherwise wait until its kernel is connected and idle, and run none."""
    path = lab.root_dir / f"{name}.ipynb"
    write_notebook(path, cells, KERNEL)
    if frontend == "lab":
        # A fresh workspace: a reused one would bring back another test's layout.
        url = f"lab/workspaces/{name}/tree/{path.name}?token={lab.token}"
        status_js = LAB_STATUS_JS
    else:
        url = f"notebooks/{path.name}?token={lab.token}"
        status_js = INDICATOR_STATUS_JS
    log = WebsocketLog(page)
    if run_all:
        open_and_run_all(page, lab, log, url, status_js)
    else:
        page.goto(lab.http_url(url))
        wait_for(
            lambda: any(f.msg_type == "kernel_info_reply" for f in log.frames()),
            180,
            what="the page's kernel connected",
            page=page,
        )
        wait_idle(page, status_js)
    session = wait_for(
        lambda: next((s for s in lab.api("GET", "api/sessions") if s["path"] == path.name), None),
        60,
        what=f"the session of {path.name}",
        page=page,
    )
    assert session["kernel"]["name"] == KERNEL, session
    return log, status_js


def run_cell(page: Any, index: int) -> None:
    """Run the notebook's cell ``index`` as a user would (select it, Run), without waiting."""
    page.evaluate(
        "() => { const nb = window.jupyterapp.shell.currentWidget.content;"
        f" nb.activeCellIndex = {index};"
        " window.jupyterapp.commands.execute('notebook:run-cell'); }"
    )


def comm_msgs_sent(log: WebsocketLog, method: str) -> list[Any]:
    """The ``comm_msg`` s the page sent on the shell channel whose data method is ``method``
    (``update`` for a slider's moves, ``custom`` for a button's clicks)."""
    return [
        f
        for f in log.frames()
        if f.direction == "sent"
        and f.channel == "shell"
        and f.msg_type == "comm_msg"
        and (f.content.get("data") or {}).get("method") == method
    ]


def drag_slider(page: Any, start: int, steps: int) -> None:
    """Drag the slider's handle from ``start`` by ``steps``, stopping at every step."""
    track = page.locator(SLIDER_TRACK).bounding_box()
    handle = page.locator(SLIDER_HANDLE).bounding_box()
    y = handle["y"] + handle["height"] / 2
    page.mouse.move(handle["x"] + handle["width"] / 2, y)
    page.mouse.down()
    for step in range(start + 1, start + steps + 1):
        page.mouse.move(track["x"] + track["width"] * step / SLIDER_MAX, y, steps=2)
    page.mouse.up()


def read_records(path: Path) -> list[dict[str, Any]]:
    """The JSON lines the kernel's callbacks appended to ``path`` (none yet: empty)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def cell_output_text(page: Any, index: int) -> str:
    return "\n".join(page.locator(CODE_CELL).nth(index).locator(".jp-OutputArea").all_inner_texts())


def wait_idle(page: Any, status_js: str) -> None:
    page.wait_for_function(f"() => ({status_js})().toLowerCase() === 'idle'", timeout=60_000)


# Kernel-side: each callback appends one JSON line to a record file, with the subshell its comm
# message came on (the parent header the kernel handles it under).
RECORD_HELPER = """\
import json as _json, threading as _threading

def _record(path, **fields):
    parent = get_ipython().kernel.get_parent() or {}
    fields.update(
        thread=_threading.current_thread().name,
        running=running,
        subshell_id=(parent.get("header") or {}).get("subshell_id"),
    )
    with open(path, "a") as f:
        f.write(_json.dumps(fields) + "\\n")
"""


# --- 1. a slider moved while a cell draws with pyplot ------------------------------------------


def slider_cells(record: Path, started: Path, release: Path) -> list[str]:
    setup = (
        "%matplotlib inline\n"
        "import matplotlib.pyplot as plt\n"
        "import ipywidgets as widgets\n"
        "running = False\n"
        + RECORD_HELPER
        + f"""
slider = widgets.IntSlider(value=0, min=0, max={SLIDER_MAX})

def draw(change):
    # A user's callback: a pyplot figure with `value` lines, counted on the current axes.
    plt.figure()
    for i in range(change["new"]):
        plt.plot([0, 1], [i, i + 1])
    _record({str(record)!r}, value=change["new"], lines=len(plt.gca().lines))

slider.observe(draw, "value")
slider"""
    )
    # The cell draws its lines over about 3 s while the test moves the slider, then waits for
    # the release file (60 s: a hang guard, not a verdict); the figure is shown at its end.
    draw = f"""\
import pathlib, time
running = True
try:
    plt.figure()
    pathlib.Path({str(started)!r}).touch()
    release = pathlib.Path({str(release)!r})
    for i in range({CELL_LINES}):
        plt.plot([0, 1], [i, -i])
        if not release.exists():
            time.sleep(0.05)
    deadline = time.monotonic() + 60
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    print("CELL LINES", len(plt.gca().lines), "RELEASED", release.exists())
finally:
    running = False"""
    return [setup, draw]


def slider_moved_while_a_cell_draws(page: Any, lab: JupyterServer, frontend: str) -> None:
    name = f"slider-{frontend}-{uuid.uuid4().hex[:8]}"
    record, started, release = (
        lab.root_dir / f"{name}.{ext}" for ext in ("jsonl", "started", "release")
    )
    try:
        log, status_js = open_notebook(
            page, lab, frontend, name, slider_cells(record, started, release), run_all=False
        )
        run_cell(page, 0)
        handle = page.locator(SLIDER_HANDLE)
        wait_for(lambda: handle.count() == 1, 60, what="the slider rendered", page=page)
        wait_idle(page, status_js)
        # One move while idle, as a user plays with a slider before running the next cell: from
        # then on stock ipykernel 7.4 runs every message of this widget on the subshell's thread.
        drag_slider(page, 0, 1)
        wait_for(lambda: read_records(record), 60, what="the idle move's callback", page=page)
        wait_idle(page, status_js)
        moves_before_cell = len(comm_msgs_sent(log, "update"))
        run_cell(page, 1)
        wait_for(started.exists, 60, what="the drawing cell started", page=page)
        # The user drags the slider while the cell draws, one step at a time (Notebook 7's
        # keyboard handling keeps arrow keys from the slider's handle; the mouse is the same in
        # both frontends).
        drag_slider(page, 1, MOVES)
        readout = page.locator(SLIDER_READOUT)
        wait_for(
            lambda: readout.inner_text().strip() == str(1 + MOVES),
            30,
            what=f"the page's slider at {1 + MOVES}",
            page=page,
        )
        # The page sends its first move at once and holds the rest (ipywidgets sends the next
        # state once the kernel is idle for the previous one): wait until the first went out.
        wait_for(
            lambda: len(comm_msgs_sent(log, "update")) > moves_before_cell,
            30,
            what="a move sent to the kernel mid-cell",
            page=page,
        )
        moves_before_release = read_records(record)[1:]
        release.touch()
        page_value = int(readout.inner_text().strip())
        # The cell ends, then the moves run; the last one brings the kernel to the page's value.
        wait_for(
            lambda: (records := read_records(record)) and records[-1]["value"] == page_value,
            60,
            what=f"the kernel's callback for value {page_value}",
            page=page,
        )
        wait_idle(page, status_js)
        output = page.locator(CODE_CELL).nth(1).locator(".jp-OutputArea")
        wait_for(
            lambda: "CELL LINES" in cell_output_text(page, 1),
            30,
            what="the cell's print",
            page=page,
        )
        images = output.locator("img").count()
        text = cell_output_text(page, 1)
    finally:
        release.touch()

    records = read_records(record)
    sent = comm_msgs_sent(log, "update")
    detail = json.dumps(
        {
            "kernel": KERNEL,
            "records": records,
            "cell_output": text,
            "cell_images": images,
            "sent_subshells": [f.subshell_id for f in sent],
        }
    )
    print(detail)
    # The premise: the page sent its moves on a subshell, and the kernel got them with it.
    assert sent and all(f.subshell_id for f in sent), f"moves not sent on a subshell: {detail}"
    assert records and all(r["subshell_id"] for r in records), detail
    assert page_value == 1 + MOVES, detail
    # The verdicts.
    assert f"CELL LINES {CELL_LINES} RELEASED True" in text, f"the cell's figure: {detail}"
    assert images == 1 and "with 0 Axes" not in text, f"the cell's figure not shown: {detail}"
    assert moves_before_release == [], f"a callback ran before the cell was released: {detail}"
    assert not [r for r in records if r["running"]], f"a callback ran mid-cell: {detail}"
    assert {r["thread"] for r in records} == {"MainThread"}, detail
    assert all(r["lines"] == r["value"] for r in records), f"a garbled drawing: {detail}"
    assert records[-1]["value"] == page_value, detail


@pytest.mark.parametrize("frontend", ["lab", "notebook7"])
def test_slider_moved_while_a_cell_draws_with_pyplot(
    lab: JupyterServer, page: Any, frontend: str
) -> None:
    slider_moved_while_a_cell_draws(page, lab, frontend)


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
    log, status_js = open_notebook(page, lab, "lab", name, [setup, loop])
    button = page.locator(BUTTON)
    wait_for(lambda: button.count() == 1, 60, what="the button rendered", page=page)
    wait_for(started.exists, 60, what="the polling cell started", page=page)
    for _ in range(CLICKS):
        button.click()
    wait_for(lambda: "CLICKS" in cell_output_text(page, 1), 90, what="the loop's print", page=page)
    wait_idle(page, status_js)
    text = cell_output_text(page, 1)
    records = read_records(record)
    sent = comm_msgs_sent(log, "custom")
    detail = json.dumps(
        {
            "kernel": KERNEL,
            "records": records,
            "cell_output": text,
            "sent_subshells": [f.subshell_id for f in sent],
        }
    )
    print(detail)
    assert len(sent) == CLICKS and all(f.subshell_id for f in sent), detail
    assert records and all(r["subshell_id"] for r in records), detail
    assert f"CLICKS {CLICKS}" in text, detail
    assert [r["click"] for r in records] == list(range(1, CLICKS + 1)), detail
