"""What a notebook page and its ``.ipynb`` show of a cell's outputs (the browser tests and the
nbmodel benchmark).

One notebook per case (:class:`Notebook`: its file, its cells' holds from
harness/outputs_cells.py, the URL a tab opens, the running tab's kernel websocket); what the
page shows, read from its DOM (JupyterLab 4.6 and Notebook 7 draw cells with the same
widgets); what the notebook file on disk holds; the verdicts on the counting cell.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.browser import (
    INDICATOR_STATUS_JS,
    LAB_STATUS_JS,
    open_and_run_all,
    shut_down_everything,
    wait_for,
    write_notebook,
)
from harness.outputs_cells import HANG, Holds
from harness.page_websocket import WebsocketLog
from harness.server import JupyterServer

STDOUT = "application/vnd.jupyter.stdout"
WIDGET = "application/vnd.jupyter.widget-view+json"

# Per code cell: its prompt and, per output of its own output area (not one nested in a
# widget), the MIME type JupyterLab rendered it as, its text, and what a rich rendering drew:
# ipywidgets sliders (".widget-slider", the readout's value) and elements of class
# "outputs-mark" (the HTML a test cell displays).
CELLS_JS = """() => Array.from(document.querySelectorAll('.jp-Notebook .jp-Cell.jp-CodeCell'))
  .map(cell => {
    const prompt = cell.querySelector('.jp-InputArea-prompt');
    const area = cell.querySelector('.jp-OutputArea');
    const children = area ? Array.from(area.children)
        .filter(c => c.classList.contains('jp-OutputArea-child')) : [];
    return {
      prompt: prompt ? prompt.textContent.trim() : null,
      outputs: children.map(child => {
        const out = child.querySelector('.jp-OutputArea-output');
        if (!out) return {mime: '', text: ''};
        const readout = out.querySelector('.widget-readout');
        return {
          mime: out.getAttribute('data-mime-type') || '',
          text: out.textContent,
          sliders: out.querySelectorAll('.widget-slider').length,
          readout: readout ? (readout.value !== undefined && readout.value !== ''
              ? readout.value : readout.textContent).trim() : null,
          marks: out.querySelectorAll('.outputs-mark').length,
        };
      }),
    };
  })"""


def lines(word: str, stop: int, start: int = 0) -> list[str]:
    """``["<word> <start>", ..., "<word> <stop - 1>"]``."""
    return [f"{word} {i}" for i in range(start, stop)]


# --- one notebook per case ------------------------------------------------------------------


@dataclass
class Notebook:
    """A notebook of one case: its file, its cells' holds, and how a page opens it."""

    lab: JupyterServer
    name: str
    frontend: str = "lab"
    log: WebsocketLog | None = None  # the running tab's kernel websocket
    kernel: str = "python3-ext"  # the notebook's kernelspec ("python3": stock ipykernel)
    n_cells: int = 0  # as written

    @property
    def path(self) -> Path:
        return self.lab.root_dir / f"{self.name}.ipynb"

    def holds(self, cell: int = 0) -> Holds:
        return Holds(self.lab.root_dir, f"{self.name}-c{cell}")

    def write(self, sources: list[str]) -> None:
        write_notebook(self.path, sources, self.kernel)
        self.n_cells = len(sources)

    def url(self, tab: int = 0) -> str:
        """The page's path on the server (JupyterLab: a workspace of its own per tab, since
        two windows of one workspace fight over it)."""
        if self.frontend == "lab":
            where = f"lab/workspaces/{self.name}-{tab}/tree/{self.path.name}"
        else:
            where = f"notebooks/{self.path.name}"
        return f"{where}?token={self.lab.token}"

    @property
    def status_js(self) -> str:
        return LAB_STATUS_JS if self.frontend == "lab" else INDICATOR_STATUS_JS

    def run_all(self, page: Any) -> None:
        """Open the notebook in ``page`` and run all its cells (as a user's Run All)."""
        page.set_default_timeout(120_000)
        self.log = WebsocketLog(page)
        open_and_run_all(page, self.lab, self.log, self.url(), self.status_js)

    def count(self, holds: Holds, cell: int = 0, page: Any = None) -> int:
        """Once the cell has ended: the execution count the kernel gave it (its
        ``execute_input``, received by the running tab when the cell started)."""
        holds.wait_ended(page)
        log = self.log
        assert log is not None

        def count_of_cell() -> int | None:
            counts = [
                f.content["execution_count"]
                for f in log.frames()
                if f.direction == "received" and f.msg_type == "execute_input"
            ]
            return counts[cell] if len(counts) > cell else None  # a count is 1 or more

        # The end file is the kernel's barrier, not the page's: on a loaded machine the
        # frame may still be on its way to the tab, so wait for it in the page's log.
        return int(wait_for(count_of_cell, HANG, what=f"execute_input {cell}", page=page))

    def open(self, context: Any, tab: int = 0) -> Any:
        page = context.new_page()
        page.set_default_timeout(120_000)
        open_notebook(page, self.lab.http_url(self.url(tab)), 1)
        return page


