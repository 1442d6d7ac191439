"""A file uploaded with ipywidgets' FileUpload in a real page: no echo sends it back (issue 39).

A ``jupyter lab`` server as installed (our ``SharedChannelsConnection``, which skips a page's
own ``comm_echo``), JupyterLab and Notebook 7 in Chromium, a ``python3-ext`` kernel. The page
uploads a 3 MB file (under tornado's 10 MiB websocket message limit); a second client of the
kernel, as another frontend would, reads every IOPub message. The kernel must get every byte,
neither websocket may get the file back, and the other client's ``comm_echo`` still says what
was sent (PROTOCOL.md section 2: ``comm_echo_omitted``, FileUpload's ``value`` has
``echo_update=False``). Waits are barriers: the page's label, the other client's messages.

Checked against the old echo: run at the first parent of "Merge issue-39" (ed60f7e) in a
throwaway worktree, it fails in both frontends on the other client's bytes (its echo carried
the whole file, 3145979 B). The page's own echo is skipped by the server either way, so the
page's bytes (a few kB) alone would not tell the old echo from the new.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

import pytest

from harness.browser import wait_for
from harness.browser_subshell import FRONTENDS, open_notebook
from harness.kernel_websocket import KernelWebsocket
from harness.kernels import EXT_KERNEL
from harness.server import JupyterServer

pytestmark = [pytest.mark.server, pytest.mark.timeout(300)]

SIZE = 3 * 1024 * 1024
#: The widget's observer shows what the kernel got in a Label: the barrier the test waits on.
CELLS = [
    "import hashlib, ipywidgets as w\n"
    "u, got = w.FileUpload(), w.Label()\n"
    "def show(change):\n"
    "    data = bytes(u.value[0].content)\n"
    "    got.value = f'kernel has {len(data)} {hashlib.sha256(data).hexdigest()[:16]}'\n"
    "u.observe(show, 'value')\n"
    "w.VBox([u, got])"
]
UPLOAD = ".jp-OutputArea .widget-upload"
LABEL = ".jp-OutputArea .widget-label"


def message_bytes(msg: dict[str, Any]) -> int:
    """About what a message weighs on the wire: its content's JSON and its buffers."""
    return len(json.dumps(msg["content"])) + sum(len(b) for b in msg["buffers"])


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_upload_reaches_the_kernel_and_is_not_echoed(
    lab: JupyterServer, page: Any, frontend: str, tmp_path: Path
) -> None:
    data = random.Random(39).randbytes(SIZE)
    upload = tmp_path / "upload.bin"
    upload.write_bytes(data)
    expected = f"kernel has {SIZE} {hashlib.sha256(data).hexdigest()[:16]}"
    # Bytes of every frame the page's kernel websockets receive, in order (attached before
    # the page opens them).
    received: list[int] = []

    def count(ws: Any) -> None:
        if "/channels" in ws.url:
            ws.on("framereceived", lambda payload: received.append(len(payload)))

    page.on("websocket", count)
    name = f"upload-{frontend}"
    log, _ = open_notebook(page, lab, frontend, name, CELLS, EXT_KERNEL)
    page.locator(UPLOAD).wait_for()
    (session,) = [s for s in lab.api("GET", "api/sessions") if s["path"] == f"{name}.ipynb"]
    with KernelWebsocket(lab, session["kernel"]["id"]) as other:
        before = len(received)
        # The view's file input is never in the DOM: a click opens the chooser, as for a user.
        with page.expect_file_chooser() as chooser:
            page.click(UPLOAD)
        chooser.value.set_files(str(upload))
        label = page.locator(LABEL)
        wait_for(lambda: label.inner_text() == expected, 120, what=expected, page=page)
        # The other client has the Label's update, so also everything the kernel sent before.
        other.recv_until(
            lambda m: (
                m["msg_type"] == "comm_msg"
                and (m["content"]["data"].get("state") or {}).get("value") == expected
            ),
            60,
        )
        seen = other.backlog

    sent = [
        f
        for f in log.frames()
        if f.direction == "sent" and "value" in (f.content.get("data") or {}).get("state", {})
    ]
    assert len(sent) == 1, f"the page sent {len(sent)} uploads"
    page_bytes = sum(received[before:])
    other_bytes = [(m["msg_type"], message_bytes(m)) for m in seen]
    print(f"{frontend}: page received {page_bytes} B; other client {other_bytes}")
    assert page_bytes < SIZE // 10, f"the page's websocket got {page_bytes} B back"
    assert sum(n for _, n in other_bytes) < SIZE // 10, f"the other client got {other_bytes}"
    echoes = [
        m
        for m in seen
        if m["msg_type"] == "comm_echo" and m["content"]["comm_id"] == sent[0].content["comm_id"]
    ]
    assert len(echoes) == 1, [m["msg_type"] for m in seen]
    omitted = echoes[0]["metadata"].get("comm_echo_omitted")
    assert omitted == {"buffers": 1, "bytes": SIZE, "state_keys": ["value"]}, omitted
    assert "value" not in echoes[0]["content"]["data"]["state"] and not echoes[0]["buffers"]
