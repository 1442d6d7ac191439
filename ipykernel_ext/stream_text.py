"""Stream text as JupyterLab stores it: ``\\r`` and ``\\b`` applied, with a cursor that survives.

A shared leaf: the server's model of a cell's outputs (``server/outputs/``) and the kernel's
cell journal (``kernel/journal/``) both keep a stream as the page stores it, by this one rule.

JupyterLab 4 (``@jupyterlab/outputarea`` ``OutputAreaModel``, its private ``processText``)
applies control characters when it *stores* a stream, not when it draws it, and keeps a cursor
between messages, so ``print("50%", end="\\r")`` followed by ``print("60%", end="\\r")`` leaves
one line. This module is that model, reimplemented here (not copied) so that what the server
writes is character for character what the running tab would have written:

* ordinary characters overwrite from the cursor (appending at the end of the text);
* ``\\r`` moves the cursor to the start of its line (it erases nothing);
* ``\\b`` removes the character before the cursor and, as JupyterLab 4.6 does, the one under
  it when the cursor is inside the line; never a line feed;
* ``\\n`` appends a line feed at the *end* of the text and puts the cursor there.

The cursor never goes back past a line feed, so everything up to the last ``\\n`` is final:
:class:`StreamText` keeps it as finished chunks and edits only the last line, so a cell
printing 100000 lines costs linear time, not quadratic.

What a kernel sends again for a page that lost the stream (:attr:`StreamText.resent`) is the
text and, when the cursor is inside the last line, ``"\\r"`` and the characters before the
cursor: fed to an empty output, it leaves the same text *and* the same cursor, so what the
cell prints next lands where it would have. :meth:`StreamText.cut_front` drops the oldest
lines when a bound asks.
"""

from __future__ import annotations

import re

#: The characters that move the cursor instead of being written.
_CONTROL = re.compile(r"[\n\b\r]")


class StreamText:
    """The text of one stream output and its cursor (see the module docstring)."""

    __slots__ = ("_cursor", "_done", "_done_bytes", "_line")

    def __init__(self, text: str = "") -> None:
        self._done: list[str] = []  # finished lines, each ending with "\n"
        self._done_bytes = 0
        self._line = ""  # the last line (no "\n"), the only part the cursor can edit
        self._cursor = 0  # index into self._line
        if text:
            self.feed(text)

    def feed(self, new: str) -> None:
        """Apply the text of one more stream message."""
        if not _CONTROL.search(new):
            self._write(new)
            return
        start = 0
        for match in _CONTROL.finditer(new):
            self._write(new[start : match.start()])
            start = match.end()
            char = match.group()
            if char == "\n":
                finished = self._line + "\n"
                self._done.append(finished)
                self._done_bytes += len(finished.encode("utf-8", "surrogatepass"))
                self._line, self._cursor = "", 0
            elif char == "\r":
                self._cursor = 0
            elif self._cursor > 0:  # "\b"
                c = self._cursor
                self._line = self._line[: c - 1] + self._line[c + 1 :]
                self._cursor = c - 1
        self._write(new[start:])

    def _write(self, piece: str) -> None:
        if not piece:
            return
        c, line = self._cursor, self._line
        self._line = line[:c] + piece + line[c + len(piece) :] if c < len(line) else line + piece
        self._cursor = c + len(piece)

    @property
    def text(self) -> str:
        """The whole text (joined once; later calls reuse the join)."""
        if len(self._done) > 1:
            self._done = ["".join(self._done)]
        return (self._done[0] if self._done else "") + self._line

    @property
    def resent(self) -> str:
        """The text to send a page again: the same text and cursor once it is stored."""
        c, line = self._cursor, self._line
        return self.text if c == len(line) else f"{self.text}\r{line[:c]}"

    def cut_front(self, wanted: int) -> int:
        """Drop at least ``wanted`` bytes from the front (at a line start, unless only the
        last line is left); how many bytes were dropped."""
        dropped = 0
        while self._done and dropped < wanted:
            first = self._done[0]  # whole lines: it ends with "\n"
            # n characters are at least n bytes: the first line end at or after that many
            # characters is far enough.
            end = first.find("\n", wanted - dropped - 1) + 1
            piece = first[:end] if end else first
            if len(piece) == len(first):
                self._done.pop(0)
            else:
                self._done[0] = first[len(piece) :]
            size = len(piece.encode("utf-8", "surrogatepass"))
            self._done_bytes -= size
            dropped += size
        if dropped < wanted and self._line:
            take = min(len(self._line), wanted - dropped)
            dropped += len(self._line[:take].encode("utf-8", "surrogatepass"))
            self._line, self._cursor = self._line[take:], max(0, self._cursor - take)
        return dropped

    @property
    def nbytes(self) -> int:
        """UTF-8 size of :attr:`text` (what it costs the server to hold it)."""
        return self._done_bytes + len(self._line.encode("utf-8", "surrogatepass"))
