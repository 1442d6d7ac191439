"""``python -m ipykernel_ext --version``: ipykernel_ext's version and ipykernel's."""

from __future__ import annotations

import ipykernel
import pytest

import ipykernel_ext
from ipykernel_ext.kernel.kernelapp import ExtKernelApp


def test_version_names_ipykernel_ext_and_ipykernel(capsys: pytest.CaptureFixture[str]) -> None:
    app = ExtKernelApp()
    with pytest.raises(SystemExit) as exited:
        app.parse_command_line(["--version"])  # prints the version and exits, as the CLI does
    assert exited.value.code == 0
    printed = capsys.readouterr().out.strip()
    assert printed == f"{ipykernel_ext.__version__} (ipykernel {ipykernel.__version__})"
