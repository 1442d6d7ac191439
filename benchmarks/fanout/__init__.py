"""What the ``shared_channels`` benchmark runs on: its server and its counting clients.

The benchmark module keeps the configurations (clients x server class x kernel), the bursts
run on them and the tables; this package holds what they run on:

* :mod:`~benchmarks.fanout.server`: the jupyter_server under measurement, one per websocket
  connection class, and what is read off its process (descriptors, CPU, RSS);
* :mod:`~benchmarks.fanout.clients`: the websocket clients that only count a burst, in
  worker processes of their own, driven over pipes.

Why the clients are not :class:`harness.async_websocket.WSClient` (as the fan-out tests'
``CountingClient`` is): those keep every message as a dict (headers JSON-decoded) so a test
can compare them with the server's own counts; a benchmark client must cost as little as
possible on the machine the server and the kernel share, so it keeps a count, slices each
frame and matches bytes, and a hundred of them are spread over worker processes.

A package, not modules beside the benchmarks, so ``python -m benchmarks --list`` does not
name its parts. Importing this package imports nothing else.
"""
