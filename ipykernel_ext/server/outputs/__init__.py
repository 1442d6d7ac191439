"""Outputs survive the tab: the server keeps running cells' outputs and writes them for a
departed tab (docs/PROTOCOL.md section 6).

Server side only; the connection classes (:mod:`ipykernel_ext.server`) feed it, and import
it from here only. The parts, each its own module:

* :mod:`.owner`: :class:`OutputsOwner`, one per kernel: it hears the kernel through its
  feed, knows which sessions are open, decides which cells the server owns and what a
  returning session is not given, and tells its feed when the kernel must be heard;
* :mod:`.feed`: what hears a kernel for its owner, one per transport (:class:`Feed`;
  :class:`ChannelsFeed` for a kernel of this server, which holds its shared channels open
  while a followed cell runs and no tab is; the gateway's is in
  :mod:`ipykernel_ext.server.gateway.gateway_link`);
* :mod:`.heard`: what the owner hears (kernel messages from the channels or a gateway, a
  client's messages) and how it reads them, decoding no more than it needs;
* :mod:`.writer`: :class:`~.writer.OutputsWriter`, where and when the owned cells are
  written (the live document as they go, else the file), and which are written;
* :mod:`.registry`: the cells of one kernel the server follows (a
  :class:`FollowedCell` per ``execute_request`` with a ``cellId``, running or ended), the
  kernel-wide display index and byte bound;
* :mod:`.fold`: one cell's outputs folded from IOPub messages, as nbformat dicts, bounded;
* :mod:`.text`: where two stream texts part (the live document's edits); the stream text
  itself, ``\\r``/``\\b`` applied as JupyterLab stores it, is the shared leaf
  ``ipykernel_ext.stream_text``;
* :mod:`.capture`: which requests an ipywidgets ``Output`` widget is capturing;
* :mod:`.collab`: writes a cell's outputs into the live collaborative document
  (jupyter-collaboration), incrementally, as receiving tabs need them;
* :mod:`.contents`: writes ended cells' outputs into the ``.ipynb`` through the
  ContentsManager, for when no tab and no collaboration room is there;
* :mod:`.coalesce`: one write in flight per cell, the writes asked for meanwhile run as one.

The model (registry, fold, text, capture, coalesce) imports no server package; the writers
import jupyter_server, pycrdt or jupyter_ydoc when they write.
"""

from ...stream_text import StreamText
from .capture import OutputCapture
from .coalesce import Coalescer
from .collab import CollabWriter, find_cell
from .contents import ContentsWriter
from .feed import ChannelsFeed, Feed
from .fold import CUT_NOTE_KEY, OUTPUT_TYPES, CellOutputs, output_from_content
from .heard import HeardMessage
from .owner import MakeFeed, OutputsOwner
from .registry import DEFAULT_MAX_CELL_BYTES, DEFAULT_MAX_KERNEL_BYTES, FollowedCell, KernelOutputs
from .text import common_prefix

__all__ = [
    "CUT_NOTE_KEY",
    "DEFAULT_MAX_CELL_BYTES",
    "DEFAULT_MAX_KERNEL_BYTES",
    "OUTPUT_TYPES",
    "CellOutputs",
    "ChannelsFeed",
    "Coalescer",
    "CollabWriter",
    "ContentsWriter",
    "Feed",
    "FollowedCell",
    "HeardMessage",
    "KernelOutputs",
    "MakeFeed",
    "OutputCapture",
    "OutputsOwner",
    "StreamText",
    "common_prefix",
    "find_cell",
    "output_from_content",
]
