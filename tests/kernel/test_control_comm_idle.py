"""ipywidgets' control comm on an idle kernel is answered with our snapshot, in stock's order.

PROTOCOL.md section 5. Real kernels over CurveZMQ. Which code answered is shown by a
behaviour, not by time: a widget whose serializer counts its calls is read once per
``request_states`` by our snapshot and twice by ipywidgets' handler (which builds
``get_manager_state()`` and throws it away before reading every state again). Order is
shown with a cell that provably runs while the request waits (it blocks on a file the test
creates after sending the request), then creates widgets.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from jupyter_client import BlockingKernelClient

from harness.cells import START_MARKER, evaluate, run, start_cell
from harness.kernels import EXT_KERNEL, STOCK_KERNEL, running_kernel
from harness.messages import is_status, send, wait_iopub
from harness.widget_control import (
    CONTROL_TARGET,
    assert_closed_unanswered,
    fetch_ipywidgets_update_states,
    fetch_update_states,
    is_update_states,
    open_control_comm,
    request_states,
    set_answer_while_busy,
)

# Hang guard per test (default 120 s): kernel starts plus waits of up to 60 s each.
pytestmark = pytest.mark.timeout(180)

# Buffers at the top level, in a list and in a dict inside a list; a counting serializer.
WIDGETS = """\
import ipywidgets as w
from traitlets import Bytes, List, Unicode
reads = []
def _counting(value, widget):
    reads.append(value)
    return value
class Counted(w.DOMWidget):
    label = Unicode("counted").tag(sync=True, to_json=_counting)
class Blobs(w.DOMWidget):
    data = Bytes(b"").tag(sync=True)
    parts = List().tag(sync=True)
