"""The kernelspec: what pip installs, what ``python -m ipykernel_ext install`` writes, and
that an installed spec starts ipykernel_ext (also under the name ``python3``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.kernelspec import KernelSpecManager

from harness.kernels import running_kernel

EXT_ARGV_TAIL = ["-m", "ipykernel_ext", "-f", "{connection_file}"]


def run_install(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ipykernel_ext", "install", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def read_spec(kernels_dir: Path, name: str) -> dict[str, Any]:
    return json.loads((kernels_dir / name / "kernel.json").read_text())


def test_pip_installed_spec_is_python3_ext_with_curve() -> None:
    spec = KernelSpecManager().get_kernel_spec("python3-ext")
    assert spec.display_name == "Python 3 (ipykernel_ext)"
    assert spec.argv[-len(EXT_ARGV_TAIL) :] == EXT_ARGV_TAIL
    assert spec.metadata["supported_encryption"] == ["curve"]
    assert spec.metadata["debugger"] is True
    assert spec.language == "python"


def test_install_prefix_name_display_name_env(tmp_path: Path) -> None:
    names = ["--name", "ext-test", "--display-name", "Ext Test"]
    envs = ["--env", "EXT_A", "1", "--env", "EXT_B", "two"]
    result = run_install("--prefix", str(tmp_path), *names, *envs)
    assert result.returncode == 0, result.stderr
    kernels = tmp_path / "share" / "jupyter" / "kernels"
    spec = read_spec(kernels, "ext-test")
    assert spec["argv"] == [sys.executable, "-Xfrozen_modules=off", *EXT_ARGV_TAIL]
    assert spec["display_name"] == "Ext Test"
    assert spec["env"] == {"EXT_A": "1", "EXT_B": "two"}
    assert spec["metadata"] == {"debugger": True, "supported_encryption": ["curve"]}
    assert (kernels / "ext-test" / "logo-64x64.png").exists()
    assert "Installed kernelspec ext-test" in result.stdout


def test_install_user(tmp_path: Path) -> None:
    result = run_install("--user", env={"JUPYTER_DATA_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    spec = read_spec(tmp_path / "kernels", "python3-ext")
    assert spec["argv"][-len(EXT_ARGV_TAIL) :] == EXT_ARGV_TAIL
    assert spec["display_name"] == "Python 3 (ipykernel_ext)"


def test_install_sys_prefix() -> None:
    name = f"ext-sysprefix-{os.getpid()}"
    target = Path(sys.prefix) / "share" / "jupyter" / "kernels" / name
    try:
        result = run_install("--sys-prefix", "--name", name)
        assert result.returncode == 0, result.stderr
        assert read_spec(target.parent, name)["argv"][-len(EXT_ARGV_TAIL) :] == EXT_ARGV_TAIL
    finally:
        subprocess.run(["rm", "-rf", str(target)], check=False)


def test_frozen_modules_flag_drops_xfrozen(tmp_path: Path) -> None:
    assert run_install("--prefix", str(tmp_path), "--frozen-modules").returncode == 0
    spec = read_spec(tmp_path / "share" / "jupyter" / "kernels", "python3-ext")
    assert spec["argv"] == [sys.executable, *EXT_ARGV_TAIL]


@pytest.mark.parametrize(
    "args",
    [
        ["--as-default", "--name", "other"],
        ["--user", "--prefix", "/tmp/x"],
        ["--env", "ONLY_NAME"],
        ["--no-such-option"],
    ],
)
def test_install_bad_arguments_fail_clearly(args: list[str], tmp_path: Path) -> None:
    result = run_install(*args, env={"JUPYTER_DATA_DIR": str(tmp_path)})
    assert result.returncode == 2
    assert "usage" in result.stderr or "--as-default" in result.stderr
    assert not (tmp_path / "kernels").exists()


def test_as_default_replaces_python3_and_starts_ext_kernel(tmp_path: Path) -> None:
    """The drop-in path: a frontend asking for 'python3' gets ipykernel_ext."""
    result = run_install("--prefix", str(tmp_path), "--as-default")
    assert result.returncode == 0, result.stderr
    kernels = tmp_path / "share" / "jupyter" / "kernels"
    spec = read_spec(kernels, "python3")
    assert spec["argv"][-len(EXT_ARGV_TAIL) :] == EXT_ARGV_TAIL
    assert spec["metadata"]["supported_encryption"] == ["curve"]

    ksm = KernelSpecManager(kernel_dirs=[str(kernels)])
    with running_kernel("python3", kernel_spec_manager=ksm) as (_km, kc):
        features = kc.kernel_info(reply=True, timeout=30)["content"]["supported_features"]
    assert "iopub_stats" in features
