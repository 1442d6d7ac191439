"""Comm messages handled while a cell waits (PROTOCOL.md section 7, issue 37): each gets its
own ``busy`` and ``idle`` in the order of its outputs, as one handled at rest; from a blocking
cell its callbacks run on the main thread, in the main event loop's context, stopped by an
interrupt with the cell, and an ``input()`` in one takes only its own reply.

Real kernels, CurveZMQ required; the comm messages carry ``header.subshell_id`` as JupyterLab
sends them. Verdicts come from what the kernel recorded and the messages on the wire; the waits
are barriers (a marker the cell or a callback prints, the idle of a request).
"""

from __future__ import annotations

import ast
from typing import Any

import pytest
from jupyter_client import BlockingKernelClient, KernelManager

from harness.cells import START_MARKER, evaluate, kernel_set, run, start_cell
from harness.messages import get_reply, printed, wait_iopub
from harness.polling import wait_until
from harness.subshells import (
    assert_the_cell_stays_busy,
    cell_until_released,
    click,
    create_subshell,
    execute_on,
    send_on,
    update,
    wait_idles,
    widget_and_subshell,
)

pytest.importorskip("ipywidgets", reason="the widget tests need ipywidgets (the test extra)")

Message = dict[str, Any]


SLIDER = """
import threading, ipywidgets as _w
log = []
s = _w.IntSlider(max=1000)
def _moved(ch):
    log.append((ch['new'], threading.current_thread().name))
    print('MOVED', ch['new'])  # not flushed here: the kernel flushes it before the idle
s.observe(_moved, 'value')
"""

#: The loop of a blocking cell that lets comm messages through until ``log`` has N entries.
#: The deadline is a hang guard, not a verdict.
WAITS = {
    "handle_waiting_comms": (
        "from ipykernel_ext.kernel import handle_waiting_comms\n"
        "while len(log) < {n} and _time.monotonic() < _deadline:\n"
        "    handle_waiting_comms()\n    _time.sleep(0.01)\n"
    ),
    "jupyter-ui-poll": (
        "from jupyter_ui_poll import ui_events\nwith ui_events() as _poll:\n"
        "    while len(log) < {n} and _time.monotonic() < _deadline:\n"
        "        _poll(10)\n        _time.sleep(0.01)\n"
    ),
    "async cell": (
        "import asyncio\n"
        "while len(log) < {n} and _time.monotonic() < _deadline:\n"
        "    await asyncio.sleep(0.01)\n"
    ),
}


def waiting_cell(wait: str, n: int) -> str:
    return (
        f"import time as _time\n_deadline = _time.monotonic() + 60\n"
        f"print({START_MARKER!r}, flush=True)\n"
        + WAITS[wait].format(n=n)
        + "print('SAW', len(log))\n"
    )


def of(seen: list[Message], msg_id: str) -> list[str]:
    """What IOPub carried under ``msg_id``, in order: a status as ``status:<state>``."""
    return [
        f"status:{m['content']['execution_state']}" if m["msg_type"] == "status" else m["msg_type"]
        for m in seen
        if m["parent_header"].get("msg_id") == msg_id
    ]


@pytest.mark.parametrize("wait", list(WAITS))
def test_a_comm_message_handled_mid_cell_gets_its_own_busy_and_idle_in_order(
    kernel: BlockingKernelClient, wait: str
) -> None:
    if wait == "jupyter-ui-poll":
        pytest.importorskip("jupyter_ui_poll", reason="needs jupyter-ui-poll (test extra)")
    model_id, subshell = widget_and_subshell(kernel, SLIDER, "s")
    seen: list[Message] = []
    cell = start_cell(kernel, waiting_cell(wait, 3), seen)
    sent = [update(kernel, subshell, model_id, value=v) for v in (1, 2, 3)]
    wait_idles(kernel, [cell], seen)
    assert "SAW 3" in printed(seen, cell), printed(seen, cell)
    assert [value for value, _ in evaluate(kernel, "log")] == [1, 2, 3]
    for msg_id in sent:
        carried = of(seen, msg_id)
        # At rest: busy, its echo, what its callbacks publish, idle.
        assert carried[:2] == ["status:busy", "comm_echo"], carried
        assert carried[-1] == "status:idle", carried
        assert "stream" in carried, carried
        assert carried.count("status:busy") == carried.count("status:idle") == 1, carried
    assert_the_cell_stays_busy(seen, sent, cell)