@contextlib.contextmanager
def running_all(context: Any, nb: Notebook) -> Iterator[Any]:
    """A new page of ``context`` that ran all of ``nb``; on the way out, every hold of the
    notebook's cells is released and the server's kernels are shut down."""
    page = context.new_page()
    try:
        nb.run_all(page)
        yield page
    finally:
        for cell in range(nb.n_cells):
            nb.holds(cell).release_all()
        shut_down_everything(nb.lab)


def new_notebook(
    lab: JupyterServer, case: str, frontend: str = "lab", kernel: str = "python3-ext"
) -> Notebook:
    return Notebook(lab, f"{case}-{uuid.uuid4().hex[:6]}", frontend, kernel=kernel)


# --- the page ----------------------------------------------------------------------------


def cells(page: Any) -> list[dict[str, Any]]:
    """What the page shows per code cell (see CELLS_JS); [] while it is (re)loading."""
    from playwright.sync_api import Error as PlaywrightError

    try:
        return page.evaluate(CELLS_JS)
    except PlaywrightError:  # the document is being replaced (reload)
        return []


def stdout_lines(cell: dict[str, Any]) -> list[str]:
    """The lines of the cell's stdout outputs, in the order the page shows them."""
    text = "".join(o["text"] for o in cell["outputs"] if o["mime"] == STDOUT)
    return text.splitlines()


def outputs(cell: dict[str, Any]) -> list[tuple[str, str]]:
    """The cell's outputs as the page shows them: (MIME type drawn, text without the last
    newline), one per output."""
    return [(o["mime"], o["text"].removesuffix("\n")) for o in cell["outputs"]]


def wait_page(page: Any, what: str, check: Any, timeout: float = HANG) -> list[dict[str, Any]]:
    """Poll the page until ``check(cells)`` holds; the AssertionError says what it showed."""
    last: list[list[dict[str, Any]]] = [[]]

    def probe() -> list[dict[str, Any]] | None:
        last[0] = cells(page)
        return last[0] if last[0] and check(last[0]) else None

    try:
        return wait_for(probe, timeout, what=what, page=page)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; the page showed {summary(last[0])}") from None


def shows_line(cell: int, line: str) -> Any:
    return lambda shown: len(shown) > cell and line in stdout_lines(shown[cell])


def shows_prompt(cell: int, prompt: str) -> Any:
    return lambda shown: len(shown) > cell and shown[cell]["prompt"] == prompt


def summary(shown: list[dict[str, Any]]) -> str:
    """A short account of a page: per cell its prompt, its stdout lines, its other outputs."""
    parts = []
    for i, cell in enumerate(shown):
        out = stdout_lines(cell)
        head = f"{out[:3]}..{out[-3:]}" if len(out) > 6 else f"{out}"
        others = [
            {k: v for k, v in o.items() if v not in (None, 0)} | {"text": o["text"][:60]}
            for o in cell["outputs"]
            if o["mime"] != STDOUT
        ]
        parts.append(f"cell {i}: {cell['prompt']} {len(out)} stdout lines {head} others {others}")
    return "; ".join(parts) or "no cells"


def open_notebook(page: Any, url: str, n_cells: int) -> None:
    """Go to ``url``; wait until the notebook's ``n_cells`` code cells are drawn."""
    page.goto(url)
    wait_page(page, "the notebook's cells drawn", lambda shown: len(shown) == n_cells)


