"""Outputs survive the tab, through a real jupyter_server with SharedChannelsConnection.

A real server (CurveZMQ required), a ``python3-ext`` kernel for a notebook session made
through ``/api/sessions`` (a real ``.ipynb``), websocket clients that send what JupyterLab
sends (``metadata.cellId``). The cell prints a line per barrier file the test writes; verdicts
are the file, the live document and the websockets; the server's log lines are barriers;
time bounds are hang guards. Without collaboration: a closed tab's cell goes into the file
once it ended, nothing while a websocket of the kernel is open, the same session back within
the grace gets every output once, a restart ends an owned cell. With jupyter-collaboration:
the document gets the lines as they come, ``[*]`` then the count, once.
"""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from harness.kernel_websocket import KernelWebsocket
from harness.outputs_notebook import (
    CELL_ID,
    HANG,
    K,
    N,
    Notebook,
    doc_cell,
    document_follows_the_cell,
    lines,
    stdout_of,
    stream,
    until_line,
    wait_doc,
)
from harness.polling import wait_until
from harness.server import JupyterServer

# Hang guard per test (default 120 s): a jupyter_server, kernels, cells whose tab went away
# and the notebook file read back.
pytestmark = pytest.mark.timeout(400)

CLASS = "ipykernel_ext.server.SharedChannelsConnection"


def server_with(grace: float, collab: bool, extra: tuple[str, ...] = ()) -> JupyterServer:
    """A server with the connection class and outputs_buffer_extension (the offline buffer's
    counts); collaboration and outputs_room_extension if asked (harness/server_extensions/)."""
    args = [
        f"--ServerApp.kernel_websocket_connection_class={CLASS}",
        f"--SharedChannelsConnection.keep_outputs_grace={grace}",
    ]
    if collab:
        args += [
            '--ServerApp.jpserver_extensions={"outputs_room_extension": True, '
            '"outputs_buffer_extension": True, "jupyter_server_ydoc": True}',
            "--YDocExtension.document_save_delay=0.5",
        ]
    else:
        args.append(
            '--ServerApp.jpserver_extensions={"outputs_buffer_extension": True, '
            '"jupyter_server_ydoc": False}'
        )
    return JupyterServer(extra_args=[*args, *extra], stop_timeout=20)


@pytest.fixture(scope="module")
def server() -> Iterator[JupyterServer]:
    """No collaboration, a short grace."""
    with server_with(grace=0.5, collab=False) as srv:
        yield srv


# --- without collaboration ---------------------------------------------------------------------


@pytest.mark.parametrize("kernel", ["python3-ext", "python3"])  # stock ipykernel too
def test_closed_tab_outputs_reach_the_file_once_the_cell_ended(
    server: JupyterServer, kernel: str
) -> None:
    nb = Notebook(server, f"closed-{kernel}.ipynb", kernel)
    _msg_id, count = nb.leave_mid_cell(KernelWebsocket(server, nb.kernel_id))
    nb.release(N)
    nb.whole_on_disk(count)


def test_nothing_is_written_while_a_websocket_of_the_kernel_is_open(
    server: JupyterServer,
) -> None:
    nb = Notebook(server, "second_tab.ipynb")
    other = KernelWebsocket(server, nb.kernel_id)  # another tab of the notebook stays
    ws = KernelWebsocket(server, nb.kernel_id)
    msg_id, count = nb.leave_mid_cell(ws)
    nb.release(N)
    other.recv_until(  # the other tab sees the cell end (its idle)
        lambda m: (
            m["msg_type"] == "status"
            and m["content"]["execution_state"] == "idle"
            and m["parent_header"].get("msg_id") == msg_id
        ),
        timeout=120,
    )
    nb.wait_log(f"cell {CELL_ID} ended; its outputs go into")
    cell = nb.cell_on_disk()
    assert (cell.outputs, cell.execution_count) == ([], None)  # untouched
    other.close()  # the last tab of the kernel leaves: now the file gets them
    nb.whole_on_disk(count)


def test_kernel_restart_ends_an_owned_cell_with_what_it_had(server: JupyterServer) -> None:
    nb = Notebook(server, "restarted.ipynb")
    ws = KernelWebsocket(server, nb.kernel_id)
    _msg_id, count = nb.leave_mid_cell(ws, resist=True)
    server.api("POST", f"api/kernels/{nb.kernel_id}/restart", timeout=120)
    cell = nb.ended_on_disk()
    assert [dict(o) for o in cell.outputs] == [stream(lines(K + 1))]
    assert cell.execution_count == count
    assert nb.log_says("running cells end idle (restart)")


