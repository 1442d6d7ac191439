"""The outputs fold on what a real kernel publishes (ipykernel_ext.server.outputs).

The unit tests feed the fold messages written by hand; these run cells in a real
``python3-ext`` kernel (KernelManager, real ZMQ, CurveZMQ required) and fold the IOPub
messages it actually sent, so the message shapes the fold relies on (stream splitting,
``transient.display_id``, ipywidgets' ``Output`` widget state updates) are the real ones.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness import cells
from harness.kernels import running_kernel
from ipykernel_ext.server.outputs import KernelOutputs

nbformat = pytest.importorskip("nbformat")


def run_cell(kc: Any, kernel: KernelOutputs, cell_id: str, code: str) -> str:
    """Run ``code`` as the cell ``cell_id`` and fold its IOPub messages; its msg_id."""
    cell = cells.run_cell(kc, code)  # keeps every message of the request
    reply, messages = cell.reply, cell.messages
    assert reply is not None
    msg_id = reply["parent_header"]["msg_id"]
    header = {"msg_id": msg_id, "session": kc.session.session, "msg_type": "execute_request"}
    kernel.on_execute_request({"header": header, "metadata": {"cellId": cell_id}})
    for msg in messages:
        kernel.on_iopub(msg)
    kernel.on_shell(reply)
    assert reply["content"]["status"] in ("ok", "error")
    return msg_id


def outputs(kernel: KernelOutputs, msg_id: str) -> list[dict[str, Any]]:
    folded = kernel.cells[msg_id].outputs.to_nbformat()
    for output in folded:
        nbformat.validate(nbformat.from_dict(output), ref="output", version=4, version_minor=5)
    return folded


CELL = r"""
import sys
from IPython.display import display, clear_output
for i in range(3):
    print(f"line {i}")
for pct in range(0, 101, 20):
    sys.stdout.write(f"\r{pct}%"); sys.stdout.flush()
print()
handle = display("v0", display_id=True)
print("after")
handle.update("v1")
for frame in range(3):
    clear_output(wait=True)
    print(f"frame {frame}")
sys.stdout.flush()  # stdout and stderr are buffered apart: fix their order
sys.stderr.write("warn\n"); sys.stderr.flush()
41 + 1
"""


OUTPUT_WIDGET = """
import ipywidgets as w
out = w.Output()
display(out)
with out:
    print('captured')
    display('captured display')
print('mine')
"""


def test_real_cells_fold_as_jupyterlab_keeps_them() -> None:
    """Streams, progress lines, clear_output and a display update in one cell; a display
    updated from another cell; what an Output widget captures stays out of the cell."""
    with running_kernel() as (_km, kc):
        kernel = KernelOutputs()
        msg_id = run_cell(kc, kernel, "c1", CELL)
        cell = kernel.cells[msg_id]
        assert (cell.state, cell.execution_count, cell.reply_status) == ("idle", 1, "ok")
        folded = outputs(kernel, msg_id)
        assert folded[0] == {"output_type": "stream", "name": "stdout", "text": "frame 2\n"}
        assert folded[1] == {"output_type": "stream", "name": "stderr", "text": "warn\n"}
        assert folded[2]["output_type"] == "execute_result"
        assert folded[2]["data"]["text/plain"] == "42"
        assert len(folded) == 3
        progress = run_cell(kc, kernel, "c2", CELL.split("handle =")[0])
        assert outputs(kernel, progress) == [
            {"output_type": "stream", "name": "stdout", "text": "line 0\nline 1\nline 2\n100%\n"}
        ]

        kernel = KernelOutputs()
        first = run_cell(kc, kernel, "c1", "h = display('v0', display_id='bar')")
        second = run_cell(kc, kernel, "c2", "print('x'); h.update('v1')")
        assert [o["data"]["text/plain"] for o in outputs(kernel, first)] == ["'v1'"]
        assert outputs(kernel, second) == [
            {"output_type": "stream", "name": "stdout", "text": "x\n"}
        ]

        pytest.importorskip("ipywidgets")
        kernel = KernelOutputs()
        folded = outputs(kernel, run_cell(kc, kernel, "c1", OUTPUT_WIDGET))
    assert [o["output_type"] for o in folded] == ["display_data", "stream"]
    assert "application/vnd.jupyter.widget-view+json" in folded[0]["data"]
    assert folded[1] == {"output_type": "stream", "name": "stdout", "text": "mine\n"}
