"""``python -m benchmarks``: the runner (benchmarks/runner.py)."""

import sys

from benchmarks.runner import main

if __name__ == "__main__":
    sys.exit(main())
