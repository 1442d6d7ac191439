"""The benchmarks, stock ipykernel vs ipykernel_ext: ``python -m benchmarks --list``.

Each module here is one benchmark; ``__main__`` is the runner and ``harness`` what they share.
"""
