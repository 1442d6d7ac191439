"""Fixtures of the browser tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.browser import LAB_ARGS, quiet_lab_settings, require_browser
from harness.server import JupyterServer


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    """``jupyter lab`` as a user has it once ipykernel_ext is installed (its server extension
    enabled by the install, nothing configured), for JupyterLab and Notebook 7 pages: the
    ``lab`` of tests/conftest.py's ``page``, unless a module defines its own.

    One for the session, shared by the modules that do not define their own (a start is
    about 10 s): they do not interfere, since each page's kernels are shut down after it
    (``after_page``), each notebook has a name of its own in the shared root, and what a test
    reads of the server's log it counts from before its own step."""
    require_browser(("playwright", "jupyterlab", "notebook", "ipywidgets"))
    root = tmp_path_factory.mktemp("root")
    with JupyterServer(app="lab", root_dir=root, extra_args=LAB_ARGS, ipykernel_ext=None) as srv:
        quiet_lab_settings(srv)
        yield srv
