"""ipykernel_ext.server.outputs.coalesce: one write in flight per key, the rest folded into one
more."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from ipykernel_ext.server.outputs import Coalescer


def test_requests_during_a_write_become_one_more_write_with_the_newest_writer() -> None:
    async def main() -> list[str]:
        coalescer = Coalescer()
        done: list[str] = []
        gate = asyncio.Event()
        started = asyncio.Event()

        def writer(name: str, blocking: bool = False) -> Callable[[], Awaitable[None]]:
            async def write() -> None:
                if blocking:
                    started.set()
                    await gate.wait()
                done.append(name)

            return write

        coalescer.request("cell", writer("first", blocking=True))
        await started.wait()
        for i in range(10):
            coalescer.request("cell", writer(f"later {i}"))
        coalescer.request("other", writer("other cell"))  # another key is not held up
        await coalescer.wait("other")
        assert done == ["other cell"] and coalescer.busy("cell")
        gate.set()
        await coalescer.wait("cell")
        assert not coalescer.busy("cell")
        return done

    assert asyncio.run(main()) == ["other cell", "first", "later 9"]


def test_a_failed_write_does_not_stop_the_next() -> None:
    async def main() -> list[str]:
        coalescer = Coalescer()
        done: list[str] = []
        gate = asyncio.Event()

        async def failing() -> None:
            await gate.wait()
            raise RuntimeError("room gone")

        async def ok() -> None:
            done.append("ok")

        coalescer.request("cell", failing)
        coalescer.request("cell", ok)
        gate.set()
        await coalescer.wait("cell")
        return done

    assert asyncio.run(main()) == ["ok"]
