"""The slider scenario: a widget moved in a real page while a cell draws with pyplot.

JupyterLab 4.4+ and Notebook 7 send every comm message on a kernel subshell (their setting
``commsOverSubshells``, default ``perCommTarget``). Stock ipykernel 7 runs those on the
subshell's thread, beside the running cell: a slider's callback and the cell then both draw
with pyplot's one global state. ipykernel_ext runs them on the main shell, after the cell
(PROTOCOL.md section 7). This module owns that scenario, for the browser test
(``tests/browser/test_browser_subshell_comms.py``, which asserts on it) and the benchmark
(``benchmarks/browser_subshell.py``, which counts it on both kernels):

* the notebook (:func:`slider_cells`): a slider whose callback draws ``value`` lines on a new
  figure and records, in a JSON-lines file, what it drew, on which thread, under which
  subshell and whether the cell was running; and a cell that draws :data:`CELL_LINES` lines,
  then waits for a release file;
* the user's steps (:func:`run_slider_scenario`): one idle move first (from then on stock
  routes the widget's messages to its subshell thread), then the cell, then a drag of
  :data:`MOVES` steps while it draws, then the release; every wait is a barrier (the file the
  cell writes, the page's slider readout, the messages the page sent, the kernel's record);
* what the page showed and the kernel recorded (:class:`SliderRun`), without verdicts.

Also the page helpers the other subshell browser tests share (:func:`open_notebook`,
:func:`run_cell`, :func:`comm_msgs_sent`, :func:`read_records`, :data:`RECORD_HELPER`,
:func:`slider_and_waiting_cells`, and a
subshell console: :func:`open_subshell_console`, :func:`run_in_console`).
"""

from __future__ import annotations

import contextlib
import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .browser import (
    notebook_url,
    open_and_run_all,
    open_connected,
    wait_command_enabled,
    wait_for,
    write_notebook,
)
from .page_websocket import WebsocketLog
from .server import JupyterServer

#: Steps the slider is dragged by while the cell draws, one at a time (of SLIDER_MAX).
MOVES = 8
SLIDER_MAX = 30
#: Lines the cell draws on its own figure.
CELL_LINES = 60

SLIDER_HANDLE = ".jp-OutputArea .widget-slider .noUi-handle"
SLIDER_TRACK = ".jp-OutputArea .widget-slider .noUi-base"
SLIDER_READOUT = ".jp-OutputArea .widget-slider .widget-readout"
CODE_CELL = ".jp-Notebook .jp-CodeCell"
CONSOLE_INPUT = ".jp-CodeConsole-input .cm-content"
CONSOLE_OUTPUT = ".jp-CodeConsole-content .jp-OutputArea"
FRONTENDS = ("lab", "notebook7")


# --- the page --------------------------------------------------------------------------------


def open_notebook(
    page: Any,
    lab: JupyterServer,
    frontend: str,
    name: str,
    cells: list[str],
    kernel: str,
    run_all: bool = True,
) -> tuple[WebsocketLog, str]:
    """Write ``cells`` to ``<name>.ipynb`` for ``kernel``, open it in ``frontend`` (``lab`` or
    ``notebook7``) and (``run_all``) run all its cells; otherwise wait until its kernel is
    connected and idle, and run none. Returns the page's websocket log and its status JS."""
    path = lab.root_dir / f"{name}.ipynb"
    write_notebook(path, cells, kernel)
    url, status_js = notebook_url(lab, frontend, name, path)
    log = WebsocketLog(page)
    if run_all:
        open_and_run_all(page, lab, log, url, status_js)
    else:
        open_connected(page, lab, log, url, status_js)
    session = wait_for(
        lambda: next((s for s in lab.api("GET", "api/sessions") if s["path"] == path.name), None),
        60,
        what=f"the session of {path.name}",
        page=page,
    )
    if session["kernel"]["name"] != kernel:
        raise RuntimeError(f"{path.name} runs {session['kernel']['name']}, not {kernel}")
    return log, status_js


#: Cell ``index``'s input prompt (``[ ]:``, ``[*]:``, ``[3]:``), or null for a cell without one.
PROMPT_JS = """(index) => {
  const cell = window.jupyterapp.shell.currentWidget.content.widgets[index];
  const prompt = cell && cell.node.querySelector('.jp-InputPrompt');
  return prompt ? prompt.textContent : null;
}"""