def test_same_session_back_within_the_grace_gets_every_output_once() -> None:
    with server_with(grace=120, collab=False) as srv:  # the return is always within it
        nb = Notebook(srv, "blip.ipynb")
        session = uuid.uuid4().hex
        ws = KernelWebsocket(srv, nb.kernel_id, session_id=session)
        msg_id = nb.run(ws)
        nb.release(K + 1)
        before = stdout_of(until_line(ws, msg_id, K), msg_id)
        ws.close()
        nb.release(K + 3)  # printed while the tab is away: the server's offline buffer
        back = KernelWebsocket(srv, nb.kernel_id, session_id=session, ready_on="control")
        nb.release(N)
        reply, iopub = back.collect_execution(msg_id)  # its reply and idle still come
        assert reply["content"]["status"] == "ok"
        assert before + stdout_of(iopub, msg_id) == lines(N)
        back.close()


def buffer_probe(server: JupyterServer, nb: Notebook, msg_id: str) -> dict[str, Any]:
    """The kernel's offline buffer and owner, as outputs_buffer_extension counts them."""
    return server.api("GET", f"outputs-buffer?kernel_id={nb.kernel_id}&msg_id={msg_id}")


def close_mid_cell(server: JupyterServer, nb: Notebook, owned: bool = True) -> tuple[str, int]:
    """A new tab runs the cell to ``line K`` and leaves mid-cell; ``owned``: the server then
    takes the cell over (its log says so). The request's msg_id and the cell's count."""
    ws = KernelWebsocket(server, nb.kernel_id, session_id=uuid.uuid4().hex)
    if owned:
        return nb.leave_mid_cell(ws)
    msg_id, count = nb.run_to_line_k(ws)
    ws.close()
    return msg_id, count


def test_the_offline_buffer_holds_no_decoded_copy_of_an_owned_cell(
    server: JupyterServer,
) -> None:
    """jupyter_server's offline buffer keeps every message of the departed session, as bytes;
    the owner decodes what it folds for the fold only, so the buffer holds no decoded copy
    beside them (for the 50 MB cell of docs/BENCHMARKS.md, that copy is the text twice)."""
    nb = Notebook(server, "buffered.ipynb")
    msg_id, count = close_mid_cell(server, nb)
    nb.release(N)  # lines K+1 .. N-1: into the buffer, and folded by the owner
    nb.whole_on_disk(count)
    probe = buffer_probe(server, nb, msg_id)
    assert probe["buffering"] and probe["owner"] and probe["outputs"] >= 1, probe
    assert probe["outputs_decoded"] == 0, probe  # bytes only, as stock's buffer holds them


def test_keep_outputs_off_writes_nothing_for_a_closed_tab() -> None:
    """``keep_outputs=False``: stock behaviour. The tab leaves mid-cell and never comes back,
    the cell ends: there is no owner, and neither the file nor the live document (with
    collaboration, when installed, a room open as a tab of the notebook would have it) gets
    anything from the server."""
    collab = importlib.util.find_spec("jupyter_server_ydoc") is not None
    with server_with(
        grace=0.5, collab=collab, extra=("--SharedChannelsConnection.keep_outputs=False",)
    ) as srv:
        nb = Notebook(srv, "kept_off.ipynb")
        if collab:
            nb.open_room()
        msg_id, _ = close_mid_cell(srv, nb, owned=False)
        nb.release(N)
        wait_until(
            lambda: (
                buffer_probe(srv, nb, msg_id)["others"] >= 2  # its idle and reply
                and srv.kernel_model(nb.kernel_id)["execution_state"] == "idle"
            ),
            HANG,
            "the cell's end, in the offline buffer",
        )
        probe = buffer_probe(srv, nb, msg_id)
        assert not probe["owner"], probe  # nobody keeps or writes outputs
        assert probe["outputs"] >= 1, probe  # stock's buffer has them, for the same session
        cell = nb.cell_on_disk()
        assert (cell.outputs, cell.execution_count) == ([], None)
        if collab:
            cell = doc_cell(srv, nb)
            assert (cell["outputs"], cell["execution_count"]) == ([], None), cell