def test_handle_waiting_comms_runs_callbacks_on_the_main_thread_in_the_main_loop(
    kernel: BlockingKernelClient,
) -> None:
    model_id, subshell = widget_and_subshell(
        kernel,
        SLIDER + "import asyncio\nscheduled = []\n"
        "async def _later(v):\n    scheduled.append(('task', v))\n"
        "s.observe(lambda ch: asyncio.ensure_future(_later(ch['new'])), 'value')\n"
        "s.observe(lambda ch: asyncio.get_running_loop().call_later(0, "
        "scheduled.append, ('call_later', ch['new'])), 'value')\n",
        "s",
    )
    seen: list[Message] = []
    cell = start_cell(kernel, waiting_cell("handle_waiting_comms", 1), seen)
    update(kernel, subshell, model_id, value=7)
    wait_idles(kernel, [cell], seen)
    assert evaluate(kernel, "log") == [(7, "MainThread")]
    # What the callback scheduled runs once the cell has given the loop back.
    wait_until(
        lambda: sorted(evaluate(kernel, "scheduled")) == [("call_later", 7), ("task", 7)],
        timeout=60,
        what="the task and the call_later a callback scheduled mid-cell",
    )


def test_other_threads_that_handle_waiting_comms_run_nothing_of_the_main_shell(
    kernel: BlockingKernelClient,
) -> None:
    model_id, subshell = widget_and_subshell(kernel, SLIDER, "s")
    console = create_subshell(kernel)
    seen: list[Message] = []
    # The main cell waits for a file, letting nothing through.
    cell = start_cell(
        kernel,
        f"import time as _time\nprint({START_MARKER!r}, flush=True)\n"
        "while not globals().get('release'):\n    _time.sleep(0.01)\n",
        seen,
    )
    moved = update(kernel, subshell, model_id, value=5)
    # A subshell console's cell, sent after the move: the move waits in the inbox by then.
    beside = execute_on(
        kernel,
        console,
        "import threading\nfrom ipykernel_ext.kernel import handle_waiting_comms\n"
        "handled_beside = [handle_waiting_comms()]\n"
        "handled_beside.append(await get_ipython().kernel.do_one_iteration())\n"
        "_user = threading.Thread(\n"
        "    target=lambda: handled_beside.append(handle_waiting_comms()))\n"
        "_user.start(); _user.join()\n"
        "log_beside = list(log)\nrelease = True",
    )
    wait_idles(kernel, [beside, cell, moved], seen)
    # From the console's thread (both calls) and from a thread of the user's: nothing.
    assert evaluate(kernel, "handled_beside") == [0, 0, 0]
    assert evaluate(kernel, "log_beside") == []
    # The move ran after the cell, on the main thread.
    assert evaluate(kernel, "log") == [(5, "MainThread")]


NESTED = """
import threading, ipywidgets as _w
from ipykernel_ext.kernel import handle_waiting_comms
started, finished = [], []
s = _w.IntSlider(max=1000)
def _moved(ch):
    started.append(ch['new'])
    if ch['new'] == 1:
        while len(started) < 3 and _time.monotonic() < _deadline:
            handle_waiting_comms()
            _time.sleep(0.01)
    finished.append(ch['new'])
s.observe(_moved, 'value')
log = finished
"""


