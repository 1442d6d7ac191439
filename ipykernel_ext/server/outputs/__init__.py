"""Outputs survive the tab: the server keeps running cells' outputs and writes them for a
departed tab (docs/PROTOCOL.md section 6).

Server side only; the connection classes (:mod:`ipykernel_ext.server`) feed it. The parts,
each its own module:

* :mod:`.owner`: :class:`~.owner.OutputsOwner`, one per kernel: it hears the kernel's
  channels, knows which sessions are open, decides which cells the server owns and what a
  returning session is not given, and keeps the channels open while it follows a cell;
* :mod:`.heard`: what the owner hears (kernel messages from the channels or a gateway, a
  client's messages) and how it reads them, decoding no more than it needs;
* :mod:`.writer`: :class:`~.writer.OutputsWriter`, where and when the owned cells are
  written (the live document as they go, else the file), and which are written;
* :mod:`.registry`: the cells of one kernel the server follows (a
  :class:`~.registry.FollowedCell` per ``execute_request`` with a ``cellId``, running or
  ended), the kernel-wide display index and byte bound;
* :mod:`.fold`: one cell's outputs folded from IOPub messages, as nbformat dicts, bounded;
* :mod:`.text`: stream text with ``\\r``/``\\b`` applied as JupyterLab stores it;
* :mod:`.capture`: which requests an ipywidgets ``Output`` widget is capturing;
* :mod:`.collab`: writes a cell's outputs into the live collaborative document
  (jupyter-collaboration), incrementally, as receiving tabs need them;
* :mod:`.contents`: writes ended cells' outputs into the ``.ipynb`` through the
  ContentsManager, for when no tab and no collaboration room is there;
* :mod:`.coalesce`: one write in flight per cell, the writes asked for meanwhile run as one.

The model (registry, fold, text, capture, coalesce) imports no server package; the writers
import jupyter_server, pycrdt or jupyter_ydoc when they write.
"""

from .capture import OutputCapture
from .coalesce import Coalescer
from .fold import CUT_NOTE_KEY, CellOutputs
from .registry import FollowedCell, KernelOutputs
from .text import StreamText

__all__ = [
    "CUT_NOTE_KEY",
    "CellOutputs",
    "Coalescer",
    "FollowedCell",
    "KernelOutputs",
    "OutputCapture",
    "StreamText",
]
