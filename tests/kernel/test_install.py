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
CLASS = "ipykernel_ext.server.SharedChannelsConnection"
VOILA_SET = {"Voila": {"kernel_websocket_connection_class": CLASS}}


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
    # It ends itself once left without a server: the server extension lets it outlive one.
    assert spec.metadata["ends_when_orphaned"] is True
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
    assert spec["metadata"] == {
        "debugger": True,
        "supported_encryption": ["curve"],
        "ends_when_orphaned": True,
    }
    assert (kernels / "ext-test" / "logo-64x64.png").exists()
    assert "Installed kernelspec ext-test" in result.stdout


def test_install_user(tmp_path: Path) -> None:
    config = tmp_path / "config"
    env = {"JUPYTER_DATA_DIR": str(tmp_path), "JUPYTER_CONFIG_DIR": str(config)}
    result = run_install("--user", env=env)
    assert result.returncode == 0, result.stderr
    spec = read_spec(tmp_path / "kernels", "python3-ext")
    assert spec["argv"][-len(EXT_ARGV_TAIL) :] == EXT_ARGV_TAIL
    assert spec["display_name"] == "Python 3 (ipykernel_ext)"
    # Standalone Voila's class, in the user's Jupyter config dir.
    assert json.loads((config / "voila.json").read_text()) == VOILA_SET


def test_install_sys_prefix() -> None:
    name = f"ext-sysprefix-{os.getpid()}"
    target = Path(sys.prefix) / "share" / "jupyter" / "kernels" / name
    try:
        # --no-voila: the venv's voila.json is every other test's (voila_config_dir below).
        result = run_install("--sys-prefix", "--name", name, "--no-voila")
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


# --- standalone Voila's connection class (ipykernel_ext/voila_config.py) -------------------


def install_with_voila_json(tmp_path: Path, text: str | None, *args: str) -> tuple[str, str]:
    """Install into the prefix ``tmp_path`` whose ``etc/jupyter/voila.json`` holds ``text``
    (None: no file); the file's text after, and the command's stdout."""
    config = tmp_path / "etc" / "jupyter"
    config.mkdir(parents=True)
    if text is not None:
        (config / "voila.json").write_text(text)
    result = run_install("--prefix", str(tmp_path), *args)
    assert result.returncode == 0, result.stderr
    after = config / "voila.json"
    return (after.read_text() if after.exists() else ""), result.stdout


def test_install_writes_an_absent_voila_json(tmp_path: Path) -> None:
    after, out = install_with_voila_json(tmp_path, None)
    assert json.loads(after) == VOILA_SET
    assert "Voila configured" in out


def test_install_adds_the_one_key_and_keeps_every_other_byte(tmp_path: Path) -> None:
    before = '{\n  "Voila": {"ip":  "0.0.0.0",\n "theme": "dark"},\n  "X": [1, {"Voila": 2}]\n}\n'
    after, _ = install_with_voila_json(tmp_path, before)
    added = f'"kernel_websocket_connection_class": "{CLASS}", '
    assert after == before.replace('"Voila": {', '"Voila": {' + added, 1)
    assert json.loads(after)["Voila"] == {
        "kernel_websocket_connection_class": CLASS,
        "ip": "0.0.0.0",
        "theme": "dark",
    }


def test_install_adds_a_voila_section_to_other_sections(tmp_path: Path) -> None:
    before = '{ "VoilaConfiguration" : {"theme": "dark"} }'
    after, _ = install_with_voila_json(tmp_path, before)
    assert (
        after == '{"Voila": {"kernel_websocket_connection_class": "' + CLASS + '"}, ' + before[1:]
    )
    assert json.loads(after)["VoilaConfiguration"] == {"theme": "dark"}


OTHER = "jupyter_server.services.kernels.connection.channels.ZMQChannelsWebsocketConnection"


@pytest.mark.parametrize(
    ("text", "found"),
    [
        (json.dumps({"Voila": {"kernel_websocket_connection_class": OTHER}}), OTHER),
        ('{"Voila": {"ip": "1.2.3.4",}}', "not valid JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"Voila": "x"}', "not a JSON object"),
    ],
)
def test_install_leaves_a_voila_json_it_must_not_change(
    tmp_path: Path, text: str, found: str
) -> None:
    after, out = install_with_voila_json(tmp_path, text)
    assert after == text
    line = next(line for line in out.splitlines() if line.startswith("Voila not configured"))
    assert found in line and CLASS in line  # what it found, and what to add by hand


def test_install_leaves_alone_a_dir_with_voila_py(tmp_path: Path) -> None:
    config = tmp_path / "etc" / "jupyter"
    config.mkdir(parents=True)
    (config / "voila.py").write_text("c.Voila.port = 9\n")
    result = run_install("--prefix", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in config.iterdir()) == ["voila.py"]
    assert (config / "voila.py").read_text() == "c.Voila.port = 9\n"
    assert "voila.py exists" in result.stdout and CLASS in result.stdout


def test_install_already_configured_and_no_voila(tmp_path: Path) -> None:
    text = json.dumps(VOILA_SET)
    after, out = install_with_voila_json(tmp_path, text)
    assert after == text and "already configured" in out
    other = tmp_path / "other"
    after, out = install_with_voila_json(other, None, "--no-voila")
    assert after == "" and "Voila" not in out


def test_voila_config_dir_matches_each_form() -> None:
    from jupyter_core.paths import SYSTEM_CONFIG_PATH, jupyter_config_dir

    from ipykernel_ext.install import voila_config_dir

    assert voila_config_dir(user=True) == jupyter_config_dir()
    assert voila_config_dir(prefix=sys.prefix) == os.path.join(sys.prefix, "etc", "jupyter")
    assert voila_config_dir() == SYSTEM_CONFIG_PATH[0]
