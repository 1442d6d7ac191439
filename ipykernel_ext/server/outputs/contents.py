"""Writes ended cells' outputs into a notebook file through the server's ContentsManager.

Without a collaboration room nobody else writes a cell's outputs once its tab is gone, so when
the cell has ended and no tab of the kernel is connected (the caller decides that: a tab that
has the notebook open would overwrite the file on its next save, or warn that it changed on
disk), :class:`ContentsWriter` reads the notebook, puts each ended cell's outputs and
``execution_count`` into the cell with its id, and saves it. It goes through the
ContentsManager, so checkpoints, ``pre_save_hook``/``post_save_hook`` and the notebook
signature behave as for any save: a notebook whose cells were trusted is signed again with
the new outputs, an untrusted one stays untrusted. Sync and async managers both work
(``ensure_async``). A cell whose id is no longer in the file (deleted, or the file replaced)
is skipped; nothing is saved when no cell matched.

A save is read back. jupyter_server's atomic writing overwrites the file in place behind a
``.~`` copy, and a read that meets the half-written file puts that copy back: a client that
reads the notebook while the server writes (a tab opening it, a poll) can undo the save or
leave no file at all (measured: 3 of 14 trials of ``benchmarks/outputs_tab.py``, which polls
the file). The user did not ask for this save and would never know, so a save that did not
hold is made again from the notebook read first, :data:`SAVES` times at most.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from jupyter_core.utils import ensure_async

log = logging.getLogger(__name__)

#: Saves of one write at most (the first and the ones made again after a lost race).
SAVES = 3


class ContentsWriter:
    """Writes outputs into ``.ipynb`` files through ``contents_manager``."""

    def __init__(self, contents_manager: Any) -> None:
        self.contents_manager = contents_manager

    async def write(
        self, path: str, cells: Mapping[str, tuple[list[dict[str, Any]], int | None]]
    ) -> list[str]:
        """Set ``outputs`` and ``execution_count`` of the cells ``{cell_id: (outputs,
        execution_count)}`` in the notebook at ``path``; returns the ids written."""
        import nbformat

        cm = self.contents_manager
        model = await ensure_async(cm.get(path, content=True, type="notebook"))
        nb = model["content"]
        written = []
        for cell in nb.cells:
            cell_id = cell.get("id")
            if cell.get("cell_type") != "code" or cell_id not in cells:
                continue
            outputs, execution_count = cells[cell_id]
            cell["outputs"] = [nbformat.from_dict(o) for o in outputs]
            cell["execution_count"] = execution_count
            written.append(cell_id)
        if not written:
            log.warning("outputs: none of the cells %s is in %s any more", sorted(cells), path)
            return []
        for attempt in range(1, SAVES + 1):
            try:
                await ensure_async(
                    cm.save({"type": "notebook", "format": "json", "content": nb}, path)
                )
                if await self._holds(path, {c: cells[c] for c in written}):
                    return written
                why = "the file read back has other outputs"
            except Exception as exc:  # the save itself met the race (the file gone under it)
                why = repr(exc)
            log.warning("outputs: save %d of %s did not hold (%s)", attempt, path, why)
        raise RuntimeError(f"outputs: {path} did not keep the outputs after {SAVES} saves")

    async def _holds(
        self, path: str, cells: Mapping[str, tuple[list[dict[str, Any]], int | None]]
    ) -> bool:
        """Whether the file at ``path`` has each cell's outputs and execution_count."""
        model = await ensure_async(self.contents_manager.get(path, content=True, type="notebook"))
        found = {c.get("id"): c for c in model["content"].cells}
        return all(
            cell_id in found
            and len(found[cell_id].get("outputs", [])) == len(outputs)
            and found[cell_id].get("execution_count") == count
            for cell_id, (outputs, count) in cells.items()
        )
