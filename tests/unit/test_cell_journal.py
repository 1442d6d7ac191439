"""The kernel's cell journal (ipykernel_ext.kernel.journal), on signed frames as the IOPub
thread sends them (a real jupyter_client Session), with no kernel.

* What the journal keeps of a stream, sent again, is what the page would store: checked
  against the server's own model of JupyterLab's stream (``StreamText``), for every short
  sequence of ``a``, ``b``, ``\\r`` and ``\\n`` chunks, *and* with what the cell prints next.
* A cell sent again is a ``clear_output``, then its outputs folded as the page folds them
  (waiting clears, displays replaced by id), then ``idle`` if it ended.
* The bound holds whatever is printed: ended cells go first, then the running cell is cut
  from its front, and the cut is told where it is sent again.
"""

from __future__ import annotations

import itertools
from typing import Any

from jupyter_client.session import Session

from ipykernel_ext.kernel.journal.cell import KeptStream
from ipykernel_ext.kernel.journal.journal import (
    CUT_NOTE_KEY,
    FOLD_BATCH,
    FOLD_BYTES,
    MAX_ENDED,
    Journal,
)
from ipykernel_ext.protocol import AGAIN_METADATA_KEY
from ipykernel_ext.server.outputs import StreamText

SESSION = Session(key=b"journal-test")


def request(cell: str = "c") -> dict[str, Any]:
    return SESSION.msg("execute_request", {"code": ""}, metadata={"cellId": cell})


def frames(msg_type: str, content: dict[str, Any], parent: dict[str, Any]) -> list[Any]:
    """An IOPub message as the kernel's IOPub thread sends it: topic, delimiter, signed parts."""
    msg = SESSION.msg(msg_type, content, parent=parent)
    return SESSION.serialize(msg, ident=f"kernel.x.{msg_type}".encode())


def stream(journal: Journal, parent: dict[str, Any], text: str, name: str = "stdout") -> None:
    journal.sent(frames("stream", {"name": name, "text": text}, parent))


