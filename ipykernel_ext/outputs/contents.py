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
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)


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
        from jupyter_core.utils import ensure_async

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
            log.info("outputs: none of the cells %s is in %s any more", sorted(cells), path)
            return []
        await ensure_async(
            cm.save({"type": "notebook", "format": "json", "content": nb}, path)
        )
        return written
