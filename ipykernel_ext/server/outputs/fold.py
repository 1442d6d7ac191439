"""One cell's outputs, folded from IOPub messages the way JupyterLab's output area folds them.

A :class:`CellOutputs` is the list of nbformat output dicts a cell would have in the notebook
if the tab that ran it were still open: what JupyterLab 4.6's ``OutputArea._onIOPub`` and
``OutputAreaModel.add`` make of the same messages (read in ``@jupyterlab/outputarea``):

* ``stream``: appended to the last output when that is a stream of the same name, else a new
  output; ``\\r``/``\\b`` applied as JupyterLab stores them (:mod:`.text`);
* ``display_data``, ``execute_result``, ``error``: a new output (``transient`` dropped, as
  JupyterLab's ``toJSON`` does);
* ``clear_output``: clears now, or with ``wait=True`` just before the next *added* output (an
  update does not trigger it); either way the next stream starts a new output;
* displays are replaced by ``display_id``: :meth:`replace_display` (the kernel-wide index of
  which cells hold which id is :mod:`.registry`'s, as JupyterLab's is per kernel connection).

What a cell may hold is bounded (UTF-8 bytes of its outputs): where an output would pass the
bound, the stream is cut at the bound or the output is dropped, a note output says so
(:data:`CUT_NOTE_KEY` in its metadata), and nothing more is added until a ``clear_output``.
This module knows no messages' routing, no documents and no files: data in, dicts out.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ...stream_text import StreamText

#: Output message types that add an output (``update_display_data`` replaces one).
ADDING = frozenset({"stream", "display_data", "execute_result", "error"})

#: Every output message type a cell's output area handles: the IOPub messages that change a
#: cell's outputs (what the server hides from a returning session, :mod:`.owner`).
OUTPUT_TYPES = ADDING | {"clear_output", "update_display_data"}

#: The metadata key that marks the note written where a cell's output was cut.
CUT_NOTE_KEY = "ipykernel_ext_cut"

#: Called with the bytes a cell wants to add: how many it may add now (the kernel's share).
Room = Callable[[int], int]


def output_from_content(msg_type: str, content: dict[str, Any]) -> dict[str, Any]:
    """The nbformat output dict of an output message's content (stream text not folded)."""
    if msg_type == "stream":
        return {
            "output_type": "stream",
            "name": content.get("name", "stdout"),
            "text": content.get("text", ""),
        }
    if msg_type == "error":
        return {
            "output_type": "error",
            "ename": content.get("ename", ""),
            "evalue": content.get("evalue", ""),
            "traceback": list(content.get("traceback", [])),
        }
    output: dict[str, Any] = {
        "output_type": "display_data" if msg_type == "update_display_data" else msg_type,
        "data": content.get("data", {}),
        "metadata": content.get("metadata", {}),
    }
    if msg_type == "execute_result":
        output["execution_count"] = content.get("execution_count")
    return output


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def output_size(output: dict[str, Any]) -> int:
    """What holding ``output`` costs: UTF-8 bytes of its JSON (of a stream: its text's bytes
    and the JSON of the rest)."""
    if output.get("output_type") == "stream":
        rest = {k: v for k, v in output.items() if k != "text"}
        return _utf8_len(json.dumps(rest, ensure_ascii=False)) + _utf8_len(output["text"])
    return _utf8_len(json.dumps(output, ensure_ascii=False))


def cut_note(limit: int, scope: str) -> dict[str, Any]:
    """The output put where a cell's output was cut (``scope``: "cell" or "kernel")."""
    text = (
        f"[ipykernel_ext: output cut here; the server keeps at most {limit} bytes of output "
        f"per {scope}, so the rest of this cell's output was not kept. Rerun the cell with "
        f"its tab open to see all of it.]"
    )
    return {
        "output_type": "display_data",
        "data": {"text/plain": text},
        "metadata": {CUT_NOTE_KEY: True},
    }


