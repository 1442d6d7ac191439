"""Waiting until something holds: the one polling loop of the tests and the benchmarks.

A wait here is a barrier, never a verdict: what is waited for is a fact the system exposes
(a counter, a marker file, a line in a log, a file's content), ``timeout`` only guards
against a hang, and ``interval`` only paces the polls. Running out is a failure that names
what was waited for and what was seen last (:class:`WaitTimeout`).

The named waits elsewhere in the harness are built on :func:`wait_until`, each adding what it
reads: :func:`harness.kernels.wait_stats` (the kernel's IOPub counters),
:func:`harness.browser.wait_for` (a condition polled while a Playwright page keeps delivering
its events), :meth:`harness.shared_channels_server.KernelConnections.wait_stdin_connections`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

T = TypeVar("T")

#: How much of the last value's repr a timeout's message shows.
SHOWN_CHARS = 2000


def _shown(value: object) -> str:
    text = repr(value)
    if len(text) <= SHOWN_CHARS:
        return text
    half = SHOWN_CHARS // 2
    return f"{text[:half]} ... {text[-half:]}"


class WaitTimeout(AssertionError, TimeoutError):
    """What was waited for did not hold within the hang guard.

    An ``AssertionError``, so pytest reports it as the test's failure with its message; a
    ``TimeoutError`` too, so a caller for whom "not reached" is an outcome it handles (a
    bound, a benchmark's trial) catches it as before. ``last`` is the last value read.
    """

    def __init__(self, what: str, timeout: float, last: object) -> None:
        self.what = what
        self.timeout = timeout
        self.last = last
        super().__init__(f"{what}: not reached in {timeout:g} s; last seen: {_shown(last)}")


#: What :func:`_polls` yields while the condition does not hold yet: time for a pause.
_NOT_YET = object()


def _polls(
    probe: Callable[[], T], timeout: float, what: str, done: Callable[[T], Any]
) -> Iterator[T | object]:
    """The rule of every wait, once for the sync and the async loop: read, and yield the value
    once it is done, :data:`_NOT_YET` while time is left, or raise :class:`WaitTimeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if done(value):
            yield value
            return
        if time.monotonic() >= deadline:
            raise WaitTimeout(what, timeout, value)
        yield _NOT_YET


def wait_until(
    probe: Callable[[], T],
    timeout: float,
    what: str,
    interval: float = 0.05,
    *,
    done: Callable[[T], Any] = bool,
    sleep: Callable[[float], Any] = time.sleep,
) -> T:
    """Call ``probe()`` until ``done(value)`` holds (by default: until the value is truthy);
    return that value.

    ``timeout`` is a hang guard and ``interval`` the pause between polls, neither a verdict.
    ``sleep`` is how the pause is spent (a Playwright page's ``wait_for_timeout`` keeps its
    events flowing). An exception from ``probe`` or ``done`` ends the wait at once, so a
    probe can assert what must hold meanwhile (the process it waits on is still alive).
    Raises :class:`WaitTimeout` naming ``what`` and the last value read.
    """
    polls = _polls(probe, timeout, what, done)
    while (reached := next(polls)) is _NOT_YET:
        sleep(interval)
    return cast(T, reached)  # _polls yields a T once it yields anything but _NOT_YET


async def wait_until_async(
    probe: Callable[[], T],
    timeout: float,
    what: str,
    interval: float = 0.05,
    *,
    done: Callable[[T], Any] = bool,
) -> T:
    """:func:`wait_until` inside an event loop: the pauses are ``asyncio.sleep``, so the
    loop runs whatever the probe waits for."""
    polls = _polls(probe, timeout, what, done)
    while (reached := next(polls)) is _NOT_YET:
        await asyncio.sleep(interval)
    return cast(T, reached)  # _polls yields a T once it yields anything but _NOT_YET
