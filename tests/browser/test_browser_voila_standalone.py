"""Standalone ``voila dash.ipynb`` set up by ``python -m ipykernel_ext install``, in a real page.

Voila 0.5 standalone loads no jupyter_server extension; the install's ``voila.json`` (found
through the config path, as ``{sys.prefix}/etc/jupyter`` is) gives it
``SharedChannelsConnection``. The dashboard: a slider, a button and a label; the button's
callback sets the slider N times, then writes the kernel's value into the label. With stock's
class and N = 20000 the page's slider stopped at 14169 and the label never changed (the
server dropped past its IOPub rate). Here the page ends with both on the kernel's value: N =
20000 on ``python3-ext``; on stock ipykernel (``python3``) N stays within stock ipykernel's own
drop limit (``STOCK_SETS``), so any loss would be the server's. A user's class on the command
line wins over the install's. Which class served is what Voila's log says: ours logs, at the
first websocket, that it keeps no outputs in an app without a session manager (written before
the page's widgets can show, so its absence once they show is a verdict). A dashboard of 1000
Buttons renders whole and answers a click, and again after a reload. Every wait is a barrier on
the page (its buttons, its label's text), with a hang guard.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.browser import chromium, require_browser, wait_for, write_notebook
from harness.kernels import EXT_KERNEL, STOCK_KERNEL
from harness.polling import WaitTimeout
from harness.voila import StandaloneVoila, install_prefix

pytestmark = [pytest.mark.server, pytest.mark.timeout(300)]

EXT_SETS = 20_000
#: 450 slider updates plus the callback's statuses stay under stock ipykernel's 1000-message
#: IOPub queue however slowly the server reads (STOCK_CELL of tests/server/test_iopub_merge.py).
STOCK_SETS = 450
#: What our class logs at a standalone Voila's first websocket (server/keep_outputs.py).
OURS_SERVED = "keep_outputs is off"
STOCK_CLASS = "jupyter_server.services.kernels.connection.channels.ZMQChannelsWebsocketConnection"


def dashboard(sets: int) -> list[str]:
    return [
        "import ipywidgets as w\n"
        "s = w.IntSlider(max=30000)\n"
        "b = w.Button(description='go')\n"
        "label = w.Label('waiting')\n"
        "def go(_):\n"
        f"    for i in range(1, {sets} + 1):\n"
        "        s.value = i\n"
        "    label.value = f'kernel {s.value}'\n"
        "b.on_click(go)\n"
        "w.VBox([s, b, label])"
    ]


@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A prefix as ``python -m ipykernel_ext install --prefix`` leaves it."""
    require_browser(("playwright", "voila", "ipywidgets"))
    return install_prefix(tmp_path_factory.mktemp("prefix"))


@pytest.fixture(scope="module")
def browser(prefix: Path) -> Iterator[Any]:
    """tests/conftest.py's ``page`` on this browser: no ``lab`` (skips as ``prefix`` says)."""
    with chromium() as chromium_browser:
        yield chromium_browser


@pytest.fixture
def after_page() -> Callable[[], None]:
    """Nothing after a page: each test's Voila, stopped in the test, shut its kernels down."""
    return lambda: None


def click_and_read(page: Any, voila: StandaloneVoila, sets: int) -> tuple[str, str]:
    """Open the dashboard, click its button once it shows, wait for the label to show the
    kernel's value; the label's text and the slider's readout. A wait that times out fails
    with the end of Voila's log as it was then."""
    try:
        return _click_and_read(page, voila, sets)
    except WaitTimeout as exc:
        raise AssertionError(f"{exc}\nVoila's log:\n{voila.log_text()[-3000:]}") from exc


