"""The missed-messages notice (PROTOCOL.md section 1), against real kernels over CurveZMQ.

A subscriber that never reads (:class:`~harness.raw_subscriber.RawSubscriber`) is given up after the
send timeout; the reading client must then find exactly one ``stream`` notice on a cell's
stderr, just ahead of that request's ``idle``, and ``iopub_stats`` must count it. The case here
is a give-up **after the cell's idle was queued** (the common case: a short cell and a long
send timeout), reached by a barrier: the send timeout is shortened at run time only once the
cell and the next request have ended. The cell is told, not the next one;
``--no-iopub-missed-notice`` tells nobody. A give-up during the cell: tests/kernel/test_iopub.py
(test_stalled_subscriber) on a real kernel, tests/unit/test_iopub_socket.py to the message.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.bursts import (
    STALL_BURST,
    STALL_SNDHWM,
    STALL_TIMEOUT_MS,
    comm_loop_code,
)
from harness.kernels import (
    EXT_KERNEL,
    iopub_stats,
    running_kernel,
    unbounded_client,
    wait_stats,
)
from harness.messages import get_reply, is_status, wait_iopub
from harness.raw_subscriber import RawSubscriber
from ipykernel_ext.kernel.iopub.notice import NOTICE_PREFIX

#: Long enough that no give-up comes before the test shortens it (a hang guard, no verdict).
LONG_TIMEOUT_MS = 600_000


def notices_in(messages: list[dict[str, Any]]) -> list[int]:
    """The positions of the missed-messages notices in ``messages``."""
    return [
        i
        for i, m in enumerate(messages)
        if m["msg_type"] == "stream" and m["content"]["text"].startswith(NOTICE_PREFIX)
    ]


def assert_told_once(
    messages: list[dict[str, Any]],
    msg_id: str,
    missed: int,
    before: dict[str, Any],
    after: dict[str, Any],
) -> None:
    """One notice, on ``msg_id``'s stderr, right ahead of its idle, counted once."""
    [at] = notices_in(messages)
    notice = messages[at]
    assert notice["parent_header"]["msg_id"] == msg_id, notice["parent_header"]
    assert notice["content"]["name"] == "stderr"
    assert f"at least {missed} " in notice["content"]["text"], (notice, missed)
    assert is_status("idle", msg_id)(messages[at + 1]), messages[at + 1]
    assert after["notices"] - before["notices"] == 1, (before, after)


# Hang guard: a kernel, a burst against a subscriber that never reads, the send timeout
# running out, then the notice.
@pytest.mark.timeout(240)
@pytest.mark.parametrize("notice", [True, False], ids=["notice", "no-notice"])
def test_a_give_up_after_the_cell_ended_tells_that_cell(notice: bool) -> None:
    args = [f"--iopub-sndhwm={STALL_SNDHWM}", f"--iopub-send-timeout={LONG_TIMEOUT_MS}"]
    if not notice:
        args.append("--no-iopub-missed-notice")
    # The reading client reads IOPub only once the next request has ended: its queue must
    # never be the one found full (unbounded_client), or it would be given up as well.
    with running_kernel(EXT_KERNEL, args, unbounded_client) as (km, kc), RawSubscriber(km):
        before = iopub_stats(kc)
        cell_id = kc.execute(comm_loop_code(STALL_BURST, pad=1000))
        get_reply(kc, cell_id, timeout=120)
        wait_stats(kc, lambda s: s["backlog_messages"] > 0, "the stalled queue full", 120)
        # The main shell runs one request at a time: the cell's idle is queued before the next
        # request starts, and the timeout is shortened (on the IOPub thread) after that.
        later_id = kc.execute(f"get_ipython().kernel.iopub_send_timeout = {STALL_TIMEOUT_MS}")
        get_reply(kc, later_id, timeout=120)
        seen: list[dict[str, Any]] = []
        wait_iopub(kc, is_status("idle", later_id), "the next request's idle", 120, seen)
        after = iopub_stats(kc)
    ours = [m for m in seen if m["parent_header"].get("msg_id") == cell_id]
    assert sum(m["msg_type"] == "comm_open" for m in ours) == STALL_BURST
    assert after["timeouts"] - before["timeouts"] == 1, (before, after)
    missed = after["missed"] - before["missed"]
    assert missed >= 1
    if notice:
        assert_told_once(seen, cell_id, missed, before, after)
    else:
        assert notices_in(seen) == []
        assert after["notices"] == before["notices"]