def again(journal: Journal, parent: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages the journal sends again for ``parent``'s cell, decoded."""
    out = []
    sent, _ = journal.again([parent["header"]["msg_id"]], SESSION, lambda t: t.encode())
    for f in sent:
        _, parts = SESSION.feed_identities(f)
        msg = SESSION.deserialize(parts)
        assert msg["parent_header"]["msg_id"] == parent["header"]["msg_id"]
        assert msg["metadata"][AGAIN_METADATA_KEY] is True
        out.append({"msg_type": msg["msg_type"], "content": msg["content"]})
    return out


def shown(chunks: list[str]) -> str:
    page = StreamText()
    for c in chunks:
        page.feed(c)
    return page.text


def kept(chunks: tuple[str, ...] | list[str]) -> KeptStream:
    stream = KeptStream("stdout")
    for c in chunks:
        stream.append(c)
    return stream


def test_a_kept_stream_shows_what_the_page_would_and_goes_on_from_the_same_cursor() -> None:
    """What is sent again, stored by the page, leaves the same text and the same cursor as
    every chunk would have: checked with what the cell prints next."""
    pieces = ["a", "bb", "\r", "\n", "b\r", "\b"]
    for n in range(1, 5):
        for chunks in itertools.product(pieces, repeat=n):
            resent = kept(chunks).resent
            assert "\b" not in resent and shown([resent]) == shown(list(chunks)), chunks
            for tail in ("x", "\rxy", "\n", "\b"):
                assert shown([resent, tail]) == shown([*chunks, tail]), (chunks, tail)


def test_a_progress_bar_costs_one_line() -> None:
    bar = kept([f"\r{i:5d} of 10000" for i in range(10000)])
    assert bar.resent == " 9999 of 10000" and bar.nbytes == 14


def test_a_kept_stream_cut_from_its_front_starts_at_a_line() -> None:
    log = kept([f"line {i}\n" for i in range(1000)] + ["\u00e9t\u00e9 50%\r"])
    before = log.nbytes
    dropped = log.cut_front(100)
    assert dropped >= 100 and log.nbytes == before - dropped
    assert log.text.startswith("line ") and log.text.split("\n", 1)[0] in {
        f"line {i}" for i in range(1000)
    }
    assert log.resent.endswith("\u00e9t\u00e9 50%\r")
    rest = log.nbytes
    assert log.cut_front(10**9) == rest and log.text == "" and log.nbytes == 0


def test_a_cell_sent_again_is_a_clear_then_its_outputs_folded_then_its_idle() -> None:
    journal = Journal()
    parent = request()
    journal.started(parent, 3)
    stream(journal, parent, "one\n")
    stream(journal, parent, "two\n")
    stream(journal, parent, "oops\n", name="stderr")
    journal.sent(
        frames(
            "display_data",
            {"data": {"text/plain": "v1"}, "metadata": {}, "transient": {"display_id": "d"}},
            parent,
        )
    )
    journal.sent(
        frames(
            "update_display_data",
            {"data": {"text/plain": "v2"}, "metadata": {}, "transient": {"display_id": "d"}},
            parent,
        )
    )
    journal.sent(frames("clear_output", {"wait": True}, parent))
    journal.sent(frames("status", {"execution_state": "busy"}, parent))  # not an output
    other = request("other")
    stream(journal, other, "not journaled\n")  # a request the journal was not told of
    sent = again(journal, parent)
    assert [m["msg_type"] for m in sent] == [
        "clear_output",
        "stream",
        "stream",
        "display_data",
        "clear_output",
    ]
    assert sent[0]["content"] == {"wait": False}
    assert sent[1]["content"] == {"name": "stdout", "text": "one\ntwo\n"}
    assert sent[3]["content"]["data"] == {"text/plain": "v2"}  # replaced in place
    assert sent[4]["content"] == {"wait": True}  # still waiting: sent again at the end
    stream(journal, parent, "after\n")  # the waiting clear takes effect
    journal.ended(parent["header"]["msg_id"], {"status": "ok", "execution_count": 3}, {})
    sent = again(journal, parent)
    assert [m["msg_type"] for m in sent] == ["clear_output", "stream", "status"]
    assert sent[1]["content"]["text"] == "after\n"
    assert sent[2]["content"] == {"execution_state": "idle"}
    (cell,) = journal.summary()
    assert cell["state"] == "ended" and cell["execution_count"] == 3
    assert cell["metadata"] == {"cellId": "c"} and cell["reply"]["status"] == "ok"


def test_the_bound_holds_ended_cells_go_first_and_a_cut_is_told() -> None:
    bound = 100_000
    journal = Journal(max_bytes=bound)
    done = request("done")
    journal.started(done, 1)
    stream(journal, done, "x" * 50_000 + "\n")
    journal.ended(done["header"]["msg_id"], {"status": "ok"}, {})
    running = request("running")
    journal.started(running, 2)
    line = "0123456789" * 9 + "\n"
    for i in range(20_000):  # 2 MB through a 100 kB bound
        stream(journal, running, f"{i:08d} {line}")
        assert journal.nbytes <= bound
    ids = [c["msg_id"] for c in journal.summary()]
    assert ids == [running["header"]["msg_id"]]  # the ended cell went first
    sent = again(journal, running)
    assert sent[0]["msg_type"] == "clear_output"
    note = sent[1]
    assert note["msg_type"] == "display_data" and note["content"]["metadata"][CUT_NOTE_KEY] > 0
    text = sent[2]["content"]["text"]
    assert text.endswith(f"{19_999:08d} {line}")  # the newest is kept, from a line's start
    assert text.startswith(f"{20_000 - len(text) // len(f'00000000 {line}'):08d} ")


def test_only_ended_cells_are_acknowledged_and_few_are_kept() -> None:
    journal = Journal()
    cells = [request(f"c{i}") for i in range(MAX_ENDED + 3)]
    for i, parent in enumerate(cells):
        journal.started(parent, i)
        stream(journal, parent, f"{i}\n")
        journal.ended(parent["header"]["msg_id"], {"status": "ok"}, {})
    running = request("r")
    journal.started(running, 99)
    kept = [c["msg_id"] for c in journal.summary()]
    assert kept == [p["header"]["msg_id"] for p in cells[-MAX_ENDED:]] + [
        running["header"]["msg_id"]
    ]
    assert journal.ack(kept) == kept[:-1]  # a running cell is not let go
    assert [c["msg_id"] for c in journal.summary()] == [running["header"]["msg_id"]]


def test_what_waits_to_be_folded_stays_small_and_every_read_sees_it() -> None:
    """Sent messages are folded in batches (module docstring of the journal): the queue never
    holds more than a batch, nor much more than its bytes, and a read folds it first."""
    journal = Journal()
    parent = request()
    journal.started(parent, 1)
    n = FOLD_BATCH * 3 + 7
    for i in range(n):
        stream(journal, parent, f"{i}\n")
        assert len(journal._unfolded) < FOLD_BATCH
    (cell,) = journal.summary()
    assert not journal._unfolded and cell["nbytes"] == len("".join(f"{i}\n" for i in range(n)))
    big = "x" * (FOLD_BYTES // 3)
    for _ in range(4):
        stream(journal, parent, big)
        assert journal._unfolded_bytes < FOLD_BYTES
    assert [m["content"]["text"][-3:] for m in again(journal, parent)[1:]] == ["xxx"]
