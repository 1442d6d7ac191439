"""The benchmarks, stock ipykernel vs ipykernel_ext: ``python -m benchmarks --list``.

Each module here is one benchmark but ``runner`` (``python -m benchmarks``; ``__main__`` only
calls it) and ``harness`` (what the benchmarks share).
"""
