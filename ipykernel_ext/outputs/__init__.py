"""Outputs survive the tab: the server side's model of running cells' outputs, and writers.

Server side only (never imported by ``kernel/``); the connection class feeds it (see
docs/ARCHITECTURE.md, "Outputs"). The parts, each its own module:

* :mod:`.text`: stream text with ``\\r``/``\\b`` applied as JupyterLab stores it;
* :mod:`.fold`: one cell's outputs folded from IOPub messages, as nbformat dicts, bounded;
* :mod:`.capture`: which requests an ipywidgets ``Output`` widget is capturing;
* :mod:`.registry`: the running cells of one kernel (per ``execute_request`` with a
  ``cellId``), the kernel-wide display index and byte bound;
* :mod:`.collab`: writes a cell's outputs into the live collaborative document
  (jupyter-collaboration), incrementally, as receiving tabs need them;
* :mod:`.contents`: writes ended cells' outputs into the ``.ipynb`` through the
  ContentsManager, for when no tab and no collaboration room is there;
* :mod:`.coalesce`: one write in flight per cell, the writes asked for meanwhile run as one.

Nothing here imports jupyter_server, pycrdt or jupyter_ydoc at import time; the writers import
what they need when they write.
"""

from .capture import OutputCapture
from .coalesce import Coalescer
from .fold import CUT_NOTE_KEY, CellOutputs
from .registry import KernelOutputs, RunningCell
from .text import StreamText

__all__ = [
    "CUT_NOTE_KEY",
    "CellOutputs",
    "Coalescer",
    "KernelOutputs",
    "OutputCapture",
    "RunningCell",
    "StreamText",
]
