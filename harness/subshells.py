"""Shell messages on a kernel subshell, as JupyterLab 4.4+ and Notebook 7 send comm messages.

``send_on`` names a subshell in ``header.subshell_id`` as JupyterLab's KernelConnection does
(``execute_on``: a subshell console's cell);
``update`` and ``click`` are ipywidgets' frontend messages, ``widget_and_subshell`` makes the
widget they go to; ``subshell_barrier`` returns once a
subshell answered a request sent after everything before it; ``wait_idles`` waits for the
``idle`` of each request. ``cell_until_released`` is a main cell held until a subshell
console's cell releases it, and ``assert_the_cell_stays_busy`` what IOPub must show of comm
messages handled while such a cell runs.
"""

from __future__ import annotations

from typing import Any

from jupyter_client import BlockingKernelClient

from .cells import START_MARKER, evaluate, run, start_cell
from .messages import control_request, get_reply, is_status, wait_iopub

Message = dict[str, Any]


def create_subshell(kc: BlockingKernelClient) -> str:
    reply = control_request(kc, "create_subshell_request")
    assert reply["content"]["status"] == "ok", reply["content"]
    subshell_id: str = reply["content"]["subshell_id"]
    return subshell_id


def widget_and_subshell(kc: BlockingKernelClient, code: str, widget: str) -> tuple[str, str]:
    """Run ``code``; the model id of its ``widget`` and a new subshell (the frontend's)."""
    run(kc, code)
    return evaluate(kc, f"{widget}.model_id"), create_subshell(kc)


def send_on(kc: BlockingKernelClient, subshell_id: str, msg_type: str, content: Message) -> str:
    """Send a shell message on ``subshell_id``, as JupyterLab's KernelConnection does."""
    msg = kc.session.msg(msg_type, content)
    msg["header"]["subshell_id"] = subshell_id
    kc.shell_channel.send(msg)
    msg_id: str = msg["header"]["msg_id"]
    return msg_id


def execute_on(kc: BlockingKernelClient, subshell_id: str, code: str) -> str:
    """Run ``code`` on ``subshell_id``, as a subshell console's cell; its msg_id."""
    return send_on(kc, subshell_id, "execute_request", {"code": code, "silent": False})


def update(kc: BlockingKernelClient, subshell_id: str, model_id: str, **state: Any) -> str:
    """A widget's ``update`` from the frontend (a slider moved)."""
    data = {"method": "update", "state": state, "buffer_paths": []}
    return send_on(kc, subshell_id, "comm_msg", {"comm_id": model_id, "data": data})


def click(kc: BlockingKernelClient, subshell_id: str, model_id: str) -> str:
    """A Button's click from the frontend."""
    data = {"method": "custom", "content": {"event": "click"}}
    return send_on(kc, subshell_id, "comm_msg", {"comm_id": model_id, "data": data})


def subshell_barrier(kc: BlockingKernelClient, subshell_id: str) -> None:
    """Return once the subshell answered a request sent after everything before it.

    The shell-channel thread routes in arrival order and a subshell handles its messages in
    order: stock's routing has run every comm callback sent there before by now.
    """
    get_reply(kc, send_on(kc, subshell_id, "kernel_info_request", {}))


def wait_idles(kc: BlockingKernelClient, msg_ids: list[str], seen: list[Message]) -> None:
    """Wait for the ``idle`` of each of ``msg_ids``; every IOPub message read goes to ``seen``."""
    for msg_id in msg_ids:
        if not any(is_status("idle", msg_id)(m) for m in seen):
            wait_iopub(kc, is_status("idle", msg_id), what=f"the idle of {msg_id}", seen=seen)


def cell_until_released(kc: BlockingKernelClient, seen: list[Message], then: str = "") -> str:
    """A main cell that lets nothing through until a subshell console's cell sets
    ``release`` (``execute_on(kc, console, "release = True")``), then runs ``then``; its
    msg_id once it runs. ``then`` and the wait itself let nothing through but what ``then``
    asks for; ``seen`` collects the IOPub messages read meanwhile."""
    return start_cell(
        kc,
        f"import time as _time\nrelease = False\nprint({START_MARKER!r}, flush=True)\n"
        f"while not release:\n    _time.sleep(0.01)\n{then}\n",
        seen,
    )


def assert_the_cell_stays_busy(seen: list[Message], handled: list[str], cell: str) -> None:
    """Each of ``handled`` (comm messages handled while ``cell`` ran) has its ``idle`` followed
    by ``busy`` for ``cell``, which still runs: the kernel never looks idle mid-cell; the
    cell's own ``idle`` is the last status of ``seen``."""
    statuses = [
        (m["parent_header"].get("msg_id"), m["content"]["execution_state"])
        for m in seen
        if m["msg_type"] == "status"
    ]
    for msg_id in handled:
        after = statuses[statuses.index((msg_id, "idle")) + 1]
        assert after == (cell, "busy"), statuses
    assert statuses[-1] == (cell, "idle"), statuses
