"""pytest configuration shared by every test (the shared parts are modules of this package)."""

import os

# Kernels started by the tests must not pick up a developer's own Jupyter config.
os.environ.setdefault("JUPYTER_PLATFORM_DIRS", "1")
