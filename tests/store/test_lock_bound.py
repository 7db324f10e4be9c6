"""Issue 25: a DuckDB file held by another kernel — a bounded wait, one line naming it.

The other kernel is a real process holding ocw's own lock on the file (inside one
long use of it: 30 s) and calling itself a Jupyter kernel on its command line. A
`%%chat` cell in this process with `%config Ocw.lock_timeout = 2` gives up after
the bound with one line that names that kernel, and writes nothing."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest
from IPython.core.error import UsageError

import ocw

HOLDER = r'''
import sys, time
from ocw.store.duckdb.db import Db
d = Db(sys.argv[1])
with d.connect():
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
'''


def test_a_file_held_30_s_by_another_kernel_is_one_line_within_the_bound(ip, ocw_env, tmp_path):
    ip.run_line_magic("config", "Ocw.lock_timeout = 2")
    ip.run_line_magic("new", "--name held")
    ip.run_cell_magic("chat", "", "first")
    s = ocw.current_session()
    head, count = s.head, len(s.branch())
    ocw_store = ocw.notebook.magics.get_runtime().store
    ocw_store.backend.db.close()  # this kernel lets go of the file, as an idle kernel does
    conn_file = str(tmp_path / "kernel-abcdef12-3456-7890-abcd-ef1234567890.json")  # how Jupyter starts one
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(ocw_env), "30", "-f", conn_file],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "locked"
        t0 = time.monotonic()
        with pytest.raises(UsageError) as e:
            ip.run_cell_magic("chat", "", "second")
        waited = time.monotonic() - t0
    finally:
        p.kill()
        p.wait()
    line = str(e.value)
    assert "\n" not in line and "gave up after 2 s" in line, line
    assert f"kernel abcdef12 (pid {p.pid})" in line, line
    assert 2 <= waited < 15, waited  # the bound, not the other kernel's 30 s
    assert "retry-save" not in line  # the wait came before the model was asked: no reply to keep
    s.sync()
    assert (s.head, len(s.branch())) == (head, count)
    ip.run_cell_magic("chat", "", "third")  # the holder gone: writes as ever
    assert len(ocw.current_session().branch()) == count + 2
