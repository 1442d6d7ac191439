"""The comm inbox's markers (issue 44): one marker per run of comm messages with nothing else
for the main shell between them, so the main shell's inproc queue never fills with them; a
marker's batch is exactly what arrived before the next request queued for the main shell; a
message put back goes first, with a marker only if no queued one will reach it.

In-process: the inbox alone, driven as the shell-channel thread and the main shell drive it.
"""

from __future__ import annotations

from ipykernel_ext.kernel.comms.comm_routing import CommInbox, Routed, Waiting


def put(inbox: CommInbox, name: str) -> list[bytes] | None:
    return inbox.put([name.encode()], Routed(None))


def names(taken: list[Waiting | None]) -> list[str]:
    return [waiting.msg[0].decode() for waiting in taken if waiting is not None]


def drain(inbox: CommInbox, met_only: bool = True) -> list[str]:
    taken = []
    while (waiting := inbox.take_next(met_only=met_only)) is not None:
        taken.append(waiting)
    return names(list(taken))


def test_a_run_of_messages_shares_one_marker_however_long() -> None:
    """A UI loop's thousands of messages, each handled mid-cell: one marker in all.

    Fails on the old main (one marker per message; ``put`` returned a marker each time)."""
    inbox = CommInbox()
    markers = []
    for n in range(10_000):
        marker = put(inbox, f"m{n}")
        if marker is not None:
            markers.append(marker)
        assert inbox.take_next() is not None  # handled mid-cell, as a UI loop does
    assert len(markers) == 1
    number = CommInbox.marker_number(markers[0])
    assert number is not None
    inbox.met(number)
    assert drain(inbox) == []


def test_a_marker_stands_for_what_came_before_the_next_main_shell_request() -> None:
    """comm a, comm b, a request for the main shell, comm c: the first marker stands for a
    and b only; c waits behind the request, with a marker of its own."""
    inbox = CommInbox()
    first = put(inbox, "a")
    assert first is not None
    assert put(inbox, "b") is None
    inbox.passed_to_main_shell()
    second = put(inbox, "c")
    assert second is not None
    first_number, second_number = map(CommInbox.marker_number, (first, second))
    assert first_number is not None and second_number is not None
    inbox.met(first_number)
    assert drain(inbox) == ["a", "b"]
    inbox.met(second_number)
    assert drain(inbox) == ["c"]


def test_a_met_marker_closes_its_batch() -> None:
    """A message that arrives after the main shell met the marker gets a marker of its own
    (the main shell may have finished the batch already)."""
    inbox = CommInbox()
    marker = put(inbox, "a")
    assert marker is not None
    number = CommInbox.marker_number(marker)
    assert number is not None
    inbox.met(number)
    assert put(inbox, "b") is not None


def test_a_message_put_back_goes_first_and_is_reached() -> None:
    """Taken mid-cell and stopped before it began: back at the front, no new marker while its
    own is still queued; once its marker was met, a new one is returned for it."""
    inbox = CommInbox()
    marker = put(inbox, "a")
    assert marker is not None and put(inbox, "b") is None
    taken = inbox.take_next()
    assert taken is not None
    assert inbox.put_back(taken) is None
    number = CommInbox.marker_number(marker)
    assert number is not None
    inbox.met(number)
    first = inbox.take_next(met_only=True)
    assert names([first]) == ["a"] and first is not None
    again = inbox.put_back(first)
    assert again is not None
    assert drain(inbox) == []  # not before its new marker is met
    again_number = CommInbox.marker_number(again)
    assert again_number is not None
    inbox.met(again_number)
    assert drain(inbox) == ["a", "b"]


def test_messages_left_after_a_pass_that_stopped_get_a_marker() -> None:
    """The main shell's pass over a met run stopped (``SystemExit`` from a handler): the rest
    gets a marker of its own; none while a queued marker will reach them."""
    inbox = CommInbox()
    marker = put(inbox, "a")
    assert marker is not None and put(inbox, "b") is None
    assert inbox.mark_leftovers() is None  # its marker is still queued
    number = CommInbox.marker_number(marker)
    assert number is not None
    inbox.met(number)
    assert names([inbox.take_next(met_only=True)]) == ["a"]
    again = inbox.mark_leftovers()
    assert again is not None
    assert drain(inbox) == []
    again_number = CommInbox.marker_number(again)
    assert again_number is not None
    inbox.met(again_number)
    assert drain(inbox) == ["b"]
