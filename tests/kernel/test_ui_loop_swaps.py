"""jupyter-ui-poll's swaps of the main shell's lock and ``execute_request`` handler never cost a
request its reply (PROTOCOL.md section 7, issue 51).

``ui_events()`` assigns ``contextlib.nullcontext()`` to ``kernel._main_asyncio_lock`` and
replaces ``kernel.shell_handlers["execute_request"]`` until the next cell ends; ipykernel 7's
``shell_main`` fails on the swapped lock (``'nullcontext' object has no attribute 'locked'``)
and drops the request without a reply. Each test here is one way users reach it, with real
jupyter-ui-poll; each fails on main (checked with ``PYTHONPATH=/work/main``: no reply within
the hang guard). Real kernels, CurveZMQ required; the waits are barriers (a marker the cell
prints, the idle of a request, the kernel's count of main-shell tasks).
"""

from __future__ import annotations

from typing import Any

import pytest
from jupyter_client import BlockingKernelClient

from harness.cells import START_MARKER, start_cell
from harness.messages import get_reply, is_status, printed, wait_iopub
from harness.subshells import click, create_subshell, execute_on, wait_idles, widget_and_subshell

pytest.importorskip("jupyter_ui_poll", reason="needs jupyter-ui-poll (test extra)")
pytest.importorskip("ipywidgets", reason="the widget tests need ipywidgets (the test extra)")

Message = dict[str, Any]

#: How long a test waits for a reply that main never sends: a hang guard, not a verdict.
REPLY_GUARD = 20


def assert_answered_in_its_own_cell(
    kc: BlockingKernelClient, code: str, text: str, seen: list[Message] | None = None
) -> None:
    """``code`` (which prints ``text``) gets an ``ok`` reply, its output and its ``idle`` under
    its own msg_id; ``seen`` collects the IOPub messages read."""
    seen = [] if seen is None else seen
    msg_id = kc.execute(code)
    reply = get_reply(kc, msg_id, timeout=REPLY_GUARD)
    assert reply["content"]["status"] == "ok", reply["content"]
    wait_iopub(kc, is_status("idle", msg_id), what=f"the idle of {msg_id}", seen=seen)
    assert text in printed(seen, msg_id), printed(seen, msg_id)


def test_a_main_shell_cell_sent_while_a_subshell_console_polls_runs_at_once(
    kernel: BlockingKernelClient,
) -> None:
    """The console's ``ui_events()`` swaps the kernel-wide lock and handler: the main shell's
    cell still runs, at once, on the main shell (it releases the console's loop), its output
    and idle its own; the console's cell ends too. On main the cell gets no reply."""
    console = create_subshell(kernel)
    seen: list[Message] = []
    polling = execute_on(
        kernel,
        console,
        "import time as _time\nfrom jupyter_ui_poll import ui_events\nrelease = False\n"
        f"_deadline = _time.monotonic() + {REPLY_GUARD + 10}\n"
        f"print({START_MARKER!r}, flush=True)\n"
        "with ui_events() as _poll:\n"
        "    while not release and _time.monotonic() < _deadline:\n"
        "        _poll(1)\n        _time.sleep(0.01)\n"
        "print('CONSOLE RELEASED', release)\n",
    )
    wait_iopub(
        kernel,
        lambda m: START_MARKER in printed([m], polling),
        what="the console's loop running",
        seen=seen,
    )
    assert_answered_in_its_own_cell(
        kernel,
        "import threading\nrelease = True\nprint('MAIN', threading.current_thread().name)",
        "MAIN MainThread",
        seen,
    )
    wait_idles(kernel, [polling], seen)
    assert "CONSOLE RELEASED True" in printed(seen, polling), printed(seen, polling)


def test_the_cell_queued_behind_an_async_ui_events_cell_runs_after_it(
    kernel: BlockingKernelClient,
) -> None:
    """A cell sent while an ``async with ui_events()`` cell runs (as "Run all" sends it) waits
    for that cell and then runs, output and idle its own. On main it is dropped: no reply."""
    seen: list[Message] = []
    first = start_cell(
        kernel,
        "import asyncio, time as _time\nfrom jupyter_ui_poll import ui_events\n"
        f"_deadline = _time.monotonic() + {REPLY_GUARD}\n"
        f"print({START_MARKER!r}, flush=True)\n"
        "_kernel = get_ipython().kernel\n"
        # Until the main shell has taken the next cell (its task waits for the lock).
        "async with ui_events() as _poll:\n"
        "    while _kernel._main_shell_tasks < 2 and _time.monotonic() < _deadline:\n"
        "        await _poll(1)\n        await asyncio.sleep(0.01)\n"
        "print('FIRST DONE')\n",
        seen,
    )
    nxt = kernel.execute("print('NEXT RAN')")
    assert get_reply(kernel, first)["content"]["status"] == "ok"
    reply = get_reply(kernel, nxt, timeout=REPLY_GUARD)
    assert reply["content"]["status"] == "ok", reply["content"]
    wait_idles(kernel, [first, nxt], seen)
    assert "FIRST DONE" in printed(seen, first), printed(seen, first)
    assert "NEXT RAN" in printed(seen, nxt), printed(seen, nxt)


BUTTON_POLLING_AT_REST = """
import ipywidgets as _w
from jupyter_ui_poll import ui_events
polled = []
b = _w.Button()
def _clicked(_):
    with ui_events() as poll:
        poll(1)
    polled.append(1)
b.on_click(_clicked)
"""


def test_every_cell_after_a_callback_at_rest_used_ui_events_is_answered(
    kernel: BlockingKernelClient,
) -> None:
    """A callback run at rest uses ``ui_events()``: no cell ends after it, so its swaps stay.
    Every later cell still runs and is answered in its own cell. On main the next cell and
    every one after it get no reply (the notebook stuck at ``[*]``)."""
    model_id, subshell = widget_and_subshell(kernel, BUTTON_POLLING_AT_REST, "b")
    wait_idles(kernel, [click(kernel, subshell, model_id)], [])
    for n in range(3):
        assert_answered_in_its_own_cell(kernel, f"print('LATER', {n}, len(polled))", f"LATER {n} 1")
