"""The cell journal: what a returning server needs of the cells that ran while it was away
(docs/PROTOCOL.md section 9, "The cell journal").

A kernel launched to outlive its server (:mod:`ipykernel_ext.kernel.orphan`) keeps, for each
cell it runs, what the server must have to show the cell whole after a restart: the cell's
IOPub outputs folded as the page folds them, its ``execute_reply`` and an ``input_request``
still waiting for its answer. One concept per module:

* :mod:`.cell`: one cell's record (:class:`~.cell.JournalCell`): its request, its folded
  outputs (streams as the page stores them, by the shared leaf
  :mod:`ipykernel_ext.stream_text`: a progress bar costs one line), its reply and its
  waiting question;
* :mod:`.journal`: the kernel's records (:class:`~.journal.Journal`): what the IOPub thread
  sent, in wire order; the byte bound; the summary a server asks; the messages a server is
  sent again;
* :mod:`.kernel_part`: :class:`~.kernel_part.JournalingKernel`, the kernel's mixin: the
  ``journal_request`` on control, and the kernel's hooks that start, end and ask in a cell.

Nothing here imports the rest of the kernel side (only the shared leaves); the app wires the
journal to the IOPub thread
(:class:`~ipykernel_ext.kernel.iopub.thread.WakeSafeIOPubThread`'s ``tap``).
"""