class CellOutputs:
    """The folded outputs of one execution of one cell (see the module docstring).

    ``max_bytes`` bounds this cell; ``room`` (optional) returns what the kernel still lets
    its cells add, and ``kernel_limit`` is quoted in the note when that is what cut.
    """

    def __init__(
        self, max_bytes: int, room: Room | None = None, kernel_limit: int | None = None
    ) -> None:
        self.max_bytes = max_bytes
        self._room = room
        self._kernel_limit = kernel_limit
        self._outputs: list[dict[str, Any]] = []
        self._display_ids: list[str | None] = []
        self._sizes: list[int] = []
        self._stream: StreamText | None = None  # the last output's text, when it is a stream
        self._clear_next = False
        self.execution_count: int | None = None
        #: the note output has been added; nothing more until a clear
        self.cut = False
        #: the bound the last note quotes: (bytes, "cell" or "kernel"); None: never cut
        self.cut_by: tuple[int, str] | None = None

    # what it holds -----------------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        stream = self._stream.nbytes if self._stream is not None else 0
        return sum(self._sizes) + stream

    def display_ids(self) -> set[str]:
        return {d for d in self._display_ids if d}

    def to_nbformat(self) -> list[dict[str, Any]]:
        """The outputs as nbformat 4 dicts (fresh copies of the lists, shared leaf values)."""
        result = [dict(o) for o in self._outputs]
        if self._stream is not None:
            result[-1]["text"] = self._stream.text
        return result

    # applying messages ---------------------------------------------------------------------

    def apply(self, msg_type: str, content: dict[str, Any]) -> bool:
        """Apply one IOPub message of this cell; whether the outputs changed.

        ``update_display_data`` is not applied here (its targets may be in any cell): the
        caller finds them and calls :meth:`replace_display`. ``execute_input`` sets
        :attr:`execution_count`.
        """
        if msg_type == "execute_input":
            self.execution_count = content.get("execution_count")
            return False
        if msg_type == "clear_output":
            if content.get("wait"):
                self._clear_next = True
                self._end_stream()  # JupyterLab forgets the last stream's name at once
                return False
            return self.clear()
        if msg_type not in ADDING:
            return False
        if self._clear_next:
            self.clear()
        display_id = (content.get("transient") or {}).get("display_id")
        if msg_type == "execute_result" and self.execution_count is None:
            self.execution_count = content.get("execution_count")
        return self._add(output_from_content(msg_type, content), display_id)

    def clear(self) -> bool:
        had = bool(self._outputs)
        self._outputs, self._display_ids, self._sizes = [], [], []
        self._stream = None
        self._clear_next = False
        self.cut = False
        return had

    def replace_display(self, display_id: str, output: dict[str, Any]) -> bool:
        """Replace every output of this cell shown with ``display_id``; whether any was."""
        changed = False
        for i, shown in enumerate(self._display_ids):
            if shown != display_id:
                continue
            size = output_size(output)
            if size - self._sizes[i] > self._free(size - self._sizes[i]):
                self._note_cut()
                continue
            self._outputs[i] = dict(output)
            self._sizes[i] = size
            changed = True
        return changed

    # internals ---------------------------------------------------------------------------

    def _free(self, needed: int) -> int:
        free = self.max_bytes - self.nbytes
        if self._room is not None and needed > 0:
            free = min(free, self._room(needed))
        return free

    def _limit_and_scope(self) -> tuple[int, str]:
        cell_free = self.max_bytes - self.nbytes
        if self._room is not None and self._room(0) < cell_free and self._kernel_limit:
            return self._kernel_limit, "kernel"
        return self.max_bytes, "cell"

    def _end_stream(self) -> None:
        if self._stream is not None:
            self._outputs[-1]["text"] = self._stream.text
            self._sizes[-1] = output_size(self._outputs[-1])
            self._stream = None

    def _add(self, output: dict[str, Any], display_id: str | None) -> bool:
        if self.cut:
            return False
        if output["output_type"] == "stream":
            return self._add_stream(output)
        size = output_size(output)
        if size > self._free(size):
            self._note_cut()
            return True
        self._end_stream()
        self._outputs.append(output)
        self._display_ids.append(display_id)
        self._sizes.append(size)
        return True

    def _add_stream(self, output: dict[str, Any]) -> bool:
        text: str = output["text"]
        last = self._outputs[-1] if self._outputs else None
        merging = self._stream is not None and last is not None and last["name"] == output["name"]
        overhead = 0 if merging else output_size({**output, "text": ""})
        encoded = text.encode("utf-8", "surrogatepass")
        free = self._free(overhead + len(encoded))
        over = overhead + len(encoded) > free
        if over:
            # Keep what fits (whole characters: a cut inside one drops it).
            keep = encoded[: max(0, free - overhead)]
            text = keep.decode("utf-8", "ignore")
        if merging:
            assert self._stream is not None
            self._stream.feed(text)
        elif text or not over:
            self._end_stream()
            self._outputs.append({**output, "text": ""})
            self._display_ids.append(None)
            self._sizes.append(output_size({**output, "text": ""}))
            self._stream = StreamText(text)
        if over:
            self._note_cut()
        return True

    def _note_cut(self) -> None:
        if self.cut:
            return
        limit, scope = self._limit_and_scope()
        self.cut_by = (limit, scope)
        self._end_stream()
        note = cut_note(limit, scope)
        self._outputs.append(note)
        self._display_ids.append(None)
        self._sizes.append(0)  # the note is not counted: it must always fit
        self.cut = True
