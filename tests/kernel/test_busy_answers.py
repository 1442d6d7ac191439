"""A frontend reconnecting to a busy kernel is answered mid-cell (kernel/busy/answers.py).

Real kernels over CurveZMQ. Every "mid-cell" claim is made while a cell is provably running:
the cell prints a marker, then waits for a file the test creates only after its checks, so a
reply that arrives at all arrived mid-cell; nothing depends on the machine's speed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client import BlockingKernelClient

from harness.cells import busy_cell, evaluate, kernel_set, run
from harness.kernels import EXT_KERNEL, new_client, running_kernel
from harness.messages import (
    control_request,
    iopub_until_barrier,
    is_status,
    send,
    shell_reply,
    wait_iopub,
)
from harness.subshells import execute_on, send_on
from harness.widget_control import (
    CONTROL_TARGET,
    assert_closed_unanswered,
    fetch_ipywidgets_update_states,
    fetch_update_states,
    is_update_states,
    open_control_comm,
    request_states,
)
from ipykernel_ext.protocol import UNTRACKED_MESSAGE_TYPES

# Hang guard per test (default 120 s): kernel starts plus waits on busy cells (60 s each).
pytestmark = pytest.mark.timeout(180)


WIDGETS = """\
import ipywidgets as w
sliders = [w.IntSlider(value=i) for i in range(200)]
image = w.Image(value=bytes(range(256)) * 40, format="png")
box = w.VBox([*sliders, image])
"""


def kernel_info_barrier(kc: BlockingKernelClient, seen: list[dict[str, Any]]) -> None:
    """Mid-cell: a kernel_info round trip, its idle included; every IOPub message read lands in
    ``seen``. What was sent before it on this client has been answered or refused by then."""
    msg_id = kc.kernel_info()
    assert shell_reply(kc, msg_id)["content"]["status"] == "ok"
    wait_iopub(kc, is_status("idle", msg_id), what="the barrier's idle", seen=seen)


def control_comm_barrier(
    kc: BlockingKernelClient, comm_id: str, seen: list[dict[str, Any]]
) -> None:
    """Mid-cell, on control comm ``comm_id`` opened here: its request_states is answered at once
    even when ``kc`` has messages of its own queued behind the cell (its kernel_info then waits
    for them, as on stock). What ``kc`` sent before it has gone through the shell-channel
    thread by then; every IOPub message read lands in ``seen``."""
    request_states(kc, comm_id)
    wait_iopub(kc, is_update_states(comm_id), what="the barrier's update_states", seen=seen)


def about(comm_id: str) -> Callable[[dict[str, Any]], bool]:
    """A comm_msg or comm_close on ``comm_id``."""
    return lambda m: (
        m["msg_type"] in ("comm_msg", "comm_close") and m["content"].get("comm_id") == comm_id
    )


@pytest.fixture(scope="module")
def ext(ext_kernel: tuple[Any, BlockingKernelClient]) -> tuple[Any, BlockingKernelClient]:
    """The shared kernel with the widgets made."""
    run(ext_kernel[1], WIDGETS)
    return ext_kernel


@pytest.fixture
def frontend(ext: Any) -> Iterator[BlockingKernelClient]:
    """A second client: the reloaded page."""
    kc = new_client(ext[0])
    yield kc
    kc.stop_channels()


# --- the answers ---------------------------------------------------------------------------


def test_answers_mid_cell(ext: Any, frontend: Any, tmp_path: Path) -> None:
    """kernel_info (as when idle), comm_info, update_states equal to ipywidgets' own, and
    request_states on a control comm opened before the cell; the control comm never echoed."""
    idle_info = frontend.kernel_info(reply=True, timeout=30)["content"]
    theirs = fetch_ipywidgets_update_states(ext[1], via=frontend)  # ipywidgets' own handler
    # A cell of this client's own, to its end: its comm_open below then goes to the main shell.
    # ext[1]'s last idle alone is no barrier for another client: the main shell records that
    # idle just after publishing it, and a comm_open arriving in between is taken as mid-cell.
    run(frontend, "pass")
    seen: list[dict[str, Any]] = []
    comm_id = open_control_comm(frontend)
    request_states(frontend, comm_id)  # answered: the main thread has opened it (kernel idle)
    wait_iopub(frontend, is_update_states(comm_id), what="update_states (idle)", seen=seen)
    with busy_cell(ext[1], tmp_path) as cell:
        info = shell_reply(frontend, frontend.kernel_info())
        comm_info = shell_reply(
            frontend, send(frontend, "comm_info_request", {"target_name": "jupyter.widget"})
        )
        all_comms = shell_reply(frontend, send(frontend, "comm_info_request", {}))
        ours = fetch_update_states(frontend)
        assert ours["msg"]["parent_header"]["msg_type"] == "comm_msg"
        request_states(frontend, comm_id)
        msg = wait_iopub(frontend, is_update_states(comm_id), what="update_states", seen=seen)
        kernel_info_barrier(frontend, seen)
        # Still mid-cell: the cell has not been released yet.
        assert not cell.release_file.exists()
    send(frontend, "comm_close", {"comm_id": comm_id, "data": {}})
    assert info["msg_type"] == "kernel_info_reply"
    # The same reply as when idle, but for IPython's banner, which ends with a random tip.
    assert {**info["content"], "banner": ""} == {**idle_info, "banner": ""}
    assert comm_info["content"]["status"] == "ok"
    comms = comm_info["content"]["comms"]
    assert len(comms) >= 201  # 200 sliders, the image, the box, their layouts and styles
    assert {c["target_name"] for c in comms.values()} == {"jupyter.widget"}
    assert len(all_comms["content"]["comms"]) >= len(comms)
    assert all_comms["content"]["comms"][comm_id] == {"target_name": CONTROL_TARGET}
    assert ours["states"] == theirs["states"]
    assert ours["buffer_paths"] == theirs["buffer_paths"]
    assert ours["buffers"] == theirs["buffers"]
    assert len(ours["buffers"]) == 1  # the Image's value
    assert ours["msg"]["header"]["msg_type"] == "comm_msg"
    assert len(msg["content"]["data"]["states"]) >= 201
    assert [m for m in seen if m["msg_type"] == "comm_echo"] == []


def test_a_busy_kernel_never_looks_idle(ext: Any, frontend: Any, tmp_path: Path) -> None:
    """jupyter_server's tracker, fed every status the kernel publishes mid-cell, stays busy."""
    seen: list[dict[str, Any]] = []
    with busy_cell(ext[1], tmp_path) as cell:
        fetch_update_states(frontend)
        send(frontend, "comm_info_request", {})
        # JupyterLab 4.4+ asks for a subshell on control once kernel_info is answered.
        subshell = control_request(frontend, "create_subshell_request")
        assert subshell["content"]["status"] == "ok"
        # Its idle is followed by a busy for the running cell: wait for that busy.
        create_id = subshell["parent_header"]["msg_id"]
        wait_iopub(frontend, is_status("idle", create_id), what="create_subshell's idle", seen=seen)
        wait_iopub(frontend, is_status("busy", cell.msg_id), what="busy after it", seen=seen)
        kernel_info_barrier(frontend, seen)
        subshell_id = subshell["content"]["subshell_id"]
        control_request(frontend, "delete_subshell_request", {"subshell_id": subshell_id})
        kernel_info_barrier(frontend, seen)
    statuses = [m for m in seen if m["msg_type"] == "status"]
    assert statuses, "no status seen"
    comm_statuses = [
        m
        for m in statuses
        if m["parent_header"].get("msg_type") in ("comm_open", "comm_msg", "comm_close")
    ]
    assert comm_statuses == [], "comm messages answered mid-cell publish no status"
    # What the server tracks: after a tracked idle, the next tracked status is busy for the
    # cell (statuses it does not track, from other kernel threads, may come between).
    tracked = [
        m for m in statuses if m["parent_header"].get("msg_type") not in UNTRACKED_MESSAGE_TYPES
    ]
    for i, msg in enumerate(tracked):
        if msg["content"]["execution_state"] == "idle":
            parent_type = msg["parent_header"].get("msg_type")
            following = tracked[i + 1] if i + 1 < len(tracked) else None
            assert following is not None, f"a tracked idle ({parent_type}) ends the cell's view"
            assert following["content"]["execution_state"] == "busy"
            assert following["parent_header"]["msg_id"] == cell.msg_id
    assert tracked and tracked[-1]["content"]["execution_state"] == "busy"


