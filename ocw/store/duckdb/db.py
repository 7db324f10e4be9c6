"""The DuckDB file and its hand-over between kernels.

DuckDB locks a file to one process. Two kernels on one file must both work, and
a turn must stay cheap, so `Db` holds one connection for as long as no other
process wants the file, and hands it over within milliseconds when one does (a
sidecar file, `<db>.ocw-lock`, carries the "someone waits" signal and an
advisory lock: ocw/store/duckdb/sidecar.py). Closing — which checkpoints the
WAL, 40–960 ms measured — and checkpoints happen on the reaper thread, never on
the caller's, while no other process wants the file: an uncontended cell never
pays for them (issue 14; ENVIRONMENT.md has the measurements). A busy caller that
another process waits for hands the file over itself: it would wait for that
process anyway.
"""
from __future__ import annotations

import os
import random
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import duckdb

from ocw.store.duckdb import ownership
from ocw.store.duckdb.settings import DUCKDB_CONFIG
from ocw.store.duckdb.sidecar import Sidecar
from ocw.store.holder import BUSY_HINT
from ocw.text.errors import StoreBusy, StoreError

_ALIAS = "ocw_file"  # the name the file is attached under (then made the default database)


def _quote(path: str) -> str:
    return "'" + path.replace("'", "''") + "'"


def connection_settings() -> list[str]:
    """The statements every connection ocw opens runs first (the benchmark's floor
    runs them too, so that it measures the same engine). One DuckDB thread: a
    kernel's queries are point and range reads and one-row writes, and handing them
    to a second thread only adds a wake-up — measured at 100k messages, interleaved:
    2.19 vs 2.37 ms per turn back to back, 6.09 vs 6.38 ms human-paced, ~10 % less
    CPU (ENVIRONMENT.md: a raw transaction 1.7 vs 2.0 ms)."""
    return [f"SET wal_autocheckpoint = '{Db.WAL_AUTOCHECKPOINT}'", "SET threads = 1"]


class _WriteFailed(Exception):
    """A commit DuckDB refused (inside Db.transaction only)."""


def _first_line(e: BaseException) -> str:
    text = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return text.removeprefix("TransactionContext Error: ").removeprefix("Failed to commit: ")


