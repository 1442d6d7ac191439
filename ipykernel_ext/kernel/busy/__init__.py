"""A frontend that (re)connects while the main shell runs a cell is answered at once.

The answers run on ipykernel's shell-channel thread, which receives every shell message
before it is routed to the main shell or a subshell; the main shell's thread tells them what
it publishes and what it has finished (under the locks of :mod:`.main_shell_status` and
:mod:`.busy_routing`):

* :mod:`.answers`: :class:`~.answers.BusyAnswers`, the answers themselves (``kernel_info``,
  ``comm_info``, ipywidgets' control comm) and the check after the cell;
* :mod:`.busy_routing`: which shell messages are answered there, in each client's order;
* :mod:`.main_shell_status`: what was last published about the main shell (busy or idle).

It uses the widget snapshot of :mod:`ipykernel_ext.kernel.widgets`; nothing there uses it.
"""