@pytest.fixture
def cells_client(ext: Any) -> Iterator[BlockingKernelClient]:
    """A client of its own for the cell (its shell replies are all this test's)."""
    kc = new_client(ext[0])
    yield kc
    kc.stop_channels()


def test_the_cells_own_client_gets_its_replies_in_stocks_order(
    cells_client: BlockingKernelClient, frontend: Any, tmp_path: Path
) -> None:
    """What ipykernel's test_non_execute_stop_on_error does: execute, then kernel_info and
    comm_info from the same client. Its replies come in the order it asked, as on stock;
    another client (a page reloaded mid-cell) is answered while the cell runs."""
    kc = cells_client
    seen: list[dict[str, Any]] = []
    with busy_cell(kc, tmp_path) as cell:
        info_id = kc.kernel_info()
        comm_info_id = send(kc, "comm_info_request", {})
        # Answered, and the cell is still running: it waits for a file not made yet.
        assert shell_reply(frontend, frontend.kernel_info())["content"]["status"] == "ok"
        assert not cell.release_file.exists()
    replies = [kc.get_shell_msg(timeout=60) for _ in range(3)]
    assert [r["parent_header"]["msg_id"] for r in replies] == [cell.msg_id, info_id, comm_info_id]
    assert [r["msg_type"] for r in replies] == [
        "execute_reply",
        "kernel_info_reply",
        "comm_info_reply",
    ]
    # Answered by the main shell after the cell: their busy/idle follow the cell's idle
    # (busy_cell read up to it) and no busy for the cell comes after them.
    wait_iopub(kc, is_status("idle", comm_info_id), what="comm_info's idle", seen=seen)
    statuses = [
        (m["parent_header"]["msg_id"], m["content"]["execution_state"])
        for m in seen
        if m["msg_type"] == "status"
    ]
    assert statuses == [
        (info_id, "busy"),
        (info_id, "idle"),
        (comm_info_id, "busy"),
        (comm_info_id, "idle"),
    ]


