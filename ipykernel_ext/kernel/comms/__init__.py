"""Comm messages from clients: echoed to the other frontends, and run on the main shell.

* :mod:`.echo`: ``comm_echo`` (docs/PROTOCOL.md section 2), which client comm messages are
  published again on IOPub, the run-time switch and the per-target exclusions;
* :mod:`.comm_routing`: comm messages a frontend sends to a subshell run on the main shell,
  in arrival order, never beside a cell (:class:`~.comm_routing.CommRouting` on the
  shell-channel thread, :class:`~.comm_routing.CommInbox` for the main shell,
  :func:`~.comm_routing.handle_waiting_comms`);
* :mod:`.main_shell`: :class:`~.main_shell.CommsOnMainShell`, the kernel mixin that holds the
  path together: one routing decision per message, the markers (one per run of messages), the
  main shell meeting one and taking its messages under its lock, who may handle them mid-cell;
* :mod:`.mid_cell`: a comm message handled while the cell waits (its own busy/idle, on the
  main thread from a blocking cell, an interrupt stops the cell);
* :mod:`.cell_events`: a cell's ``pre_execute``/``post_execute`` held while a comm message is
  handled in the middle of it, and the figures its callback opened shown under it.
"""
