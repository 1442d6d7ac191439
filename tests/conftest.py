"""pytest configuration shared by every test (helpers are importable through pyproject's
``[tool.pytest.ini_options] pythonpath``)."""

import os

# Kernels started by the tests must not pick up a developer's own Jupyter config.
os.environ.setdefault("JUPYTER_PLATFORM_DIRS", "1")
