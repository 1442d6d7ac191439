"""What the ``widget_fetch`` benchmark reports beside its round trips: floors, tables.

The benchmark module keeps the client round trips (per-widget ``request_state``, the control
comm, ``widget_state_request``) and the run; this package holds what it reports around them:

* :mod:`~benchmarks.widget_fetching.floors`: what a reply costs without the client round
  trip: the kernel's own work timed in its process, and the same bytes over a bare
  ROUTER/DEALER pair (the transport floor);
* :mod:`~benchmarks.widget_fetching.tables`: the summary tables the run prints.

A package, not modules beside the benchmarks, so ``python -m benchmarks --list`` does not
name its parts. Importing this package imports nothing else.
"""
