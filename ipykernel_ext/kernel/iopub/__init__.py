"""IOPub that never loses a message silently (docs/PROTOCOL.md section 1).

The kernel's IOPub socket and what it runs with, one concept per module:

* :mod:`.socket`: :class:`~.socket.NoDropXPubSocket`, the XPUB socket (queue size before bind,
  ``XPUB_NODROP``, a full subscriber's messages waiting in the kernel, give-ups);
* :mod:`.settings`: the settings it runs with, the options that set them and their checks;
* :mod:`.stats`: what it counts, and the ``iopub_stats_reply`` that reports it;
* :mod:`.backlog`: what waits for a full subscriber, in order, with its bytes;
* :mod:`.give_up_log`: the kernel log's warning about give-ups;
* :mod:`.notice`: the affected cell told, in its own output, what a frontend missed;
* :mod:`.adoption`: the same socket under any other app (stock ``IPKernelApp``, the cluster
  launchers, ``embed_kernel``): :class:`~.adoption.AdoptedXPubSocket` over the socket it bound;
* :mod:`.thread`: :class:`~.thread.WakeSafeIOPubThread`, ipykernel's IOPub thread, which
  never waits on its own full wake-up pipe (a deadlock in stock's);
* :mod:`.kernel_options`: :class:`~.kernel_options.IOPubOptions`, the kernel's options mixin
  (the adoption when the kernel is made, a change at run time).

Only the IOPub thread sends and changes the socket's state; what other threads read is named
where it is kept. Nothing here imports the rest of the kernel side.
"""
