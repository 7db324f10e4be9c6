"""Who holds a store (ocw/store/holder.py), named the way a user can find it: `kernel <first 8 of
its id> (pid N)` for a Jupyter kernel — its command line names `kernel-<id>.json` — else
`process N`. Read from a real process's /proc/<pid>/cmdline."""
from __future__ import annotations

import subprocess
import sys

import pytest

from ocw.store import holder


def _named(args: list) -> tuple[int, str]:
    """A real process whose command line carries `args` (it waits on stdin), and its name."""
    p = subprocess.Popen([sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()", *args],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert p.stdout.readline() == b"up\n"  # running its code: /proc/<pid>/cmdline is its own by now
        return p.pid, holder.process_name(p.pid)
    finally:
        p.stdin.close()
        p.wait(timeout=30)


@pytest.mark.parametrize("arg, kernel", [
    ("/run/jupyter/kernel-5f3a9c1e-77aa-4b1c-9d2e-0123456789ab.json", "5f3a9c1e"),  # a kernel id: its first 8
    ("--f=kernel-ABCDEF12.json", "ABCDEF12"),  # exactly 8 hex digits
    ("kernel-5f3a9c1.json", None),  # 7: not a kernel's connection file
    ("kernel-5f3a9c1x-0000.json", None),  # not hex
])
def test_a_process_is_named_by_its_kernel_id_when_its_command_line_names_one(arg, kernel):
    pid, name = _named(["-x", arg])
    assert name == (f"kernel {kernel} (pid {pid})" if kernel else f"process {pid}")


def test_a_command_line_with_bytes_that_are_not_utf8_still_names_the_kernel():
    pid, name = _named([b"\xff\xfe-caf\xe9", "kernel-0badc0de.json"])  # raw bytes on the command line
    assert name == f"kernel 0badc0de (pid {pid})"


def test_a_process_that_is_gone_is_named_by_its_pid():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait(timeout=30)
    assert holder.process_name(p.pid) == f"process {p.pid}"


def test_this_process_is_named_the_same_way(monkeypatch):
    import os

    monkeypatch.setattr(sys, "argv", ["ipykernel_launcher.py", "-f", "/tmp/kernel-1234abcd-ef.json"])
    assert holder.this_process() == f"kernel 1234abcd (pid {os.getpid()})"
    monkeypatch.setattr(sys, "argv", ["python", "script.py"])
    assert holder.this_process() == f"process {os.getpid()}"
