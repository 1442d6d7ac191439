"""ipywidgets' control comm as its manager drives it: open, ``request_states``, close.

The requests a frontend sends to fetch every widget's state, and the predicates for the
answer, for the tests of :mod:`ipykernel_ext.kernel.busy.answers` / ``control_comm`` and the
widget-fetch benchmarks; and the run-time switch ``ExtKernel.answer_while_busy`` (off:
ipywidgets' own handler answers the comm).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from jupyter_client import BlockingKernelClient

from ipykernel_ext.protocol import CONTROL_COMM_TARGET

from .messages import is_status, shell_reply, wait_iopub

#: ipywidgets' control comm: one ``request_states``, one ``update_states`` with every model
#: (the kernel's name for it, ``ipykernel_ext.protocol``).
CONTROL_TARGET = CONTROL_COMM_TARGET


def open_control_comm(kc: BlockingKernelClient, version: str = "1.0.0") -> str:
    """Open a ``jupyter.widget.control`` comm as ipywidgets' manager does; its comm_id."""
    comm_id = uuid.uuid4().hex
    kc.shell_channel.send(
        kc.session.msg(
            "comm_open",
            {"comm_id": comm_id, "target_name": CONTROL_TARGET, "data": {}},
            metadata={"version": version},
        )
    )
    return comm_id


def request_states(kc: BlockingKernelClient, comm_id: str) -> str:
    """Send ``request_states`` on a control comm; the request's msg_id."""
    msg = kc.session.msg("comm_msg", {"comm_id": comm_id, "data": {"method": "request_states"}})
    kc.shell_channel.send(msg)
    return msg["header"]["msg_id"]


def is_update_states(comm_id: str) -> Callable[[dict[str, Any]], bool]:
    return lambda m: (
        m["msg_type"] == "comm_msg"
        and m["content"].get("comm_id") == comm_id
        and m["content"]["data"].get("method") == "update_states"
    )


def assert_closed_unanswered(
    kc: BlockingKernelClient, comm_id: str, seen: list[dict[str, Any]], what: str
) -> None:
    """The kernel closes control comm ``comm_id`` (stock's refusal); no update_states on it."""
    wait_iopub(
        kc,
        lambda m: m["msg_type"] == "comm_close" and m["content"].get("comm_id") == comm_id,
        what=what,
        seen=seen,
    )
    assert not any(is_update_states(comm_id)(m) for m in seen)


def update_states(kc: BlockingKernelClient, comm_id: str, timeout: float = 60) -> dict[str, Any]:
    """``request_states`` on the open control comm ``comm_id``; the ``update_states`` answer.

    The IOPub message as it came (buffers untouched). Raises AssertionError if none answers
    this request within ``timeout`` seconds.
    """
    request_id = request_states(kc, comm_id)
    msg = wait_iopub(kc, is_update_states(comm_id), what="update_states", timeout=timeout)
    assert msg["parent_header"]["msg_id"] == request_id
    return msg


def fetch_update_states(kc: BlockingKernelClient, timeout: float = 60) -> dict[str, Any]:
    """The whole control-comm exchange as ipywidgets' manager does it (open, ask, close).

    Returns ``states``, ``buffer_paths``, ``buffers`` (bytes) and the IOPub ``msg``.
    """
    comm_id = open_control_comm(kc)
    msg = update_states(kc, comm_id, timeout)
    kc.shell_channel.send(kc.session.msg("comm_close", {"comm_id": comm_id, "data": {}}))
    data = msg["content"]["data"]
    return {
        "states": data["states"],
        "buffer_paths": data["buffer_paths"],
        "buffers": [bytes(b) for b in msg["buffers"]],
        "msg": msg,
    }


def set_answer_while_busy(kc: BlockingKernelClient, on: bool) -> None:
    """Turn ``ExtKernel.answer_while_busy`` on or off at run time (a cell on the main shell)."""
    msg_id = kc.execute(f"get_ipython().kernel.answer_while_busy = {on!r}")
    wait_iopub(kc, is_status("idle", msg_id), what="the switch cell's idle")
    assert shell_reply(kc, msg_id)["content"]["status"] == "ok"


@contextmanager
def ipywidgets_answering(kc: BlockingKernelClient) -> Iterator[None]:
    """``answer_while_busy`` off inside (``kc`` sets it, a cell each way): an idle ExtKernel's
    control comm is answered by ipywidgets' own handler, not by our snapshot."""
    set_answer_while_busy(kc, False)
    try:
        yield
    finally:
        set_answer_while_busy(kc, True)


def fetch_ipywidgets_update_states(
    kc: BlockingKernelClient, via: BlockingKernelClient | None = None
) -> dict[str, Any]:
    """ipywidgets' own ``update_states`` (its handler, not ours), from an idle ExtKernel.

    ``answer_while_busy`` is off for the exchange (``kc`` sets it; ``via`` asks, default
    ``kc``), so the control comm is opened and answered by ipywidgets alone.
    """
    with ipywidgets_answering(kc):
        return fetch_update_states(via or kc)
