"""Writing the cells the server owns: where, when, and what came of it.

:class:`OutputsWriter` (one per kernel, held by its :class:`~.owner.OutputsOwner`) writes the
cells the owner hands it (docs/PROTOCOL.md section 6, "What it writes"):

* with a live collaborative document of the notebook, the cell as it goes
  (:class:`~.collab.CollabWriter`; one write in flight per cell, :class:`~.coalesce.Coalescer`,
  the next one brings the document to the fold's latest state); the document then shows the
  cell's outputs, so its session is not given them again (:attr:`OutputsWriter.hidden`);
* without one, the ended cells into the ``.ipynb`` (:class:`~.contents.ContentsWriter`) once
  the owner says no websocket of the kernel has been open for its grace
  (:meth:`OutputsWriter.now_unattended`, until :meth:`~OutputsWriter.session_back`); if the
  file is gone, into the notebook the kernel's session names now; failing that, the log says
  so;
* a cell's notebook is the path of the kernel's one notebook session (jupyter_server's session
  manager), looked up once per request, one lookup shared by a burst (Run All); a kernel
  several notebooks share names none, and its cells are not written (the log says so).

It keeps which ended cells are written, or can never be (:meth:`OutputsWriter.unwritten`: the
kernel's byte bound lets only those go), and logs once per cell that a bound cut it. Which
cells it owns is the owner's decision: :meth:`~OutputsWriter.take` and
:meth:`~OutputsWriter.hand_back`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Mapping
from typing import Any

from jupyter_core.utils import ensure_async

from .coalesce import Coalescer
from .collab import CollabWriter
from .contents import ContentsWriter
from .registry import FollowedCell, KernelOutputs


class OutputsWriter:
    """Writes one kernel's owned cells (see the module docstring).

    ``settings`` is the server's ``web_app.settings`` (``contents_manager``,
    ``session_manager``, and ``jupyter_server_ydoc`` when collaboration is on).
    """

    def __init__(
        self,
        kernel_id: str,
        settings: dict[str, Any],
        cells: KernelOutputs,
        log: logging.Logger | logging.LoggerAdapter[Any],
    ) -> None:
        self.kernel_id = kernel_id
        self.cells = cells
        self.log = log
        self.collab = CollabWriter(settings)
        manager = settings.get("contents_manager")
        self.contents = ContentsWriter(manager) if manager is not None else None
        self.session_manager: Any = settings.get("session_manager")
        #: msg_ids of the cells the server owns (given by the owner)
        self.owned: set[str] = set()
        #: msg_id -> session, of owned cells written into a live document
        self.hidden: dict[str, str] = {}
        #: no websocket of the kernel has been open for the grace (the owner says when, through
        #: now_unattended and session_back)
        self._unattended = False
        self._writes = Coalescer()  # one write in flight per cell (msg_id)
        self._path_lookup: asyncio.Future[str | None] | None = None
        self._pending_files: set[str] = set()  # ended owned cells waiting for the file
        #: ended cells whose outputs are where they belong (the document or the file), or
        #: that can never be written (told in the log): the kernel's bound may let them go
        self._settled: set[str] = set()
        self._cut_told: set[str] = set()  # cells whose cut was logged
        self._tasks: set[asyncio.Future[Any]] = set()

    # --- which cells (the owner decides) -------------------------------------------------

    def take(self, cell: FollowedCell) -> None:
        """The server owns ``cell`` from now on: write it."""
        self.owned.add(cell.msg_id)
        self.write_soon(cell)

    def hand_back(self, msg_id: str) -> None:
        """The cell's session is back: it is the tab's again, unless the server wrote it into
        the live document or a first write is under way (it may be into the live document:
        that cell stays the server's)."""
        if msg_id in self.owned and msg_id not in self.hidden and not self._writes.busy(msg_id):
            self.owned.discard(msg_id)
            self._pending_files.discard(msg_id)

    def unwritten(self, msg_id: str) -> bool:
        """Whether an ended cell must stay: its outputs are not written yet (its session may
        still be in its grace, or the write is pending)."""
        return msg_id not in self._settled

    def forget_unheld(
        self, held: Mapping[str, FollowedCell], open_sessions: Mapping[str, int]
    ) -> None:
        """Forget what is said of cells the fold no longer holds. Which messages a departed
        session is not given is kept until it comes back: its offline buffer may still
        replay an ended cell's outputs, which the document already has."""
        self.owned &= held.keys()
        self._pending_files &= held.keys()
        self._settled &= held.keys()
        self._cut_told &= held.keys()
        for msg_id in [m for m in self.hidden if m not in held]:
            if self.hidden[msg_id] in open_sessions:
                del self.hidden[msg_id]

    def session_back(self, session: str) -> None:
        """``session``'s websocket opened and its replay is over: what was hidden from it of
        cells let go is of no more use, and a tab of the kernel is there (the file waits)."""
        self._unattended = False
        for msg_id in [m for m, s in self.hidden.items() if s == session]:
            if msg_id not in self.cells.cells:
                del self.hidden[msg_id]

    def now_unattended(self) -> None:
        """No websocket of the kernel has been open for the grace: the file may be written."""
        self._unattended = True
        self.spawn(self.write_files())

    # --- writing -------------------------------------------------------------------------

    def write_soon(self, cell: FollowedCell) -> None:
        """Write ``cell`` now, or once the write under way is done (it reads the fold then)."""
        self._writes.request(cell.msg_id, lambda: self._write(cell))

    async def _write(self, cell: FollowedCell) -> None:
        if cell.msg_id not in self.owned or cell.msg_id not in self.cells.cells:
            return  # handed back, or let go
        self._tell_cut(cell)
        path = cell.path or await self.find_path(cell)
        if not path:
            if not cell.running and cell.msg_id not in self._settled:
                self._settled.add(cell.msg_id)
                self.log.warning(
                    "Kernel %s: the outputs of cell %s are not written anywhere: no single "
                    "notebook session names the kernel (%s)",
                    self.kernel_id,
                    cell.cell_id,
                    "/api/sessions",
                )
            return
        ended = not cell.running  # before the write: the document then has the end too
        if self.collab.available and await self.collab.write(
            path, cell.cell_id, cell.outputs.to_nbformat(), cell.execution_count, cell.state
        ):
            self.hidden[cell.msg_id] = cell.session
            self._pending_files.discard(cell.msg_id)
            if ended:
                self._settled.add(cell.msg_id)
            return
        # No live document (no collaboration, or no room open): the file, once the cell
        # ended and no tab of the kernel is connected.
        if not cell.running:
            self._pending_files.add(cell.msg_id)
            if self._unattended:
                await self.write_files()
            else:
                self.log.info(
                    "Kernel %s: cell %s ended; its outputs go into %s once no tab of the "
                    "kernel is connected",
                    self.kernel_id,
                    cell.cell_id,
                    path,
                )

    def _tell_cut(self, cell: FollowedCell) -> None:
        """Log, once per cell the server writes, that a bound cut it (its note says so in
        the cell)."""
        cut_by = cell.outputs.cut_by
        if cut_by is None or cell.msg_id in self._cut_told:
            return
        self._cut_told.add(cell.msg_id)
        limit, scope = cut_by
        self.log.warning(
            "Kernel %s: the outputs of cell %s were cut at %d bytes per %s "
            "(KeepOutputs.keep_outputs_%s_bytes); a note in the cell says so",
            self.kernel_id,
            cell.cell_id,
            limit,
            scope,
            scope,
        )

    async def write_files(self) -> None:
        """Write the ended owned cells waiting for the file, if no tab is connected."""
        if not self._unattended or self.contents is None:
            return
        by_path: dict[str, dict[str, tuple[list[dict[str, Any]], int | None]]] = {}
        for msg_id in list(self._pending_files):
            cell = self.cells.cells.get(msg_id)
            if cell is None or cell.running or not cell.path:
                self._pending_files.discard(msg_id)
                continue
            by_path.setdefault(cell.path, {})[cell.cell_id] = (
                cell.outputs.to_nbformat(),
                cell.execution_count,
            )
            self._pending_files.discard(msg_id)
        for path, cells in by_path.items():
            if self.collab.available and await self.collab.document(path) is not None:
                continue  # a room opened meanwhile: its next change brings them there
            held = [c for c in self.cells.cells.values() if c.path == path and c.cell_id in cells]
            await self._write_file(path, cells, held)
            # Written, or told: either way nothing more will come of them.
            self._settled.update(c.msg_id for c in held)

    async def _write_file(
        self,
        path: str,
        cells: dict[str, tuple[list[dict[str, Any]], int | None]],
        held: list[FollowedCell],
    ) -> None:
        """Write ``cells`` into ``path``; if the file is not there (renamed or moved in a way
        this server did not see), into the notebook the kernel's session names now; if that
        fails too, say so in the log (nothing else can be told: no tab is open)."""
        assert self.contents is not None
        tried = [path]
        while True:
            try:
                written = await self.contents.write(path, cells)
                self.log.info("Kernel %s: wrote cells %s into %s", self.kernel_id, written, path)
                return
            except Exception as exc:
                error = exc
            current = await self._current_path(held[0]) if held else None
            if not current or current in tried:
                break
            for cell in held:
                cell.path = current
            path = current
            tried.append(path)
        self.log.error(
            "Kernel %s: the outputs of cells %s could not be written anywhere (tried %s): %r",
            self.kernel_id,
            sorted(cells),
            ", ".join(tried),
            error,
        )

    # --- the notebook's path ------------------------------------------------------------

    def learn_path(self, cell: FollowedCell) -> None:
        """Look up ``cell``'s notebook now (its request just passed), in the background."""
        self.spawn(self.find_path(cell))

    async def find_path(self, cell: FollowedCell) -> str | None:
        """The notebook of the kernel's session (None: no notebook session, or several)."""
        if cell.path or self.session_manager is None:
            return cell.path
        # One lookup at a time, shared: Run All sends every cell at once.
        if self._path_lookup is None or self._path_lookup.done():
            self._path_lookup = asyncio.ensure_future(self._notebook_path())
        cell.path = await asyncio.shield(self._path_lookup)
        return cell.path

    async def _current_path(self, cell: FollowedCell) -> str | None:
        """The kernel's notebook as its session names it now (after a rename that did not go
        through this server's ContentsManager events, the session is the one to ask)."""
        path = await self._notebook_path()
        if path and path != cell.path:
            self.log.info(
                "Kernel %s: cell %s's notebook is now %s (was %s)",
                self.kernel_id,
                cell.cell_id,
                path,
                cell.path,
            )
            cell.path = path
        return path

    async def _notebook_path(self) -> str | None:
        try:
            sessions = await ensure_async(self.session_manager.list_sessions())
        except Exception:
            self.log.exception("Listing sessions for kernel %s failed", self.kernel_id)
            return None
        paths = {
            s.get("path")
            for s in sessions
            if (s.get("kernel") or {}).get("id") == self.kernel_id
            and (s.get("type") == "notebook" or str(s.get("path", "")).endswith(".ipynb"))
        }
        return paths.pop() if len(paths) == 1 else None

    # --- tasks ---------------------------------------------------------------------------

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Future[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.log.error("Outputs of kernel %s", self.kernel_id, exc_info=task.exception())

    async def drain(self) -> None:
        """Wait for the writes under way (and those they start)."""
        for msg_id in list(self.owned):
            await self._writes.wait(msg_id)
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
