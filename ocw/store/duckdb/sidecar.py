"""The sidecar of a DuckDB file, `<db>.ocw-lock`: how kernels take turns with the file.

A process takes its advisory lock (flock; a byte lock on Windows) before it opens
DuckDB and drops it only after DuckDB's close has returned (ocw/store/duckdb/db.py says
why DuckDB's own lock is not enough). The file's mtime is the "someone is waiting"
signal: a waiter touches it while it polls the lock, and the holder compares it with
the mtime it saw when it took the file (`contended`). The holder writes a token of its
own (pid first) into the file, so a process that handed the file over can tell when
the waiter has taken it (`let_the_waiter_in`) and a `StoreBusy` names who holds it.
"""
from __future__ import annotations

import errno
import itertools
import os
import time

from ocw.store.holder import BUSY_HINT, process_name
from ocw.text.errors import StoreBusy

_TOKENS = itertools.count(1)

try:  # advisory locks for the hand-over between kernels
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - Windows
    _fcntl = None
try:
    import msvcrt as _msvcrt
except ImportError:
    _msvcrt = None

HANDOVER_WAIT = 0.5  # seconds a process that just yielded the file waits, at most, for the waiter to take it


def _try_lock(fd: int) -> bool:
    """Exclusive, non-blocking advisory lock on `fd`: True if taken, False if another
    holder has it. OSError: no advisory locks here (platform or filesystem)."""
    if _fcntl is not None:
        try:
            _fcntl.flock(fd, _fcntl.LOCK_EX | _fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
    if _msvcrt is not None:  # pragma: no cover - Windows
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            _msvcrt.locking(fd, _msvcrt.LK_NBLCK, 1)
            return True
        except OSError as e:
            if e.errno in (errno.EACCES, errno.EAGAIN, errno.EDEADLK):
                return False
            raise
    raise OSError("no advisory file locks on this platform")


def _unlock(fd: int) -> None:
    if _fcntl is not None:
        _fcntl.flock(fd, _fcntl.LOCK_UN)
    elif _msvcrt is not None:  # pragma: no cover - Windows
        os.lseek(fd, 0, os.SEEK_SET)
        _msvcrt.locking(fd, _msvcrt.LK_UNLCK, 1)


def _holder(fd: int) -> str:
    """The process that holds the sidecar lock (its token starts with its pid)."""
    try:
        token = os.pread(fd, 32, 0).decode("ascii", "replace")
    except OSError:
        token = ""
    pid = token.split(":", 1)[0].strip()
    return process_name(int(pid)) if pid.isdigit() else "another process"


class Sidecar:
    """The lock file beside database `database`, at `path`: this process's hold on it."""

    def __init__(self, path: str, database: str):
        self.path, self.database = path, database
        self.fd: int | None = None  # the lock's file, while we hold it
        self.mark: int | None = None  # its mtime when we took the file
        self.token: bytes | None = None  # what we wrote in it when we took the file
        self.yield_token: bytes | None = None  # our token when we last handed the file over
        self.yielded_at = -1e9  # when that was (time.monotonic)

    def signal_waiting(self) -> None:
        try:
            now = time.time_ns()
            os.utime(self.path, ns=(now, now))
        except OSError:
            pass

    def lock(self, deadline: float, lock_timeout: float) -> bool:
        """Take the advisory lock, signalling while we wait; whether we waited. `StoreBusy`
        after `lock_timeout` seconds (at `deadline`)."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            return False  # read-only place: DuckDB's own lock (and its retry) alone
        delay = 0.0005
        waited = False
        while True:
            try:
                if _try_lock(fd):
                    break
            except OSError:
                os.close(fd)  # no advisory locks here: DuckDB's own lock (and its retry) alone
                return False
            if time.monotonic() >= deadline:
                who = _holder(fd)
                os.close(fd)
                raise StoreBusy(f"database {self.database} is held by {who}; gave up after {lock_timeout:g} s",
                                hint=BUSY_HINT) from None
            waited = True
            self.signal_waiting()
            time.sleep(delay)
            delay = min(delay * 1.5, 0.003)
        self.fd = fd
        # Say who holds the file now: a process that just handed it over waits for this
        # to change before queueing again (`let_the_waiter_in`). Written under the lock, unsynced.
        self.token = f"{os.getpid()}:{next(_TOKENS)}".encode().ljust(32)
        try:
            os.pwrite(fd, self.token, 0)
        except OSError:
            self.token = None
        return waited

    def holder_token(self) -> bytes | None:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return None
        try:
            return os.pread(fd, 32, 0)
        except OSError:
            return None
        finally:
            os.close(fd)

    def let_the_waiter_in(self) -> None:
        """We handed the file over to a waiting process: until it has taken it (the
        sidecar names another holder), or HANDOVER_WAIT has passed (it gave up), do not
        queue for the lock again — flock is not fair, and a process that yielded and
        asks again at once would often take the file straight back, so a waiter on a
        loaded machine could wait seconds. Keep signalling: the new holder then hands
        the file back after its share."""
        mine, self.yield_token = self.yield_token, None
        if mine is None:
            return
        until = self.yielded_at + HANDOVER_WAIT
        delay = 0.0005
        while time.monotonic() < until and self.holder_token() == mine:
            self.signal_waiting()
            time.sleep(delay)
            delay = min(delay * 1.5, 0.003)

    def unlock(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            try:
                _unlock(fd)
            finally:
                os.close(fd)

    def contended(self) -> bool:
        """Has another process signalled since we took the file?"""
        if self.mark is None:
            return False
        try:
            return os.stat(self.path).st_mtime_ns != self.mark
        except OSError:
            return False

    def handed_over(self) -> None:
        """We let go for a waiting process: `let_the_waiter_in` waits for it before we queue again."""
        self.yielded_at = time.monotonic()
        self.yield_token = self.token

    def take_mark(self) -> None:
        """Remember the mtime now: a later one means someone waits (`contended`)."""
        try:
            self.mark = os.stat(self.path).st_mtime_ns
        except OSError:
            self.mark = None
