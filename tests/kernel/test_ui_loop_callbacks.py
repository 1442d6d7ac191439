"""Widget callbacks under interrupts and nesting (PROTOCOL.md section 7, issue 51): an interrupt
while a jupyter-ui-poll ``ui_events()`` callback runs strands, duplicates and overlaps no
callback, and the next cell's output and ``idle`` are its own; a callback may wait for other
widget events (``handle_waiting_comms()`` or ``ui_events()`` inside it, mid-cell or at rest).

jupyter-ui-poll runs the cell's callbacks on a thread of its own while the cell waits for it;
an interrupt reaches the main thread only, which leaves its wait and joins that thread (a
second interrupt ends the join). Real kernels, CurveZMQ required, real jupyter-ui-poll; the
interrupts are the KernelManager's, each sent once the kernel said where it is: the first
callback prints a marker when it runs, and another once the main thread has taken the
interrupt (its frames show jupyter-ui-poll's ``terminate``, joining the poll thread). The next
cell runs ``gc.collect()`` first, so what only the collector would have put back (main: a
dispatch task its loop's end left pending) shows before it, not at some later collection.
"""

from __future__ import annotations

from typing import Any

import pytest
from jupyter_client import BlockingKernelClient, KernelManager

from harness.callback_cells import CALLBACK_PRELUDE
from harness.cells import START_MARKER, evaluate, run, start_cell
from harness.messages import get_reply, is_status, printed, wait_iopub
from harness.subshells import click, create_subshell, wait_idles

pytest.importorskip("jupyter_ui_poll", reason="needs jupyter-ui-poll (test extra)")
pytest.importorskip("ipywidgets", reason="the widget tests need ipywidgets (the test extra)")

Message = dict[str, Any]

BUTTON = (
    CALLBACK_PRELUDE
    + """
def _main_waits_for_a_request():
    frame = sys._current_frames().get(_main.ident)
    return frame is not None and frame.f_code.co_name == 'select'

def _clicked(_):
    n = len(started) + 1
    started.append((n, threading.current_thread() is _main))
    active[0] += 1
    most[0] = max(most[0], active[0])
    try:
        if n == 1:
            _deadline = _time.monotonic() + 30  # a hang guard
            print('CALLBACK 1 RUNNING', flush=True)
            while not _main_in('terminate') and _time.monotonic() < _deadline:
                _time.sleep(0.005)
            print('MAIN TOOK THE INTERRUPT', flush=True)
            if DOUBLE:
                # Until the second interrupt ended the join, and the main shell went on: it
                # waits for a request, or runs another callback beside this one.
                while _main_in('terminate') and _time.monotonic() < _deadline:
                    _time.sleep(0.005)
                while (len(started) == 1 and not _main_waits_for_a_request()
                       and _time.monotonic() < _deadline):
                    _time.sleep(0.005)
    finally:
        active[0] -= 1
        finished.append(n)

b = _w.Button()
b.on_click(_clicked)
"""
)

POLLING_CELL = (
    "import time as _time\nfrom jupyter_ui_poll import ui_events\n"
    "_deadline = _time.monotonic() + 60\n"
    f"print({START_MARKER!r}, flush=True)\n"
    "try:\n"
    "    with ui_events() as _poll:\n"
    "        while len(finished) < 3 and _time.monotonic() < _deadline:\n"
    "            _poll(10)\n"
    "            _time.sleep(0.01)\n"
    "except KeyboardInterrupt:\n"
    "    print('CAUGHT')\n"
)

NEXT_CELL = "import gc\ngc.collect()\nprint('NEXT', started, finished, most[0])\n"


