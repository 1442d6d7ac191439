"""The outputs fold (ipykernel_ext.server.outputs): IOPub messages in, nbformat outputs out.

Each case feeds the messages a kernel would publish for one or more cells to a
:class:`KernelOutputs` and compares the folded outputs with what JupyterLab 4.6 keeps for the
same messages; every result is also validated as nbformat 4 outputs.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from harness import cell_messages
from harness.cell_messages import D, S
from ipykernel_ext.server.outputs import CUT_NOTE_KEY, KernelOutputs, StreamText, common_prefix

nbformat = pytest.importorskip("nbformat")

_ids = itertools.count()


def request(kernel: KernelOutputs, cell_id: str | None = "cell-1", session: str = "tab-1") -> str:
    msg_id = f"req-{next(_ids)}"
    metadata = {"cellId": cell_id} if cell_id else {}
    kernel.on_execute_request(
        {
            "header": {"msg_id": msg_id, "session": session, "msg_type": "execute_request"},
            "metadata": metadata,
            "content": {"code": "..."},
        }
    )
    return msg_id


def iopub(kernel: KernelOutputs, parent: str, msg_type: str, **content: Any) -> set[str]:
    return kernel.on_iopub(cell_messages.message(msg_type, content, parent))


def stream(kernel: KernelOutputs, parent: str, text: str, name: str = "stdout") -> set[str]:
    return kernel.on_iopub(cell_messages.stream(text, name, parent))


def display(
    kernel: KernelOutputs,
    parent: str,
    plain: str,
    display_id: str | None = None,
    update: bool = False,
) -> set[str]:
    return kernel.on_iopub(cell_messages.display(plain, display_id, parent, update))


def outputs_of(kernel: KernelOutputs, msg_id: str) -> list[dict[str, Any]]:
    outputs = kernel.cells[msg_id].outputs.to_nbformat()
    for output in outputs:
        nbformat.validate(nbformat.from_dict(output), ref="output", version=4, version_minor=5)
    return outputs


@pytest.fixture
def kernel() -> KernelOutputs:
    return KernelOutputs()


# --- stream text ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pieces", "expected"),
    [
        (["abc"], "abc"),
        (["a\n", "b\n"], "a\nb\n"),
        (["10%\r", "20%\r", "100%\n"], "100%\n"),
        (["abcdef\r", "XY"], "XYcdef"),  # \r erases nothing: later text overwrites
        (["abcdef\rXY\n"], "XYcdef\n"),  # \n goes to the end of the text, not the cursor
        (["abc\b", "d"], "abd"),
        (["ab\n\b\bc"], "ab\nc"),  # \b never removes a line feed
        (["abcdef\r", "\b"], "abcdef"),  # nothing before the cursor at a line start
        (["abcdef\rab\b"], "aacdef"[:1] + "def"),  # mid-line \b removes two, as JupyterLab
        (["x\r\n"], "x\n"),  # Windows line ends
        (["line 1\nprog 1", "\rprog 2", "\rprog 3\n"], "line 1\nprog 3\n"),
        (["é€😀\rX"], "X€😀"),
    ],
)
def test_stream_text_applies_cr_and_bs_as_jupyterlab_stores_them(
    pieces: list[str], expected: str
) -> None:
    text = StreamText()
    for piece in pieces:
        text.feed(piece)
    assert text.text == expected
    assert text.nbytes == len(expected.encode())


def test_stream_text_of_many_lines_stays_linear() -> None:
    text = StreamText()
    for i in range(200_000):
        text.feed(f"line {i}\n")
    assert text.text.count("\n") == 200_000


@pytest.mark.parametrize(
    ("a", "b", "n"),
    [
        ("", "x", 0),
        ("abc", "abd", 2),
        ("ab", "abc", 2),
        ("same", "same", 4),
        ("x" * 999 + "a", "x" * 1000, 999),
    ],
)
def test_common_prefix(a: str, b: str, n: int) -> None:
    assert common_prefix(a, b) == n


# --- one cell -------------------------------------------------------------------------------


#: One cell's IOPub, as steps: ("s", text[, name]) a stream, ("d", plain[, display_id]) a
#: display, ("u", plain, display_id) an update_display_data, ("clear", wait) a clear_output.
ONE_CELL: dict[str, tuple[list[tuple[Any, ...]], list[dict[str, Any]]]] = {
    "consecutive streams of one name merge": (
        [*[("s", f"line {i}\n") for i in range(3)], ("s", "oops\n", "stderr"), ("s", "line 3\n")],
        [S("line 0\nline 1\nline 2\n"), S("oops\n", "stderr"), S("line 3\n")],
    ),
    "a display between streams starts a new stream": (
        [("s", "a\r"), ("d", "shown"), ("s", "b")],
        [S("a"), D("shown"), S("b")],
    ),
    "a progress bar with cr keeps one line": (
        [("s", f"\r{pct:3d}% [{'#' * (pct // 10):10s}]") for pct in range(0, 101, 10)]
        + [("s", "\ndone\n")],
        [S("100% [##########]\ndone\n")],
    ),
    "transient is not kept": ([("d", "x", "d1")], [D("x")]),
    "clear_output clears at once": ([("s", "old\n"), ("d", "old display"), ("clear", False)], []),
    "after clear_output a new output": (
        [("s", "old\n"), ("d", "old display"), ("clear", False), ("s", "new\n")],
        [S("new\n")],
    ),
    "clear_output wait, then a stream of the same name starts fresh": (
        [("s", "frame 0\n"), ("clear", True), ("s", "frame 1\n")],
        [S("frame 1\n")],
    ),
    "an update does not trigger a pending clear": (
        [("d", "v0", "p"), ("clear", True), ("u", "v1", "p")],
        [D("v1")],
    ),
    "an update, then the pending clear on the next output": (
        [("d", "v0", "p"), ("clear", True), ("u", "v1", "p"), ("s", "after")],
        [S("after")],
    ),
    "display_data with a known id updates the old ones and is added": (
        [("d", "v0", "p"), ("d", "v1", "p")],
        [D("v1"), D("v1")],
    ),
}


@pytest.mark.parametrize("case", list(ONE_CELL))
def test_one_cells_outputs_are_what_jupyterlab_keeps(kernel: KernelOutputs, case: str) -> None:
    steps, expected = ONE_CELL[case]
    cell = request(kernel)
    for kind, *args in steps:
        if kind == "s":
            stream(kernel, cell, *args)
        elif kind == "d":
            display(kernel, cell, *args)
        elif kind == "u":
            display(kernel, cell, args[0], args[1], update=True)
        else:
            iopub(kernel, cell, "clear_output", wait=args[0])
    assert outputs_of(kernel, cell) == expected


def test_execute_result_error_and_execution_count(kernel: KernelOutputs) -> None:
    cell = request(kernel)
    iopub(kernel, cell, "execute_input", code="1/0", execution_count=7)
    iopub(kernel, cell, "execute_result", data={"text/plain": "2"}, metadata={}, execution_count=7)
    iopub(
        kernel,
        cell,
        "error",
        ename="ZeroDivisionError",
        evalue="division by zero",
        traceback=["tb 1", "tb 2"],
    )
    assert outputs_of(kernel, cell) == [
        {
            "output_type": "execute_result",
            "data": {"text/plain": "2"},
            "metadata": {},
            "execution_count": 7,
        },
        {
            "output_type": "error",
            "ename": "ZeroDivisionError",
            "evalue": "division by zero",
            "traceback": ["tb 1", "tb 2"],
        },
    ]
    assert kernel.cells[cell].execution_count == 7


def test_clear_output_wait_clears_on_the_next_output(kernel: KernelOutputs) -> None:
    cell = request(kernel)
    for frame in range(5):
        iopub(kernel, cell, "clear_output", wait=True)
        assert outputs_of(kernel, cell) == ([] if frame == 0 else [D(f"frame {frame - 1}")])
        display(kernel, cell, f"frame {frame}")
    assert outputs_of(kernel, cell) == [D("frame 4")]


# --- display ids ----------------------------------------------------------------------------


def test_update_display_data_replaces_every_display_with_the_id(kernel: KernelOutputs) -> None:
    cell = request(kernel)
    display(kernel, cell, "v0", display_id="p")
    stream(kernel, cell, "between\n")
    display(kernel, cell, "v0", display_id="p")
    display(kernel, cell, "other", display_id="q")
    for i in range(1, 4):
        assert display(kernel, cell, f"v{i}", display_id="p", update=True) == {cell}
    assert outputs_of(kernel, cell) == [D("v3"), S("between\n"), D("v3"), D("other")]


def test_update_display_data_across_cells_and_from_any_parent(kernel: KernelOutputs) -> None:
    first = request(kernel, "cell-1")
    display(kernel, first, "v0", display_id="p")
    iopub(kernel, first, "status", execution_state="idle")
    second = request(kernel, "cell-2")
    assert display(kernel, second, "v1", display_id="p", update=True) == {first}
    assert outputs_of(kernel, first) == [D("v1")]
    assert outputs_of(kernel, second) == []  # an update adds nothing where it was sent
    # from a request no cell sent (a thread, a comm handler): still updates
    assert display(kernel, "someone-else", "v2", display_id="p", update=True) == {first}
    assert outputs_of(kernel, first) == [D("v2")]


def test_an_unknown_display_id_updates_nothing(kernel: KernelOutputs) -> None:
    cell = request(kernel)
    assert display(kernel, cell, "v", display_id="nobody", update=True) == set()
    assert outputs_of(kernel, cell) == []


def test_rerunning_a_cell_forgets_the_old_run_and_its_displays(kernel: KernelOutputs) -> None:
    first = request(kernel, "cell-1")
    display(kernel, first, "v0", display_id="p")
    iopub(kernel, first, "status", execution_state="idle")
    again = request(kernel, "cell-1")
    assert first not in kernel.cells
    assert display(kernel, again, "v1", display_id="p", update=True) == set()


# --- Output widgets -------------------------------------------------------------------------


def widget_open(
    kernel: KernelOutputs, comm_id: str, model: str = "OutputModel", msg_id: str = ""
) -> None:
    kernel.on_iopub(
        {
            "header": {"msg_type": "comm_open"},
            "parent_header": {},
            "content": {
                "comm_id": comm_id,
                "target_name": "jupyter.widget",
                "data": {"state": {"_model_name": model, "msg_id": msg_id}, "buffer_paths": []},
            },
        }
    )


def widget_update(
    kernel: KernelOutputs,
    comm_id: str,
    msg_id: str,
    channel: str = "iopub",
    method: str = "update",
) -> None:
    msg = cell_messages.widget_update(comm_id, {"msg_id": msg_id}, method=method)
    (kernel.on_iopub if channel == "iopub" else kernel.on_shell)(msg)


def test_outputs_captured_by_an_output_widget_are_not_the_cells(kernel: KernelOutputs) -> None:
    cell = request(kernel)
    widget_open(kernel, "out-1")
    stream(kernel, cell, "before\n")
    widget_update(kernel, "out-1", cell)  # `with out:` in the kernel
    assert stream(kernel, cell, "inside\n") == set()
    display(kernel, cell, "inside display")
    iopub(kernel, cell, "clear_output", wait=False)
    widget_update(kernel, "out-1", "")  # end of the `with`
    stream(kernel, cell, "after\n")
    assert outputs_of(kernel, cell) == [S("before\nafter\n")]


def test_a_captured_update_still_updates_the_display_it_names(kernel: KernelOutputs) -> None:
    cell = request(kernel)
    display(kernel, cell, "v0", display_id="p")
    widget_open(kernel, "out-1", msg_id=cell)
    assert display(kernel, cell, "v1", display_id="p", update=True) == {cell}
    display(kernel, cell, "v2", display_id="p")  # updates v1, and is the widget's itself
    assert outputs_of(kernel, cell) == [D("v2")]


def test_a_frontend_can_point_an_output_widget_at_a_request(kernel: KernelOutputs) -> None:
    cell = request(kernel)
    widget_open(kernel, "out-1")
    widget_update(kernel, "out-1", cell, channel="shell")
    stream(kernel, cell, "captured\n")
    widget_update(kernel, "out-1", "", method="echo_update")
    stream(kernel, cell, "mine\n")
    assert outputs_of(kernel, cell) == [S("mine\n")]


def test_other_widgets_capture_nothing_and_a_closed_output_widget_stops(
    kernel: KernelOutputs,
) -> None:
    cell = request(kernel)
    widget_open(kernel, "slider", model="IntSliderModel", msg_id=cell)
    widget_open(kernel, "out-1", msg_id=cell)
    stream(kernel, cell, "captured\n")
    kernel.on_iopub(
        {
            "header": {"msg_type": "comm_close"},
            "parent_header": {},
            "content": {"comm_id": "out-1", "data": {}},
        }
    )
    stream(kernel, cell, "mine\n")
    assert outputs_of(kernel, cell) == [S("mine\n")]


# --- the registry ---------------------------------------------------------------------------


def test_a_request_without_cell_id_is_not_registered(kernel: KernelOutputs) -> None:
    msg_id = request(kernel, cell_id=None)
    assert msg_id not in kernel.cells
    assert stream(kernel, msg_id, "x") == set()


def test_a_cell_ends_at_its_idle_and_takes_the_reply_count(kernel: KernelOutputs) -> None:
    cell = request(kernel, session="tab-9")
    iopub(kernel, cell, "status", execution_state="busy")
    assert kernel.cells[cell].running
    iopub(kernel, "other", "status", execution_state="idle")
    assert kernel.cells[cell].running
    iopub(kernel, cell, "status", execution_state="idle")
    ran = kernel.cells[cell]
    assert (ran.state, ran.ended_by, ran.session) == ("idle", "idle", "tab-9")
    kernel.on_shell(
        {
            "header": {"msg_type": "execute_reply"},
            "parent_header": {"msg_id": cell},
            "content": {"status": "ok", "execution_count": 4},
        }
    )
    assert (ran.execution_count, ran.reply_status) == (4, "ok")
    assert kernel.cells_of_session("tab-9") == [ran]


def test_an_aborted_request_ends_at_its_reply(kernel: KernelOutputs) -> None:
    cell = request(kernel, "cell-3")
    changed = kernel.on_shell(
        {
            "header": {"msg_type": "execute_reply"},
            "parent_header": {"msg_id": cell},
            "content": {"status": "aborted", "execution_count": None},
        }
    )
    assert changed == {cell}
    ran = kernel.cells[cell]
    assert (ran.state, ran.ended_by, ran.execution_count) == ("idle", "aborted", None)


def test_restart_ends_running_cells_idle_with_what_they_had(kernel: KernelOutputs) -> None:
    done = request(kernel, "cell-1")
    iopub(kernel, done, "status", execution_state="idle")
    running = request(kernel, "cell-2")
    stream(kernel, running, "half\n")
    assert [c.msg_id for c in kernel.end_all("restart")] == [running]
    cell = kernel.cells[running]
    assert (cell.state, cell.ended_by) == ("idle", "restart")
    assert outputs_of(kernel, running) == [S("half\n")]
    assert kernel.cells[done].ended_by == "idle"


def test_outputs_after_the_idle_still_reach_the_cell(kernel: KernelOutputs) -> None:
    cell = request(kernel)
    iopub(kernel, cell, "status", execution_state="idle")
    assert stream(kernel, cell, "from a thread\n") == {cell}
    assert outputs_of(kernel, cell) == [S("from a thread\n")]


# --- bounds ---------------------------------------------------------------------------------


def is_note(output: dict[str, Any]) -> bool:
    return output.get("metadata", {}).get(CUT_NOTE_KEY) is True


def test_a_cell_is_cut_at_its_bound_with_a_note() -> None:
    kernel = KernelOutputs(max_cell_bytes=2000, max_kernel_bytes=10**6)
    cell = request(kernel)
    for i in range(500):
        stream(kernel, cell, f"line {i}\n")
    outputs = outputs_of(kernel, cell)
    assert [o["output_type"] for o in outputs] == ["stream", "display_data"]
    assert is_note(outputs[1]) and "2000 bytes" in outputs[1]["data"]["text/plain"]
    text = outputs[0]["text"]
    assert text.startswith("line 0\nline 1\n") and len(text) <= 2000
    assert kernel.cells[cell].outputs.nbytes <= 2000
    display(kernel, cell, "more")  # nothing is added after the note
    assert outputs_of(kernel, cell) == outputs


def test_a_big_display_is_dropped_for_the_note_and_clear_output_makes_room() -> None:
    kernel = KernelOutputs(max_cell_bytes=1000, max_kernel_bytes=10**6)
    cell = request(kernel)
    display(kernel, cell, "small")
    display(kernel, cell, "x" * 5000)
    outputs = outputs_of(kernel, cell)
    assert outputs[0] == D("small") and is_note(outputs[1]) and len(outputs) == 2
    iopub(kernel, cell, "clear_output", wait=True)
    display(kernel, cell, "frame")
    assert outputs_of(kernel, cell) == [D("frame")]


def test_frames_with_clear_output_wait_never_hit_the_bound() -> None:
    kernel = KernelOutputs(max_cell_bytes=1000, max_kernel_bytes=10**6)
    cell = request(kernel)
    for frame in range(2000):
        iopub(kernel, cell, "clear_output", wait=True)
        stream(kernel, cell, f"frame {frame}\n")
    assert outputs_of(kernel, cell) == [S("frame 1999\n")]


def test_the_kernel_bound_lets_ended_cells_go_then_cuts_the_running_one() -> None:
    kernel = KernelOutputs(max_cell_bytes=10**6, max_kernel_bytes=3000)
    old = request(kernel, "cell-1")
    stream(kernel, old, "o" * 1500)
    iopub(kernel, old, "status", execution_state="idle")
    new = request(kernel, "cell-2")
    stream(kernel, new, "n" * 2000)
    assert old not in kernel.cells  # let go to make room
    stream(kernel, new, "n" * 2000)
    outputs = outputs_of(kernel, new)
    assert is_note(outputs[-1]) and "per kernel" in outputs[-1]["data"]["text/plain"]
    assert kernel.nbytes <= 3000


def test_the_kernel_bound_never_lets_go_of_a_cell_not_yet_written() -> None:
    """At the kernel's bound, an ended cell the server still has to write stays; the running
    cell is cut, with a note that names the kernel's bound."""
    unwritten: set[str] = set()
    kernel = KernelOutputs(
        max_cell_bytes=10**6, max_kernel_bytes=3000, keep=lambda msg_id: msg_id in unwritten
    )
    old = request(kernel, "cell-1")
    unwritten.add(old)
    stream(kernel, old, "o" * 1500)
    iopub(kernel, old, "status", execution_state="idle")
    new = request(kernel, "cell-2")
    stream(kernel, new, "n" * 2000)
    assert old in kernel.cells and outputs_of(kernel, old) == [S("o" * 1500)]
    outputs = outputs_of(kernel, new)
    assert (
        is_note(outputs[-1])
        and "3000 bytes of output per kernel" in (outputs[-1]["data"]["text/plain"])
    )
    assert kernel.cells[new].outputs.cut_by == (3000, "kernel")
    assert kernel.evicted == [] and kernel.nbytes <= 3000
    # Once written, the next run may have its room: the old cell goes, and is reported.
    unwritten.clear()
    newer = request(kernel, "cell-3")
    stream(kernel, newer, "m" * 1000)
    assert old not in kernel.cells and kernel.evicted == [old]
    assert outputs_of(kernel, newer) == [S("m" * 1000)]