class Db:
    """One DuckDB connection, held while nobody else wants the file, handed over when
    another process waits.

    DuckDB lets one process at a time open a file. Kernels sharing a file take
    turns through a sidecar file, `<db>.ocw-lock`, and an advisory lock on it
    (flock; a byte lock on Windows) that a process takes BEFORE it opens DuckDB
    and drops only AFTER DuckDB's close has returned:

    - Safety. DuckDB's own file lock is not enough for close → reopen hand-overs
      between processes. Two processes that each connect, insert, commit and
      close 400 times, retrying on DuckDB's lock error, lost committed rows
      (798 of 800 with no error raised; 528 of 800 with "Could not read enough
      bytes from file") in 6 of 8 runs here (DuckDB 2.0.1); with a sidecar lock
      held from before each connect to after each close: 12 of 12 runs clean.
    - Fairness. A process that wants the file and cannot have it touches the
      sidecar (its mtime is the "someone is waiting" signal) and polls the lock
      every few milliseconds (a cheap syscall, where a failed `duckdb.connect`
      costs ~9 ms). When someone waits, the holder lets go as soon as it pauses
      for `contended_idle` seconds (its reaper thread sees that), or once it has
      had the file for `contended_hold` seconds even while busy (its caller
      sees that on its next use: between two back-to-back uses the reaper
      rarely gets the lock, and waiters waited 1–3 s). A process that handed
      the file over does not queue again until the sidecar names another holder
      (or `sidecar.HANDOVER_WAIT` passed): flock is not fair, and it would often take
      the file straight back. Both kernels' turns interleave; measured with two
      processes appending back to back on a loaded machine, the worst wait went
      from 1.4–2.9 s to 0.3–0.4 s. The share is 0.25 s: with 0.1 s, two kernels
      appending back to back on a loaded machine (load 15 on 2 cores) handed over
      every ~3 turns and got 0.5× one kernel's throughput, worst turn 1.4–1.8 s;
      with 0.25 s, 24 hand-overs in 400 turns, ≥ 1× and 0.8–1.0 s (issue 28).
      A pause counts as idle after 0.05 s (was 0.01 s): on a loaded machine a
      back-to-back writer is often descheduled for 10 ms between two turns, and
      handed the file over then; a kernel between cells is idle for seconds.
    - Cost. Uncontended, the connection stays open (a reopen costs ~20 ms, which
      at human pace was every cell: 24–35 ms turns instead of 3–4). Nothing slow
      runs on the caller's thread while no other process waits: closing (which
      checkpoints) and checkpoints run on the reaper thread, a checkpoint only
      after `checkpoint_idle` seconds without use; DuckDB's own automatic
      checkpoint, which would stall a commit for 125–720 ms, is set far out of
      reach. A hand-over leaves a small WAL (≤ HANDOVER_WAL_BYTES) for the next
      holder to replay instead of checkpointing it on the way out (25–40 ms per
      hand-over); a larger one is checkpointed, so replays stay short. Once another
      process has shared the file, it is attached to an in-memory DuckDB this Db
      keeps, so a hand-over is DETACH + ATTACH (1–20 ms) instead of closing and
      reconnecting DuckDB (20 ms quiet, 60–110 ms loaded).
      `idle_close` (None: never) closes an idle connection, for tests and for
      callers that want the file released.

    Where no advisory lock can be taken (a filesystem without them), only
    DuckDB's lock and the retry below guard the file. Callers only ever see a
    wait, or `StoreBusy` after `lock_timeout` seconds.
    """

    WAL_AUTOCHECKPOINT = "256MB"  # DuckDB's own checkpoint: a safety valve only
    CHECKPOINT_BYTES = 1 << 20  # the reaper checkpoints an idle WAL larger than this
    HANDOVER_WAL_BYTES = 64 << 10  # a hand-over leaves a WAL up to this size unmerged

    def __init__(self, path: str, *, idle_close: float | None = None, contended_hold: float = 0.25,
                 contended_idle: float = 0.05, lock_timeout: float = 60.0, checkpoint_idle: float = 0.5):
        self.path = path
        self.memory = path == ":memory:"
        self.idle_close = idle_close
        self.contended_hold = contended_hold
        self.contended_idle = contended_idle
        self.checkpoint_idle = checkpoint_idle
        self.lock_timeout = lock_timeout
        self._cond = threading.Condition(threading.RLock())
        self._con: duckdb.DuckDBPyConnection | None = None
        self._inst: duckdb.DuckDBPyConnection | None = None  # this Db's own in-memory DuckDB, the file attached to it
        self._attached = False  # the file is attached to _inst (else: a plain connection to it, or memory)
        self._opened_at = 0.0
        self._last_used = 0.0
        self._dirty = False  # written since the last checkpoint
        self._depth = 0
        self._reaper: threading.Thread | None = None
        self._closing = False
        self.sidecar = None if self.memory else Sidecar(path + ".ocw-lock", path)  # ocw/store/duckdb/sidecar.py
        # Counters, for tests and the benchmark.
        self.opens = 0  # times the file was opened
        self.waits = 0  # opens that had to wait for another holder
        self.handoffs = 0  # times we let go because another process waited
        self.checkpoints = 0  # checkpoints the reaper ran

    def _contended(self) -> bool:
        """Has another process signalled since we took the file?"""
        return self.sidecar is not None and self.sidecar.contended()

    # -- open / close -----------------------------------------------------------
    def _wait_for_lock(self, deadline: float, delay: float) -> float:
        """One wait for DuckDB's own lock (held by another process, or by another Db of
        this one): `StoreBusy` once `deadline` has passed, else signal the holder (it
        hands the file over at its next chance), sleep a jittered `delay` (waiters that
        started together do not retry in step) and return the next, doubled up to 50 ms."""
        if time.monotonic() >= deadline:
            raise StoreBusy(f"database {self.path} is locked by another process; gave up after "
                            f"{self.lock_timeout:g} s", hint=BUSY_HINT) from None
        if self.sidecar is not None:
            self.sidecar.signal_waiting()
        time.sleep(delay * (0.5 + random.random()))
        return min(delay * 2, 0.05)

    def _connect(self, deadline: float, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
        """duckdb.connect, retried while another process holds DuckDB's own lock."""
        delay = 0.005
        waited = False
        while True:
            try:
                con = duckdb.connect(self.path, read_only=read_only, config=DUCKDB_CONFIG)
                break
            except duckdb.ConnectionException as e:
                if not (read_only and "different configuration" in str(e)):
                    raise StoreError(f"cannot open {self.path}: {e}") from None
                # Open read-write elsewhere in this process: share that instance (it
                # has replayed its WAL already; this connection only reads).
                con = duckdb.connect(self.path, config=DUCKDB_CONFIG)
                break
            except duckdb.IOException as e:
                if "lock" not in str(e).lower():
                    raise StoreError(f"cannot open {self.path}: {e}") from None
                delay = self._wait_for_lock(deadline, delay)
                waited = True
        self.waits += waited
        return con

    def _attach(self, deadline: float) -> duckdb.DuckDBPyConnection:
        """The file, attached to this Db's own in-memory DuckDB (made once, kept for the
        Db's life) and made the default database (`USE`) — once other processes share
        the file (see `_open`). A hand-over is then a DETACH
        and an ATTACH: 1–20 ms where closing and reconnecting a DuckDB instance took
        ~20 ms quiet and 60–110 ms on a loaded machine, every hand-over (issue 28).
        DETACH never checkpoints (checkpoint_on_shutdown is off in that instance):
        `_close` checkpoints itself when it should. DuckDB refuses to attach a file
        another instance of this process has open ("unique file handle conflict"):
        if that is the user's own connection, share it as a plain connection, as
        before; if it is another Db of this process, wait as for another process."""
        delay = 0.005
        waited = False
        while True:
            try:
                if self._inst is None:
                    self._inst = duckdb.connect(":memory:", config=DUCKDB_CONFIG)
                    self._inst.execute("PRAGMA disable_checkpoint_on_shutdown")
                self._inst.execute(f"ATTACH {_quote(self.path)} AS {_ALIAS}")
                self._inst.execute(f"USE {_ALIAS}")
                self._attached = True
                con = self._inst
                break
            except duckdb.Error as e:
                text = str(e)
                if "unique file handle conflict" in text.lower():
                    try:  # a connection of this process (the user's) has it: share that instance
                        con = duckdb.connect(self.path, config=DUCKDB_CONFIG)
                        break
                    except duckdb.Error:
                        pass  # another Db of this process holds it attached: wait for its hand-over
                elif "lock" not in text.lower():
                    raise StoreError(f"cannot open {self.path}: {_first_line(e)}") from None
                delay = self._wait_for_lock(deadline, delay)
                waited = True
        self.waits += waited
        return con

    def _open(self) -> None:
        if not self.memory:
            ownership.make_folder(self.path)
        deadline = time.monotonic() + self.lock_timeout
        if not self.memory:
            self.sidecar.let_the_waiter_in()
            self.waits += self.sidecar.lock(deadline, self.lock_timeout)
            if self.sidecar.fd is None and time.monotonic() - self.sidecar.yielded_at < 0.2:
                # No advisory lock to queue on: the waiter polls DuckDB's lock every
                # ≤50 ms. Give it that long to get in before taking the file back.
                time.sleep(0.06)
        try:
            if not self.memory:
                ownership.replace_empty_file(self.path)  # under the lock: no kernel writes it now
            # Attached once another process has shown up (we waited, or handed over): from
            # then on hand-overs are what this file's life is, and they must be cheap. Until
            # then a plain connection, which a user's own duckdb.connect() in this process
            # shares (an attached file refuses it: "unique file handle conflict").
            contended = self.waits > 0 or self.handoffs > 0
            self._con = self._attach(deadline) if contended and not self.memory else self._connect(deadline)
            for stmt in connection_settings():
                self._con.execute(stmt)
        except BaseException:
            if self._con is not None:
                self._close(checkpoint=False)
            if self.sidecar is not None:
                self.sidecar.unlock()
            raise
        if self.sidecar is not None:
            self.sidecar.take_mark()
        self._opened_at = self._last_used = time.monotonic()
        self._dirty = not self.memory and self._wal_bytes() > 0  # a WAL handed over unmerged
        self.opens += 1
        if not self.memory and self._reaper is None:
            self._reaper = threading.Thread(target=self._reap, name="ocw-db-reaper", daemon=True)
            self._reaper.start()

    @contextmanager
    def read_only(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A short read-only look at an existing file, for the ownership check: a
        read-only open replays no WAL into the file and checkpoints nothing. The
        sidecar lock is taken only if the file already has one (an ocw file), so
        nothing is created beside a file that may not be ocw's."""
        with self._cond:
            if self._con is not None:
                yield self._con
                return
            deadline = time.monotonic() + self.lock_timeout
            if self.sidecar is not None and os.path.exists(self.sidecar.path):
                self.waits += self.sidecar.lock(deadline, self.lock_timeout)
            try:
                con = self._connect(deadline, read_only=True)
                try:
                    yield con
                finally:
                    con.close()
            finally:
                if self.sidecar is not None:
                    self.sidecar.unlock()

    def _close(self, checkpoint: bool = True) -> None:
        """Let go of the file (and its sidecar lock): a checkpoint first unless told not
        to (a hand-over leaves a small WAL for the next holder; after a failed write
        nothing more is written)."""
        try:
            if self._con is not None:
                try:
                    if self._attached:
                        try:
                            if checkpoint and self._wal_bytes() > 0:
                                self._con.execute("CHECKPOINT")
                        finally:
                            self._con.execute("USE memory")
                            self._con.execute(f"DETACH {_ALIAS}")
                    else:
                        if not checkpoint:
                            try:
                                self._con.execute("PRAGMA disable_checkpoint_on_shutdown")
                            except duckdb.Error:
                                pass
                        self._con.close()  # checkpoints the WAL unless told not to
                finally:
                    self._con = None
                    self._attached = False
                    self._dirty = False
        finally:
            if self.sidecar is not None:
                self.sidecar.mark = None
                self.sidecar.unlock()
            self._cond.notify_all()

    def _hand_over(self) -> None:
        """Let another process have the file. A small WAL is left for the next holder to
        replay (a few ms) instead of checkpointed on the way out (25–40 ms, every
        hand-over); a large one is checkpointed, so the WAL stays bounded."""
        self.handoffs += 1
        self.sidecar.handed_over()
        self._close(checkpoint=self._wal_bytes() > self.HANDOVER_WAL_BYTES)

    def _should_yield(self) -> bool:
        """Another process waits and we have had our share of the file."""
        return self._contended() and time.monotonic() - self._opened_at >= self.contended_hold

    def _wal_bytes(self) -> int:
        try:
            return os.path.getsize(self.path + ".wal")
        except OSError:
            return 0

    def _reap(self) -> None:
        """Off the caller's thread: hand the file over when another process waits (as
        soon as this one pauses, or has had its share), close after `idle_close`,
        checkpoint a large WAL after `checkpoint_idle` seconds without use."""
        with self._cond:
            try:
                while self._con is not None and not self._closing:
                    now = time.monotonic()
                    idle = now - self._last_used if self._depth == 0 else 0.0
                    if self._depth == 0 and self._contended() and (
                            self._should_yield() or idle >= self.contended_idle):
                        self._hand_over()
                        break
                    if self._depth == 0 and self.idle_close is not None and idle >= self.idle_close:
                        self._close()
                        break
                    if self._depth == 0 and self._dirty and idle >= self.checkpoint_idle:
                        self._dirty = False
                        if self._wal_bytes() > self.CHECKPOINT_BYTES:
                            self._con.execute("CHECKPOINT")
                            self.checkpoints += 1
                    wait = self.contended_idle
                    if self.idle_close is not None:
                        wait = max(wait, min(self.idle_close - idle, 0.05))
                    self._cond.wait(wait)
            finally:
                self._reaper = None

    @contextmanager
    def connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with self._cond:
            if self._depth == 0 and self._con is not None and not self.memory and self._should_yield():
                # A busy caller rarely lets the reaper in between two uses (the lock is not
                # fair), so the caller hands over itself: it would wait for the waiter anyway.
                self._hand_over()
            if self._con is None:
                self._open()
            self._depth += 1
            try:
                yield self._con  # type: ignore[misc]
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self._last_used = time.monotonic()

    def close(self) -> None:
        with self._cond:
            self._closing = True
            try:
                self._close()
            finally:
                self._closing = False
                inst, self._inst = self._inst, None
                if inst is not None:
                    inst.close()
        reaper = self._reaper
        if reaper is not None and reaper is not threading.current_thread():
            reaper.join(1.0)

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """All or nothing: on any exception the file is exactly as before.

        A write the disk refuses (full, a file-size limit, an I/O error) is a
        StoreError of one line, not DuckDB's traceback; DuckDB may have given up on
        the open database after it, so the connection is dropped and the next use
        opens the file again (replaying what had committed)."""
        with self.connect() as con:
            con.begin()
            try:
                yield con
                try:
                    con.commit()
                except duckdb.Error as e:  # any failed commit: DuckDB says TransactionException
                    raise _WriteFailed(e) from None
            except (_WriteFailed, duckdb.IOException, duckdb.FatalException, duckdb.OutOfMemoryException) as e:
                self._abandon(con)
                cause = e.args[0] if isinstance(e, _WriteFailed) else e
                raise StoreError(f"cannot write {self.path}: {_first_line(cause)}; nothing of it was stored",
                                 hint="free some space (or fix the disk), then try again") from None
            except BaseException:
                try:
                    con.rollback()
                except duckdb.Error:  # a failed commit ended the transaction already
                    pass
                raise
            self._dirty = True

    def _abandon(self, con) -> None:
        """After a failed write: roll back what can be, close, let the next use reopen."""
        try:
            con.rollback()
        except duckdb.Error:
            pass
        with self._cond:
            if self._con is con:
                try:
                    self._close(checkpoint=False)  # no checkpoint onto a full disk
                except duckdb.Error:
                    pass  # closed either way (_close clears the connection and the lock)