def file_gets_the_closed_tabs_cell(srv: JupyterServer, nb: Notebook) -> str:
    """The tab closes mid-cell, the server takes the cell over, the cell ends: the file has
    every line and the count. Returns the cell's msg_id."""
    msg_id, count = close_mid_cell(srv, nb)
    nb.release(N)
    nb.whole_on_disk(count)
    return msg_id


def test_without_an_offline_buffer_the_file_gets_the_cell() -> None:
    """``buffer_offline_messages=False``: the closed tab's channels would close under the
    cell; the owner holds them while it follows the cell, and writes it once it ended."""
    with server_with(
        grace=0.5, collab=False, extra=("--MappingKernelManager.buffer_offline_messages=False",)
    ) as srv:
        nb = Notebook(srv, "unbuffered.ipynb")
        msg_id = file_gets_the_closed_tabs_cell(srv, nb)
        assert not buffer_probe(srv, nb, msg_id)["buffering"]


# --- with jupyter-collaboration ------------------------------------------------------------------


@pytest.fixture(scope="module")
def collab_server() -> Iterator[JupyterServer]:
    pytest.importorskip(
        "jupyter_server_ydoc",
        reason="jupyter-collaboration is not installed (pip install 'ipykernel-ext[collab]')",
    )
    with server_with(grace=0.5, collab=True) as srv:
        yield srv


def test_collab_document_gets_the_lines_as_they_come(collab_server: JupyterServer) -> None:
    nb = Notebook(collab_server, "live.ipynb")
    nb.open_room()  # a tab opened it
    ws = KernelWebsocket(collab_server, nb.kernel_id)
    _msg_id, count = nb.leave_mid_cell(ws)
    cell = wait_doc(collab_server, nb, lines(K + 1), "running")
    assert cell["execution_count"] is None  # a count would make every tab show the cell idle
    cell = document_follows_the_cell(collab_server, nb)
    assert len(cell["outputs"]) == 1 and cell["execution_count"] == count
    # the room saves the file itself
    nb.whole_on_disk(count, "the room's save")


def test_collab_session_back_after_takeover_is_not_given_the_outputs_again(
    collab_server: JupyterServer,
) -> None:
    nb = Notebook(collab_server, "back.ipynb")
    nb.open_room()
    session = uuid.uuid4().hex
    ws = KernelWebsocket(collab_server, nb.kernel_id, session_id=session)
    msg_id, _count = nb.leave_mid_cell(ws)
    nb.release(K + 3)  # printed while away: buffered, and written into the document
    wait_doc(collab_server, nb, lines(K + 3), "running")
    back = KernelWebsocket(collab_server, nb.kernel_id, session_id=session, ready_on="control")
    nb.release(N)
    reply, iopub = back.collect_execution(msg_id)  # status and the reply still come
    assert reply["content"]["status"] == "ok"
    assert stdout_of(iopub, msg_id) == ""  # the document has them: given once, there
    cell = wait_doc(collab_server, nb, lines(N), "idle")
    assert len(cell["outputs"]) == 1
    back.close()


def test_collab_restart_ends_an_owned_cell_idle(collab_server: JupyterServer) -> None:
    nb = Notebook(collab_server, "restart_live.ipynb")
    nb.open_room()
    ws = KernelWebsocket(collab_server, nb.kernel_id)
    _msg_id, _count = nb.leave_mid_cell(ws, resist=True)
    wait_doc(collab_server, nb, lines(K + 1), "running")
    collab_server.api("POST", f"api/kernels/{nb.kernel_id}/restart", timeout=120)
    cell = wait_doc(collab_server, nb, lines(K + 1), "idle")
    assert len(cell["outputs"]) == 1
    assert nb.log_says("running cells end idle (restart)")


def test_collab_offline_buffer_skips_outputs_written_into_the_document(
    collab_server: JupyterServer,
) -> None:
    """Once the server wrote the departed session's cell into the live document, that
    session is never given the cell's outputs (PROTOCOL.md section 6): jupyter_server's
    offline buffer is not given them either. Its statuses and replies are."""
    nb = Notebook(collab_server, "skipped.ipynb")
    nb.open_room()
    msg_id, count = close_mid_cell(collab_server, nb)
    wait_until(lambda: buffer_probe(collab_server, nb, msg_id)["hidden"], HANG, "the first write")
    nb.release(N)
    cell = wait_doc(collab_server, nb, lines(N), "idle")
    assert cell["execution_count"] == count
    probe = buffer_probe(collab_server, nb, msg_id)
    assert probe["buffering"] and probe["outputs"] == 0, probe
    assert probe["skipped"] >= 1 and probe["others"] >= 2, probe  # its idle and reply kept


