"""The server's IOPub rate in a real page: nothing dropped, and the page stays usable.

A ``jupyter lab`` server as installed (the package's extension on: ``SharedChannelsConnection``
with jupyter_server's default rate settings), Debian's Chromium driven by Playwright, JupyterLab
4.6 and Notebook 7 as they ship. One notebook: a slider, a cell that sets it 20001 times, a
cell that prints 200000 lines (9.6 MB), an empty cell. With stock's limiter the slider ends on
a stale value and the print loses lines under "IOPub data rate exceeded"; with the limit off
JupyterLab renders 200000 stream messages for minutes. Here the page ends on the kernel's
value and the print's last line, with no "rate exceeded", and a key typed into the next cell
shows. The verdicts are what the page shows; the waits are barriers on it (its kernel status,
its text), with hang guards.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.browser import wait_for
from harness.browser_subshell import CODE_CELL, FRONTENDS, open_notebook, wait_idle
from harness.kernels import EXT_KERNEL
from harness.server import JupyterServer

pytestmark = [pytest.mark.server, pytest.mark.timeout(600)]

LINES = 200_000
SETS = 20_001
CELLS = [
    "import ipywidgets as w\ns = w.IntSlider(max=30000)\ns",
    f"for i in range({SETS}): s.value = i",
    f"for i in range({LINES}): print(f'line {{i:07d}} ' + 'x' * 34)",
    "",
]
LAST_LINE = f"line {LINES - 1:07d} "

#: The text of cell ``index``'s output area (read in the page: it is 9.6 MB).
OUTPUT_JS = """(index) => {
  const cell = document.querySelectorAll('.jp-Notebook .jp-CodeCell')[index];
  const area = cell && cell.querySelector('.jp-OutputArea');
  return area ? area.textContent : '';
}"""
#: Whether cell ``index``'s output ends with the line (read in the page, as above).
ENDS_WITH_JS = """([index, line]) => {
  const cell = document.querySelectorAll('.jp-Notebook .jp-CodeCell')[index];
  const area = cell && cell.querySelector('.jp-OutputArea');
  const text = area ? area.textContent : '';
  return text.includes(line) && !text.includes('rate exceeded');
}"""


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_nothing_dropped_and_the_page_answers(lab: JupyterServer, page: Any, frontend: str) -> None:
    _, status_js = open_notebook(page, lab, frontend, f"rate-{frontend}", CELLS, EXT_KERNEL)
    # The print's last line shows (the cell ran to its end and every byte reached the page).
    wait_for(
        lambda: page.evaluate(ENDS_WITH_JS, [2, LAST_LINE]),
        300,
        what="the 200000-line cell's last line in the page",
        page=page,
    )
    wait_idle(page, status_js)
    text = page.evaluate(OUTPUT_JS, 2)
    assert text.count("\n") >= LINES - 1 and "rate exceeded" not in text
    # The slider shows the kernel's last value.
    readout = page.locator(CODE_CELL).nth(0).locator(".widget-readout")
    wait_for(
        lambda: readout.inner_text().strip() == str(SETS - 1),
        60,
        what=f"the slider's readout at {SETS - 1}",
        page=page,
    )
    # The page answers a key typed into the next cell.
    editor = page.locator(CODE_CELL).nth(3).locator(".cm-content")
    editor.click()
    page.keyboard.type("typed42")
    wait_for(
        lambda: "typed42" in editor.inner_text(),
        60,
        what="the typed text in the next cell",
        page=page,
    )
