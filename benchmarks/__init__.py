"""The benchmarks, stock ipykernel vs ipykernel_ext: ``python -m benchmarks --list``.

Each module here is one benchmark but ``runner`` (``python -m benchmarks``; ``__main__`` only
calls it), ``trials`` (what the benchmarks share: kernels, trial order, tables, JSON) and
``plot`` (their figures). The packages hold parts, not benchmarks (``--list`` names modules
only): ``burst`` (the scenario behind the burst presets), ``fanout`` (``shared_channels``'
server and clients) and ``widget_fetching`` (``widget_fetch``'s floors and tables).
The tools they share with the tests are in the checkout's ``harness`` package: run the
benchmarks as ``python -m benchmarks`` from the checkout root.
"""
