"""A notebook whose one cell prints lines paced by barrier files, and what a test reads of it,
for the outputs-survive-the-tab tests through a real server (local kernels and a gateway's).

:class:`Notebook` writes a real ``.ipynb`` with one code cell, makes its notebook session
through ``/api/sessions`` (the server starts the kernel, or asks its gateway to), sends what
JupyterLab sends for the cell (an ``execute_request`` with ``metadata.cellId``), and lets the
cell print ``line i`` once the test touches the barrier ``go-i``: every step is paced by the
test, never by time. It reads the cell back from the file, and waits on the server's log.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import nbformat

from .kernel_websocket import KernelWebsocket
from .polling import wait_until
from .server import JupyterServer

CELL_ID = "cell-a"
N = 8  # lines the cell prints
K = 2  # the tab goes away after this line
#: The hang guard of every wait here (seconds), never a verdict on speed.
HANG = 120

#: ``resist``: the cell ignores SIGINT while it runs, as a cell stuck in C code would, so a
#: restart (jupyter_client interrupts first) must end it by killing the kernel. Ignored at the
#: signal, not caught: an interrupt landing between two statements (in ``exists()``, more
#: often on a loaded machine) would escape any ``try`` around the wait.
CELL_CODE = """\
import signal, time
from pathlib import Path
if {resist}:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
_go = Path(r"{barriers}")
for _i in range({n}):
    while not (_go / f"go-{{_i}}").exists():
        time.sleep(0.005)
    print(f"line {{_i}}", flush=True)
"""


def lines(upto: int) -> str:
    """``line 0`` ... ``line upto-1``, one per line."""
    return "".join(f"line {i}\n" for i in range(upto))


class Notebook:
    """A real .ipynb with one code cell, its notebook session and kernel, and the barriers."""

    def __init__(self, server: JupyterServer, name: str, kernel: str = "python3-ext") -> None:
        self.server = server
        self.name = name
        self.path = server.root_dir / name
        nb = nbformat.v4.new_notebook()
        cell = nbformat.v4.new_code_cell(source="# prints lines")
        cell.id = CELL_ID
        nb.cells.append(cell)
        nbformat.write(nb, self.path)
        self.barriers = server.root_dir / f"{self.path.stem}-go"
        self.barriers.mkdir()
        model = server.api(
            "POST",
            "api/sessions",
            {"path": name, "type": "notebook", "name": name, "kernel": {"name": kernel}},
            timeout=HANG,
        )
        self.kernel_id: str = model["kernel"]["id"]

    def run(self, ws: KernelWebsocket, resist: bool = False) -> str:
        """What JupyterLab sends for the cell; returns the request's msg_id. ``resist``: the
        cell ignores interrupts (a restart must then end it by killing the kernel)."""
        content = {
            "code": CELL_CODE.format(barriers=self.barriers, n=N, resist=resist),
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        }
        msg = ws.send("shell", "execute_request", content, metadata={"cellId": CELL_ID})
        return msg["header"]["msg_id"]

    def run_to_line_k(self, ws: KernelWebsocket, resist: bool = False) -> tuple[str, int]:
        """Run the cell on ``ws`` and read it up to ``line K``; the request's msg_id and the
        execution count the kernel gave it (its ``execute_input``)."""
        msg_id = self.run(ws, resist=resist)
        self.release(K + 1)
        return msg_id, execution_count_of(until_line(ws, msg_id, K), msg_id)

    def leave_mid_cell(self, ws: KernelWebsocket, resist: bool = False) -> tuple[str, int]:
        """:meth:`run_to_line_k`, then the tab leaves (``ws`` closed) and the server takes the
        cell over (its log says so, after the grace)."""
        msg_id, count = self.run_to_line_k(ws, resist)
        ws.close()
        self.wait_log("takes over the outputs of cell")
        return msg_id, count

    def release(self, upto: int) -> None:
        """Let the cell print lines up to ``upto - 1``."""
        for i in range(upto):
            (self.barriers / f"go-{i}").touch()

    def cell_on_disk(self) -> Any:
        try:
            nb = nbformat.reads(self.path.read_text(), as_version=4)
        except (OSError, ValueError):
            return None  # being written
        return next(c for c in nb.cells if c.get("id") == CELL_ID)

    def wait_on_disk(self, check: Callable[[Any], bool], what: str) -> Any:
        return wait_until(self.cell_on_disk, HANG, what, done=lambda c: c is not None and check(c))

    def ended_on_disk(self, what: str = "the cell in the file") -> Any:
        """The cell in the file once it has its execution count (it ended)."""
        return self.wait_on_disk(lambda c: c.execution_count is not None, what)

    def whole_on_disk(self, count: int, what: str = "the cell in the file") -> Any:
        """Once the cell ended, the file has every line it printed and ``count``."""
        cell = self.ended_on_disk(what)
        assert [dict(o) for o in cell.outputs] == [stream(lines(N))], cell.outputs
        assert cell.execution_count == count, cell
        return cell

    def open_room(self) -> None:
        """As a tab opening the notebook: its live document's room (outputs_room_extension)."""
        self.server.api("GET", f"outputs-room/doc?path={self.name}&open=1")

    def log_says(self, text: str) -> bool:
        return any(
            self.kernel_id in line and text in line for line in self.server.log_text().splitlines()
        )

    def wait_log(self, text: str) -> None:
        wait_until(
            lambda: self.log_says(text), HANG, f"the server log saying {text!r} for {self.name}"
        )


