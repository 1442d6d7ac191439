"""Everything that runs in the kernel process.

* :class:`ExtKernel` (:mod:`.ipkernel`): the IPython kernel with the additions of
  PROTOCOL.md, and :class:`ExtKernelApp` (:mod:`.kernelapp`), its launcher
  (``python -m ipykernel_ext``);
* IOPub without silent loss: :mod:`.iopub` (the socket), :mod:`.iopub_options` (the settings
  it runs with, the options that set them and their checks), :mod:`.iopub_stats` (what it
  counts and reports), :mod:`.iopub_backlog` (what waits), :mod:`.iopub_warning` (the
  give-ups in the log), :mod:`.iopub_adopt` (under any other app), :mod:`.iopub_notice`
  (telling the affected cell);
* :mod:`.comm_echo`, :mod:`.widget_state` / :mod:`.widget_buffers` (the one-reply snapshot),
  :mod:`.router_identity`;
* comm messages on the main shell, never beside a cell, whatever subshell a frontend sends
  them to: :mod:`.comm_routing` (which go there, the inbox, :func:`handle_waiting_comms`) and
  :mod:`.cell_events` (a cell's ``pre_execute``/``post_execute`` held while one is handled
  mid-cell);
* a reconnecting frontend answered mid-cell: :mod:`.busy_answers` (the answers), with
  :mod:`.busy_routing` (which messages, in each client's order), :mod:`.main_shell_status`
  (what was published about the main shell), :mod:`.control_comm` (ipywidgets' control comm,
  on an idle kernel too) and :mod:`.widget_reconcile` (what changed, sent after the cell).

``ipykernel_ext.kernel.ExtKernel`` is the path cluster kernelspecs and images name.
"""

from .comm_routing import handle_waiting_comms
from .ipkernel import ExtKernel
from .kernelapp import ExtKernelApp

__all__ = ["ExtKernel", "ExtKernelApp", "handle_waiting_comms"]
