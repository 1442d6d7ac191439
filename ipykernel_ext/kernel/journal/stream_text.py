"""Stream text with ``\\r`` overwrites applied, as JupyterLab stores it, with its cursor kept.

JupyterLab 4 (``OutputAreaModel``) applies control characters when it stores a stream:
characters overwrite from a cursor, ``\\r`` moves the cursor to the start of its line,
``\\n`` ends the line. So ``"50%\\r60%\\r"`` is shown as one line. A cell printing a progress
bar for hours sends one such update per tick; kept as sent, its text would grow without end.
:func:`append` keeps the text *as the page would store it*, plus, when the cursor is inside
the last line, ``"\\r"`` and the characters before the cursor: fed to the page again, the text
gives the same lines *and* the same cursor, so what the cell prints next lands where it would
have. A line with ``\\b`` is kept as sent (rare; its rule moves more than the cursor).
"""

from __future__ import annotations


def overwritten(line: str) -> tuple[str, int]:
    """What ``line`` (no ``\\n``, no ``\\b``) shows, and where its cursor ends."""
    shown, cursor = "", 0
    for i, piece in enumerate(line.split("\r")):
        if i:
            cursor = 0
        if piece:
            shown = shown[:cursor] + piece + shown[cursor + len(piece) :]
            cursor += len(piece)
    return shown, cursor


def append(text: str, new: str) -> str:
    """``text`` followed by ``new``, with the overwrites in the lines ``new`` touches applied."""
    if "\r" not in new:
        return text + new
    start = text.rfind("\n") + 1  # the last line of text: ``new`` may overwrite it
    tail = text[start:] + new
    if "\b" in tail:
        return text + new
    lines = tail.split("\n")
    out = [overwritten(line)[0] for line in lines[:-1]]
    shown, cursor = overwritten(lines[-1])
    out.append(shown if cursor == len(shown) else f"{shown}\r{shown[:cursor]}")
    return text[:start] + "\n".join(out)
