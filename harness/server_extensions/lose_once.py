"""A ContentsManager ``post_save_hook`` for tests: the file is gone right after one save.

What a client reading a notebook while the server writes it can do to the file through
jupyter_server's own atomic-writing recovery (see ``ipykernel_ext/server/outputs/contents.py``),
made deterministic: the save after which ``<notebook>.lose-once`` exists (the test makes it)
removes that marker and the notebook, so the save's own read back finds no file. Configured
with ``--FileContentsManager.post_save_hook=harness.server_extensions.lose_once.hook``; without
a marker it does nothing.
"""

from __future__ import annotations

import os
from typing import Any


def hook(os_path: str, model: Any = None, contents_manager: Any = None, **_: Any) -> None:
    marker = f"{os_path}.lose-once"
    if os.path.exists(marker):
        os.remove(marker)
        os.remove(os_path)
