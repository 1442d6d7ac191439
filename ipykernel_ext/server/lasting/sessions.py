"""Keeping each lasting kernel's sessions in its state file.

jupyter_server keeps sessions in a database that is in memory by default, and announces no
change of them; the next server needs them to give every tab its session back. So the
server's sessions are read once a second (:data:`EVERY`) and each lasting kernel's are
written into its state file when they changed. A session made less than a second before
the server died is not kept: its tab makes a new one, as it would without this.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .records import RecordFiles

#: How often the sessions are read (seconds).
EVERY = 1.0

#: What a session row keeps (the kernel is the state file's own).
SESSION_FIELDS = ("id", "path", "name", "type")


#: The running keepers (one per server process; held so that nothing collects them).
_keepers: set[SessionKeeper] = set()


class SessionKeeper:
    def __init__(
        self,
        session_manager: Any,
        files: RecordFiles,
        log: logging.Logger | logging.LoggerAdapter[Any],
    ) -> None:
        self.session_manager = session_manager
        self.files = files
        self.log = log
        self._written: dict[str, list[dict[str, Any]]] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Keep them from the loop's start on (it may not run yet: the load hook)."""
        self._task = loop.create_task(self._run())  # held here: the loop holds tasks weakly
        _keepers.add(self)

    async def _run(self) -> None:
        while True:
            try:
                await self.write_changes()
            except Exception:  # a bad turn is logged; the next one tries again
                self.log.exception("Could not keep the sessions of the lasting kernels")
            await asyncio.sleep(EVERY)

    async def write_changes(self) -> None:
        by_kernel: dict[str, list[dict[str, Any]]] = {}
        for model in await self.session_manager.list_sessions():
            kernel = model.get("kernel") or {}
            row = {name: model.get(name) for name in SESSION_FIELDS}
            by_kernel.setdefault(kernel.get("id", ""), []).append(row)
        # A kernel whose last session was deleted: written with none.
        for kernel_id in self._written.keys() - by_kernel.keys():
            by_kernel[kernel_id] = []
        for kernel_id, sessions in by_kernel.items():
            if self._written.get(kernel_id) == sessions:
                continue
            record = self.files.read(kernel_id)
            if record is None:
                # Not a lasting kernel, or one shut down: forgotten, so what is kept here
                # grows with the kernels running, not with every kernel the server ever ran.
                self._written.pop(kernel_id, None)
                continue
            record.sessions = sessions
            self.files.write(record)
            self._written[kernel_id] = sessions
