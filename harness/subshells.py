"""Shell messages on a kernel subshell, as JupyterLab 4.4+ and Notebook 7 send comm messages.

``send_on`` names a subshell in ``header.subshell_id`` as JupyterLab's KernelConnection does
(``execute_on``: a subshell console's cell);
``update`` and ``click`` are ipywidgets' frontend messages, ``widget_and_subshell`` makes the
widget they go to; ``subshell_barrier`` returns once a
subshell answered a request sent after everything before it; ``wait_idles`` waits for the
``idle`` of each request.
"""

from __future__ import annotations

from typing import Any

from jupyter_client import BlockingKernelClient

from .cells import evaluate, run
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