def run_cell(page: Any, index: int) -> None:
    """Run the notebook's cell ``index`` as a user would (select it, Run), without waiting
    for it to finish: only until the page took the run (the command is enabled before, the
    cell's prompt changed after: ``[*]``, or its new count)."""
    wait_command_enabled(page, "notebook:run-cell")
    before = page.evaluate(PROMPT_JS, index)
    page.evaluate(
        "() => { const nb = window.jupyterapp.shell.currentWidget.content;"
        f" nb.activeCellIndex = {index};"
        " window.jupyterapp.commands.execute('notebook:run-cell'); }"
    )
    if before is not None:
        wait_for(
            lambda: page.evaluate(PROMPT_JS, index) != before,
            60,
            what=f"cell {index} taken to run (its prompt still {before!r})",
            page=page,
        )


def wait_idle(page: Any, status_js: str) -> None:
    page.wait_for_function(f"() => ({status_js})().toLowerCase() === 'idle'", timeout=60_000)


def start_beside_a_widget(
    page: Any, status_js: str, widget: Any, started: Path, what: str = "the widget"
) -> None:
    """Run cell 0 until its widget (``widget``, a locator) is drawn and the kernel is idle,
    then cell 1 until it touched ``started``: the waiting cell runs with the widget shown."""
    run_cell(page, 0)
    wait_for(lambda: widget.count() == 1, 60, what=what, page=page)
    wait_idle(page, status_js)
    run_cell(page, 1)
    wait_for(started.exists, 60, what="cell 1 started", page=page)


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


def subshells_created(log: WebsocketLog) -> bool:
    """Every ``create_subshell_request`` the page sent has its reply: the subshell a comm
    target's messages go on exists. JupyterLab asks for it when the target's first comm
    opens and sends that target's messages on the main shell until the reply is in (a move
    made before went without a subshell once, on a loaded machine); a kernel without
    subshells is never asked (true at once)."""
    frames = log.frames()
    asked = {
        f.msg_id
        for f in frames
        if f.direction == "sent" and f.msg_type == "create_subshell_request"
    }
    answered = {
        f.parent_msg_id
        for f in frames
        if f.direction == "received" and f.msg_type == "create_subshell_reply"
    }
    return asked <= answered


def cell_output_text(page: Any, index: int) -> str:
    """The text of cell ``index``'s output area."""
    return "\n".join(page.locator(CODE_CELL).nth(index).locator(".jp-OutputArea").all_inner_texts())


def open_subshell_console(page: Any) -> Any:
    """Open a subshell console of the current notebook as a user would ("New Subshell Console
    for Notebook", JEP 91), and return its input editor once it is in the page."""
    page.evaluate(
        "() => window.jupyterapp.commands.execute("
        "'notebook:create-subshell-console', {activate: true})"
    )
    editor = page.locator(CONSOLE_INPUT)
    wait_for(lambda: editor.count() == 1, 60, what="the subshell console", page=page)
    return editor


def run_in_console(page: Any, editor: Any, code: str) -> None:
    """Type ``code`` into the console's ``editor`` and run it (Shift+Enter), without waiting."""
    editor.click()
    page.keyboard.insert_text(code)
    page.keyboard.press("Shift+Enter")


def console_output_text(page: Any) -> str:
    """The text of every output the page's consoles show."""
    return "\n".join(page.locator(CONSOLE_OUTPUT).all_inner_texts())


def drag_slider(page: Any, start: int, steps: int) -> None:
    """Drag the slider's handle from ``start`` by ``steps``, stopping at every step (Notebook
    7's keyboard handling keeps arrow keys from the handle; the mouse works in both)."""
    track = page.locator(SLIDER_TRACK).bounding_box()
    handle = page.locator(SLIDER_HANDLE).bounding_box()
    y = handle["y"] + handle["height"] / 2
    page.mouse.move(handle["x"] + handle["width"] / 2, y)
    page.mouse.down()
    for step in range(start + 1, start + steps + 1):
        page.mouse.move(track["x"] + track["width"] * step / SLIDER_MAX, y, steps=2)
    page.mouse.up()