def test_a_callback_that_handles_waiting_comms_itself_keeps_arrival_order(
    kernel: BlockingKernelClient,
) -> None:
    code = "import time as _time\n_deadline = _time.monotonic() + 60\n" + NESTED
    model_id, subshell = widget_and_subshell(kernel, code, "s")
    seen: list[Message] = []
    cell = start_cell(kernel, waiting_cell("handle_waiting_comms", 3), seen)
    for value in (1, 2, 3):
        update(kernel, subshell, model_id, value=value)
    wait_idles(kernel, [cell], seen)
    assert evaluate(kernel, "started") == [1, 2, 3]
    assert evaluate(kernel, "finished") == [2, 3, 1]


INTERRUPTIBLE = """
import threading, time as _time, ipywidgets as _w
state = {'running': False, 'stop': False, 'thread': None}
b = _w.Button()
def _clicked(_):
    state['thread'] = threading.current_thread().name
    try:
        state['running'] = True
        print('CALLBACK STARTED', flush=True)
        while not state['stop']:
            _time.sleep(0.01)
    finally:
        state['running'] = False
b.on_click(_clicked)
log = []
"""


def test_an_interrupt_stops_a_callback_handled_mid_cell_with_its_cell(
    ext_kernel: tuple[KernelManager, BlockingKernelClient],
) -> None:
    km, kernel = ext_kernel
    model_id, subshell = widget_and_subshell(kernel, INTERRUPTIBLE, "b")
    seen: list[Message] = []
    cell = start_cell(kernel, waiting_cell("handle_waiting_comms", 1), seen)
    clicked = click(kernel, subshell, model_id)
    wait_iopub(
        kernel,
        lambda m: "CALLBACK STARTED" in printed([m], clicked),
        what="the click's callback running",
        seen=seen,
    )
    km.interrupt_kernel()
    reply = get_reply(kernel, cell)
    try:
        assert reply["content"]["status"] == "error", reply["content"]
        assert reply["content"]["ename"] == "KeyboardInterrupt", reply["content"]
        wait_idles(kernel, [clicked], seen)
        # Nothing of the callback runs beside the next cell.
        assert evaluate(kernel, "state['running'], state['thread']") == (False, "MainThread")
    finally:
        run(kernel, "state['stop'] = True")


INPUT = """
import threading, ipywidgets as _w
answers = []
b = _w.Button()
b.on_click(lambda _: answers.append(input('callback? ')))
log = answers
"""


def read_input_request(kernel: BlockingKernelClient) -> Message:
    msg: Message = kernel.get_stdin_msg(timeout=60)
    assert msg["msg_type"] == "input_request", msg
    return msg


@pytest.mark.parametrize("interrupted", [True, False], ids=["interrupted", "answered"])
def test_input_in_a_callback_handled_mid_cell(
    ext_kernel: tuple[KernelManager, BlockingKernelClient], interrupted: bool
) -> None:
    """Answered, the callback's input() gets its reply; interrupted, it never takes the
    next cell's."""
    km, kernel = ext_kernel
    model_id, subshell = widget_and_subshell(kernel, INPUT, "b")
    cell = kernel.execute(waiting_cell("handle_waiting_comms", 1), allow_stdin=True)
    clicked = click(kernel, subshell, model_id)
    assert read_input_request(kernel)["parent_header"]["msg_id"] == clicked
    if not interrupted:
        kernel.input("for the callback")
        assert get_reply(kernel, cell)["content"]["status"] == "ok"
        assert evaluate(kernel, "answers") == ["for the callback"]
        return
    km.interrupt_kernel()
    assert get_reply(kernel, cell)["content"]["status"] == "error"
    wait_idles(kernel, [cell, clicked], [])
    nxt = kernel.execute("got = input('cell? ')", allow_stdin=True)
    assert read_input_request(kernel)["parent_header"]["msg_id"] == nxt
    kernel.input("for the cell")
    assert get_reply(kernel, nxt)["content"]["status"] == "ok"
    assert evaluate(kernel, "got, answers") == ("for the cell", [])