@pytest.mark.parametrize("interrupts", [1, 2], ids=["caught", "double"])
def test_an_interrupt_during_a_ui_events_callback_strands_and_overlaps_nothing(
    ext_kernel: tuple[KernelManager, BlockingKernelClient], interrupts: int
) -> None:
    """Three clicks, the first one's callback interrupted once (the cell catches it) or twice
    (the second ends the cell's join of the poll thread): every click runs once, in order,
    one at a time, before the next cell (the first on the poll thread, the others on the main
    thread after the cell); the next cell's output and ``idle`` go under its own msg_id, and
    nothing says a task was destroyed pending or a coroutine never awaited.

    On main, caught: the second click is taken for a loop that is ending and runs only when
    the collector finalises its task (after the next cell); the next cell's output and idle
    go under the polling cell's msg_id. Double: the second click runs on the main thread
    while the first still runs on the poll thread (``most`` is 2)."""
    km, kernel = ext_kernel
    run(kernel, f"DOUBLE = {interrupts == 2}\n" + BUTTON)
    model_id = evaluate(kernel, "b.model_id")
    subshell = create_subshell(kernel)
    seen: list[Message] = []
    cell = start_cell(kernel, POLLING_CELL, seen)
    clicks = [click(kernel, subshell, model_id) for _ in range(3)]
    wait_iopub(
        kernel,
        lambda m: "CALLBACK 1 RUNNING" in printed([m], clicks[0]),
        what="the first click's callback running",
        seen=seen,
    )
    km.interrupt_kernel()
    if interrupts == 2:
        wait_iopub(
            kernel,
            lambda m: "MAIN TOOK THE INTERRUPT" in printed([m], clicks[0]),
            what="the main thread joining the poll thread",
            seen=seen,
        )
        km.interrupt_kernel()
    get_reply(kernel, cell)
    nxt = kernel.execute(NEXT_CELL)
    reply = get_reply(kernel, nxt)
    wait_idles(kernel, [cell, *clicks, nxt], seen)
    assert reply["content"]["status"] == "ok", reply["content"]
    # Each click once, in order, before the next cell; one callback at a time.
    expected = [(1, False), (2, True), (3, True)]
    assert f"NEXT {expected} [1, 2, 3] 1" in printed(seen, nxt), _streams(seen)
    # The next cell's own output and idle, nothing of it under the polling cell.
    assert "NEXT" not in printed(seen, cell), _streams(seen)
    statuses = [m for m in seen if m["msg_type"] == "status"]
    assert len([m for m in statuses if is_status("idle", cell)(m)]) == 1, _states(statuses)
    assert len([m for m in statuses if is_status("idle", nxt)(m)]) == 1, _states(statuses)
    everything = "".join(m["content"].get("text", "") for m in seen if m["msg_type"] == "stream")
    assert "never awaited" not in everything and "destroyed" not in everything, everything


def _streams(seen: list[Message]) -> list[tuple[str, str]]:
    return [
        (m["parent_header"].get("msg_id", "")[-6:], m["content"]["text"])
        for m in seen
        if m["msg_type"] == "stream"
    ]


def _states(statuses: list[Message]) -> list[tuple[str, str]]:
    return [
        (m["parent_header"].get("msg_id", "")[-6:], m["content"]["execution_state"])
        for m in statuses
    ]


#: How a cell or a callback waits for widget events; the deadline is a hang guard.
WAIT_LOOPS = {
    "handle_waiting_comms": (
        "from ipykernel_ext.kernel import handle_waiting_comms\n"
        "while {until} and _time.monotonic() < _deadline:\n"
        "    handle_waiting_comms()\n    _time.sleep(0.01)\n"
    ),
    "ui_events": (
        "from jupyter_ui_poll import ui_events\nwith ui_events() as _poll:\n"
        "    while {until} and _time.monotonic() < _deadline:\n"
        "        _poll(1)\n        _time.sleep(0.01)\n"
    ),
}


def _indented(code: str, prefix: str) -> str:
    return "".join(prefix + line + "\n" for line in code.splitlines())


@pytest.mark.parametrize(
    ("cell_waits", "callback_waits"),
    [
        ("ui_events", "handle_waiting_comms"),
        ("handle_waiting_comms", "ui_events"),
        (None, "handle_waiting_comms"),
        (None, "ui_events"),
    ],
    ids=["ui_events-then-handle", "handle-then-ui_events", "at-rest-handle", "at-rest-ui_events"],
)
def test_a_callback_may_wait_for_another_widget_event(
    kernel: BlockingKernelClient, cell_waits: str | None, callback_waits: str
) -> None:
    """The first click's callback waits, in a loop of its own, for the second click, which
    runs inside it: mid-cell (the cell lets the clicks through one way, the callback waits the
    other) and at rest. On main, mid-cell, the inner loop gets nothing (its thread's parent is
    the comm message, refused as not the main cell's) until its hang guard, and at rest
    ``ui_events()`` leaves its lock swap behind, which drops the next request; at rest
    ``handle_waiting_comms()`` works on main too (the README's promise, kept here)."""
    callback = (
        "import threading, time as _time, ipywidgets as _w\nstarted, finished, got = [], [], []\n"
        "def _clicked(_):\n    n = len(started) + 1\n    started.append(n)\n"
        "    if n == 1:\n        _deadline = _time.monotonic() + 15\n"
        "        print('WAITING FOR ANOTHER', flush=True)\n"
        + _indented(WAIT_LOOPS[callback_waits].format(until="len(started) < 2"), "        ")
        + "        got.append(len(started))\n    finished.append(n)\n"
        "b = _w.Button()\nb.on_click(_clicked)\n"
    )
    run(kernel, callback)
    model_id = evaluate(kernel, "b.model_id")
    subshell = create_subshell(kernel)
    seen: list[Message] = []
    waited: list[str] = []
    if cell_waits is not None:
        code = (
            f"import time as _time\n_deadline = _time.monotonic() + 30\n"
            f"print({START_MARKER!r}, flush=True)\n"
            + WAIT_LOOPS[cell_waits].format(until="len(finished) < 2")
        )
        waited.append(start_cell(kernel, code, seen))
    first = click(kernel, subshell, model_id)
    wait_iopub(
        kernel,
        lambda m: "WAITING FOR ANOTHER" in printed([m], first),
        what="the first callback waiting",
        seen=seen,
    )
    second = click(kernel, subshell, model_id)
    wait_idles(kernel, [*waited, first, second], seen)
    assert evaluate(kernel, "started, finished, got") == ([1, 2], [2, 1], [2])


