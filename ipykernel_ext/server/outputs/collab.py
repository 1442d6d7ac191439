"""Writes a cell's folded outputs into the live collaborative document of its notebook.

With jupyter-collaboration (``jupyter_server_ydoc``) on, every tab of a notebook shows the
shared document, and a tab applies a change to a cell's outputs the way JupyterLab 4.6's
``CodeCellModel._onSharedModelChanged`` does (read in ``@jupyterlab/cells``, with
``@jupyter/ydoc``'s ``YCodeCell.getChanges``). That decides how the server must write:

* an edit of a stream's ``Text`` is applied to the tab's **last** output as "remove the last
  *n* characters" then "append": so only the last output's text is edited, a deletion is
  always of a suffix, and the deletion and the insertion are separate transactions (in one,
  Yjs may list the insertion first, and the tab would then remove what it just appended);
* an inserted output is always *appended* by the tab, and a stream appended right after a
  stream of the same name is merged by the tab into it and written back into the document by
  every tab (the text then shows up duplicated): so outputs are only ever added at the end,
  a stream is never added next to one of its name, and replacing an output that is not the
  last (``update_display_data``) rewrites the tail from it (one transaction: delete the tail,
  insert the new tail);
* the tab's "last stream name" outlives a removed stream, so a rewritten tail never starts
  with a stream of the name of the stream it removed last (the tail starts one earlier).

The writer is stateless: each :meth:`CollabWriter.write` fetches the document again (a
document object kept from a room that was deleted is dead: writes to it reach nobody and are
never saved), finds the cell by id, and brings its outputs from what the document holds to
what the fold holds with the least of these edits. It sets the cell's ``execution_count`` and
``execution_state`` (``"running"`` shows ``[*]`` in every tab; never saved to disk). The
room saves the notebook itself. Numbers are written as floats, as ``jupyter_ydoc`` does
(Yjs numbers are JavaScript numbers).
"""

from __future__ import annotations

import logging
from typing import Any

from .text import common_prefix

#: The key of jupyter-collaboration's extension in ``web_app.settings``.
SETTINGS_KEY = "jupyter_server_ydoc"

log = logging.getLogger(__name__)


def to_y_value(value: Any) -> Any:
    """``value`` with every int (not bool) a float, as Yjs expects (copies lists/dicts)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, dict):
        return {k: to_y_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_y_value(v) for v in value]
    return value


def _same(doc_output: dict[str, Any], output: dict[str, Any]) -> bool:
    return doc_output == to_y_value(output)


def _make_youtput(output: dict[str, Any]) -> Any:
    from pycrdt import Map, Text

    value = to_y_value(output)
    if value.get("output_type") == "stream":
        value["text"] = Text(value.get("text", ""))
    return Map(value)


class CollabWriter:
    """Writes cells' outputs into notebooks' live shared documents (module docstring).

    ``settings`` is the server's ``web_app.settings``; without jupyter-collaboration in it,
    :attr:`available` is false and :meth:`write` writes nothing.
    """

    def __init__(self, settings: dict[str, Any]) -> None:
        self._settings = settings

    @property
    def extension(self) -> Any:
        return self._settings.get(SETTINGS_KEY)

    @property
    def available(self) -> bool:
        return self.extension is not None

    async def document(self, path: str, create: bool = False) -> Any:
        """The live notebook document of ``path`` (None: no room, and not ``create``)."""
        ext = self.extension
        if ext is None:
            return None
        return await ext.get_document(
            path=path, content_type="notebook", file_format="json", copy=False, create=create
        )

    async def write(
        self,
        path: str,
        cell_id: str,
        outputs: list[dict[str, Any]],
        execution_count: int | None,
        execution_state: str,
        create: bool = False,
    ) -> bool:
        """Bring cell ``cell_id`` of ``path``'s live document to these outputs and state.

        False when there is no room (and not ``create``), or no such cell in it.
        """
        doc = await self.document(path, create=create)
        if doc is None:
            return False
        ycell = find_cell(doc, cell_id)
        if ycell is None:
            log.debug("outputs: no cell %s in the shared document of %s", cell_id, path)
            return False
        sync_outputs(doc.ydoc, ycell["outputs"], outputs)
        with doc.ydoc.transaction():
            # Every JupyterLab tab marks a cell idle once its count is set (as the running tab
            # does with the reply), so the count goes in only when the cell has ended: while
            # it runs the cell keeps the null count the running tab gave it, and shows [*].
            running = execution_state == "running"
            count = None if execution_count is None or running else float(execution_count)
            if ycell.get("execution_count") != count:
                ycell["execution_count"] = count
            if ycell.get("execution_state") != execution_state:
                ycell["execution_state"] = execution_state
        return True


def find_cell(doc: Any, cell_id: str) -> Any:
    """The cell ``Map`` with this id in a ``YNotebook`` (None if there is none)."""
    for ycell in doc.ycells:
        if ycell.get("id") == cell_id:
            return ycell
    return None


def sync_outputs(ydoc: Any, youtputs: Any, outputs: list[dict[str, Any]]) -> None:
    """Edit the ``outputs`` Array ``youtputs`` of a cell until it holds ``outputs``."""
    current = [o.to_py() for o in youtputs]
    n = min(len(current), len(outputs))
    first = 0  # the first output that differs
    while first < n and _same(current[first], outputs[first]):
        first += 1
    if first == len(current) == len(outputs):
        return
    # The document's last output is a stream of the name the fold has there: extend its text.
    if (
        first == len(current) - 1
        and first < len(outputs)
        and current[first].get("output_type") == "stream"
        and outputs[first].get("output_type") == "stream"
        and current[first].get("name") == outputs[first].get("name")
        and hasattr(youtputs[first].get("text"), "insert")  # a Text (old ydocs kept a str)
        and {k: v for k, v in current[first].items() if k != "text"}
        == {k: v for k, v in to_y_value(outputs[first]).items() if k != "text"}
    ):
        _sync_text(ydoc, youtputs[first]["text"], outputs[first].get("text", ""))
        first += 1
        if first < len(outputs):
            with ydoc.transaction():
                youtputs.extend([_make_youtput(o) for o in outputs[first:]])
        return
    start = first
    last = current[-1] if current else None
    if (
        start > 0
        and start < len(current)
        and last is not None
        and last.get("output_type") == "stream"
        and start < len(outputs)
        and outputs[start].get("output_type") == "stream"
        and outputs[start].get("name") == last.get("name")
    ):
        start -= 1  # the tab still takes the removed stream's name as the last one
    with ydoc.transaction():
        if start < len(current):
            del youtputs[start:]
        if start < len(outputs):
            youtputs.extend([_make_youtput(o) for o in outputs[start:]])


def _sync_text(ydoc: Any, ytext: Any, text: str) -> None:
    """Make ``ytext`` read ``text``: delete the suffix after the common prefix, then append
    the rest, each in its own transaction (see the module docstring)."""
    current = str(ytext)
    keep = common_prefix(current, text)
    if keep < len(current):
        # pycrdt indexes a Text in UTF-8 bytes (a tab counts UTF-16 units: it gets a delta)
        start = len(current[:keep].encode("utf-8"))
        with ydoc.transaction():
            del ytext[start:]
    if keep < len(text):
        with ydoc.transaction():
            ytext.insert(len(ytext), text[keep:])
