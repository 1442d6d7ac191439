"""The main shell at a comm marker takes its lock, or lets its holder's await through (issue 44).

``CommsOnMainShell._hold_unless_awaiting`` on a real ``asyncio.Lock``, in-process: the request
the lock was just handed to (queued before the marker) keeps its place, and once it holds the
lock and awaits (an async cell) the marker's messages are handled mid-cell instead of waiting
behind it, out of its reach. Order is the verdict: each step runs when the loop gets to it.
``CommsOnMainShell._put_back`` with a real ``Session``: a message stopped before its ``busy``
goes back first and is accepted when dispatched again; one whose handling began never does.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from jupyter_client.session import Session

from ipykernel_ext.kernel.comms.comm_routing import CommInbox, Routed, Waiting
from ipykernel_ext.kernel.comms.main_shell import CommsOnMainShell
from ipykernel_ext.kernel.comms.mid_cell import MidCellComm


def hold_unless_awaiting(lock: asyncio.Lock, tasks: int) -> Any:
    """The method, for a main shell with ``tasks`` of its messages in flight (ours included)."""
    main_shell = cast(Any, SimpleNamespace(_main_shell_tasks=tasks))
    return CommsOnMainShell._hold_unless_awaiting(main_shell, lock)


def test_a_free_lock_nobody_waits_for_is_taken_at_once() -> None:
    async def scenario() -> bool:
        lock = asyncio.Lock()
        held: bool = await hold_unless_awaiting(lock, 1)
        assert lock.locked()
        lock.release()
        return held

    assert asyncio.run(scenario()) is True


def test_a_request_the_lock_was_handed_to_keeps_it_and_its_await_lets_the_marker_through() -> None:
    """An async cell ends with a request queued behind it; the marker comes in that window.

    The old main took the message first and then waited for the lock behind that request (an
    async cell awaiting the message's callback would wait for good): waiting for the lock here
    would hang (the second request ends only after the marker)."""

    async def scenario() -> list[str]:
        lock = asyncio.Lock()
        order: list[str] = []
        cell_may_end, second_may_end = asyncio.Event(), asyncio.Event()

        async def cell() -> None:
            async with lock:
                await cell_may_end.wait()
            order.append("cell ended")

        async def second() -> None:
            async with lock:
                order.append("second holds the lock")
                await second_may_end.wait()  # an async cell awaiting a widget change

        first_task = asyncio.create_task(cell())
        await asyncio.sleep(0)  # the cell holds the lock
        second_task = asyncio.create_task(second())
        await asyncio.sleep(0)  # the second request waits for it
        cell_may_end.set()
        await asyncio.sleep(0)  # the cell releases: the lock is handed to the second request
        assert not lock.locked()
        # The marker, in the window between the release and the second request's wake-up.
        # Awaited in this task (no wait_for: its task would let the second request run
        # first); pytest's timeout is the hang guard.
        held = await hold_unless_awaiting(lock, 3)
        order.append(f"marker: held={held}")
        assert lock.locked()  # by the second request, which awaits
        second_may_end.set()
        await asyncio.gather(first_task, second_task)
        assert not lock.locked()  # the marker's cancelled request left nothing behind
        return order

    assert asyncio.run(scenario()) == [
        "cell ended",
        "second holds the lock",
        "marker: held=False",
    ]


class PutBackMainShell:
    """What ``CommsOnMainShell._put_back`` uses: the inbox, the session, where markers go."""

    def __init__(self) -> None:
        self.comm_inbox = CommInbox()
        self.session = Session(key=b"put-back")
        self.queued: list[list[bytes]] = []

    def _queue_marker(self, marker: list[bytes]) -> None:
        self.queued.append(marker)

    def put_back(self, waiting: Waiting, mid: MidCellComm, seen_before: bool) -> None:
        CommsOnMainShell._put_back(cast(Any, self), waiting, mid, seen_before)


def test_a_message_put_back_after_its_signature_was_checked_is_accepted_again() -> None:
    """Stopped between its verification and its busy (an interrupt mid-cell): back at the
    inbox's front, its signature forgotten, so that its dispatch is not refused as a replay;
    its marker, met already, is queued again."""
    main_shell = PutBackMainShell()
    session = main_shell.session
    frames = session.serialize(session.msg("comm_msg", {"comm_id": "c"}))  # [DELIM, sig, ...]
    marker = main_shell.comm_inbox.put(frames, Routed(None))
    assert marker is not None
    number = CommInbox.marker_number(marker)
    assert number is not None
    main_shell.comm_inbox.met(number)
    waiting = main_shell.comm_inbox.take_next(met_only=True)
    assert waiting is not None
    session.deserialize(frames[1:])  # verified, as dispatch_shell does, then stopped
    main_shell.put_back(waiting, MidCellComm(), seen_before=False)
    again = main_shell.comm_inbox.take_next()
    assert again is waiting
    assert session.deserialize(frames[1:])["header"]["msg_type"] == "comm_msg"
    assert len(main_shell.queued) == 1


def test_a_message_whose_handling_began_is_never_put_back() -> None:
    main_shell = PutBackMainShell()
    main_shell.comm_inbox.put([b"m"], Routed(None))
    waiting = main_shell.comm_inbox.take_next()
    assert waiting is not None
    mid = MidCellComm(parent={"header": {}})  # its busy was published
    main_shell.put_back(waiting, mid, seen_before=False)
    assert main_shell.comm_inbox.take_next() is None and main_shell.queued == []