sliders = [w.IntSlider(value=i, description=f"s{i}") for i in range(300)]
image = w.Image(value=bytes(range(256)) * 40, format="png")
blobs = Blobs(data=b"raw", parts=[b"\\x00\\x01", {"x": memoryview(b"abc")}, 3])
counted = Counted()
box = w.VBox([*sliders, image, blobs, counted])
"""


def reads(kc: BlockingKernelClient) -> int:
    """How many times the counting serializer has run."""
    return evaluate(kc, "len(reads)")


def answer_on_main(kc: BlockingKernelClient, comm_id: str, data: Any) -> list[dict[str, Any]]:
    """Send a comm_msg on ``comm_id``; every IOPub message up to its own ``idle`` (idle kernel:
    the main shell handles it, with stock's busy/idle)."""
    msg_id = send(kc, "comm_msg", {"comm_id": comm_id, "data": data})
    seen: list[dict[str, Any]] = []
    wait_iopub(kc, is_status("idle", msg_id), what="the comm_msg's idle", seen=seen)
    return seen


def normalized(got: dict[str, Any]) -> tuple[str, list[Any], list[bytes]]:
    """States and buffer paths with model ids replaced by their position (ids are random)."""
    ids = list(got["states"])
    text = json.dumps([got["states"], got["buffer_paths"]])
    for index, model_id in enumerate(ids):
        text = text.replace(model_id, f"model-{index}")
    return text, ids, got["buffers"]


@pytest.fixture(scope="module")
def ext(ext_kernel: tuple[Any, BlockingKernelClient]) -> BlockingKernelClient:
    """The shared kernel's client, with the widgets made."""
    run(ext_kernel[1], WIDGETS)
    return ext_kernel[1]


# --- the reply -----------------------------------------------------------------------------


def test_idle_reply_is_ipywidgets_own_from_the_fast_path(ext: BlockingKernelClient) -> None:
    before = reads(ext)
    ours = fetch_update_states(ext)
    after_ours = reads(ext)
    theirs = fetch_ipywidgets_update_states(ext)
    after_theirs = reads(ext)
    assert ours["states"] == theirs["states"]
    assert list(ours["states"]) == list(theirs["states"])  # registry order
    assert ours["buffer_paths"] == theirs["buffer_paths"]
    assert ours["buffers"] == theirs["buffers"]
    assert len(ours["buffers"]) == 4  # the Image, Blobs.data, Blobs.parts[0], parts[1].x
    assert len(ours["states"]) >= 304
    for got in (ours, theirs):
        assert got["msg"]["parent_header"]["msg_type"] == "comm_msg"
        assert list(got["msg"]["content"]) == ["data", "comm_id"]
        assert list(got["msg"]["content"]["data"]) == ["method", "states", "buffer_paths"]
    assert ours["msg"]["metadata"] == theirs["msg"]["metadata"]
    # Which code answered: ours reads each state once, ipywidgets' handler twice.
    assert after_ours - before == 1
    assert after_theirs - after_ours == 2


def test_idle_reply_equals_stock_ipykernel(ext: BlockingKernelClient) -> None:
    """The same widgets on stock ipykernel: the same reply, model ids aside."""
    ours = normalized(fetch_update_states(ext))
    with running_kernel(STOCK_KERNEL) as (_km, kc):
        run(kc, WIDGETS)
        stock = normalized(fetch_update_states(kc))
    # Every test here closes the widgets it makes (and their layouts and styles).
    assert len(ours[1]) == len(stock[1])
    assert ours[0] == stock[0]
    assert ours[2] == stock[2]


# --- order ---------------------------------------------------------------------------------


def test_widgets_made_by_the_clients_queued_cell_are_all_in_the_reply(
    ext: BlockingKernelClient, tmp_path: Path
) -> None:
    """The client's comm_open and request_states wait behind its running cell, which then
    makes 200 widgets: all are in the reply, after the cell's idle, from the fast path."""
    before = reads(ext)
    release = tmp_path / f"release-{uuid.uuid4().hex}"
    seen: list[dict[str, Any]] = []
    cell_id = start_cell(
        ext,
        f"import os as _os, time as _time\nprint({START_MARKER!r}, flush=True)\n"
        f"while not _os.path.exists({str(release)!r}):\n    _time.sleep(0.01)\n"
        "late = [w.IntSlider(value=-i) for i in range(200)]\n"
        "late_ids = [s.model_id for s in late]\n",
        seen,
    )
    comm_id = open_control_comm(ext)
    request_id = request_states(ext, comm_id)
    release.touch()
    msg = wait_iopub(ext, is_update_states(comm_id), what="update_states", seen=seen)
    send(ext, "comm_close", {"comm_id": comm_id, "data": {}})
    assert msg["parent_header"]["msg_id"] == request_id
    cell_idle = [i for i, m in enumerate(seen) if is_status("idle", cell_id)(m)]
    assert cell_idle, "update_states came before the cell's idle"
    late_ids = evaluate(ext, "late_ids")
    states = msg["content"]["data"]["states"]
    assert [m for m in late_ids if m not in states] == []
    assert reads(ext) - before == 1, "answered by the fast path"
    run(ext, "for _s in late: _s.layout.close(); _s.style.close(); _s.close()\ndel late")


# --- stock's behaviour kept ------------------------------------------------------------------


def test_each_control_comm_is_answered_on_itself(ext: BlockingKernelClient) -> None:
    """Deliberate difference: ipywidgets answers on the last control comm opened
    (``Widget._control_comm``); ours answers the comm that asked."""
    first, second = open_control_comm(ext), open_control_comm(ext)
    seen = answer_on_main(ext, first, {"method": "request_states"})
    replies = [m for m in seen if m["msg_type"] == "comm_msg"]
    assert [m["content"]["comm_id"] for m in replies] == [first]
    for comm_id in (first, second):
        send(ext, "comm_close", {"comm_id": comm_id, "data": {}})


@pytest.mark.parametrize(
    "data", [{"method": "explode"}, {}, "not an object"], ids=["unknown", "none", "not-a-dict"]
)
def test_bad_request_gets_ipywidgets_answer(ext: BlockingKernelClient, data: Any) -> None:
    """ipywidgets raises (the comm manager logs it) and sends nothing; the comm still works."""
    comm_id = open_control_comm(ext)
    seen = answer_on_main(ext, comm_id, data)
    assert [m for m in seen if m["msg_type"] in ("comm_msg", "comm_close")] == []
    seen = answer_on_main(ext, comm_id, {"method": "request_states"})
    assert sum(is_update_states(comm_id)(m) for m in seen) == 1
    send(ext, "comm_close", {"comm_id": comm_id, "data": {}})


def assert_refused_as_on_stock(kc: BlockingKernelClient, comm_id: str, why: str) -> None:
    """Stock closes a control comm it will not serve, and a ``request_states`` sent on it
    anyway gets no ``update_states``."""
    seen: list[dict[str, Any]] = []
    assert_closed_unanswered(kc, comm_id, seen, f"stock's comm_close ({why})")
    seen = answer_on_main(kc, comm_id, {"method": "request_states"})
    assert not any(is_update_states(comm_id)(m) for m in seen)


def test_other_major_version_is_refused_as_on_stock(ext: BlockingKernelClient) -> None:
    assert_refused_as_on_stock(ext, open_control_comm(ext, version="2.0.0"), "refused version")


def test_a_widget_that_cannot_be_read_is_left_out(ext: BlockingKernelClient) -> None:
    """Deliberate difference: ipywidgets' handler raises and sends nothing at all; ours
    answers with every other widget (and logs the one left out)."""
    run(
        ext,
        "def _boom(value, widget):\n"
        "    if widget.armed:\n        raise ValueError('boom')\n    return value\n"
        "class Broken(w.DOMWidget):\n"
        "    value = Unicode('x').tag(sync=True, to_json=_boom)\n    armed = False\n"
        "broken = Broken()\nbroken.armed = True\n",
    )
    broken_id = evaluate(ext, "broken.model_id")
    try:
        ours = fetch_update_states(ext)
        assert broken_id not in ours["states"]
        assert len(ours["states"]) >= 304
        set_answer_while_busy(ext, False)
        comm_id = open_control_comm(ext)
        seen = answer_on_main(ext, comm_id, {"method": "request_states"})
        assert [m for m in seen if m["msg_type"] == "comm_msg"] == []
        send(ext, "comm_close", {"comm_id": comm_id, "data": {}})
    finally:
        set_answer_while_busy(ext, True)
        run(ext, "broken.armed = False\nbroken.layout.close()\nbroken.close()")


# --- the switch, and kernels without ipywidgets --------------------------------------------


def test_switch_off_leaves_the_control_comm_to_ipywidgets() -> None:
    with running_kernel(EXT_KERNEL, ["--no-answer-while-busy"]) as (_km, kc):
        run(kc, WIDGETS)
        before = reads(kc)
        got = fetch_update_states(kc)
        assert reads(kc) - before == 2, "ipywidgets' handler reads every state twice"
        assert len(got["buffers"]) == 4


def test_without_ipywidgets_the_idle_control_comm_is_stock() -> None:
    with running_kernel(EXT_KERNEL) as (_km, kc):
        assert_refused_as_on_stock(kc, open_control_comm(kc), "no such target")
        info = kc.kernel_info(reply=True, timeout=30)["content"]
        assert info["status"] == "ok"
        assert CONTROL_TARGET not in evaluate(kc, "list(get_ipython().kernel.comm_manager.targets)")
