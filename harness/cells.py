"""Cells a test runs for their effect: to completion, for a value, or held running.

Every cell goes through :func:`ipykernel_ext.demo.cells.run_cell` or waits on its own messages
(:func:`harness.messages.wait_iopub`): a marker it prints, its idle.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from jupyter_client import BlockingKernelClient

from ipykernel_ext.demo.cells import run_cell

from .messages import is_status, wait_iopub


def run(kc: BlockingKernelClient, code: str) -> None:
    """Run ``code`` to its idle; fail with its traceback unless it ends ``ok``."""
    cell = run_cell(kc, code)
    errors = [m["content"]["traceback"] for m in cell.messages if m["msg_type"] == "error"]
    assert cell.status == "ok", errors


@contextmanager
def kernel_set(kc: BlockingKernelClient, name: str, value: Any, after: Any) -> Iterator[None]:
    """``get_ipython().kernel.<name>`` is ``value`` inside the block, ``after`` once out."""
    run(kc, f"get_ipython().kernel.{name} = {value!r}")
    try:
        yield
    finally:
        run(kc, f"get_ipython().kernel.{name} = {after!r}")


def evaluate(kc: BlockingKernelClient, expression: str) -> Any:
    """The value of ``expression`` in the kernel (through repr and ast.literal_eval)."""
    import ast

    reply = kc.execute_interactive(
        "", user_expressions={"x": expression}, timeout=60, output_hook=lambda m: None
    )
    result = reply["content"]["user_expressions"]["x"]
    assert result["status"] == "ok", result
    return ast.literal_eval(result["data"]["text/plain"])


#: What a held cell prints first: :func:`start_cell` returns once it is seen.
START_MARKER = "CELL STARTED"


def start_cell(kc: BlockingKernelClient, code: str, seen: list[Any] | None = None) -> str:
    """Execute ``code`` (which prints :data:`START_MARKER` first); return its msg_id once the
    marker is seen. ``seen`` collects the IOPub messages read meanwhile."""
    msg_id = kc.execute(code)
    wait_iopub(
        kc,
        lambda m: (
            m["msg_type"] == "stream"
            and m["parent_header"].get("msg_id") == msg_id
            and START_MARKER in m["content"]["text"]
        ),
        what="the cell's start marker",
        seen=seen,
    )
    return msg_id


class BusyCell:
    """A cell that runs until :meth:`release`; its execute request's id is ``msg_id``."""

    def __init__(self, kc: BlockingKernelClient, release_file: Path, msg_id: str) -> None:
        self.kc = kc
        self.release_file = release_file
        self.msg_id = msg_id

    def release(self) -> None:
        self.release_file.touch()


@contextmanager
def busy_cell(kc: BlockingKernelClient, tmp_path: Path, then: str = "") -> Iterator[BusyCell]:
    """Run a cell that prints a marker, runs ``then``, and waits for a file; return once the
    marker is seen."""
    release_file = tmp_path / f"release-{uuid.uuid4().hex}"
    code = (
        f"import os as _os, time as _time\nprint({START_MARKER!r}, flush=True)\n{then}\n"
        f"while not _os.path.exists({str(release_file)!r}):\n    _time.sleep(0.01)\n"
    )
    cell = BusyCell(kc, release_file, start_cell(kc, code))
    try:
        yield cell
    finally:
        cell.release()
        wait_iopub(
            kc,
            is_status("idle", cell.msg_id),
            what="the cell's idle",
        )
