"""Comm messages a frontend sends on a subshell (as JupyterLab 4.4+ and Notebook 7 do) run on
the main shell, never beside a cell, and a cell's figures stay in the cell (PROTOCOL.md section
8). Real kernels; the comm messages carry ``header.subshell_id`` as JupyterLab sends them.

Every test waits on barriers the kernel exposes: a marker the cell prints, the reply to a
request sent on the same subshell after the comm messages (the shell-channel thread routes in
arrival order, so by then every comm message has gone where it goes), a file the test writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from jupyter_client import BlockingKernelClient

from harness.cells import evaluate, kernel_set, run, start_cell
from harness.kernels import EXT_KERNEL, running_kernel
from harness.messages import control_request, get_reply, printed, wait_iopub
from harness.polling import wait_until
from harness.subshells import (
    click,
    create_subshell,
    execute_on,
    send_on,
    subshell_barrier,
    update,
    wait_idles,
    widget_and_subshell,
)

pytest.importorskip("ipywidgets", reason="the widget tests need ipywidgets (the test extra)")

Message = dict[str, Any]


def waiting_cell(release: Path, before: str = "") -> str:
    """A cell that marks itself running, prints CELL STARTED and waits for ``release``."""
    return (
        f"import os as _os, time as _time\n{before}\nrunning = True\n"
        "print('CELL STARTED', flush=True)\n"
        f"while not _os.path.exists({str(release)!r}):\n    _time.sleep(0.01)\n"
        "running = False\n"
    )


SLIDER = """
import threading, ipywidgets as _w
log, running = [], False
s = _w.IntSlider(max=1000)
s.observe(lambda ch: log.append((ch['new'], threading.current_thread().name, running)), 'value')
"""


def moved_while_running(
    kc: BlockingKernelClient, tmp_path: Path, moves: int = 10
) -> tuple[list[Any], list[Message], list[str]]:
    """A slider moved once while idle, then ``moves`` times while a cell runs, on a subshell.

    Returns what its observer logged (value, thread, whether the cell was running), every
    IOPub message read, and the ids of the updates sent during the cell.
    """
    model_id, subshell = widget_and_subshell(kc, SLIDER, "s")
    seen: list[Message] = []
    # Once while idle: stock 7.4 then routes every later message of this widget to the
    # subshell (its echo_update was published under a parent naming it).
    wait_idles(kc, [update(kc, subshell, model_id, value=1)], seen)
    release = tmp_path / "release"
    cell = start_cell(kc, waiting_cell(release), seen)
    sent = [update(kc, subshell, model_id, value=v) for v in range(2, 2 + moves)]
    subshell_barrier(kc, subshell)
    release.touch()
    wait_idles(kc, [cell, *sent], seen)
    return evaluate(kc, "log"), seen, sent


def test_slider_callbacks_wait_for_the_cell_then_run_in_order_each_with_its_busy_and_idle(
    kernel: BlockingKernelClient, tmp_path: Path
) -> None:
    """On the main thread, after the cell; each update gets its own busy and idle."""
    log, seen, sent = moved_while_running(kernel, tmp_path)
    assert [value for value, _, _ in log] == list(range(1, 12))
    assert {thread for _, thread, _ in log} == {"MainThread"}
    assert [entry for entry in log if entry[2]] == [], "a callback ran while the cell ran"
    statuses = [
        (m["parent_header"].get("msg_id"), m["content"]["execution_state"])
        for m in seen
        if m["msg_type"] == "status" and m["parent_header"].get("msg_id") in sent
    ]
    assert statuses == [(msg_id, state) for msg_id in sent for state in ("busy", "idle")]


def test_the_switch_at_run_time_brings_back_stocks_routing(
    kernel: BlockingKernelClient, tmp_path: Path
) -> None:
    with kernel_set(kernel, "comms_on_subshells", True, after=False):
        log, _, _ = moved_while_running(kernel, tmp_path, moves=5)
    during = [entry for entry in log if entry[2]]
    # Stock's routing: every move sent during the cell ran during it, on the subshell's thread.
    assert [value for value, _, _ in during] == list(range(2, 7))
    assert "MainThread" not in {thread for _, thread, _ in during}


def test_the_launcher_flag_sets_the_switch() -> None:
    with running_kernel(EXT_KERNEL, ["--comms-on-subshells"]) as (_, kc):
        assert evaluate(kc, "get_ipython().kernel.comms_on_subshells") is True


def comm_open_during_a_cell(
    kc: BlockingKernelClient, tmp_path: Path, target: str, before_release: str = ""
) -> list[Any]:
    """Register ``target`` (its callback records its thread and whether a cell ran), open a
    comm to it on a subshell while a cell runs, then (``before_release="delete"``) delete the
    subshell; release the cell; return the records."""
    run(
        kc,
        f"import threading\nrecords = []\nrunning = False\n"
        f"get_ipython().kernel.comm_manager.register_target({target!r}, lambda comm, msg: "
        "records.append((threading.current_thread().name, running)))",
    )
    subshell = create_subshell(kc)
    seen: list[Message] = []
    release = tmp_path / "release"
    cell = start_cell(kc, waiting_cell(release), seen)
    opened = send_on(kc, subshell, "comm_open", {"comm_id": target, "target_name": target})
    subshell_barrier(kc, subshell)  # routed by now: on the subshell, or in the main inbox
    if before_release == "delete":
        deleted = control_request(kc, "delete_subshell_request", {"subshell_id": subshell})
        assert deleted["content"]["status"] == "ok", deleted["content"]
    release.touch()
    wait_idles(kc, [cell, opened], seen)
    return evaluate(kc, "records")


def test_a_target_declared_concurrent_keeps_stocks_routing(
    kernel: BlockingKernelClient, tmp_path: Path
) -> None:
    with kernel_set(kernel, "concurrent_comm_targets", ["safe"], after=[]):
        ((thread, running),) = comm_open_during_a_cell(kernel, tmp_path, "safe")
    assert running and thread != "MainThread"


def test_a_cells_inline_figure_stays_in_the_cell_while_a_slider_moves(
    kernel: BlockingKernelClient, tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib", reason="the figure test needs matplotlib (test extra)")
    code = SLIDER + "\n%matplotlib inline\nimport matplotlib.pyplot as plt"
    model_id, subshell = widget_and_subshell(kernel, code, "s")
    seen: list[Message] = []
    wait_idles(kernel, [update(kernel, subshell, model_id, value=1)], seen)
    release = tmp_path / "release"
    cell = start_cell(kernel, waiting_cell(release, before="plt.plot([1, 2, 3])"), seen)
    moved = update(kernel, subshell, model_id, value=2)
    subshell_barrier(kernel, subshell)
    release.touch()
    wait_idles(kernel, [cell, moved], seen)
    figures = [
        m["parent_header"].get("msg_id")
        for m in seen
        if m["msg_type"] == "display_data" and "image/png" in m["content"]["data"]
    ]
    assert figures == [cell]


def test_an_async_cell_that_awaits_a_slider_change_gets_it(
    kernel: BlockingKernelClient, tmp_path: Path
) -> None:
    model_id, subshell = widget_and_subshell(kernel, SLIDER, "s")
    seen: list[Message] = []
    wait_idles(kernel, [update(kernel, subshell, model_id, value=1)], seen)
    code = (
        "import asyncio\nfut = asyncio.get_running_loop().create_future()\n"
        "s.observe(lambda ch: fut.done() or fut.set_result(ch['new']), 'value')\n"
        "print('CELL STARTED', flush=True)\n"
        # A hang guard, not a verdict: the value must come long before.
        "print('GOT', await asyncio.wait_for(fut, 60))\n"
    )
    cell = start_cell(kernel, code, seen)
    update(kernel, subshell, model_id, value=42)
    wait_idles(kernel, [cell], seen)
    assert "GOT 42" in printed(seen, cell), printed(seen, cell)


@pytest.mark.parametrize(
    "poll",
    [
        pytest.param(
            "from jupyter_ui_poll import ui_events\nwith ui_events() as poll:\n"
            "    while len(clicks) < 5 and _time.monotonic() < deadline:\n"
            "        poll(10)\n        _time.sleep(0.01)\n",
            id="jupyter-ui-poll",
        ),
        pytest.param(
            "from ipykernel_ext.kernel import handle_waiting_comms\n"
            "while len(clicks) < 5 and _time.monotonic() < deadline:\n"
            "    handle_waiting_comms()\n    _time.sleep(0.01)\n",
            id="handle_waiting_comms",
        ),
    ],
)
def test_a_blocking_loop_sees_every_click(
    kernel: BlockingKernelClient, tmp_path: Path, poll: str
) -> None:
    if "jupyter_ui_poll" in poll:
        pytest.importorskip("jupyter_ui_poll", reason="needs jupyter-ui-poll (test extra)")
    model_id, subshell = widget_and_subshell(
        kernel,
        "import threading, ipywidgets as _w\nclicks = []\nb = _w.Button()\n"
        "b.on_click(lambda _: clicks.append(threading.current_thread().name))",
        "b",
    )
    seen: list[Message] = []
    code = (
        "import time as _time\nprint('CELL STARTED', flush=True)\n"
        # A hang guard, not a verdict: the clicks come long before.
        "deadline = _time.monotonic() + 60\n" + poll + "print('CLICKS', len(clicks))\n"
    )
    cell = start_cell(kernel, code, seen)
    for _ in range(5):
        click(kernel, subshell, model_id)
    wait_idles(kernel, [cell], seen)
    assert "CLICKS 5" in printed(seen, cell), printed(seen, cell)


def test_a_subshell_consoles_cell_runs_while_the_main_cell_polls_in_ui_events(
    kernel: BlockingKernelClient,
) -> None:
    """jupyter-ui-poll's ``ui_events()`` swaps the kernel's ``execute_request`` handler so that
    the main shell's cells wait for the loop. A subshell console's cell runs at once on its
    own thread (JEP 91); here it is what releases the loop.

    Fails on the old main and on stock ipykernel 7.4: the console's cell went through the
    swapped handler, waited for the loop to end, and the loop waited for it until its guard
    (RELEASED False)."""
    pytest.importorskip("jupyter_ui_poll", reason="needs jupyter-ui-poll (test extra)")
    console = create_subshell(kernel)
    seen: list[Message] = []
    cell = start_cell(
        kernel,
        "import time as _time\nfrom jupyter_ui_poll import ui_events\nrelease = False\n"
        "print('CELL STARTED', flush=True)\n"
        # A hang guard, not a verdict: the console's cell releases the loop long before.
        "deadline = _time.monotonic() + 60\n"
        "with ui_events() as _poll:\n"
        "    while not release and _time.monotonic() < deadline:\n"
        "        _poll(10)\n        _time.sleep(0.001)\n"
        "print('RELEASED', release)\n",
        seen,
    )
    answered = execute_on(
        kernel,
        console,
        "import threading as _threading\nconsole_thread = _threading.current_thread().name\n"
        "release = True",
    )
    wait_idles(kernel, [answered, cell], seen)
    assert "RELEASED True" in printed(seen, cell), printed(seen, cell)
    assert evaluate(kernel, "console_thread") != "MainThread"
    # The loop put the table back: the main shell's next cell runs as usual.
    assert evaluate(kernel, "1 + 1") == 2


def test_a_comm_open_whose_subshell_was_deleted_while_it_waited_is_still_handled(
    kernel: BlockingKernelClient, tmp_path: Path
) -> None:
    """Stock would answer UnknownSubshellError, which no frontend reads for a comm."""
    records = comm_open_during_a_cell(kernel, tmp_path, "late", before_release="delete")
    assert records == [("MainThread", False)]


#: Enough moves to fill a subshell's inproc queue (about two thousand messages) several times.
MOVES = 5000


def test_a_consoles_comms_never_block_the_shell_channel_thread(
    kernel: BlockingKernelClient, tmp_path: Path
) -> None:
    """A slider a subshell console made, moved 5000 times while that console's cell waits:
    the moves wait for the console without blocking the shell-channel thread (issue 51). A
    main-shell cell and another subshell's ``kernel_info`` are answered while the console
    still waits (the test releases it only then); then every move runs, in order, on the
    console. On main the console's inproc queue fills and blocks the shell-channel thread:
    neither gets a reply within the hang guard."""
    console, other = create_subshell(kernel), create_subshell(kernel)
    made = execute_on(
        kernel,
        console,
        "import ipywidgets as _w\nmoves = []\ns = _w.IntSlider(max=100000)\n"
        "s.observe(lambda ch: moves.append(ch['new']), 'value')\n",
    )
    wait_idles(kernel, [made], [])
    model_id = evaluate(kernel, "s.model_id")
    release = tmp_path / "release"
    seen: list[Message] = []
    held = execute_on(kernel, console, waiting_cell(release))
    wait_iopub(
        kernel, lambda m: "CELL STARTED" in printed([m], held), "the console held", seen=seen
    )
    for value in range(1, MOVES + 1):
        update(kernel, console, model_id, value=value)
    try:
        cell = kernel.execute("print('MAIN ANSWERED')")
        assert get_reply(kernel, cell, timeout=20)["content"]["status"] == "ok"
        info = send_on(kernel, other, "kernel_info_request", {})
        assert get_reply(kernel, info, timeout=20)["content"]["status"] == "ok"
    finally:
        release.touch()
    wait_idles(kernel, [held], seen)
    wait_until(
        lambda: evaluate(kernel, "len(moves)") == MOVES, timeout=60, what="every move handled"
    )
    assert evaluate(kernel, f"moves == list(range(1, {MOVES + 1}))") is True