def test_the_switch_turned_on_while_a_message_waits_keeps_arrival_order(
    kernel: BlockingKernelClient,
) -> None:
    model_id, subshell = widget_and_subshell(kernel, SLIDER, "s")
    console = create_subshell(kernel)
    seen: list[Message] = []
    # Moved once at rest: stock's routing then sends this widget's messages to the subshell.
    wait_idles(kernel, [update(kernel, subshell, model_id, value=5)], seen)
    cell = cell_until_released(kernel, seen)
    first = update(kernel, subshell, model_id, value=1)
    switched = execute_on(kernel, console, "get_ipython().kernel.comms_on_subshells = True")
    wait_idles(kernel, [switched], seen)
    try:
        second = update(kernel, subshell, model_id, value=2)
        released = execute_on(kernel, console, "release = True")
        wait_idles(kernel, [released, cell, first, second], seen)
        assert [value for value, _ in evaluate(kernel, "log")] == [5, 1, 2]
    finally:
        run(kernel, "get_ipython().kernel.comms_on_subshells = False")


def test_system_exit_in_a_callback_leaves_the_other_messages_to_run(
    kernel: BlockingKernelClient,
) -> None:
    model_id, subshell = widget_and_subshell(
        kernel,
        SLIDER + "def _exit(ch):\n    if ch['new'] == 1:\n        raise SystemExit\n"
        "s.observe(_exit, 'value')\n",
        "s",
    )
    console = create_subshell(kernel)
    seen: list[Message] = []
    cell = cell_until_released(
        kernel,
        seen,
        then="from ipykernel_ext.kernel import handle_waiting_comms\n"
        "try:\n    handle_waiting_comms()\nexcept SystemExit:\n    print('EXITED')",
    )
    sent = [update(kernel, subshell, model_id, value=v) for v in (1, 2, 3)]
    # Released once the three wait in the inbox (the console's request came after them).
    released = execute_on(kernel, console, "release = True")
    wait_idles(kernel, [released, cell, *sent], seen)
    assert "EXITED" in printed(seen, cell)
    assert [value for value, _ in evaluate(kernel, "log")] == [1, 2, 3]


REQUESTER = """
import ipywidgets as _w
asker = _w.Button()
def _ask(_):
    asker.comm.send({'content': {'id': 'r%d' % len(asked)}})
    asked.append(1)
asked = []
asker.on_click(_ask)
"""


def test_replies_to_comm_requests_leave_nothing_noted_on_the_comm(
    kernel: BlockingKernelClient,
) -> None:
    """ipykernel 7.4 notes each request a comm sends under a subshell's message, for the reply's
    routing; ours routes the reply itself and must consume the note (stock: 0 after 50)."""
    model_id, subshell = widget_and_subshell(kernel, REQUESTER, "asker")
    seen: list[Message] = []
    for n in range(20):
        clicked = click(kernel, subshell, model_id)
        wait_idles(kernel, [clicked], seen)  # the request is out: the frontend answers
        reply = send_on(
            kernel,
            subshell,
            "comm_msg",
            {"comm_id": model_id, "data": {"method": "noop", "content": {"id": f"r{n}"}}},
        )
        wait_idles(kernel, [reply], seen)
    assert evaluate(kernel, "len(asked), len(asker.comm._reply_subshell_ids)") == (20, 0)


def test_a_concurrent_targets_comms_opened_by_the_frontend_lose_nothing(
    kernel: BlockingKernelClient,
) -> None:
    run(
        kernel,
        "import threading\nopened, got = [], []\n"
        "def _open(comm, msg):\n    opened.append(comm.comm_id)\n"
        "    comm.on_msg(lambda m: got.append((m['content']['data']['n'], "
        "threading.current_thread().name)))\n"
        "get_ipython().kernel.comm_manager.register_target('fast', _open)\n",
    )
    with kernel_set(kernel, "concurrent_comm_targets", ["fast"], after=[]):
        subshell = create_subshell(kernel)
        sent = []
        for n in range(30):
            opening = {"comm_id": f"fast-{n}", "target_name": "fast"}
            sent.append(send_on(kernel, subshell, "comm_open", opening))
            message = {"comm_id": f"fast-{n}", "data": {"n": n}}
            sent.append(send_on(kernel, subshell, "comm_msg", message))
        wait_idles(kernel, sent, [])
        got = evaluate(kernel, "got")
    assert sorted(n for n, _ in got) == list(range(30))
    assert "MainThread" not in {thread for _, thread in got}


