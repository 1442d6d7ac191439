"""The burst scenario: one cell's burst of widget messages, read under a condition.

Five questions the project measures are this one scenario: the same load (a ``GridBox`` of
Buttons, or a loop of ``comm_open``), on stock ipykernel and ipykernel_ext taking turns,
read under another condition (plain TCP or CurveZMQ, through jupyter_server, a server
paused or stopped mid-burst, a shaped link, a co-subscriber that never reads,
gateway_provisioners' launcher). One module per part:

* :mod:`~benchmarks.burst.outcome`: what a trial sends (:class:`Load`) and saw
  (:class:`Outcome`), and their summary;
* :mod:`~benchmarks.burst.readers`: reading over a kernel client or a server's websocket,
  the kernel's memory;
* :mod:`~benchmarks.burst.conditions` and :mod:`~benchmarks.burst.provisioners`: the
  conditions, each real; :mod:`~benchmarks.burst.catalog`: each by its name;
* :mod:`~benchmarks.burst.scenario`: the run, the table and the figure;
* :mod:`~benchmarks.burst.presets`: the named runs ``python -m benchmarks --list`` shows
  (``burst``, ``iopub_burst``, ``through_server``, ``cluster_burst``, ``iopub_pause``).

Importing this package imports nothing else, so ``--list`` stays cheap.
"""
