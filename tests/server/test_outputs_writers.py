"""ipykernel_ext.server.outputs' writers in a real jupyter_server with jupyter-collaboration on.

The harness's outputs_extension folds the IOPub messages a test sends and writes them with the
package's writers from inside the server: into the live document (jupyter-collaboration's
``get_document``) and into the file through the ContentsManager. Verdicts: the document, every
change its cell saw (what a receiving tab applies), the file once the room saved it.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest

from harness import cell_messages
from harness.cell_messages import D, S
from harness.polling import wait_until
from harness.server import JupyterServer

nbformat = pytest.importorskip("nbformat")


def notebook(*cell_ids: str) -> Any:
    nb = nbformat.v4.new_notebook()
    for cell_id in cell_ids:
        cell = nbformat.v4.new_code_cell(source=f"# {cell_id}")
        cell.id = cell_id
        nb.cells.append(cell)
    return nb


# Every message is the one request's ("req", as the extension names the cell it folds).
stream = partial(cell_messages.stream, parent="req")
display = partial(cell_messages.display, parent="req")


def pub(msg_type: str, **content: Any) -> dict[str, Any]:
    return cell_messages.message(msg_type, content, "req")


def extension_args(collaboration: bool) -> list[str]:
    return [
        '--ServerApp.jpserver_extensions={"outputs_extension": True, '
        f'"jupyter_server_ydoc": {collaboration}}}',
    ]


@pytest.fixture(scope="module")
def server() -> Any:
    """A server with jupyter-collaboration on (and the default, async, contents manager)."""
    pytest.importorskip(
        "jupyter_server_ydoc",
        reason="jupyter-collaboration is not installed (pip install 'ipykernel-ext[collab]')",
    )
    with JupyterServer(
        encryption=False,  # no kernel runs here: the messages are the test's
        extra_args=[*extension_args(True), "--YDocExtension.document_save_delay=0.5"],
    ) as srv:
        yield srv


@pytest.fixture(scope="module")
def sync_server() -> Any:
    """A server without collaboration, on the synchronous ContentsManager."""
    with JupyterServer(
        encryption=False,
        extra_args=[
            *extension_args(False),
            "--ServerApp.contents_manager_class="
            "jupyter_server.services.contents.largefilemanager.LargeFileManager",
            # does nothing unless a test leaves a marker (test_contents_writer_saves_again...)
            "--FileContentsManager.post_save_hook=harness.server_extensions.lose_once.hook",
        ],
    ) as srv:
        yield srv


def read_notebook(path: Path) -> Any:
    """The notebook file, or None while it is being written."""
    try:
        return nbformat.reads(path.read_text(), as_version=4)  # joins multiline strings
    except (OSError, ValueError, nbformat.reader.NotJSONError):
        return None


def wait_for_file(path: Path, check: Any, timeout: float = 90) -> Any:
    """Read ``path`` until ``check(nb)`` holds (the room saves on its own); hang guard only."""
    return wait_until(
        lambda: read_notebook(path),
        timeout,
        f"{path.name} saved as expected",
        0.2,
        done=lambda nb: nb is not None and check(nb),
    )


def cell_of(nb: dict[str, Any], cell_id: str) -> dict[str, Any]:
    return next(c for c in nb["cells"] if c.get("id") == cell_id)


def assert_receivable(events: list[list[dict[str, Any]]]) -> None:
    """Every change is one a JupyterLab tab applies without duplicating or reordering."""
    for batch in events:
        for event in batch:
            delta = event["delta"] or []
            kinds = [k for d in delta for k in d if k != "retain"]
            if event["path"][-1:] == ["text"]:
                # a stream's text: one edit per transaction, at the end of the last output
                assert kinds in (["insert"], ["delete"]), event
            elif event["path"] == ["outputs"]:
                # outputs: a tail deleted and/or appended (the tab appends every insert)
                assert kinds in (["insert"], ["delete"], ["delete", "insert"]), event


def test_collab_writer_streams_displays_and_state(server: JupyterServer) -> None:
    nbformat.write(notebook("c1", "c2"), server.root_dir / "live.ipynb")
    messages = [
        pub("status", execution_state="busy"),
        pub("execute_input", code="...", execution_count=3),
        *[stream(f"line {i}\n") for i in range(5)],
        *[stream(f"\r{p:3d}%") for p in range(0, 101, 25)],
        stream("\n"),
        display("v0", "bar"),
        stream("after the bar é😀\n"),
        display("v1", "bar", update=True),  # not the last output: the tail is rewritten
    ]
    later = [
        stream("err\n", "stderr"),
        stream("more\n"),
        pub("clear_output", wait=True),
        display("frame 1"),
        pub("clear_output", wait=True),
        display("frame 2"),
        stream("tail\n"),
    ]
    result = server.api(
        "POST", "outputs-test/collab", {"path": "live.ipynb", "cell_id": "c1", "messages": messages}
    )
    expected_mid = [
        S("line 0\nline 1\nline 2\nline 3\nline 4\n100%\n"),
        D("v1"),
        S("after the bar é😀\n"),
    ]
    assert result["outputs"] == expected_mid
    assert_receivable(result["events"])
    doc = server.api("GET", "outputs-test/doc?path=live.ipynb")
    c1 = cell_of(doc, "c1")
    assert c1["outputs"] == expected_mid
    # no count while it runs: JupyterLab's tabs take a count for the end of the cell
    assert (c1["execution_state"], c1["execution_count"]) == ("running", None)

    # the rest of the cell, then its idle: a new run of the fold, same document
    rest = [
        pub("execute_input", code="...", execution_count=3),
        *later,
        pub("status", execution_state="idle"),
    ]
    result = server.api(
        "POST", "outputs-test/collab", {"path": "live.ipynb", "cell_id": "c1", "messages": rest}
    )
    expected = [D("frame 2"), S("tail\n")]
    assert result["outputs"] == expected
    assert_receivable(result["events"])
    c1 = cell_of(server.api("GET", "outputs-test/doc?path=live.ipynb"), "c1")
    assert c1["outputs"] == expected
    assert (c1["execution_state"], c1["execution_count"]) == ("idle", 3)

    saved = wait_for_file(
        server.root_dir / "live.ipynb", lambda nb: cell_of(nb, "c1")["outputs"] == expected
    )
    nbformat.validate(nbformat.from_dict(saved))
    assert cell_of(saved, "c1")["execution_count"] == 3
    assert "execution_state" not in cell_of(saved, "c1")
    assert cell_of(saved, "c2")["outputs"] == []


def test_collab_writer_extends_the_last_stream_in_place(server: JupyterServer) -> None:
    """A growing stream is edited as text, never re-added: receiving tabs append it."""
    nbformat.write(notebook("c1"), server.root_dir / "grow.ipynb")
    messages = [
        pub("execute_input", code="...", execution_count=1),
        *[stream(f"line {i}\n") for i in range(20)],
        stream("50%\r"),
        stream("100%\n"),
        pub("status", execution_state="idle"),
    ]
    result = server.api(
        "POST", "outputs-test/collab", {"path": "grow.ipynb", "cell_id": "c1", "messages": messages}
    )
    assert_receivable(result["events"])
    output_inserts = [
        e
        for batch in result["events"]
        for e in batch
        if e["path"] == ["outputs"] and any("insert" in d for d in e["delta"])
    ]
    assert len(output_inserts) == 1  # the stream output, once; every line after is text
    text = "".join(f"line {i}\n" for i in range(20)) + "100%\n"
    assert result["outputs"] == [S(text)]
    saved = wait_for_file(
        server.root_dir / "grow.ipynb", lambda nb: cell_of(nb, "c1")["outputs"] == [S(text)]
    )
    assert cell_of(saved, "c1")["execution_count"] == 1


def test_collab_writer_bounds_the_cell_with_a_note(server: JupyterServer) -> None:
    nbformat.write(notebook("c1"), server.root_dir / "big.ipynb")
    messages = [
        *[stream("x" * 99 + "\n") for _ in range(100)],
        pub("status", execution_state="idle"),
    ]
    result = server.api(
        "POST",
        "outputs-test/collab",
        {
            "path": "big.ipynb",
            "cell_id": "c1",
            "messages": messages,
            "bounds": {"max_cell_bytes": 2000},
        },
    )
    outputs = cell_of(server.api("GET", "outputs-test/doc?path=big.ipynb"), "c1")["outputs"]
    assert outputs == result["outputs"]
    assert outputs[-1]["metadata"] == {"ipykernel_ext_cut": True}
    assert len(outputs[0]["text"]) < 2000


@pytest.mark.parametrize("manager", ["async", "sync"])
def test_contents_writer_saves_outputs_through_the_contents_manager(
    manager: str, request: pytest.FixtureRequest
) -> None:
    server = request.getfixturevalue("sync_server" if manager == "sync" else "server")
    path = server.root_dir / "closed.ipynb"
    nbformat.write(notebook("c1", "c2"), path)
    outputs = [
        S("line 0\nline 1\n"),
        D("done"),
        {
            "output_type": "execute_result",
            "data": {"text/plain": "42"},
            "metadata": {},
            "execution_count": 5,
        },
    ]
    written = server.api(
        "POST",
        "outputs-test/contents",
        {"path": "closed.ipynb", "cells": {"c2": [outputs, 5], "gone": [[S("x")], 1]}},
    )
    assert written["written"] == ["c2"]
    assert written["manager"].startswith("Async") == (manager == "async"), written
    saved = nbformat.read(path, as_version=4)
    nbformat.validate(saved)
    c2 = cell_of(saved, "c2")
    assert (c2["outputs"], c2["execution_count"]) == (outputs, 5)
    assert cell_of(saved, "c1")["outputs"] == []


def test_contents_writer_saves_again_when_the_file_is_lost_after_its_save(
    sync_server: JupyterServer,
) -> None:
    """A save whose file is gone right after it (a client reading mid-save can cause it through
    jupyter_server's atomic-writing recovery) is made again; the file ends whole."""
    path = sync_server.root_dir / "raced.ipynb"
    nbformat.write(notebook("c1", "c2"), path)
    marker = Path(f"{path}.lose-once")
    marker.touch()  # the next save of this file loses it (harness/server_extensions/lose_once.py)
    outputs = [S("line 0\n"), D("done")]
    written = sync_server.api(
        "POST", "outputs-test/contents", {"path": "raced.ipynb", "cells": {"c2": [outputs, 3]}}
    )
    assert written["written"] == ["c2"]
    assert not marker.exists(), "the first save did not go through the hook"
    saved = nbformat.read(path, as_version=4)
    assert [c["id"] for c in saved["cells"]] == ["c1", "c2"]
    c2 = cell_of(saved, "c2")
    assert (c2["outputs"], c2["execution_count"]) == (outputs, 3)
    assert "save 1 of raced.ipynb did not hold" in sync_server.log_text()


def test_collab_writer_writes_nothing_without_a_room_or_a_cell(server: JupyterServer) -> None:
    nbformat.write(notebook("c1"), server.root_dir / "unopened.ipynb")
    probe = {"path": "unopened.ipynb", "cell_id": "c1", "probe": True}
    assert server.api("POST", "outputs-test/collab", probe) == {"available": True, "wrote": False}
    server.api(
        "POST",
        "outputs-test/collab",  # opens the room
        {"path": "unopened.ipynb", "cell_id": "c1", "messages": []},
    )
    assert server.api("POST", "outputs-test/collab", probe)["wrote"] is True
    assert server.api("POST", "outputs-test/collab", {**probe, "cell_id": "nope"}) == {
        "available": True,
        "wrote": False,
    }


def test_collab_writer_is_off_without_collaboration(sync_server: JupyterServer) -> None:
    nbformat.write(notebook("c1"), sync_server.root_dir / "plain.ipynb")
    assert sync_server.api(
        "POST", "outputs-test/collab", {"path": "plain.ipynb", "cell_id": "c1", "probe": True}
    ) == {"available": False, "wrote": False}