def test_a_kernel_made_comm_of_a_concurrent_target_reaches_a_blocking_loop(
    kernel: BlockingKernelClient,
) -> None:
    code = (
        "import threading, ipywidgets as _w\nclicks = []\nb = _w.Button()\n"
        "b.on_click(lambda _: clicks.append(threading.current_thread().name))\n"
    )
    model_id, subshell = widget_and_subshell(kernel, code, "b")
    with kernel_set(kernel, "concurrent_comm_targets", ["jupyter.widget"], after=[]):
        seen: list[Message] = []
        cell = start_cell(
            kernel,
            "import time as _time\n_deadline = _time.monotonic() + 60\n"
            f"print({START_MARKER!r}, flush=True)\n"
            "while not clicks and _time.monotonic() < _deadline:\n    _time.sleep(0.01)\n"
            "print('CLICKS', len(clicks))\n",
            seen,
        )
        click(kernel, subshell, model_id)
        wait_idles(kernel, [cell], seen)
        assert "CLICKS 1" in printed(seen, cell), printed(seen, cell)
        assert evaluate(kernel, "clicks") != ["MainThread"]


def evaluate_on(kernel: BlockingKernelClient, subshell: str, code: str, expression: str) -> Any:
    """Run ``code`` on ``subshell`` (a subshell console's cell); the value of ``expression``."""
    msg = kernel.session.msg(
        "execute_request",
        {"code": code, "silent": False, "user_expressions": {"x": expression}},
    )
    msg["header"]["subshell_id"] = subshell
    kernel.shell_channel.send(msg)
    reply = get_reply(kernel, msg["header"]["msg_id"])
    result = reply["content"]["user_expressions"]["x"]
    assert result["status"] == "ok", result
    return ast.literal_eval(result["data"]["text/plain"])


def test_a_slider_made_in_a_subshell_console_answers_while_the_main_cell_runs(
    kernel: BlockingKernelClient,
) -> None:
    """JEP 91: a subshell console's widget runs its callbacks on that subshell at once, as on
    stock; the main cell here ends only when the console's observer has run."""
    frontend = create_subshell(kernel)
    console = create_subshell(kernel)
    seen: list[Message] = []
    cell = start_cell(
        kernel,
        "import time as _time\n_deadline = _time.monotonic() + 60\nmain_running = True\n"
        f"released = False\nprint({START_MARKER!r}, flush=True)\n"
        "while not released and _time.monotonic() < _deadline:\n    _time.sleep(0.01)\n"
        "main_running = False\nprint('RELEASED', released)\n",
        seen,
    )
    model_id = evaluate_on(
        kernel,
        console,
        "import threading, ipywidgets as _w\nconsole_log = []\nc = _w.IntSlider()\n"
        "def _seen(ch):\n"
        "    global released\n"
        "    console_log.append((ch['new'], threading.current_thread().name, main_running))\n"
        "    released = True\n"
        "c.observe(_seen, 'value')\n",
        "c.model_id",
    )
    moved = update(kernel, frontend, model_id, value=3)
    wait_idles(kernel, [cell, moved], seen)
    assert "RELEASED True" in printed(seen, cell), printed(seen, cell)
    ((value, thread, main_was_running),) = evaluate(kernel, "console_log")
    assert (value, main_was_running) == (3, True)
    assert thread != "MainThread"


