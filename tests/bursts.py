"""IOPub bursts shared by the tests that run them (tests/test_iopub.py, tests/test_cluster.py).

The cells that make a burst (a widget grid, a loop of comm_opens), how one client collects a
burst, and the stall scenario's settings.
"""

from __future__ import annotations

import textwrap
import time
from dataclasses import dataclass
from typing import Any

from helpers import execute_and_collect
from jupyter_client import BlockingKernelClient

#: A comm target no client registers: for a client, a comm_open to it is just a message.
UNKNOWN_TARGET = "ipykernel_ext.tests.nobody"

#: The first words of the kernel's stall warning (ipykernel_ext/kernel/iopub.py).
STALL_WARNING = "subscriber stall(s): a frontend's queue stayed full"

#: The stall kernel's options. A subscriber that reads is treated as stalled if it cannot
#: take about half a queue (libzmq's low-water mark) within one send timeout: with these, the
#: reading client of these tests must keep up with 250 messages a second, and may be starved
#: of CPU for up to 2 s by a busy machine, without being taken for a stalled one.
STALL_SNDHWM = 1000
STALL_TIMEOUT_MS = 2000
STALL_BURST = 20_000


def widget_grid_code(buttons: int) -> str:
    """A cell that displays a GridBox of ``buttons`` Buttons: 3 comms per Button, 2 more."""
    return textwrap.dedent(
        f"""
        import ipywidgets as w
        from IPython.display import display
        display(w.GridBox([w.Button(description=str(i)) for i in range({buttons})]))
        """
    )


def comm_loop_code(count: int, pad: int = 0) -> str:
    """A cell that opens ``count`` comms to a target nobody registered (one comm_open each)."""
    return textwrap.dedent(
        f"""
        import comm
        _pad = "x" * {pad}
        for _i in range({count}):
            comm.create_comm(target_name={UNKNOWN_TARGET!r}, data={{"i": _i, "pad": _pad}})
        """
    )


@dataclass
class Burst:
    """What one client saw of one cell: counts by type, the other messages, the time."""

    reply: dict[str, Any]
    counts: dict[str, int]
    others: list[dict[str, Any]]
    seconds: float


def run_burst(kc: BlockingKernelClient, code: str, timeout: float = 120) -> Burst:
    """Execute ``code`` and collect its IOPub until idle, keeping all but the comm_opens."""
    counts: dict[str, int] = {}

    def keep(msg: dict[str, Any]) -> bool:
        counts[msg["msg_type"]] = counts.get(msg["msg_type"], 0) + 1
        return msg["msg_type"] != "comm_open"

    start = time.monotonic()
    reply, others = execute_and_collect(kc, code, timeout=timeout, keep=keep)
    return Burst(reply, counts, others, time.monotonic() - start)


