"""Standalone Voila's connection class, set in a Jupyter config dir's ``voila.json``.

Standalone ``voila NOTEBOOK`` loads no jupyter_server extension: it reads only ``voila.json``
or ``voila.py``, from the working directory and then the Jupyter config path, so the package's
server extension cannot give it :class:`~ipykernel_ext.server.SharedChannelsConnection`. A
wheel cannot refuse to overwrite a file a user or another package owns, so ``python -m
ipykernel_ext install`` sets it instead (:func:`configure_voila`), and never overwrites:

* no ``voila.json``: it is created with the one key;
* a ``voila.json`` holding a JSON object that does not set the class: the key is added, every
  other setting kept as it was;
* one that sets the class already (ours: nothing to do; another: the user's choice), one that
  is not a JSON object, or a ``voila.py`` in the dir: every file is left untouched and the
  result says what was found and what to add by hand.

Voila's own precedence decides which setting wins: the command line, then ``voila.json`` or
``voila.py`` in the working directory, then the user's Jupyter config dir, then
``{sys.prefix}/etc/jupyter``, then the system dirs. This module imports nothing of ours.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Voila's trait naming the class of its kernel websockets.
TRAIT = "kernel_websocket_connection_class"
#: Our class, as Voila's config names it.
CONNECTION_CLASS = "ipykernel_ext.server.SharedChannelsConnection"
#: What to add by hand when the install leaves the files alone.
BY_HAND = f'{{"Voila": {{"{TRAIT}": "{CONNECTION_CLASS}"}}}}'


@dataclass(frozen=True)
class VoilaConfigResult:
    """What :func:`configure_voila` did: ``changed`` (a file written) and one line for the user."""

    changed: bool
    message: str


def _left_alone(found: str, path: Path) -> VoilaConfigResult:
    return VoilaConfigResult(
        False,
        f"Voila not configured: {found}; left it untouched. To use ipykernel_ext's "
        f"connection class in standalone Voila, add {BY_HAND} to {path} by hand.",
    )


def configure_voila(config_dir: str | Path) -> VoilaConfigResult:
    """Set ``Voila.kernel_websocket_connection_class`` to ours in ``config_dir/voila.json``,
    never overwriting a setting or a file it cannot read (module docstring)."""
    directory = Path(config_dir)
    json_path, py_path = directory / "voila.json", directory / "voila.py"
    if py_path.exists():
        return _left_alone(f"{py_path} exists (Voila reads it too)", json_path)
    if not json_path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps({"Voila": {TRAIT: CONNECTION_CLASS}}, indent=2) + "\n")
        return VoilaConfigResult(True, f"Voila configured: wrote {json_path}")
    try:
        config: Any = json.loads(json_path.read_text())
    except (UnicodeDecodeError, ValueError) as exc:
        return _left_alone(f"{json_path} is not valid JSON ({exc})", json_path)
    section = config.get("Voila") if isinstance(config, dict) else None
    if not isinstance(config, dict) or not isinstance(section, dict | None):
        return _left_alone(f"{json_path} is not a JSON object of sections", json_path)
    if section is not None and TRAIT in section:
        if section[TRAIT] == CONNECTION_CLASS:
            return VoilaConfigResult(False, f"Voila already configured in {json_path}")
        return _left_alone(f"{json_path} sets Voila.{TRAIT} = {section[TRAIT]!r}", json_path)
    text = json_path.read_text()
    json_path.write_text(_with_key(text, config))
    return VoilaConfigResult(True, f"Voila configured: added Voila.{TRAIT} to {json_path}")


def _with_key(text: str, config: dict[str, Any]) -> str:
    """``text`` (a JSON object whose ``Voila`` section, if any, lacks the trait) with the
    trait inserted as the section's first key, or a ``Voila`` section as the object's first:
    every other byte stays as it was. ``config`` is ``text`` parsed."""
    section = config.get("Voila")
    entry = f"{json.dumps(TRAIT)}: {json.dumps(CONNECTION_CLASS)}"
    if section is None:
        entry = f'"Voila": {{{entry}}}'
        brace, empty = _skip_space(text, 0), not config
    else:
        brace = _voila_value_start(text)
        empty = not section
    return text[: brace + 1] + entry + ("" if empty else ", ") + text[brace + 1 :]


def _skip_space(text: str, index: int) -> int:
    while index < len(text) and text[index] in " \t\n\r":
        index += 1
    return index


def _voila_value_start(text: str) -> int:
    """Where the value of the top-level object's last ``"Voila"`` key starts (the one
    ``json.loads`` keeps), in ``text``, a valid JSON object."""
    decoder = json.JSONDecoder()
    index = _skip_space(text, 0) + 1
    found = -1
    while True:
        index = _skip_space(text, index)
        if text[index] == "}":
            return found
        key, index = decoder.raw_decode(text, index)
        index = _skip_space(text, _skip_space(text, index) + 1)  # past the colon
        if key == "Voila":
            found = index
        _value, index = decoder.raw_decode(text, index)
        index = _skip_space(text, index)
        if text[index] == ",":
            index += 1