def test_the_cells_own_client_gets_stocks_statuses_only_where_no_one_tracks_them(
    cells_client: BlockingKernelClient, frontend: Any, tmp_path: Path
) -> None:
    """PROTOCOL.md section 5, Status: stock's statuses for the cell's own client's untracked
    requests and subshell cells; busy for the cell after its other requests and any other
    client's. Verdict by the order of the statuses (one kernel thread each)."""
    kc = cells_client
    seen: list[dict[str, Any]] = []
    # A comm message on a subshell runs beside the cell only with stock's routing (by default
    # it waits for the cell on the main shell: PROTOCOL.md section 7, test_subshell_comms.py).
    with kernel_set(kc, "comms_on_subshells", True, after=False), busy_cell(kc, tmp_path) as cell:
        # Untracked, on control: no busy after its idle (the next control request shows it).
        control_request(kc, "kernel_info_request")
        # Tracked, on control: busy for the cell after its idle.
        subshell = control_request(kc, "create_subshell_request")
        assert subshell["content"]["status"] == "ok"
        subshell_id = subshell["content"]["subshell_id"]
        wait_iopub(kc, is_status("busy", cell.msg_id), what="busy after create_subshell", seen=seen)
        # Its own cell on the subshell: no busy after its idle (the subshell's next request,
        # another client's, shows it); that other client's idle is followed by busy.
        own_id = execute_on(kc, subshell_id, "1")
        wait_iopub(kc, is_status("idle", own_id), what="the subshell cell's idle", seen=seen)
        # Its comm message on the subshell (JupyterLab sends them there): busy again.
        comm_id = send_on(kc, subshell_id, "comm_msg", {"comm_id": uuid.uuid4().hex, "data": {}})
        wait_iopub(kc, is_status("idle", comm_id), what="the comm message's idle", seen=seen)
        other_id = execute_on(frontend, subshell_id, "2")
        wait_iopub(kc, is_status("idle", other_id), what="the other client's idle", seen=seen)
        wait_iopub(kc, is_status("busy", cell.msg_id), what="busy after it", seen=seen)
        # Tracked, on control: busy again; then up to a barrier's idle on control.
        control_request(kc, "delete_subshell_request", {"subshell_id": subshell_id})
        seen += iopub_until_barrier(kc)
        assert not cell.release_file.exists()
    names = {
        own_id: "own subshell cell",
        comm_id: "own subshell comm_msg",
        other_id: "other's subshell cell",
        cell.msg_id: "CELL",
    }
    statuses = [
        (
            names.get(m["parent_header"].get("msg_id"), m["parent_header"].get("msg_type")),
            m["content"]["execution_state"],
        )
        for m in seen
        if m["msg_type"] == "status"
    ]
    assert statuses == [
        ("kernel_info_request", "busy"),
        ("kernel_info_request", "idle"),
        ("create_subshell_request", "busy"),
        ("create_subshell_request", "idle"),
        ("CELL", "busy"),
        ("own subshell cell", "busy"),
        ("own subshell cell", "idle"),
        ("own subshell comm_msg", "busy"),
        ("own subshell comm_msg", "idle"),
        ("CELL", "busy"),
        ("other's subshell cell", "busy"),
        ("other's subshell cell", "idle"),
        ("CELL", "busy"),
        ("delete_subshell_request", "busy"),
        ("delete_subshell_request", "idle"),
        ("CELL", "busy"),
    ]


