"""Telling a client's own ``comm_echo`` from the other frontends' (PROTOCOL.md section 2)."""

from __future__ import annotations

from typing import Any

from ..protocol import COMM_ECHO_MSG_TYPE


def is_own_echo(msg: dict[str, Any], session_id: str) -> bool:
    """True if ``msg`` is a ``comm_echo`` of a message sent by the session ``session_id``.

    A frontend skips its own echoes (it already knows what it sent) and acts on the others'::

        msg = kc.get_iopub_msg()
        if msg["msg_type"] == "comm_echo" and not is_own_echo(msg, kc.session.session):
            ...  # another frontend opened, updated or closed a comm
    """
    return msg.get("msg_type") == COMM_ECHO_MSG_TYPE and (
        msg.get("parent_header", {}).get("session") == session_id
    )