def stdout_of(messages: list[dict[str, Any]], msg_id: str) -> str:
    return "".join(
        m["content"]["text"]
        for m in messages
        if m["channel"] == "iopub"
        and m["msg_type"] == "stream"
        and m["parent_header"].get("msg_id") == msg_id
    )


def until_line(ws: KernelWebsocket, msg_id: str, k: int) -> list[dict[str, Any]]:
    """Read ``ws`` up to the stream that prints ``line k``; returns what it read (backlog
    included), in order."""
    last = ws.recv_until(
        lambda m: (
            m["msg_type"] == "stream"
            and m["parent_header"].get("msg_id") == msg_id
            and f"line {k}\n" in m["content"]["text"]
        ),
        timeout=HANG,
    )
    read, ws.backlog = [*ws.backlog, last], []
    return read


def execution_count_of(messages: list[dict[str, Any]], msg_id: str) -> int:
    return next(
        m["content"]["execution_count"]
        for m in messages
        if m["msg_type"] == "execute_input" and m["parent_header"].get("msg_id") == msg_id
    )


def stream(text: str) -> dict[str, Any]:
    return {"output_type": "stream", "name": "stdout", "text": text}


# --- the live document (the outputs_room_extension of harness/server_extensions/) -------


def doc_cell(server: JupyterServer, nb: Notebook) -> dict[str, Any]:
    doc = server.api("GET", f"outputs-room/doc?path={nb.name}")
    return next(c for c in doc["cells"] if c.get("id") == CELL_ID)


def doc_text(cell: dict[str, Any]) -> str:
    return "".join(o.get("text", "") for o in cell["outputs"] if o["output_type"] == "stream")


def wait_doc(server: JupyterServer, nb: Notebook, text: str, state: str) -> dict[str, Any]:
    """Until the document's cell shows ``text`` and ``state``; every read must be a prefix
    of the whole output (a duplicated or reordered line fails at once)."""

    def read() -> dict[str, Any]:
        cell = doc_cell(server, nb)
        assert lines(N).startswith(doc_text(cell)), cell["outputs"]
        return cell

    return wait_until(
        read,
        HANG,
        f"the document showing {text!r}, {state}",
        done=lambda cell: doc_text(cell) == text and cell.get("execution_state") == state,
    )


def document_follows_the_cell(server: JupyterServer, nb: Notebook) -> dict[str, Any]:
    """Once the server took the cell over after ``line K``: the live document shows each line
    the test releases, the cell running, then every line and idle; its cell at the end."""
    wait_doc(server, nb, lines(K + 1), "running")
    for i in range(K + 1, N - 1):
        nb.release(i + 1)
        wait_doc(server, nb, lines(i + 1), "running")
    nb.release(N)
    return wait_doc(server, nb, lines(N), "idle")
