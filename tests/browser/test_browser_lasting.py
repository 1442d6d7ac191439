"""A JupyterLab or Notebook 7 tab left open while its server is killed and started again keeps
its kernel, and its running cell whole.

``jupyter lab`` as installed (the extension on), on a fixed port (a page reconnects only to the
address it loaded from), collaboration off, and on (jupyter-collaboration's defaults: the
page's document lives in the server's room; the next server opens the room again and lets
the page's old session back in, and the room saves the document into the file, which then
holds the cell whole too). Debian's Chromium. The cell prints ``line i`` once the test
touches ``go-i``. The server is killed (``kill -9``) mid-cell and started again; the page
reconnects by itself.

JupyterLab retries a lost kernel websocket 7 times, each after a random delay of up to 0, 1,
3, 7, 15, 31 and 63 s, then gives up ("disconnected"). Left to the wall clock, when it
reconnects, and whether it does before its tries run out while the server starts, would be
chance. So the page's timers run on Playwright's clock (``page.clock``, in step with the wall
clock until told otherwise): paused while the server is down (no try is spent on it), then
moved on past the longest delay once the server is up (the pending try runs at once), as if
the server had been down for that long. Verdicts are what the page shows: the kernel's
status comes back; the cell ends with every line once, in order: those the page had, those
printed while no server was up (the kernel's journal gives them again, section 9) and those
printed after the return; its prompt shows its count (its reply, sent to the killed server,
reaches the page); no dialog says the kernel died or restarted; and the next cell runs in the
same kernel with the next count. Waits are barriers on the page or the kernel's journal
(what it kept while no server was up), with hang guards.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from functools import partial
from typing import Any

import nbformat
import pytest

from harness.browser import LAB_ARGS, quiet_lab_settings, require_browser, wait_for
from harness.browser_subshell import FRONTENDS, PROMPT_JS, open_notebook, run_cell
from harness.journal import journal_of
from harness.kernels import EXT_KERNEL
from harness.outputs_notebook import lines
from harness.polling import wait_until
from harness.server import JupyterServer
from ipykernel_ext.server.lasting.records import RecordFiles

pytestmark = [pytest.mark.server, pytest.mark.timeout(400)]

N = 6
K = 2
#: Lines up to this one are printed while no server is up.
GAP = 4
CELL = """\
import time
from pathlib import Path
_go = Path(r"{barriers}")
for _i in range({n}):
    while not (_go / f"go-{{_i}}").exists():
        time.sleep(0.01)
    print(f"line {{_i}}", flush=True)
