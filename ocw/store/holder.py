"""Who holds a store: a process named the way a user can find it (its Jupyter kernel).

A bounded lock wait gives up with one line naming the other writer. A DuckDB
file's holder writes its pid into the sidecar lock (ocw/store/duckdb/db.py); a
PostgreSQL connection says who it is in `application_name` (ocw/store/postgres/conn.py).
Either way the name is made here: the kernel's id when the process is a Jupyter
kernel (its command line names `kernel-<id>.json`), and the pid. Pure reading of
/proc and argv; nothing here can fail a caller (unknown is said as such).
"""
from __future__ import annotations

import os
import re
import sys

BUSY_HINT = "try again when it is done, or wait longer: %config Ocw.lock_timeout = 30"
_KERNEL = re.compile(r"kernel-([0-9a-fA-F-]{8,})\.json")


def _kernel_of(args: list[str]) -> str | None:
    for a in args:
        m = _KERNEL.search(a)
        if m:
            return m.group(1)[:8]
    return None


def process_name(pid: int) -> str:
    """`kernel 5f3a9c1e (pid 1234)` for a Jupyter kernel, else `process 1234`."""
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as f:
            args = f.read().decode("utf-8", "replace").split("\0")
    except (OSError, ValueError):
        args = []
    kernel = _kernel_of(args)
    return f"kernel {kernel} (pid {pid})" if kernel else f"process {pid}"


def this_process() -> str:
    """This process, named as :func:`process_name` names another."""
    kernel = _kernel_of(sys.argv)
    return f"kernel {kernel} (pid {os.getpid()})" if kernel else f"process {os.getpid()}"