#: True once the page's app is up and its notebook's document loaded (what Save acts on).
DOCUMENT_READY_JS = (
    "() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
    " return !!(w && w.context && w.context.isReady); }"
)


def save(page: Any) -> None:
    """File > Save, as a user would (the command resolves later: not handed to Playwright),
    once the page's notebook is loaded: a page just reloaded may not have its app yet."""
    wait_for(lambda: page.evaluate(DOCUMENT_READY_JS), HANG, what="the notebook loaded", page=page)
    page.evaluate("() => { window.jupyterapp.commands.execute('docmanager:save'); }")


# --- verdicts on the counting cell -------------------------------------------------------


def running(shown: list[dict[str, Any]], n: int = 1) -> str | None:
    """None if the first ``n`` cells show ``[*]``, else what the page showed. Asserted once
    the cell has ended, so that a failure also says what the page and the file got after."""
    ok = [c["prompt"] for c in shown[:n]] == ["[*]:"] * n
    return None if ok else f"not [*] while the cell ran: {summary(shown)}"


def check_counting_cell_mid(page: Any) -> str | None:
    """At hold 2 (after line 29): lines 0-29 exactly once, in order; :func:`running`."""
    shown = wait_page(page, "line 29 shown", shows_line(0, "line 29"))
    assert stdout_lines(shown[0]) == lines("line", 30), summary(shown)
    assert outputs(shown[0]) == [(STDOUT, "\n".join(lines("line", 30)))], summary(shown)
    return running(shown)


def check_counting_cell_end(page: Any, nb: Notebook, count: int) -> None:
    """Once ended: the 40 lines and done exactly once, the count; the same in the file."""
    prompt = f"[{count}]:"
    shown = wait_page(
        page,
        f"done and {prompt}",
        lambda s: shows_prompt(0, prompt)(s) and shows_line(0, "done")(s),
    )
    expected = [*lines("line", 40), "done"]
    assert stdout_lines(shown[0]) == expected, summary(shown)
    assert outputs(shown[0]) == [(STDOUT, "\n".join(expected))], summary(shown)
    save(page)
    text = "".join(f"{line}\n" for line in expected)
    wait_file(nb.path, {"cell-0": {"count": count, "outputs": [("stream:stdout", text)]}}, page)


# --- the file ------------------------------------------------------------------------------


def file_cells(path: Path) -> dict[str, dict[str, Any]]:
    """The notebook on disk: cell id -> {"count", "outputs"} (outputs normalised: a stream as
    ("stream:<name>", text), anything else as (output_type, its MIME types)); {} if unreadable."""
    try:
        notebook = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    found = {}
    for cell in notebook.get("cells", []):
        outputs = []
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                text = output.get("text", "")
                text = "".join(text) if isinstance(text, list) else text
                outputs.append((f"stream:{output.get('name')}", text))
            else:
                outputs.append((output.get("output_type"), tuple(sorted(output.get("data", {})))))
        found[cell.get("id")] = {"count": cell.get("execution_count"), "outputs": outputs}
    return found


def file_output_data(path: Path, cell_id: str) -> list[dict[str, Any]]:
    """The ``data`` bundles of a cell's non-stream outputs in the file (a text split into a
    list of lines, as nbformat may store it, joined)."""
    notebook = json.loads(path.read_text())
    cell = next(c for c in notebook["cells"] if c.get("id") == cell_id)
    return [
        {mime: "".join(v) if isinstance(v, list) else v for mime, v in o.get("data", {}).items()}
        for o in cell.get("outputs", [])
        if o["output_type"] != "stream"
    ]


def wait_file(path: Path, expected: dict[str, dict[str, Any]], page: Any = None) -> None:
    """Wait until the file holds ``expected`` (cell id -> count and outputs as
    :func:`file_cells` gives them) for each of those cells; AssertionError with what it held."""
    last: list[dict[str, Any]] = [{}]

    def probe() -> bool:
        last[0] = file_cells(path)
        return all(last[0].get(cell_id) == want for cell_id, want in expected.items())

    try:
        wait_for(probe, HANG, what=f"{path.name} saved with the outputs", page=page)
    except TimeoutError as exc:
        held = {k: last[0].get(k) for k in expected}
        raise AssertionError(f"{exc}; expected {expected}; the file held {held}") from None
