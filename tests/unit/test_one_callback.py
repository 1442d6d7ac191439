"""The parts that keep widget callbacks whole under a UI loop (issue 51), in-process: the main
shell's lock kept whatever is assigned (``KeptMainLock``, with the table of shell handlers
told), and ``CallbackGate``'s two sides (real threads, real asyncio loops; the waits are
events and futures, never sleeps).

New classes: on main these tests fail at their import.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from ipykernel_ext.kernel.comms.one_callback import CallbackGate, InterruptCount
from ipykernel_ext.kernel.shell_handlers import KeptMainLock, ShellHandlers


class Kernel(KeptMainLock):
    def __init__(self) -> None:
        self._main_asyncio_lock = asyncio.Lock()  # as stock's __init__
        self.shell_handlers = ShellHandlers({"execute_request": "own", "comm_msg": "comm"})


def test_a_swapped_lock_is_noted_and_never_used() -> None:
    kernel = Kernel()
    lock = kernel._main_asyncio_lock
    kernel.shell_handlers["execute_request"] = "deferring"  # jupyter-ui-poll's handler
    swap: Any = contextlib.nullcontext()
    kernel._main_asyncio_lock = swap  # jupyter-ui-poll's swap
    assert kernel._main_asyncio_lock is lock
    assert kernel.main_lock_swap is swap
    # While the swap is in force the kernel dispatches execute_request with its own handler.
    assert kernel.shell_handlers.get("execute_request") == "own"
    assert kernel.shell_handlers["comm_msg"] == "comm"
    kernel._main_asyncio_lock = lock  # jupyter-ui-poll's restore
    kernel.shell_handlers["execute_request"] = "own"
    assert kernel.main_lock_swap is None and kernel._main_asyncio_lock is lock
    kernel.shell_handlers["execute_request"] = "another wrapper"
    assert kernel.shell_handlers.get("execute_request") == "another wrapper"  # stock's lookup


def test_the_main_side_waits_for_a_callback_off_the_main_thread() -> None:
    gate = CallbackGate()
    entered, leave = threading.Event(), threading.Event()

    def off_thread() -> None:
        with gate.held(nested=False):
            entered.set()
            leave.wait(30)

    thread = threading.Thread(target=off_thread)
    thread.start()
    assert entered.wait(30)
    order: list[str] = []

    async def main_side() -> None:
        waiting = asyncio.ensure_future(gate.wait_free_async(enter_main=True))
        await asyncio.sleep(0)
        order.append(f"waiting {not waiting.done()}")
        leave.set()
        await waiting
        order.append("entered")

    asyncio.run(main_side())
    thread.join(30)
    assert order == ["waiting True", "entered"]
    assert gate.free


def test_a_thread_off_the_main_one_waits_for_the_main_side_unless_nested() -> None:
    gate = CallbackGate()
    done: list[str] = []
    with gate.main_held():
        nested = threading.Thread(target=lambda: _enter(gate, True, done, "nested"))
        nested.start()
        nested.join(30)
        assert done == ["nested"]  # a handoff inside the main side's callback: at once
        other = threading.Thread(target=lambda: _enter(gate, False, done, "other"))
        other.start()
        other.join(0.05)  # (not a verdict: it is still waiting either way)
        assert done == ["nested"]
    other.join(30)
    assert done == ["nested", "other"]


def _enter(gate: CallbackGate, nested: bool, done: list[str], name: str) -> None:
    with gate.held(nested=nested):
        done.append(name)


def test_an_interrupt_stops_only_the_handoff_it_came_in() -> None:
    count = InterruptCount()

    async def handoff() -> bool:
        interrupted = count.since_handoff()
        again = count.since_handoff()  # a second do_one_iteration() of the same poll(n)
        count.taken += 1  # (the handler's count, without raising)
        return interrupted() and again()

    assert asyncio.run(handoff())

    async def next_handoff() -> bool:
        return count.since_handoff()()

    assert not asyncio.run(next_handoff())