"""

OUTPUT_JS = """(index) => {
  const cell = document.querySelectorAll('.jp-Notebook .jp-CodeCell')[index];
  const area = cell && cell.querySelector('.jp-OutputArea');
  return area ? area.textContent : '';
}"""
DIALOGS_JS = "() => [...document.querySelectorAll('.jp-Dialog')].map(d => d.textContent)"
#: Past JupyterLab's longest delay before a reconnection try (its 7th: up to 63 s).
RETRY_MAX_MS = 64_000
#: What JupyterLab's dialogs say when it takes a kernel for dead or restarted.
KERNEL_GONE = ("died", "Dead kernel", "Restarting", "restarted", "No Kernel")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def lab() -> Iterator[JupyterServer]:
    require_browser(("playwright", "jupyterlab"))
    server = JupyterServer(
        app="lab",
        ipykernel_ext=None,
        port=free_port(),
        extra_args=[*LAB_ARGS, "--YDocExtension.disable_rtc=True"],
    )
    with server:
        quiet_lab_settings(server)
        yield server


@pytest.fixture(scope="module")
def collaborative_lab() -> Iterator[JupyterServer]:
    """The same with jupyter-collaboration on (its default: the page's document lives in the
    server's room, which the next server opens again from its store and the file)."""
    require_browser(("playwright", "jupyterlab", "jupyter_server_ydoc"))
    server = JupyterServer(app="lab", ipykernel_ext=None, port=free_port(), extra_args=LAB_ARGS)
    with server:
        quiet_lab_settings(server)
        yield server


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_a_tab_left_open_gets_its_kernel_back_after_kill_9(
    lab: JupyterServer, page: Any, frontend: str
) -> None:
    keeps_its_cell(lab, page, frontend)


def test_with_collaboration_a_tab_left_open_gets_its_kernel_back_after_kill_9(
    collaborative_lab: JupyterServer, page: Any
) -> None:
    """With collaboration the page's document comes back with its room: the page shows the
    cell once all the same, and the room saves it whole. JupyterLab only: Notebook 7's page
    takes the same document provider and the same kernel connection, each already proved
    here (collaboration in JupyterLab, the kernel's return in Notebook 7 above), for 20 s
    more of the suite."""
    keeps_its_cell(collaborative_lab, page, "lab", room_saves=True)


def saved_lines(lab: JupyterServer, name: str) -> tuple[list[str], int | None]:
    """The ``line i`` of the first cell's outputs in the notebook's file, and its count."""
    try:
        nb = nbformat.read(lab.root_dir / f"{name}.ipynb", as_version=4)
    except (OSError, ValueError):
        return [], None  # being written
    cell = nb.cells[0]
    text = "".join(o.get("text", "") for o in cell.get("outputs", []))
    return re.findall(r"line \d+", text), cell.get("execution_count")


def keeps_its_cell(lab: JupyterServer, page: Any, frontend: str, room_saves: bool = False) -> None:
    """``room_saves``: collaboration is on, and its room saves the document into the file."""
    barriers = lab.root_dir / f"lasting-{frontend}-go"
    barriers.mkdir()
    page.clock.install()  # before the page loads: its timers are Playwright's (module docstring)
    cells = [CELL.format(barriers=barriers, n=N), "print('next', 6 * 7)"]
    name = f"lasting-{frontend}"
    _, status_js = open_notebook(page, lab, frontend, name, cells, EXT_KERNEL, run_all=False)
    # This notebook's kernel (the server may still be shutting down an earlier test's).
    (kernel_id,) = [
        s["kernel"]["id"] for s in lab.api("GET", "api/sessions") if s["path"] == f"{name}.ipynb"
    ]
    run_cell(page, 0)  # the kernel's first cell: count 1
    for i in range(K):
        (barriers / f"go-{i}").touch()
    wait_for(
        lambda: f"line {K - 1}" in page.evaluate(OUTPUT_JS, 0), 120, what="line K-1", page=page
    )

    record = RecordFiles(lab.runtime_dir).read(kernel_id)
    assert record is not None
    lab.kill()
    for i in range(K, GAP):  # printed while no server is up: kept by the kernel
        (barriers / f"go-{i}").touch()
    wait_until(
        partial(journal_of, record.connection_info),
        120,
        "the lines printed while no server was up, journaled",
        interval=0.2,
        done=lambda cells: [c["nbytes"] for c in cells] == [len(lines(GAP))],
    )
    # The page noticed: its kernel is no longer busy (connecting, unknown).
    wait_for(
        lambda: page.evaluate(f"({status_js})()").lower() != "busy",
        120,
        what="the page noticing the server is gone",
        page=page,
    )
    # No try while the server is down (Playwright's Python takes the time in seconds).
    page.clock.pause_at(page.evaluate("Date.now()") / 1000 + 1)
    lab.start()
    assert kernel_id in [k["id"] for k in lab.api("GET", "api/kernels")]
    page.clock.resume()
    page.clock.fast_forward(RETRY_MAX_MS)  # the pending try runs now, against the server

    # The page reconnects by itself and shows the running cell's kernel busy again.
    wait_for(
        lambda: page.evaluate(f"({status_js})()").lower() == "busy",
        180,
        what="the page's kernel busy again after the server's return",
        page=page,
    )
    # The websocket opened without waiting for a kernel_info on shell, which the kernel
    # would answer its cell's own tab only after the cell (PROTOCOL.md section 9).
    assert "Timeout waiting for kernel_info reply" not in lab.log_text()
    for i in range(N):
        (barriers / f"go-{i}").touch()
    wait_for(
        lambda: f"line {N - 1}" in page.evaluate(OUTPUT_JS, 0),
        120,
        what="the cell's last line, printed after the return",
        page=page,
    )
    wait_for(
        lambda: page.evaluate(f"({status_js})()").lower() == "idle",
        120,
        what="the kernel idle once the cell ended",
        page=page,
    )
    text = page.evaluate(OUTPUT_JS, 0)
    assert re.findall(r"line \d+", text) == [f"line {i}" for i in range(N)], text
    wait_for(
        lambda: page.evaluate(PROMPT_JS, 0) == "[1]:",
        60,
        what="the cell's count: its reply reached the page",
        page=page,
    )

    # The next cell runs in the same kernel, with the next count.
    run_cell(page, 1)
    wait_for(
        lambda: "next 42" in page.evaluate(OUTPUT_JS, 1),
        120,
        what="the next cell's output",
        page=page,
    )
    wait_for(
        lambda: page.evaluate(PROMPT_JS, 1) == "[2]:",
        60,
        what="the next cell's count, 2",
        page=page,
    )
    assert kernel_id in [k["id"] for k in lab.api("GET", "api/kernels")]
    dialogs = page.evaluate(DIALOGS_JS)
    assert not any(word in d for d in dialogs for word in KERNEL_GONE), dialogs
    if room_saves:  # the shared document, as the room saved it, holds the cell whole too
        wait_for(
            lambda: saved_lines(lab, name) == ([f"line {i}" for i in range(N)], 1),
            60,
            what="the room's save of the cell, whole, with its count",
            page=page,
        )