def test_new_values_reach_the_frontend_after_the_cell(
    ext: Any, frontend: Any, tmp_path: Path
) -> None:
    """A value changed between the snapshot and the frontend taking it is sent again.

    Deterministic: a widget whose serializer blocks inside the snapshot (on an event the cell
    sets) lets the cell change a slider read earlier in the same snapshot.
    """
    kc = ext[1]
    run(
        kc,
        """\
import threading
from traitlets import Unicode
entered, go_on = threading.Event(), threading.Event()
def _blocking_to_json(value, widget):
    if widget.armed:
        entered.set()
        go_on.wait(30)
    return value
class Gate(w.DOMWidget):
    value = Unicode("gate").tag(sync=True, to_json=_blocking_to_json)
    armed = False
early = w.IntSlider(value=1)   # created before the gate: read first
gate = Gate()
late = w.IntSlider(value=1)    # read after the gate
gate.armed = True
""",
    )
    early_id = evaluate(kc, "early.model_id")
    late_id = evaluate(kc, "late.model_id")
    seen: list[dict[str, Any]] = []
    with busy_cell(
        kc,
        tmp_path,
        then="entered.wait(30)\nearly.value = 42\nlate.value = 43\ngo_on.set()\n",
    ):
        reply = fetch_update_states(frontend)
        kernel_info_barrier(frontend, seen)
    # The snapshot caught the race: 1 for the early slider, 43 for the late one.
    assert reply["states"][early_id]["state"]["value"] == 1
    assert reply["states"][late_id]["state"]["value"] == 43
    # The cell's own update for 42 went out before update_states (the frontend would drop it:
    # it did not know the model yet). After the cell, the kernel sends the new value again.
    update = wait_iopub(
        frontend,
        lambda m: (
            m["msg_type"] == "comm_msg"
            and m["content"].get("comm_id") == early_id
            and m["content"]["data"].get("method") == "update"
            and m["content"]["data"]["state"].get("value") == 42
        ),
        what="the early slider's value sent again after the cell",
        seen=seen,
    )
    assert update["content"]["data"]["state"] == {"value": 42}
    run(kc, "gate.armed = False")


# --- bad input -----------------------------------------------------------------------------


def test_other_major_version_gets_stock_refusal_after_the_cell(
    ext: Any, frontend: Any, tmp_path: Path
) -> None:
    seen: list[dict[str, Any]] = []
    with busy_cell(ext[1], tmp_path):
        barrier = open_control_comm(frontend)
        comm_id = open_control_comm(frontend, version="2.0.0")
        request_states(frontend, comm_id)
        control_comm_barrier(frontend, barrier, seen)
        assert [m for m in seen if about(comm_id)(m)] == []
        send(frontend, "comm_close", {"comm_id": barrier, "data": {}})
    # After the cell ipywidgets refuses the version, and the comm is closed, as on stock.
    assert_closed_unanswered(frontend, comm_id, seen, "stock's comm_close (refused version)")


# --- the switch, and kernels without ipywidgets --------------------------------------------


def test_switch_off_leaves_everything_behind_the_cell(tmp_path: Path) -> None:
    with running_kernel(EXT_KERNEL, ["--no-answer-while-busy"]) as (_km, kc):
        run(kc, WIDGETS)
        with busy_cell(kc, tmp_path) as cell:
            info_id = kc.kernel_info()
            comm_id = open_control_comm(kc)
            request_states(kc, comm_id)
            # kernel_info is a barrier for nothing here: it waits for the cell.
        first = kc.get_shell_msg(timeout=60)
        assert first["parent_header"]["msg_id"] == cell.msg_id, "the cell's reply comes first"
        assert shell_reply(kc, info_id)["msg_type"] == "kernel_info_reply"
        msg = wait_iopub(kc, is_update_states(comm_id), what="update_states after the cell")
        # ipywidgets' own handler answered it, with the request as parent.
        assert msg["parent_header"]["msg_type"] == "comm_msg"


def test_without_ipywidgets_the_control_target_is_left_to_stock(tmp_path: Path) -> None:
    with running_kernel(EXT_KERNEL) as (km, kc):
        page = new_client(km)
        seen: list[dict[str, Any]] = []
        try:
            with busy_cell(kc, tmp_path) as cell:
                kernel_info_barrier(page, seen)  # kernel_info is still answered mid-cell
                comm_id = open_control_comm(page)
                request_states(page, comm_id)
            # After the cell, stock's answer: no such target, the comm is closed.
            assert_closed_unanswered(page, comm_id, seen, "stock's comm_close (no such target)")
        finally:
            page.stop_channels()
        cell_end = next(i for i, m in enumerate(seen) if is_status("idle", cell.msg_id)(m))
        assert [m for m in seen[:cell_end] if about(comm_id)(m)] == []
