"""harness.polling: the one wait of the tests and benchmarks returns what it waited for and
fails naming what it waited for; no clock decides a verdict here (the probes count calls)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from harness.polling import WaitTimeout, wait_until, wait_until_async


def test_returns_the_value_that_held_after_polling() -> None:
    calls = itertools.count(1)
    pauses: list[float] = []
    assert (
        wait_until(
            lambda: next(calls),
            60,
            "the third call",
            0.5,
            done=lambda n: n >= 3,
            sleep=pauses.append,
        )
        == 3
    )
    assert pauses == [0.5, 0.5]  # a pause between polls, none after the value held


def test_running_out_names_what_and_the_last_value() -> None:
    with pytest.raises(WaitTimeout, match=r"the marker file: not reached in 0 s; last seen: 7"):
        wait_until(lambda: 7, 0, "the marker file", done=lambda n: n > 7)


def test_a_timeout_is_an_assertion_and_a_timeout_error() -> None:
    with pytest.raises(WaitTimeout) as caught:
        wait_until(lambda: None, 0, "nothing")
    assert isinstance(caught.value, AssertionError) and isinstance(caught.value, TimeoutError)
    assert caught.value.last is None


def test_a_probe_that_raises_ends_the_wait_at_once() -> None:
    def probe() -> int:
        raise RuntimeError("the server died")

    with pytest.raises(RuntimeError, match="server died"):
        wait_until(probe, 60, "a reply")


def test_the_async_wait_follows_the_same_rule() -> None:
    calls = itertools.count(1)
    got = asyncio.run(wait_until_async(lambda: next(calls), 60, "two", 0, done=lambda n: n == 2))
    assert got == 2
    with pytest.raises(WaitTimeout, match="never: not reached"):
        asyncio.run(wait_until_async(lambda: 0, 0, "never"))
