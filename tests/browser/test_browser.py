"""JupyterLab in a real browser: a grid of 1000 Buttons renders whole on ``python3-ext``.

Where users first saw the IOPub loss: with CurveZMQ and a stock kernel such a grid shows
"Error displaying widget: model not found", an empty output, or ``[*]`` for good. JupyterLab
on localhost with ``transport_encryption=required``, Debian's ``chromium`` headless through
Playwright; the test checks what a user would look at (screenshot in ``artifacts/``). Needs
``chromium`` and the ``browser`` extra (``.ci/install-browser.sh``), else it is skipped.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from harness.browser import (
    ARTIFACTS,
    chromium,
    quiet_lab_settings,
    require_browser,
    wait_for,
    write_notebook,
)
from harness.server import JupyterServer

# Hang guard: a JupyterLab server, Chromium, 1000 Buttons rendered under load.
pytestmark = [pytest.mark.server, pytest.mark.timeout(600)]

N_BUTTONS = 1000
CELL_CODE = f"""\
import ipywidgets as widgets
buttons = [widgets.Button(description=str(i), layout=widgets.Layout(width="60px"))
           for i in range({N_BUTTONS})]
widgets.GridBox(buttons, layout=widgets.Layout(grid_template_columns="repeat(20, 64px)"))"""

# ipywidgets' views (jupyterlab_widgets 3): a Button, a view that failed to build, and the
# texts of a model not found (or still restoring).
BUTTON_SELECTOR = ".jp-OutputArea button.jupyter-button.widget-button"
ERROR_SELECTOR = ".jupyter-widgets-error-widget"
ERROR_TEXTS = ("Error displaying widget", "Loading widget...")


@pytest.fixture(scope="module")
def browser_ready() -> None:
    require_browser()


def test_grid_of_1000_buttons_renders_in_jupyterlab(browser_ready: None, tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    write_notebook(root / "grid.ipynb", [CELL_CODE])
    ARTIFACTS.mkdir(exist_ok=True)
    screenshot = ARTIFACTS / "browser-grid-1000-buttons.png"

    # No call to PyPI for a "new version" banner.
    lab_args = ["--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    console: list[str] = []
    with JupyterServer(app="lab", root_dir=root, extra_args=lab_args) as lab:
        quiet_lab_settings(lab)
        with chromium() as browser:
            page = browser.new_page(viewport={"width": 1920, "height": 1200})
            page.set_default_timeout(120_000)
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
            page.goto(lab.http_url(f"lab/tree/grid.ipynb?token={lab.token}"))
            try:
                verdict = run_cell_and_look(page, lab)
            finally:
                page.screenshot(path=str(screenshot))

        kernels = lab.api("GET", "api/kernels")
        assert [k["name"] for k in kernels] == ["python3-ext"], kernels
        assert lab.connection_info(kernels[0]["id"]).get("curve_publickey"), (
            "the kernel ran without CurveZMQ"
        )

    errors = [line for line in console if line.startswith("error")]
    detail = f"{verdict}; screenshot {screenshot}; console errors: {errors[:5]}"
    assert verdict["prompt"] == "[1]:", detail
    assert verdict["buttons"] == N_BUTTONS, detail
    assert verdict["error_widgets"] == 0, detail
    assert not verdict["error_texts"], detail


KERNEL_IDLE_JS = """() => {
    // The status bar says "<kernel display name> | Idle" once the notebook's kernel is
    // connected and ready; the toolbar's execution indicator says idle even before that.
    const bar = document.querySelector('.jp-StatusBar-Widget');
    return bar !== null && bar.innerText.includes('| Idle');
}"""


def run_cell_and_look(page: Any, lab: JupyterServer) -> dict[str, Any]:
    """Run the notebook's only cell; return what the page shows once it has settled."""
    page.wait_for_selector(".jp-Notebook .jp-Cell .jp-InputArea-editor", timeout=180_000)
    page.wait_for_function(KERNEL_IDLE_JS, timeout=180_000)
    cell = page.locator(".jp-Notebook .jp-Cell").first
    prompt = cell.locator(".jp-InputArea-prompt")
    page.click(".jp-Notebook .jp-Cell .jp-InputArea-editor")
    page.keyboard.press("Shift+Enter")

    # The prompt turns "[*]:" at once (a UI reaction, not the kernel's); then shows the
    # execution count when the kernel's idle arrives. A lost idle leaves it at "[*]:".
    page.wait_for_function(
        "el => el.innerText.trim() !== '[ ]:'", arg=prompt.element_handle(), timeout=60_000
    )
    # Not reaching it is not the failure here: the verdict below says what the page showed.
    with contextlib.suppress(TimeoutError):
        wait_for(
            lambda: prompt.inner_text().strip()[1:-2].isdigit(),
            300,
            0.5,
            "the execution count in the prompt",
            page,
        )

    # Views render after the cell finished: wait until all are there (a hang guard; no
    # "count stopped changing" exit, which would judge a partial page on a loaded machine).
    buttons = page.locator(BUTTON_SELECTOR)
    with contextlib.suppress(TimeoutError):
        wait_for(lambda: buttons.count() == N_BUTTONS, 180, 0.5, f"{N_BUTTONS} buttons", page)

    output_text = cell.inner_text()
    return {
        "prompt": prompt.inner_text().strip(),
        "buttons": buttons.count(),
        "error_widgets": page.locator(ERROR_SELECTOR).count(),
        "error_texts": [t for t in ERROR_TEXTS if t in output_text],
        "kernel_state": lab.api("GET", "api/kernels")[0]["execution_state"],
    }