SLOW_BUTTON = """
import threading, time as _time, ipywidgets as _w
started, finished, threads, active, most = [], [], [], [0], [0]
def _slow(_):
    n = len(started) + 1
    started.append(n)
    threads.append(threading.current_thread().name)
    active[0] += 1
    most[0] = max(most[0], active[0])
    try:
        # Long enough for another place that runs callbacks to start one beside this one: the
        # verdict is that none does, which no timing can make true by chance.
        _until = _time.monotonic() + 0.2
        while len(started) == n and _time.monotonic() < _until:
            _time.sleep(0.005)
    finally:
        active[0] -= 1
        finished.append(n)
b = _w.Button()
b.on_click(_slow)
"""

WORKER = """
import asyncio, contextvars, threading, time as _time
from ipykernel_ext.kernel import handle_waiting_comms
handled_beside = []
def _work():
    _deadline = _time.monotonic() + 30  # a hang guard
    while len(finished) < 4 and _time.monotonic() < _deadline:
        handled_beside.append(handle_waiting_comms())
        _time.sleep(0.005)
"""

STARTS = {
    "to_thread": "await asyncio.to_thread(_work)\n",
    "Thread": (
        "_t = threading.Thread(target=contextvars.copy_context().run, args=(_work,))\n"
        "_t.start()\n"
        "while _t.is_alive():\n    await asyncio.sleep(0.01)\n"
    ),
}


@pytest.mark.parametrize("start", list(STARTS))
def test_a_thread_the_cell_started_runs_no_callback(
    kernel: BlockingKernelClient, start: str
) -> None:
    """An async cell awaits a thread of its own (``asyncio.to_thread``, or a ``Thread`` run in
    a copy of the cell's context) that calls ``handle_waiting_comms()``: the callbacks run on
    the cell's side only (the main thread, while the cell awaits), one at a time, each once;
    the thread handles none. On main the worker is let through (its context is the cell's)
    and runs callbacks beside the event loop's: threads other than MainThread, ``most`` 2."""
    run(kernel, SLOW_BUTTON)
    model_id = evaluate(kernel, "b.model_id")
    subshell = create_subshell(kernel)
    seen: list[Message] = []
    code = WORKER + f"print({START_MARKER!r}, flush=True)\n" + STARTS[start]
    cell = start_cell(kernel, code, seen)
    clicks = [click(kernel, subshell, model_id) for _ in range(4)]
    wait_idles(kernel, [cell, *clicks], seen)
    assert get_reply(kernel, cell)["content"]["status"] == "ok"
    assert evaluate(kernel, "finished, set(threads), most[0], sum(handled_beside)") == (
        [1, 2, 3, 4],
        {"MainThread"},
        1,
        0,
    )


INPUT_BUTTON = """
import ipywidgets as _w
answers = []
b = _w.Button()
b.on_click(lambda _: answers.append(input('callback? ')))
"""


def test_an_interrupt_ends_an_input_in_a_ui_events_callback(
    ext_kernel: tuple[KernelManager, BlockingKernelClient],
) -> None:
    """A ``ui_events()`` callback waits in ``input()`` on jupyter-ui-poll's thread: one
    interrupt ends it and the cell, and the next cell's ``input()`` gets its own reply. On
    main one interrupt does not end the cell (the main thread waits for the poll thread,
    whose ``input()`` no signal reaches): no reply within the hang guard."""
    km, kernel = ext_kernel
    run(kernel, INPUT_BUTTON)
    model_id = evaluate(kernel, "b.model_id")
    subshell = create_subshell(kernel)
    cell = kernel.execute(
        "import time as _time\nfrom jupyter_ui_poll import ui_events\n"
        "_deadline = _time.monotonic() + 60\n"
        "with ui_events() as _poll:\n"
        "    while not answers and _time.monotonic() < _deadline:\n"
        "        _poll(1)\n        _time.sleep(0.01)\n",
        allow_stdin=True,
    )
    clicked = click(kernel, subshell, model_id)
    asked = kernel.get_stdin_msg(timeout=60)
    assert asked["msg_type"] == "input_request", asked
    assert asked["parent_header"]["msg_id"] == clicked
    km.interrupt_kernel()
    reply = get_reply(kernel, cell, timeout=20)
    assert reply["content"]["ename"] == "KeyboardInterrupt", reply["content"]
    wait_idles(kernel, [cell, clicked], [])
    nxt = kernel.execute("got = input('cell? ')", allow_stdin=True)
    asked = kernel.get_stdin_msg(timeout=60)
    assert asked["parent_header"]["msg_id"] == nxt, asked
    kernel.input("for the cell")
    assert get_reply(kernel, nxt)["content"]["status"] == "ok"
    assert evaluate(kernel, "got, answers") == ("for the cell", [])
