"""A jupyter_server extension for tests: ``GET /ext-test/block?seconds=N`` blocks the event loop.

With ``&release=PATH`` the block ends as soon as that file exists (``seconds`` is then the
most it lasts): the test's side decides when the pause has done what it is for.

A server whose event loop is busy for a few seconds (a slow handler, a synchronous extension,
a big notebook save) stops reading every kernel's IOPub for that long, then carries on. This
handler makes that happen on request, for real: ``time.sleep`` on the event loop's own thread.

The response is written *before* the sleep, so a client that reads it knows the loop is
blocked from then on (tornado writes straight to the socket when it can; the body is tiny).
The server keeps the connection until the sleep is over, so a client should read the status
line and body, not wait for the connection to close.

Loaded by :class:`harness.server.JupyterServer` with ``pause_extension=True``
(``--ServerApp.jpserver_extensions={"pause_extension": True}``; this folder is on the
server's ``PYTHONPATH``). Never part of the package: a handler that freezes the server is for
tests.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.utils import url_path_join
from tornado import web

#: The URL path, under the server's base_url.
BLOCK_PATH = "ext-test/block"

#: A request for longer than this is refused: a typo should not freeze a test run for hours.
MAX_SECONDS = 120.0


class BlockHandler(JupyterHandler):
    """Block the server's event loop for ``seconds`` (answering first)."""

    @web.authenticated
    def get(self) -> None:
        seconds = float(self.get_argument("seconds"))
        if not 0 <= seconds <= MAX_SECONDS:
            raise web.HTTPError(400, f"seconds must be in [0, {MAX_SECONDS}]")
        release = self.get_argument("release", "")
        self.set_header("Content-Type", "application/json")
        body = json.dumps({"blocking": seconds}).encode()
        self.set_header("Content-Length", str(len(body)))
        self.write(body)
        self.flush()
        # On purpose: nothing else on this loop runs until the sleep is over.
        if release:
            deadline = time.monotonic() + seconds
            while not os.path.exists(release) and time.monotonic() < deadline:
                time.sleep(0.01)
        else:
            time.sleep(seconds)
        self.finish()

    def check_xsrf_cookie(self) -> None:
        """GET only; token-authenticated clients send no XSRF cookie."""


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    return [{"module": "pause_extension"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    web_app = serverapp.web_app
    route = url_path_join(web_app.settings["base_url"], BLOCK_PATH)
    web_app.add_handlers(".*$", [(route, BlockHandler)])
    serverapp.log.info("pause_extension: GET %s blocks the event loop", route)
