"""Issue 25: a write that fails after the reply was shown keeps the reply, and
`%ocw retry-save` stores it.

The disk is filled for real: a kernel-like process (an InteractiveShell with ocw
loaded, the offline model) lowers its own file-size limit (RLIMIT_FSIZE, SIGXFSZ
ignored, so a write past it fails with EFBIG as on a full disk) just above the
DuckDB file and its WAL, then sends a message too big for that. The cell ends in
one line, no traceback; the reply it streamed is on screen; nothing was stored.
With the limit lifted, `%ocw retry-save` stores exactly that turn, and a fresh
process reads it back from the file."""
from __future__ import annotations

import json
import subprocess
import sys

import ocw

SCRIPT = r'''
import json, os, resource, signal, sys
from IPython.core.interactiveshell import InteractiveShell
path = sys.argv[1]
os.environ["OCW_DB"] = path
os.environ["OCW_PROVIDER"] = "offline"
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
sh = InteractiveShell.instance()
sh.run_line_magic("load_ext", "ocw")
sh.run_line_magic("config", "Ocw.status_line = False")
sh.run_line_magic("config", "Ocw.context_window = 2_000_000")  # the big message fits the window: the disk does not
sh.run_line_magic("new", "--name full")
sh.run_cell("%%chat\nfirst message")
import ocw
s = ocw.current_session()
before = (s.head, len(s.branch()))
sizes = [os.path.getsize(p) for p in (path, path + ".wal") if os.path.exists(p)]
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (max(sizes) + 64 * 1024, hard))
print("<<CELL", flush=True)
res = sh.run_cell("%%chat\n" + "pasted words " * 150_000)
print("CELL>>", flush=True)
err = res.error_in_exec
s.sync()
after_fail = (s.head, len(s.branch()))
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
print("<<RETRY", flush=True)
res2 = sh.run_cell("%ocw retry-save")
print("RETRY>>", flush=True)
res3 = sh.run_cell("%ocw retry-save")
print(json.dumps({"error": type(err).__name__, "line": str(err), "before": before, "after_fail": after_fail,
                  "retry_ok": res2.error_in_exec is None, "again_ok": res3.error_in_exec is None,
                  "session": s.id}), flush=True)
'''


def test_a_full_disk_keeps_the_reply_and_retry_save_stores_it(tmp_path):
    path = str(tmp_path / "ocw.duckdb")
    r = subprocess.run([sys.executable, "-c", SCRIPT, path], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    result = json.loads(out.strip().splitlines()[-1])
    cell = out.split("<<CELL", 1)[1].split("CELL>>", 1)[0]
    retry = out.split("<<RETRY", 1)[1].split("RETRY>>", 1)[0]
    assert "Traceback" not in r.stderr and "Traceback" not in out, r.stderr[-3000:]
    assert result["error"] == "UsageError"
    line = result["line"]
    assert "\n" not in line and line.startswith("cannot write ") and "%ocw retry-save" in line, line
    assert result["after_fail"] == result["before"]  # nothing of the turn was stored
    shown = cell.strip()
    assert shown.startswith("(offline model)")  # the reply the user read
    assert result["retry_ok"] and "Stored the reply that had not been saved (2 messages)" in retry
    assert "Nothing waits to be stored" in out.split("RETRY>>", 1)[1]  # a second retry stores nothing twice
    st = ocw.Store(path)  # a fresh process's view of the file
    try:
        s = st.open_session(result["session"])
        msgs = s.rendered_history()
        assert len(s.branch()) == result["before"][1] + 2
        assert msgs[-2]["role"] == "user" and msgs[-2]["content"][0]["text"].startswith("pasted words")
        assert msgs[-1]["role"] == "assistant" and msgs[-1]["content"][0]["text"] in shown
    finally:
        st.close()