def _click_and_read(page: Any, voila: StandaloneVoila, sets: int) -> tuple[str, str]:
    page.goto(voila.url, wait_until="commit")
    button = page.locator("button.jupyter-button", has_text="go")
    wait_for(lambda: button.count() == 1, 180, what="the dashboard's button", page=page)
    button.click()
    label = page.locator(".widget-label", has_text="kernel")
    wait_for(
        lambda: label.count() == 1,
        240,
        what=f"the label with the kernel's value ({sets})",
        page=page,
    )
    readout = page.locator(".widget-readout").first
    wait_for(
        lambda: readout.inner_text().strip() == str(sets),
        60,
        what=f"the slider's readout at {sets}",
        page=page,
    )
    return label.inner_text().strip(), readout.inner_text().strip()


@pytest.mark.parametrize(("kernel", "sets"), [(EXT_KERNEL, EXT_SETS), (STOCK_KERNEL, STOCK_SETS)])
def test_installed_voila_ends_on_the_kernels_value(
    prefix: Path, page: Any, tmp_path: Path, kernel: str, sets: int
) -> None:
    write_notebook(tmp_path / "dash.ipynb", dashboard(sets), kernel)
    with StandaloneVoila(tmp_path / "dash.ipynb", config_path=prefix / "etc" / "jupyter") as v:
        label, readout = click_and_read(page, v, sets)
        log = v.log_text()
    assert (label, readout) == (f"kernel {sets}", str(sets))
    assert OURS_SERVED in log, log[-3000:]
    assert "rate exceeded" not in log


def test_a_class_on_the_command_line_wins(prefix: Path, page: Any, tmp_path: Path) -> None:
    write_notebook(tmp_path / "dash.ipynb", dashboard(STOCK_SETS), EXT_KERNEL)
    args = [f"--Voila.kernel_websocket_connection_class={STOCK_CLASS}"]
    with StandaloneVoila(
        tmp_path / "dash.ipynb", config_path=prefix / "etc" / "jupyter", extra_args=args
    ) as v:
        label, _ = click_and_read(page, v, STOCK_SETS)
        log = v.log_text()
    assert label == f"kernel {STOCK_SETS}"
    assert OURS_SERVED not in log, log[-3000:]


N_BUTTONS = 1000
BUTTONS = [
    "import ipywidgets as w\n"
    "out = w.Label('none')\n"
    f"buttons = [w.Button(description=f'b{{i}}') for i in range({N_BUTTONS})]\n"
    "for b in buttons:\n"
    "    b.on_click(lambda b: setattr(out, 'value', f'clicked {b.description}'))\n"
    "w.VBox([out, *buttons])"
]


def buttons_answer(page: Any, load: str) -> None:
    """Once the page shows every button, a click on the last one reaches the kernel, whose
    callback's label shows."""
    buttons = page.locator("button.jupyter-button")
    wait_for(
        lambda: buttons.count() == N_BUTTONS, 180, what=f"{N_BUTTONS} buttons ({load})", page=page
    )
    last = f"b{N_BUTTONS - 1}"
    page.locator("button.jupyter-button", has_text=last).click()
    label = page.locator(".widget-label", has_text=f"clicked {last}")
    wait_for(lambda: label.count() == 1, 60, what=f"the click's label ({load})", page=page)


def test_1000_buttons_render_answer_a_click_and_come_back_on_reload(
    prefix: Path, page: Any, tmp_path: Path
) -> None:
    """(A Voila page load runs the notebook in a kernel of its own: the reload's widgets are a
    new kernel's, rendered through a new websocket on the same server.)"""
    write_notebook(tmp_path / "buttons.ipynb", BUTTONS, EXT_KERNEL)
    with StandaloneVoila(tmp_path / "buttons.ipynb", config_path=prefix / "etc" / "jupyter") as v:
        page.goto(v.url, wait_until="commit")
        buttons_answer(page, "first load")
        page.reload(wait_until="commit")
        buttons_answer(page, "reload")
        log = v.log_text()
    # Two websockets (one per page load), one INFO line: said once a process.
    assert log.count(OURS_SERVED) == 1 and "Traceback" not in log, log[-3000:]