# --- the kernel's records ----------------------------------------------------------------------

# Kernel-side: each callback appends one JSON line to a record file, with the subshell its comm
# message came on (the parent header the kernel handles it under). Needs ``running`` defined.
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


def slider_and_waiting_cells(
    record: Path, started: Path, release: Path, *, slider_max: int, wait: str, guard_s: float
) -> list[str]:
    """Two cells: a slider (0 to ``slider_max``) whose every value the kernel records in
    ``record``; then a cell that marks itself running, touches ``started`` and waits with
    ``wait`` (code that loops while ``not release.exists() and time.monotonic() < deadline``)
    until the test touches ``release``, ``guard_s`` seconds at most (a hang guard, not a
    verdict), then prints ``RELEASED`` and whether it was released."""
    setup = (
        "import ipywidgets as widgets\nrunning = False\n"
        + RECORD_HELPER
        + f"""
slider = widgets.IntSlider(value=0, min=0, max={slider_max})
slider.observe(lambda change: _record({str(record)!r}, value=change["new"]), "value")
slider"""
    )
    cell = (
        f"import pathlib, time\nrunning = True\npathlib.Path({str(started)!r}).touch()\n"
        f"release = pathlib.Path({str(release)!r})\ndeadline = time.monotonic() + {guard_s:g}\n"
        + wait
        + '\nrunning = False\nprint("RELEASED", release.exists())'
    )
    return [setup, cell]


def scenario_files(lab: JupyterServer, name: str) -> tuple[Path, Path, Path]:
    """A scenario's barrier files: the kernel's record, the cell's started marker, the release."""
    record, started, release = (
        lab.root_dir / f"{name}.{ext}" for ext in ("jsonl", "started", "release")
    )
    return record, started, release


def last_recorded(record: Path, value: int) -> bool:
    """Whether the kernel's last recorded callback had ``value``."""
    records = read_records(record)
    return bool(records) and records[-1]["value"] == value


def sent_and_detail(log: WebsocketLog, method: str, **fields: Any) -> tuple[list[Any], str]:
    """The page's ``method`` comm_msgs (:func:`comm_msgs_sent`) and a JSON detail of ``fields``
    with the subshell each was sent on, printed for the test's output."""
    sent = comm_msgs_sent(log, method)
    detail = json.dumps({**fields, "sent_subshells": [f.subshell_id for f in sent]})
    print(detail)
    return sent, detail


def read_records(path: Path) -> list[dict[str, Any]]:
    """The JSON lines the kernel's callbacks appended to ``path`` (none yet: empty)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --- the scenario ------------------------------------------------------------------------------


def slider_cells(record: Path, started: Path, release: Path) -> list[str]:
    """Cell 0 shows the slider (its callback draws and records); cell 1 draws
    :data:`CELL_LINES` lines over about 3 s, then waits for ``release`` (60 s: a hang guard,
    not a verdict) and prints its figure's line count; the figure is shown at its end."""
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


@dataclass
class SliderRun:
    """What one run of the slider scenario left: the page's side and the kernel's."""

    kernel: str
    frontend: str
    cell_lines: int | None  # the line count the cell printed (None: no print shown)
    released: bool  # the cell printed that it was released (not ended by its hang guard)
    cell_images: int  # <img> in the cell's output area
    zero_axes: bool  # "with 0 Axes" in the cell's output (an empty figure's repr)
    mid_cell_callbacks: int  # callbacks that recorded running=True
    before_release: int  # callbacks (after the idle move) recorded before the release
    wrong_drawings: int  # callbacks whose figure's line count differs from the value
    kernel_value: int | None  # the value of the kernel's last callback
    page_value: int  # the page's slider readout once dragged
    threads: list[str]  # the threads the callbacks ran on, each once
    sent_subshells: list[str | None]  # the subshell_id of every move the page sent
    records: list[dict[str, Any]] = field(repr=False)
    cell_output: str = field(repr=False, default="")

    @property
    def figure_right(self) -> bool:
        """The cell's figure whole, in its cell: all its lines, one image, no empty figure."""
        return self.cell_lines == CELL_LINES and self.cell_images == 1 and not self.zero_axes

    @property
    def on_subshells(self) -> bool:
        """The premise: the page sent its moves on a subshell, and the kernel got them so."""
        return bool(
            self.sent_subshells
            and all(self.sent_subshells)
            and self.records
            and all(r["subshell_id"] for r in self.records)
        )

    def detail(self) -> str:
        """Everything, as JSON, for an assertion message."""
        return json.dumps({**self.__dict__, "figure_right": self.figure_right})


