"""pytest configuration: the tests' folder on sys.path for ``helpers``, and the markers."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

# Kernels started by the tests must not pick up a developer's own Jupyter config.
os.environ.setdefault("JUPYTER_PLATFORM_DIRS", "1")
