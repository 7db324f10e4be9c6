"""Reading each message once, in the pause after the turn that wrote it.

A compaction reads every folded message in four passes — the summarizer's, the memory's,
the facts', what was lost — and each reads a line, a sentence or a message with a pure
function of that text, whose result is kept for the kernel's life (ocw/text/memo.py). This
module fills those memos ahead of time: after each turn its messages — what a later
compaction folds — are read on a worker thread while the kernel waits for the user. The
compaction then finds its lines read and costs about what reading and tokenizing its input
costs (issue 28: `python -m ocw.bench.compact_cost` prints both, cold and read ahead).

Why it changes nothing a compaction writes: each memo's key is everything its function
reads, so a hit returns what a fresh call returns (tests/conversation/test_read_ahead.py
compacts one session with and without it and compares the bytes stored).
Why it is safe beside the kernel: the worker touches only those memos — the messages are
handed to it as they will be read, never the session or the store — and it is one daemon
thread, so a kernel that exits does not wait for it. A message it has not reached yet, or
one stored before this kernel started (nothing is read when a session is opened: a long
session would pay for it at once), is read by the compaction itself, as without it.
"""
from __future__ import annotations

import logging
import queue
import threading

from ocw.context.engine import transcript_line
from ocw.context.facts import read_lines
from ocw.context.memory_rules import clean, read_message
from ocw.context.render import block_text
from ocw.providers import offline_summary
from ocw.text.tokens import count_kept, line_pieces

log = logging.getLogger("ocw")

_jobs: "queue.Queue[tuple]" = queue.Queue()
_worker: threading.Thread | None = None
_start_lock = threading.Lock()


def read_session(session, provider, ids=None) -> int:
    """Hand the session's tail messages (those of `ids` only: a turn's own) to the worker;
    returns how many. `provider`: the model that will summarize — when it is the offline
    model, its reading of each line is kept too (a real model reads on its server)."""
    tail = session.tail()
    if ids is not None:  # a turn's messages end the tail
        wanted = set(ids)
        nodes = [n for n in tail[-len(wanted):] if n.id in wanted] if wanted else []
    else:
        nodes = list(tail)
    if not nodes:
        return 0
    messages = session.rendered_messages(nodes)
    offline = getattr(provider, "encoding", None) if getattr(provider, "offline", False) else None
    _submit(session.id, messages, session.encoding.name, offline)
    return len(messages)


def read_message_ahead(m: dict, encoding: str, offline_encoding: str | None, asked: str) -> str:
    """Read one message (as the model reads it: role, content blocks, name) into the memos, on
    this thread — what the worker does with each; `asked`: what the message before it asked
    (the memory pass reads an answer with its question). Returns what this one asks."""
    line = transcript_line(m)
    text = block_text(m["content"])
    read_lines(clean(line, keep_lists=True), encoding)  # the facts pass reads the transcript, counts what it lists
    read_lines(text)  # what was lost reads the messages
    asked = read_message(m["role"], clean(text), asked)  # the memory pass
    for piece in line_pieces(line + "\n\n", encoding):  # the summarizer's input, as it is joined
        count_kept(piece, encoding)
    if offline_encoding:
        offline_summary.read_ahead(line, offline_encoding)
    return asked


def wait(timeout: float) -> bool:
    """Until the worker has read everything handed to it (a benchmark or a test asks); whether it has."""
    done = threading.Event()
    _jobs.put(("mark", done))
    _ensure_worker()
    return done.wait(timeout)


def _submit(session_id: str, messages: list[dict], encoding: str, offline_encoding: str | None) -> None:
    _jobs.put(("read", session_id, messages, encoding, offline_encoding))
    _ensure_worker()


def _ensure_worker() -> None:
    global _worker
    with _start_lock:
        if _worker is None or not _worker.is_alive():
            _worker = threading.Thread(target=_run, name="ocw-read-ahead", daemon=True)
            _worker.start()


def _run() -> None:
    asked: dict[str, str] = {}  # session id → what its last message read asked
    while True:
        job = _jobs.get()
        if job[0] == "mark":
            job[1].set()
            continue
        _, sid, messages, encoding, offline_encoding = job
        for m in messages:
            try:
                asked[sid] = read_message_ahead(m, encoding, offline_encoding, asked.get(sid, ""))
            except Exception as e:  # a reading that fails is done by the compaction itself, as without this
                log.debug("ocw: read-ahead skipped a message (%s)", type(e).__name__)  # (its text could hold a secret)