def test_the_cell_bound_is_recorded_for_the_log() -> None:
    kernel = KernelOutputs(max_cell_bytes=500, max_kernel_bytes=10**6)
    cell = request(kernel)
    assert kernel.cells[cell].outputs.cut_by is None
    stream(kernel, cell, "x" * 600)
    assert kernel.cells[cell].outputs.cut_by == (500, "cell")


# --- what the tab writes itself: the input echo ----------------------------------------------


def input_request(
    kernel: KernelOutputs,
    parent: str,
    prompt: str,
    password: bool = False,
    msg_id: str | None = None,
) -> str:
    msg_id = msg_id or f"ask-{next(_ids)}"
    kernel.on_input_request(
        {
            "header": {"msg_type": "input_request", "msg_id": msg_id},
            "parent_header": {"msg_id": parent},
            "content": {"prompt": prompt, "password": password},
        }
    )
    return msg_id


def input_reply(kernel: KernelOutputs, asked: str, value: str, status: str = "ok") -> set[str]:
    return kernel.on_input_reply(
        {
            "header": {"msg_type": "input_reply", "msg_id": f"ans-{next(_ids)}"},
            "parent_header": {"msg_id": asked},
            "content": {"status": status, "value": value},
        }
    )


def test_the_input_echo_is_folded_where_the_tab_writes_it(kernel: KernelOutputs) -> None:
    msg_id = request(kernel)
    stream(kernel, msg_id, "before\n")
    asked = input_request(kernel, msg_id, "name?")
    assert input_reply(kernel, asked, "world") == {msg_id}
    stream(kernel, msg_id, "hello world 0\n")
    stream(kernel, msg_id, "hello world 1\n")
    # JupyterLab 4.6: a stdin stream (prompt, space, answer, newline) between two stdouts,
    # which therefore do not merge.
    assert outputs_of(kernel, msg_id) == [
        S("before\n"),
        S("name? world\n", "stdin"),
        S("hello world 0\nhello world 1\n"),
    ]


def test_a_password_echo_shows_dots_never_the_answer(kernel: KernelOutputs) -> None:
    msg_id = request(kernel)
    asked = input_request(kernel, msg_id, "secret:", password=True)
    input_reply(kernel, asked, "hunter2")
    assert outputs_of(kernel, msg_id) == [S("secret: " + "\u00b7" * 8 + "\n", "stdin")]
    assert "hunter2" not in str(outputs_of(kernel, msg_id))


def test_replies_to_no_known_request_or_not_ok_add_nothing(kernel: KernelOutputs) -> None:
    msg_id = request(kernel)
    assert input_reply(kernel, "never-asked", "x") == set()
    asked = input_request(kernel, msg_id, "q")
    assert input_reply(kernel, asked, "x", status="error") == set()
    assert input_reply(kernel, asked, "again") == set()  # answered once only
    other = input_request(kernel, "not-a-cell", "q")
    assert input_reply(kernel, other, "x") == set()
    assert outputs_of(kernel, msg_id) == []