def test_collab_without_a_room_the_file_gets_the_cell(collab_server: JupyterServer) -> None:
    """Collaboration on, but no tab has the notebook's room open: the file, once the cell
    ended and no tab of the kernel is connected (as without collaboration)."""
    nb = Notebook(collab_server, "no_room.ipynb")
    msg_id = file_gets_the_closed_tabs_cell(collab_server, nb)
    assert not buffer_probe(collab_server, nb, msg_id)["hidden"]


# --- every cut is told: a note in the file, a line in the log --------------------------------


def test_a_cut_cell_has_its_note_in_the_file_and_a_log_line() -> None:
    """The per-cell bound (here 80 bytes) cuts the cell the server writes: the file has the
    lines that fit, then the note (``metadata.ipykernel_ext_cut``) saying why; the log says
    so too."""
    with server_with(
        grace=0.5, collab=False, extra=("--SharedChannelsConnection.keep_outputs_cell_bytes=80",)
    ) as srv:
        nb = Notebook(srv, "cut.ipynb")
        close_mid_cell(srv, nb)
        nb.release(N)
        cell = nb.ended_on_disk()
        text, note = cell.outputs[0], cell.outputs[-1]
        assert len(cell.outputs) == 2 and text.output_type == "stream", cell.outputs
        assert lines(N).startswith(text.text) and len(text.text) < len(lines(N))
        assert note.output_type == "display_data" and note.metadata["ipykernel_ext_cut"] is True
        assert "at most 80 bytes of output per cell" in note.data["text/plain"]
        assert nb.log_says(f"the outputs of cell {CELL_ID} were cut at 80 bytes per cell")


# --- the outputs follow the notebook when it is renamed or moved -----------------------------


def rename(server: JupyterServer, nb: Notebook, new_name: str) -> None:
    """As JupyterLab renames or moves an open notebook: the file through the contents API,
    then the kernel's session path."""
    (server.root_dir / new_name).parent.mkdir(parents=True, exist_ok=True)
    server.api("PATCH", f"api/contents/{nb.name}", {"path": new_name})
    session = next(
        s["id"] for s in server.api("GET", "api/sessions") if s["kernel"]["id"] == nb.kernel_id
    )
    server.api("PATCH", f"api/sessions/{session}", {"path": new_name, "name": new_name})
    nb.name, nb.path = new_name, server.root_dir / new_name


@pytest.mark.parametrize("new_name", ["renamed.ipynb", "moved/into/folder.ipynb"])
def test_a_notebook_renamed_while_the_server_owns_its_cell_gets_it_at_its_new_path(
    server: JupyterServer, new_name: str
) -> None:
    nb = Notebook(server, f"before-{new_name.count('/')}.ipynb")
    old = nb.path
    _, count = close_mid_cell(server, nb)
    rename(server, nb, new_name)
    nb.wait_log(f"follows its notebook from {old.name} to {new_name}")
    nb.release(N)
    nb.whole_on_disk(count, "the cell at the new path")
    assert not old.exists()


def test_a_write_that_cannot_be_made_anywhere_is_told(server: JupyterServer) -> None:
    nb = Notebook(server, "deleted.ipynb")
    close_mid_cell(server, nb)
    server.api("DELETE", f"api/contents/{nb.name}")
    nb.release(N)
    nb.wait_log(f"could not be written anywhere (tried {nb.name})")
    assert not nb.path.exists()  # not made again from nothing


def test_collab_a_renamed_notebook_gets_the_cell_in_its_document(
    collab_server: JupyterServer,
) -> None:
    nb = Notebook(collab_server, "live_before.ipynb")
    nb.open_room()
    _, count = close_mid_cell(collab_server, nb)
    wait_doc(collab_server, nb, lines(K + 1), "running")
    rename(collab_server, nb, "live_after.ipynb")
    nb.wait_log("follows its notebook from live_before.ipynb to live_after.ipynb")
    nb.release(N)
    cell = wait_doc(collab_server, nb, lines(N), "idle")
    assert len(cell["outputs"]) == 1 and cell["execution_count"] == count
    saved = nb.wait_on_disk(lambda c: c.execution_count is not None, "the room's save")
    assert [dict(o) for o in saved.outputs] == [stream(lines(N))]
