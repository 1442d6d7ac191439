"""At most one write in flight per cell; the writes asked for meanwhile become one more.

A cell printing thousands of lines changes its folded outputs thousands of times; the
document only needs to reach the fold's latest state. A :class:`Coalescer` runs the write
for a key (a cell) at once when none is running, and when one is, remembers that another is
due and runs it (with the newest writer given) once the running one finished. Writes read
the fold when they run, so no change is lost and a fast cell costs few writes; the order of a
key's writes is the order they were asked for. Nothing here knows what is written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable

log = logging.getLogger(__name__)

Write = Callable[[], Awaitable[object]]


class Coalescer:
    """One running write per key; later requests coalesce into one more run."""

    def __init__(self) -> None:
        self._tasks: dict[Hashable, asyncio.Task[None]] = {}
        self._due: dict[Hashable, Write] = {}  # key -> the write to run after the current one

    def request(self, key: Hashable, write: Write) -> None:
        """Run ``write`` for ``key`` now, or after the one running (must be on the loop)."""
        if key in self._tasks:
            self._due[key] = write
            return
        self._tasks[key] = asyncio.get_running_loop().create_task(self._run(key, write))

    def busy(self, key: Hashable) -> bool:
        return key in self._tasks

    async def wait(self, key: Hashable) -> None:
        """Return once ``key`` has no write running or due."""
        task = self._tasks.get(key)
        if task is not None:
            await asyncio.shield(task)

    async def _run(self, key: Hashable, write: Write) -> None:
        try:
            while True:
                try:
                    await write()
                except Exception:  # one failed write must not stop the next ones
                    log.exception("outputs: a write for %r failed", key)
                next_write = self._due.pop(key, None)
                if next_write is None:
                    return
                write = next_write
        finally:
            self._tasks.pop(key, None)
