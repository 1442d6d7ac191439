"""A lasting kernel's cell journal, asked on its control channel (docs/PROTOCOL.md section 9).

What the kernel kept while no server was up is a barrier tests wait on: the cells it lists,
each with its state, the bytes of outputs kept and a waiting ``input_request``.
"""

from __future__ import annotations

from typing import Any, cast

from jupyter_client import BlockingKernelClient
from jupyter_client.connect import KernelConnectionInfo

from .messages import control_request

#: The hang guard of the question (seconds), never a verdict on speed.
ANSWER_SECONDS = 120


def journal_of(connection_info: dict[str, Any]) -> list[dict[str, Any]]:
    """The journaled cells of the kernel at ``connection_info`` (an empty ``journal_request``
    changes nothing)."""
    kc = BlockingKernelClient()
    kc.load_connection_info(cast(KernelConnectionInfo, connection_info))
    kc.start_channels(shell=False, iopub=False, stdin=False, hb=False)
    try:
        content = control_request(kc, "journal_request", timeout=ANSWER_SECONDS)["content"]
        if content.get("status") != "ok":
            raise RuntimeError(f"journal_request failed: {content}")
        return list(content["cells"])
    finally:
        kc.stop_channels()
