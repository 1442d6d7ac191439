"""Every widget model's state in one control-channel round trip (PROTOCOL.md section 3).

:func:`fetch_widget_states` sends a ``widget_state_request`` from a jupyter_client client
(blocking or async) and returns the reply with each binary buffer put back at its path;
:class:`WidgetStateError` is an error reply.
"""

from __future__ import annotations

import inspect
import time
from queue import Empty
from typing import Any


class WidgetStateError(RuntimeError):
    """The kernel answered a ``widget_state_request`` with an error reply.

    ``ename``, ``evalue`` and ``traceback`` are the reply's fields.
    """

    def __init__(self, content: dict[str, Any]) -> None:
        self.ename = str(content.get("ename", "Error"))
        self.evalue = str(content.get("evalue", ""))
        self.traceback = list(content.get("traceback", []))
        super().__init__(f"widget_state_request failed: {self.ename}: {self.evalue}")


def fetch_widget_states(
    client: Any, model_ids: list[str] | None = None, timeout: float | None = 30
) -> Any:
    """Every (or the asked-for) widget model's state, in one control-channel round trip.

    ``client`` is a jupyter_client ``BlockingKernelClient`` (the result is returned) or
    ``AsyncKernelClient`` (an awaitable is returned) with its channels started. The result is
    the ``widget_state_reply`` content with each binary buffer put back in place at its
    ``buffer_paths`` entry (as a ``memoryview``)::

        reply = fetch_widget_states(kc)  # or: await fetch_widget_states(akc)
        for model_id, model in reply["states"].items():
            model["model_name"], model["state"]  # what ipywidgets' update_states carries
        reply["missing"]  # asked for but not in states; reply["errors"] says why some failed

    Raises :class:`WidgetStateError` on an error reply and ``TimeoutError`` when no reply
    comes within ``timeout`` seconds (``None``: wait forever). Control replies to other
    requests that arrive meanwhile are discarded, as jupyter_client's own request helpers do.
    """
    if inspect.iscoroutinefunction(client.control_channel.get_msg):
        return async_fetch_widget_states(client, model_ids, timeout)
    msg_id = _send_widget_state_request(client, model_ids)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            reply = client.control_channel.get_msg(timeout=_remaining(deadline))
        except Empty:
            raise _timed_out(timeout) from None
        answer = _answer_to(msg_id, reply)
        if answer is not None:
            return answer


async def async_fetch_widget_states(
    client: Any, model_ids: list[str] | None = None, timeout: float | None = 30
) -> dict[str, Any]:
    """:func:`fetch_widget_states` for an ``AsyncKernelClient``."""
    msg_id = _send_widget_state_request(client, model_ids)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            reply = await client.control_channel.get_msg(timeout=_remaining(deadline))
        except Empty:
            raise _timed_out(timeout) from None
        answer = _answer_to(msg_id, reply)
        if answer is not None:
            return answer


def _send_widget_state_request(client: Any, model_ids: list[str] | None) -> str:
    content: dict[str, Any] = {} if model_ids is None else {"model_ids": list(model_ids)}
    msg = client.session.msg("widget_state_request", content)
    client.control_channel.send(msg)
    return str(msg["header"]["msg_id"])


def _answer_to(msg_id: str, reply: dict[str, Any]) -> dict[str, Any] | None:
    """What a reply loop makes of one control message, after sending request ``msg_id``:
    None for a reply to another request (discarded), else the reply's content with its
    buffers in place (:class:`WidgetStateError` for an error reply)."""
    if reply["parent_header"].get("msg_id") != msg_id:
        return None
    return _unpack_widget_state_reply(reply)


def _timed_out(timeout: float | None) -> TimeoutError:
    return TimeoutError(f"no widget_state_reply within {timeout} s")


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _unpack_widget_state_reply(reply: dict[str, Any]) -> dict[str, Any]:
    """The reply content with the message's buffers put back at their paths."""
    content: dict[str, Any] = reply["content"]
    if content.get("status") != "ok":
        raise WidgetStateError(content)
    states = content["states"]
    for path, buffer in zip(content["buffer_paths"], reply.get("buffers", []), strict=True):
        # [model_id, "state", key, ...]: a dict key was dropped, a list slot holds None.
        target = states
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = buffer
    return content
