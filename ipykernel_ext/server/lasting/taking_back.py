"""Taking back, at the server's start, the kernels a server before it left running.

Runs from the extension's load hook, before the server listens (:func:`adopt_at_start`):
JupyterLab, retrying a kernel's model while the server is away, takes a 404 (or a kernel
list without the id) for "the kernel died", so the kernel must be known before anyone is
answered. For each state file (:mod:`.records`) of the server's runtime dir:

* a kernel whose recorded server still runs (pid and start time) belongs to that server:
  left alone (a second server started beside the first must not take its kernels; two
  started at once take turns on the record's lock, :meth:`.RecordFiles.claimed`);
* a kernel whose process is gone, or whose pid now belongs to another process: not taken
  back, logged, its state file removed;
* a kernel that does not answer a signed ``kernel_info`` on its control channel within
  :data:`ANSWER_SECONDS` (the control channel answers while a cell runs): not taken back,
  logged, its file kept for a later start;
* otherwise it is started "again" under its own id through the server's kernel manager, in
  the provisioner's take-back mode (:mod:`.provisioner`: nothing is launched), the
  ``kernel_info`` it gave is handed to the server's websockets (:func:`share_kernel_info`), and its
  sessions are put back into the session manager (after the kernel: jupyter_server's
  ``row_to_model`` deletes a session row whose kernel it does not know), and its journal
  (the cells that ran meanwhile) is kept for the tabs that come back (:mod:`.resuming`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
from typing import Any, cast

import zmq.asyncio
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.connect import KernelConnectionInfo

from .provisioner import adopting
from .records import KernelRecord, RecordFiles
from .resuming import JOURNAL_FEATURE, JOURNAL_REQUEST, Hearing, Resume, resumes

#: How long a recorded kernel has to answer ``kernel_info`` on control before it is left.
ANSWER_SECONDS = 10.0

#: A take-back scheduled on a running loop (kept until done: the loop holds tasks weakly).
_later: set[asyncio.Future[int]] = set()

Log = logging.Logger | logging.LoggerAdapter[Any]


async def kernel_info_of(
    connection_info: dict[str, Any], timeout: float, context: zmq.asyncio.Context
) -> dict[str, Any] | None:
    """The ``kernel_info_reply`` content of the kernel at ``connection_info``, asked on
    control with its key, or None if none came within ``timeout`` seconds."""
    return await control_answer(connection_info, "kernel_info_request", {}, timeout, context)


async def control_answer(
    connection_info: dict[str, Any],
    msg_type: str,
    content: dict[str, Any],
    timeout: float,
    context: zmq.asyncio.Context,
) -> dict[str, Any] | None:
    """The reply content to a ``msg_type`` request on the control channel of the kernel at
    ``connection_info`` (signed with its key), or None if none came within ``timeout``."""
    client = AsyncKernelClient(context=context)
    client.load_connection_info(cast(KernelConnectionInfo, connection_info))
    client.start_channels(shell=False, iopub=False, stdin=False, hb=False, control=True)
    try:
        msg = client.session.msg(msg_type, content)
        client.control_channel.send(msg)
        deadline = asyncio.get_running_loop().time() + timeout
        while (left := deadline - asyncio.get_running_loop().time()) > 0:
            try:
                reply = await client.control_channel.get_msg(timeout=left)
            except Exception:  # queue.Empty on time-out: no answer
                return None
            if reply.get("parent_header", {}).get("msg_id") == msg["header"]["msg_id"]:
                return dict(reply["content"])
        return None
    finally:
        client.stop_channels()


def share_kernel_info(km: Any, content: dict[str, Any]) -> None:
    """Give jupyter_server's websockets of the kernel the ``kernel_info`` just asked.

    Its first websocket asks the kernel for it on shell, with the websocket's session, and
    every later one reuses that answer (``_kernel_info_future`` on the kernel manager). A
    kernel taken back mid-cell answers its cell's own client on shell only after the cell
    (stock's order), so that tab, back first, would wait ``kernel_info_timeout`` (60 s) before
    its websocket opens. The answer given on control a moment ago is the same kernel's.
    """
    future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
    future.set_result(content)
    km._kernel_info_future = future


async def adopt(
    record: KernelRecord,
    serverapp: Any,
    log: Log,
    context: zmq.asyncio.Context,
    hearing: Hearing | None = None,
) -> bool:
    """Take one recorded kernel back (module docstring); whether it was."""
    files = RecordFiles(serverapp.runtime_dir)
    kernel_manager = serverapp.kernel_manager
    kid = record.kernel_id
    if kid in kernel_manager:
        return False
    if record.server.pid != os.getpid() and record.server.alive():
        log.info(
            "Kernel %s belongs to the running server (pid %d): left to it", kid, record.server.pid
        )
        return False
    if not record.process.alive():
        log.warning(
            "Kernel %s not taken back: its process %d is gone (or the pid is another "
            "process's now); its state file is removed",
            kid,
            record.process.pid,
        )
        files.remove(kid)
        return False
    info = await kernel_info_of(record.connection_info, ANSWER_SECONDS, context)
    if info is None:
        log.warning(
            "Kernel %s (pid %d) not taken back: it did not answer kernel_info on its control "
            "channel within %.0f s",
            kid,
            record.process.pid,
            ANSWER_SECONDS,
        )
        return False
    adopting[kid] = record
    kwargs: dict[str, Any] = {}
    if record.cwd:
        kwargs["cwd"] = record.cwd
    if record.session_name:
        kwargs["env"] = {**os.environ, "JPY_SESSION_NAME": record.session_name}
    try:
        await kernel_manager.start_kernel(kernel_id=kid, kernel_name=record.kernel_name, **kwargs)
    finally:
        adopting.pop(kid, None)
    share_kernel_info(kernel_manager.get_kernel(kid), info)
    journal = None
    if JOURNAL_FEATURE in info.get("supported_features", ()):  # ours, launched to last
        journal = await control_answer(
            record.connection_info, JOURNAL_REQUEST, {}, ANSWER_SECONDS, context
        )
    cells = journal.get("cells") if isinstance(journal, dict) else None
    if cells:  # given again to the tabs that come back, and now to the owner (.resuming)
        resume = resumes[kid] = Resume(kid, list(cells), log)
        if hearing is not None:
            resume.opened(*hearing.open(kid))
    sessions = serverapp.session_manager
    for session in record.sessions:
        if await sessions.session_exists(path=session["path"]):
            continue
        await sessions.save_session(
            session_id=session["id"],
            path=session["path"],
            name=session.get("name"),
            type=session.get("type"),
            kernel_id=kid,
        )
    log.info(
        "Took back kernel %s (%s, pid %d) left running by the server before, with %d "
        "session(s) and %d journaled cell(s)",
        kid,
        record.kernel_name,
        record.process.pid,
        len(record.sessions),
        len(cells or ()),
    )
    return True


async def adopt_all(serverapp: Any, log: Log, hearing: Hearing | None = None) -> int:
    """Take back every kernel recorded in the server's runtime dir; how many were."""
    taken = 0
    context = zmq.asyncio.Context()  # the kernel_info checks' own, ended with them
    try:
        files = RecordFiles(serverapp.runtime_dir)
        for path, found in files.all():
            if isinstance(found, Exception):
                log.warning("Unreadable kernel state file %s (%s): left as it is", path, found)
                continue
            try:
                with files.claimed(found.kernel_id) as record:
                    if record is not None:
                        taken += await adopt(record, serverapp, log, context, hearing)
            except Exception:
                log.exception("Kernel %s could not be taken back", found.kernel_id)
    finally:
        context.destroy(linger=0)
    return taken


def adopt_at_start(serverapp: Any, log: Log, hearing: Hearing | None = None) -> None:
    """Run :func:`adopt_all` now, before the server listens (its loop is not running yet);
    where the loop already runs (an embedding app), as soon as it can."""
    loop = serverapp.io_loop.asyncio_loop
    if loop.is_running():
        task = asyncio.ensure_future(adopt_all(serverapp, log, hearing), loop=loop)
        _later.add(task)
        task.add_done_callback(_later.discard)
        return
    loop.run_until_complete(adopt_all(serverapp, log, hearing))
