"""jupyter_server extensions for tests and benchmarks, loaded by a real server.

The server imports each by its module name (``--ServerApp.jpserver_extensions=
{"pause_extension": True}``): :class:`harness.server.JupyterServer` puts this folder first on
the server's ``PYTHONPATH``. The harness imports their constants as
``harness.server_extensions.<name>``. Never part of the package.

* ``pause_extension``: a request that blocks the server's event loop for N seconds;
* ``outputs_extension``: ``ipykernel_ext.server.outputs``' writers driven inside the server;
* ``outputs_buffer_extension``: what the server holds for a kernel's departed session (its
  offline buffer, its outputs owner);
* ``outputs_room_extension``: a notebook's live collaborative document, read as JSON;
* ``lose_once``: not an extension but a ContentsManager ``post_save_hook`` (by its dotted
  name, ``harness.server_extensions.lose_once.hook``) that loses a notebook after one save.
"""