def test_a_console_cells_comm_request_gets_its_reply_while_the_main_cell_runs(
    kernel: BlockingKernelClient,
) -> None:
    """Upstream's ``test_comm_reply_follows_requesting_subshell`` pattern, from a subshell
    console's async cell while the main shell runs a blocking cell: the reply reaches the
    console's cell (on stock too)."""
    frontend = create_subshell(kernel)
    console = create_subshell(kernel)
    seen: list[Message] = []
    cell = cell_until_released(kernel, seen)
    comm_id = evaluate_on(
        kernel, console, "import comm\nasker = comm.create_comm(target_name='ask')", "asker.comm_id"
    )
    code = (
        "import asyncio, threading\nreply = asyncio.get_running_loop().create_future()\n"
        "asker.on_msg(lambda m: reply.set_result(m['content']['data']['content']['value']))\n"
        "asker.send({'method': 'custom', 'content': {'id': 'request-1'}})\n"
        # A hang guard, not a verdict: the reply comes long before.
        "answer = await asyncio.wait_for(reply, 60)\n"
    )
    asked = execute_on(kernel, console, code)
    wait_iopub(
        kernel,
        lambda m: m["msg_type"] == "comm_msg" and m["parent_header"].get("msg_id") == asked,
        what="the console cell's request",
        seen=seen,
    )
    data = {"method": "custom", "content": {"id": "request-1", "value": 42}}
    send_on(kernel, frontend, "comm_msg", {"comm_id": comm_id, "data": data})
    assert get_reply(kernel, asked)["content"]["status"] == "ok"
    released = execute_on(kernel, console, "release = True")
    wait_idles(kernel, [released, cell], seen)
    assert evaluate(kernel, "answer") == 42


def test_comm_info_after_a_comm_open_on_one_subshell_lists_the_comm(
    kernel: BlockingKernelClient,
) -> None:
    """A frontend opens a comm and asks for comm_info on one subshell while the main shell is
    busy: the reply lists the comm (stock answers after its comm_open; ours waits with it)."""
    run(
        kernel,
        "get_ipython().kernel.comm_manager.register_target('listed', lambda comm, msg: None)",
    )
    subshell = create_subshell(kernel)
    console = create_subshell(kernel)
    seen: list[Message] = []
    cell = cell_until_released(kernel, seen)
    send_on(kernel, subshell, "comm_open", {"comm_id": "listed-1", "target_name": "listed"})
    asked = send_on(kernel, subshell, "comm_info_request", {"target_name": "listed"})
    released = execute_on(kernel, console, "release = True")
    wait_idles(kernel, [released, cell], seen)
    reply = get_reply(kernel, asked)
    assert reply["content"]["status"] == "ok", reply["content"]
    assert "listed-1" in reply["content"]["comms"], reply["content"]


DRAWER = """
%matplotlib inline
import matplotlib.pyplot as plt, ipywidgets as _w
b = _w.Button()
def _draw(_):
    plt.figure()
    plt.plot([3, 1, 2])
b.on_click(_draw)
log = []
b.on_click(lambda _: log.append(1))
"""


def test_a_figure_a_callback_opens_mid_cell_is_shown_under_its_comm_message(
    kernel: BlockingKernelClient,
) -> None:
    """A callback handled mid-cell that opens a pyplot figure (inline backend): the figure is
    shown under the comm message, as its ``post_execute`` shows it at rest; the cell's own
    figure is still shown in the cell, once, at its end.

    Fails on the old main: the callback's figure waited for the cell's flush and was shown in
    the cell."""
    pytest.importorskip("matplotlib", reason="the figure test needs matplotlib (test extra)")
    model_id, subshell = widget_and_subshell(kernel, DRAWER, "b")
    assert_one_figure_each_for_a_click_mid_cell(kernel, model_id, subshell)


def click_while_a_cell_draws(
    kernel: BlockingKernelClient, model_id: str, subshell: str
) -> tuple[list[Message], str, str]:
    """A cell draws a figure and lets callbacks through; a click of ``model_id`` is handled
    meanwhile. What both sent, the cell's msg_id and the click's, once both are idle."""
    seen: list[Message] = []
    cell = start_cell(
        kernel,
        "plt.figure()\nplt.plot([1, 2, 3])\n" + waiting_cell("handle_waiting_comms", 1),
        seen,
    )
    clicked = click(kernel, subshell, model_id)
    wait_idles(kernel, [cell, clicked], seen)
    return seen, cell, clicked


