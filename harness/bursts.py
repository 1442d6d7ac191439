"""IOPub bursts: the cells that make one, how one client collects one, and their settings.

The cells (a widget grid, a loop of comm_opens), the collection of a burst by a kernel client
(:func:`run_burst`) or a websocket client whose server is paused mid-burst
(:func:`run_paused_burst`), and the settings of the stall and pause scenarios, shared by the
IOPub tests and benchmarks.
"""

from __future__ import annotations

import textwrap
import time
from dataclasses import dataclass
from typing import Any

from jupyter_client import BlockingKernelClient

from harness.cells import run_cell

#: A comm target no client registers: for a client, a comm_open to it is just a message.
UNKNOWN_TARGET = "ipykernel_ext.tests.nobody"

#: The first words of the kernel's stall warning (ipykernel_ext/kernel/iopub/socket.py).
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


def gated_widget_grid_code(buttons: int, gate_after: int, release: str) -> str:
    """:func:`widget_grid_code`'s burst, stopped after ``gate_after`` Buttons until the file
    ``release`` exists (its comm_opens are the same: 3 per Button, 2 more for the grid).

    For a test that pauses the reader mid-burst and needs the rest of the burst made while it
    is paused, however fast the kernel and the reader are: the reader starts its pause at
    the ``3 * gate_after``-th comm_open and makes ``release`` once it is paused. Waiting for
    a file is a barrier; the 10 ms only paces the look.
    """
    return textwrap.dedent(
        f"""
        import os as _os, time as _time
        import ipywidgets as w
        from IPython.display import display
        _buttons = []
        for i in range({buttons}):
            if i == {gate_after}:
                while not _os.path.exists({release!r}):
                    _time.sleep(0.01)
            _buttons.append(w.Button(description=str(i)))
        display(w.GridBox(_buttons))
        """
    )


def alternating_streams_code(steps: int) -> str:
    """A cell that prints, each step, ``out i`` on stdout then ``err i`` on stderr, each
    flushed: two streams that alternate, so nothing of them merges."""
    return (
        "import sys\n"
        f"for i in range({steps}):\n"
        "    print(f'out {i}', flush=True)\n"
        "    print(f'err {i}', file=sys.stderr, flush=True)"
    )


def thread_beside_cell_code(lines: int, suffix: str = "") -> tuple[str, str]:
    """(setup, cell): the setup cell starts a thread that prints ``bg i`` (plus ``suffix``)
    ``lines`` times, each flushed, once the cell sets ``go``; the cell prints as many
    ``fg i`` (plus ``suffix``) and joins it. The setup cell's context goes with the thread:
    its lines are the setup cell's output, as ipykernel routes a thread started with a
    cell's context, beside the running cell's."""
    setup = (
        "import contextvars, threading\n"
        "go = threading.Event()\n"
        "def chatter():\n"
        "    go.wait()\n"
        f"    for i in range({lines}): print(f'bg {{i}}{suffix}', flush=True)\n"
        "bg = threading.Thread(target=contextvars.copy_context().run, args=(chatter,))\n"
        "bg.start()"
    )
    cell = f"go.set()\nfor i in range({lines}): print(f'fg {{i}}{suffix}', flush=True)\nbg.join()"
    return setup, cell


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
    start = time.monotonic()
    run = run_cell(kc, code, timeout, keep=lambda m: m["msg_type"] != "comm_open")
    assert run.reply is not None  # run_cell raises rather than return without it
    return Burst(run.reply, run.counts, run.messages, time.monotonic() - start)


def assert_burst_whole(burst: Burst, comm_opens: int) -> None:
    """A burst that ends in one display reached the client whole: the reply ok, its
    ``comm_opens`` comm_opens (3 per Button of :func:`widget_grid_code`, 2 for the grid), the
    display, and the idle last."""
    assert burst.reply["content"]["status"] == "ok", burst.reply["content"]
    assert burst.counts.get("comm_open", 0) == comm_opens, burst.counts
    assert burst.counts.get("display_data", 0) == 1, burst.counts
    assert burst.others[-1]["content"]["execution_state"] == "idle", burst.others[-1]


#: The seed's burst: a GridBox of 3000 Buttons (3 comm_open each, 2 for the grid: 9002).
SEED_BUTTONS = 3000
SEED_COMM_OPEN = 3 * SEED_BUTTONS + 2

#: When the pause tests pause the reader: once the client has seen this many comm_open, so
#: the pause always hits the middle of the burst, whatever the machine's speed.
PAUSE_AFTER_COMM_OPEN = 300


@dataclass
class PausedBurst:
    """What a websocket client saw of a burst during which something paused its reader."""

    counts: dict[str, int]
    idle: bool
    reply: dict[str, Any] | None
    others: list[dict[str, Any]]
    #: True once the pause had been started (the trigger count was reached); None: no pause
    #: was asked for (a reader that is slow all along)
    paused: bool | None

    @property
    def status(self) -> str | None:
        """The execute_reply's status (None if no reply came)."""
        return None if self.reply is None else self.reply["content"]["status"]


def run_paused_burst(
    ws: Any,
    code: str,
    pause: Any = None,
    after: int = PAUSE_AFTER_COMM_OPEN,
    timeout: float = 120,
) -> PausedBurst:
    """Run ``code`` on a :class:`harness.kernel_websocket.KernelWebsocket`; call ``pause()``
    (if given) at comm_open number ``after``; collect until the idle (or ``timeout``: a lost
    idle never comes).

    ``pause`` must return at once (``JupyterServer.block_event_loop`` / ``stop_process``
    return a ``ServerPause`` running in a thread), so the client keeps reading meanwhile;
    the pause is joined before this returns.
    """
    counts: dict[str, int] = {}
    started: list[Any] = []

    def on_message(msg: dict[str, Any]) -> None:
        counts[msg["msg_type"]] = counts.get(msg["msg_type"], 0) + 1
        if pause is not None and msg["msg_type"] == "comm_open" and counts["comm_open"] == after:
            started.append(pause())

    msg_id = ws.execute(code)
    try:
        reply, iopub = ws.collect_execution(msg_id, timeout=timeout, on_message=on_message)
        idle = True
    except TimeoutError as exc:
        reply, iopub, idle = None, getattr(exc, "messages", []), False
    for p in started:
        p.join()
    others = [m for m in iopub if m["msg_type"] != "comm_open"]
    return PausedBurst(counts, idle, reply, others, bool(started) if pause is not None else None)
