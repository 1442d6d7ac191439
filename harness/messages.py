"""Requests and replies on a kernel client, and reading its IOPub: what the harness waits on.

Absence is shown with a barrier, not a quiet period: :func:`iopub_until_barrier` sends a
control request and collects IOPub up to that request's ``idle``. The control thread handles
requests one at a time, so whatever an earlier control request published comes first.
A quiet period (:func:`drain_iopub`) is for benchmarks only. Running a whole cell is
:func:`harness.cells.run_cell`.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from typing import Any

from jupyter_client import BlockingKernelClient


def send(kc: BlockingKernelClient, msg_type: str, content: dict[str, Any], **kw: Any) -> str:
    msg = kc.session.msg(msg_type, content, **kw)
    kc.shell_channel.send(msg)
    return msg["header"]["msg_id"]


def get_reply(
    kc: BlockingKernelClient, msg_id: str, channel: str = "shell", timeout: float = 60
) -> dict[str, Any]:
    """The reply to ``msg_id`` on ``channel`` ("shell" or "control"), as ipykernel's tests do.

    Replies to other requests that come first are skipped (a barrier's, the client's own
    kernel_info); raises queue.Empty if none comes within ``timeout`` seconds.
    """
    get = getattr(kc, f"get_{channel}_msg")
    deadline = time.monotonic() + timeout
    while True:
        reply = get(timeout=max(0.01, deadline - time.monotonic()))
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply


def shell_reply(kc: BlockingKernelClient, msg_id: str, timeout: float = 60) -> dict[str, Any]:
    """The shell reply to ``msg_id`` (see :func:`get_reply`)."""
    return get_reply(kc, msg_id, "shell", timeout)


def control_request(
    kc: BlockingKernelClient,
    msg_type: str,
    content: dict[str, Any] | None = None,
    timeout: float = 30,
) -> dict[str, Any]:
    """Send a control request and return its reply (the whole message)."""
    msg = kc.session.msg(msg_type, {} if content is None else content)
    kc.control_channel.send(msg)
    return get_reply(kc, msg["header"]["msg_id"], "control", timeout)


def iopub_until_barrier(kc: BlockingKernelClient, timeout: float = 30) -> list[dict[str, Any]]:
    """Every IOPub message before the ``idle`` of a barrier control ``kernel_info_request``.

    The barrier's own busy/idle are left out.
    """
    barrier = kc.session.msg("kernel_info_request", {})
    barrier_id = barrier["header"]["msg_id"]
    kc.control_channel.send(barrier)
    deadline = time.monotonic() + timeout
    messages = []
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no idle for the barrier request in {timeout} s")
        msg = kc.get_iopub_msg(timeout=remaining)
        if msg["parent_header"].get("msg_id") != barrier_id:
            messages.append(msg)
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    # Its reply, so the next control_request does not have to skip it.
    while kc.control_channel.get_msg(timeout=timeout)["parent_header"].get("msg_id") != barrier_id:
        pass
    return messages


def wait_iopub(
    kc: BlockingKernelClient,
    matches: Callable[[dict[str, Any]], bool],
    what: str,
    timeout: float = 60,
    seen: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The first IOPub message that ``matches``; every message read is added to ``seen``.

    Raises AssertionError naming ``what`` if none comes within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            msg = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"no IOPub message for {what} in {timeout} s") from None
        if seen is not None:
            seen.append(msg)
        if matches(msg):
            return msg


def is_status(state: str, msg_id: str) -> Callable[[dict[str, Any]], bool]:
    """A predicate for ``wait_iopub``: the ``status: <state>`` whose parent is ``msg_id``."""
    return lambda m: (
        m["msg_type"] == "status"
        and m["parent_header"].get("msg_id") == msg_id
        and m["content"]["execution_state"] == state
    )


def is_idle_for(msg: dict[str, Any], msg_id: str) -> bool:
    """Is ``msg`` (from :meth:`RawSubscriber.recv`: content still packed) the idle of ``msg_id``?"""
    return (
        msg["header"]["msg_type"] == "status"
        and msg["parent_header"].get("msg_id") == msg_id
        and b'"idle"' in bytes(msg["content"])
    )


def drain_iopub(kc: BlockingKernelClient, quiet: float = 0.5) -> list[dict[str, Any]]:
    """Every IOPub message until none arrives for ``quiet`` seconds: a quiet period, for
    benchmarks. A test empties the queue, or shows that something was *not* sent, with
    :func:`iopub_until_barrier`."""
    messages = []
    while True:
        try:
            messages.append(kc.get_iopub_msg(timeout=quiet))
        except queue.Empty:
            return messages


def printed(seen: list[dict[str, Any]], msg_id: str) -> str:
    """What the request ``msg_id`` printed, of the IOPub messages ``seen`` (its stream texts)."""
    return "".join(
        m["content"]["text"]
        for m in seen
        if m["msg_type"] == "stream" and m["parent_header"].get("msg_id") == msg_id
    )


def count_types(messages: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for msg in messages:
        counts[msg["msg_type"]] = counts.get(msg["msg_type"], 0) + 1
    return counts