def assert_one_figure_each_for_a_click_mid_cell(
    kernel: BlockingKernelClient, model_id: str, subshell: str
) -> None:
    """:func:`click_while_a_cell_draws`: exactly one figure is shown under the click's comm
    message and one under the cell."""
    seen, cell, clicked = click_while_a_cell_draws(kernel, model_id, subshell)
    figures = [
        m["parent_header"].get("msg_id")
        for m in seen
        if m["msg_type"] == "display_data" and "image/png" in m["content"]["data"]
    ]
    assert sorted(figures) == sorted([clicked, cell]), (figures, clicked, cell)


FLUSHERS = {
    "plt.show": "def _draw(_):\n    plt.figure()\n    plt.plot([3, 1, 2])\n    plt.show()\n",
    "interact": (
        "def _plot(x):\n    plt.plot([x, 1, 2])\n"
        "def _draw(_):\n    _w.interactive(_plot, x=(0, 3))\n"
    ),
}


@pytest.mark.parametrize("flusher", list(FLUSHERS))
def test_a_callback_that_flushes_figures_mid_cell_leaves_the_cells_figure_to_the_cell(
    kernel: BlockingKernelClient, flusher: str
) -> None:
    """A callback handled mid-cell that shows figures itself (``plt.show()``, or
    ``interactive``, which flushes every figure): its figure goes under its comm message, and
    the cell's figure stays the cell's, shown once in the cell at its end (issue 51).

    Fails on main: the callback's flush showed the cell's pending figure under the comm message
    and closed it (``interactive`` even drew into it): the cell showed no figure."""
    pytest.importorskip("matplotlib", reason="the figure test needs matplotlib (test extra)")
    code = (
        "%matplotlib inline\nimport matplotlib.pyplot as plt, ipywidgets as _w\n"
        "b = _w.Button()\n" + FLUSHERS[flusher] + "b.on_click(_draw)\n"
        "log = []\nb.on_click(lambda _: log.append(1))\n"
    )
    model_id, subshell = widget_and_subshell(kernel, code, "b")
    assert_one_figure_each_for_a_click_mid_cell(kernel, model_id, subshell)


def test_an_ipympl_figure_a_callback_opens_mid_cell_is_shown_under_its_comm_message(
    kernel: BlockingKernelClient,
) -> None:
    """``%matplotlib widget`` (ipympl): a callback handled mid-cell that opens a figure has its
    canvas displayed under its comm message; the cell's figure is displayed in the cell, once,
    at its end (issue 51).

    Fails on main: ipympl shows a new figure at the next ``post_execute``, which is the cell's
    (held mid-cell), so the callback's figure was displayed in the cell."""
    pytest.importorskip("ipympl", reason="the ipympl test needs ipympl (test extra)")
    code = (
        "%matplotlib widget\nimport matplotlib.pyplot as plt, ipywidgets as _w\n"
        "b = _w.Button()\ndef _draw(_):\n    plt.figure()\n    plt.plot([3, 1, 2])\n"
        "b.on_click(_draw)\nlog = []\nb.on_click(lambda _: log.append(1))\n"
    )
    try:
        model_id, subshell = widget_and_subshell(kernel, code, "b")
        seen, cell, clicked = click_while_a_cell_draws(kernel, model_id, subshell)
    finally:
        run(kernel, "plt.close('all')\n%matplotlib inline")
    canvases = [
        m["parent_header"].get("msg_id")
        for m in seen
        if m["msg_type"] == "display_data"
        and "application/vnd.jupyter.widget-view+json" in m["content"]["data"]
    ]
    assert sorted(canvases) == sorted([clicked, cell]), (canvases, clicked, cell)