def move_during_the_cell(
    page: Any, log: Any, status_js: str, record: Path, started: Path, moves: int
) -> Any:
    """Run cell 0 (the slider) and move it once while idle; run cell 1 and, once it has
    started, drag the slider ``moves`` steps; return the page's readout once the first
    mid-cell move went out. Cell 1 then still waits for its release file.

    The idle move is what a user does before running the next cell: from then on stock
    ipykernel 7.4 runs every message of this widget on the subshell's thread.
    """
    run_cell(page, 0)
    handle = page.locator(SLIDER_HANDLE)
    wait_for(lambda: handle.count() == 1, 60, what="the slider rendered", page=page)
    wait_idle(page, status_js)
    wait_for(lambda: subshells_created(log), 60, what="the page's comm subshell", page=page)
    drag_slider(page, 0, 1)
    wait_for(lambda: read_records(record), 60, what="the idle move's callback", page=page)
    wait_idle(page, status_js)
    moves_before_cell = len(comm_msgs_sent(log, "update"))
    run_cell(page, 1)
    wait_for(started.exists, 60, what="cell 1 started", page=page)
    drag_slider(page, 1, moves)
    readout = page.locator(SLIDER_READOUT)
    wait_for(
        lambda: readout.inner_text().strip() == str(1 + moves),
        30,
        what=f"the page's slider at {1 + moves}",
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
    return readout


def run_slider_scenario(page: Any, lab: JupyterServer, frontend: str, kernel: str) -> SliderRun:
    """Open a fresh notebook for ``kernel`` in ``frontend``, show the slider, move it once while
    idle, run the drawing cell, drag the slider :data:`MOVES` steps while it draws, release the
    cell; return what the page showed and the kernel recorded.

    Barriers only; the bounds are hang guards. The waits for the kernel's last value and for
    the cell's print do not raise: a kernel that never gets there is what the result says.
    """
    name = f"slider-{frontend}-{kernel}-{uuid.uuid4().hex[:8]}"
    record, started, release = scenario_files(lab, name)
    try:
        log, status_js = open_notebook(
            page, lab, frontend, name, slider_cells(record, started, release), kernel, False
        )
        readout = move_during_the_cell(page, log, status_js, record, started, MOVES)
        before_release = len(read_records(record)[1:])
        release.touch()
        page_value = int(readout.inner_text().strip())
        # The cell ends, then the moves run; the last one brings the kernel to the page's value.
        with contextlib.suppress(TimeoutError):
            wait_for(
                lambda: last_recorded(record, page_value),
                60,
                what=f"the kernel's callback for value {page_value}",
                page=page,
            )
        wait_idle(page, status_js)
        with contextlib.suppress(TimeoutError):
            wait_for(
                lambda: "CELL LINES" in cell_output_text(page, 1),
                30,
                what="the cell's print",
                page=page,
            )
        images = page.locator(CODE_CELL).nth(1).locator(".jp-OutputArea img").count()
        text = cell_output_text(page, 1)
    finally:
        release.touch()

    records = read_records(record)
    printed = next((line.split() for line in text.splitlines() if "CELL LINES" in line), None)
    return SliderRun(
        kernel=kernel,
        frontend=frontend,
        cell_lines=int(printed[2]) if printed else None,
        released=printed[-1] == "True" if printed else False,
        cell_images=images,
        zero_axes="with 0 Axes" in text,
        mid_cell_callbacks=sum(bool(r["running"]) for r in records),
        before_release=before_release,
        wrong_drawings=sum(r["lines"] != r["value"] for r in records),
        kernel_value=records[-1]["value"] if records else None,
        page_value=page_value,
        threads=sorted({r["thread"] for r in records}),
        sent_subshells=[f.subshell_id for f in comm_msgs_sent(log, "update")],
        records=records,
        cell_output=text,
    )
