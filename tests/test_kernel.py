"""Issue 5: the magics in a real kernel (jupyter_client KernelManager running ipykernel).

One kernel for the whole module (kernels take seconds to start), configured only
through its environment: OCW_PROVIDER=openai, OCW_BASE_URL at a loopback
reference server owned by this module, a key-like OPENAI_API_KEY, OCW_DB in a
temp dir, a 2,000-token window. Each test works in its own session (`%new`), reads
the notebook outputs from the iopub messages, and reads the DuckDB file from this
process. The last test greps everything the kernel ever sent, its log, and the
database file for the key.
"""
from __future__ import annotations

import json
import os
import queue
import threading
import time

import pytest
from jupyter_client import KernelManager

from refserver import RefServer

SECRET = "sk-test-SECRET-abc123456"
USER = "Please keep notes about the garden plan: " + "tomatoes basil " * 45  # ~100 tokens
REPLY = "green leaves grow " * 150  # ~450 tokens
FINISHED = "Context compacted: covered {n} older messages, {before} → {after} tokens"
NO_OP = "Context is already compacted; no older messages to fold."
# The loopback summarizer answers prose without the structured memory block (issue 22): said in one line.
MEMORY_FALLBACK = ". The summarizer's session memory did not parse; ocw's own memory pass was used."


class Run:
    """The iopub messages of one execution, sorted into what a notebook would show."""

    def __init__(self, msgs: list[dict], reply: dict):
        self.msgs = msgs
        self.reply = reply
        self.stdout = "".join(m["content"]["text"] for m in msgs
                              if m["msg_type"] == "stream" and m["content"]["name"] == "stdout")
        self.stderr = "".join(m["content"]["text"] for m in msgs
                              if m["msg_type"] == "stream" and m["content"]["name"] == "stderr")
        self.displays = [m for m in msgs if m["msg_type"] in ("display_data", "update_display_data")]
        self.errors = [m["content"] for m in msgs if m["msg_type"] == "error"]

    def shown(self) -> str:
        """What the cell shows as text: printed output and each display's text/plain."""
        return self.stdout + "".join(m["content"]["data"].get("text/plain", "") for m in self.displays)

    @property
    def ok(self) -> bool:
        return self.reply["content"]["status"] == "ok"

    def final_text(self, mime: str = "text/plain") -> str:
        """What the streamed reply's display shows at the end (after every update)."""
        ids = [m["content"]["transient"]["display_id"] for m in self.displays
               if m["msg_type"] == "display_data" and "display_id" in m["content"].get("transient", {})]
        assert ids, "no display with a display_id"
        last = [m for m in self.displays if m["content"].get("transient", {}).get("display_id") == ids[-1]][-1]
        return last["content"]["data"][mime]


class Kernel:
    def __init__(self, env: dict, log_path: str):
        self.log = open(log_path, "w")
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(env=env, stdout=self.log, stderr=self.log)
        self.kc = None
        self.all: list[dict] = []  # every iopub message, for the secret grep
        self._connect()

    def _connect(self):
        if self.kc is not None:
            self.kc.stop_channels()
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def run(self, code: str, timeout: float = 60, on_msg=None, ok: bool | None = True) -> Run:
        msg_id = self.kc.execute(code)
        msgs = []
        deadline = time.monotonic() + timeout
        while True:
            m = self.kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            self.all.append(m)
            msgs.append(m)
            if on_msg is not None:
                on_msg(m)
            if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                break
        while True:
            reply = self.kc.get_shell_msg(timeout=timeout)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        r = Run(msgs, reply)
        if ok is True:
            assert r.ok, (r.stdout, r.stderr, r.errors)
        return r

    def drain(self, seconds: float) -> list[dict]:
        """iopub messages that arrive in `seconds` with no execution asked for (a comm
        updated from another thread, say); kept in `all` too."""
        got, deadline = [], time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                got.append(self.kc.get_iopub_msg(timeout=0.2))
            except queue.Empty:
                continue
        self.all += got
        return got

    def py(self, expr: str):
        """Evaluate an expression in the kernel; JSON back."""
        r = self.run(f"import json as _j; print(_j.dumps({expr}))")
        return json.loads(r.stdout.strip().splitlines()[-1])

    def occupancy(self) -> dict:
        return self.py("ocw.current_session().occupancy()")

    def restart(self):
        self.km.restart_kernel(now=False)
        self._connect()

    def close(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=False)
        self.log.close()


@pytest.fixture(scope="module")
def server():
    srv = RefServer().start()
    yield srv
    srv.stop()


def loopback_kernel(url: str, d, key: str, window: str = "2000", **env):
    """A real kernel on a loopback server (a fixture's `yield from`): nothing of the outer
    environment's OCW_*, keys or JPY_SESSION_NAME, its own OCW_DB in `d`, `env` on top,
    `%load_ext ocw` and `import ocw` run; closed when the fixture ends."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("OCW_") and k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "JPY_SESSION_NAME")}
    clean.update(OCW_PROVIDER="openai", OCW_BASE_URL=url, OPENAI_API_KEY=key, OCW_DB=str(d / "kernel.duckdb"),
                 OCW_CONTEXT_WINDOW=window, NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost", **env)
    k = Kernel(clean, str(d / "kernel.log"))
    k.db = d / "kernel.duckdb"
    k.log_path = d / "kernel.log"
    try:
        k.run("%load_ext ocw\nimport ocw")
        yield k
    finally:
        k.close()


@pytest.fixture(scope="module")
def kernel(server, tmp_path_factory):
    yield from loopback_kernel(server.openai_url, tmp_path_factory.mktemp("kernel"), SECRET)


def read_db(kernel, ocw_db_reader, session_name: str):
    db = ocw_db_reader(kernel.db)
    (s,) = [x for x in db["sessions"] if x["name"] == session_name]
    return s, [n for n in db["nodes"] if n["session_id"] == s["id"]]


def new_session(kernel, name: str):
    r = kernel.run(f"%new --name {name}")
    assert f"New session {name!r}" in r.stdout


def chat(kernel, text: str, options: str = "") -> Run:
    return kernel.run(f"%%chat {options}\n{text}")


# -- a conversation -----------------------------------------------------------------------


def test_three_turn_chat_streams_into_display_updates_and_persists(kernel, server, ocw_db_reader):
    new_session(kernel, "k-chat")
    n = len(server.requests)
    replies = ["Kernel answer one, in several pieces.", "Kernel answer two.", "Kernel answer three, the last."]
    for i, text in enumerate(replies):
        server.script(text=text)
        r = chat(kernel, f"kernel question {i}")
        # Streamed: a display with an id, then updates of that same display.
        first = r.displays[0]
        assert first["msg_type"] == "display_data" and first["content"]["transient"]["display_id"]
        assert any(m["msg_type"] == "update_display_data" for m in r.displays)
        assert r.final_text() == text  # text/plain: a plain-text front end sees the reply too
        assert r.final_text("text/html") == f"<p>{text}</p>\n"  # sanitized HTML, not Markdown
        assert [m for m in r.displays if "text/markdown" in m["content"]["data"]] == []
        assert not r.errors and not r.stderr
    assert [(q.path, q.stream) for q in server.requests[n:]] == [("/v1/chat/completions", True)] * 3
    s, nodes = read_db(kernel, ocw_db_reader, "k-chat")
    assert [(x["role"], x["text"].strip()) for x in nodes] == [
        (role, t) for i, rep in enumerate(replies) for role, t in (("user", f"kernel question {i}"), ("assistant", rep))]
    assert s["head"] == nodes[-1]["id"]


def test_compact_in_the_kernel_then_nothing_to_fold(kernel, server, ocw_db_reader):
    new_session(kernel, "k-compact")
    for i in range(3):
        server.script(text=f"Reply {i}: " + REPLY)
        chat(kernel, f"Turn {i}. " + USER)
    before = kernel.occupancy()
    server.script(text="Summary: the user plans a garden.")
    n = len(server.requests)
    r = kernel.run("%compact")
    after = kernel.occupancy()
    _, nodes = read_db(kernel, ocw_db_reader, "k-compact")
    (summary,) = [x for x in nodes if x["name"] == "context/summary"]
    # Six messages on a 2,000-token window: the tail is its last quarter, widened toward
    # five messages only within half the window — the last question and reply stay.
    assert len(summary["covers"]) == 4
    assert r.stdout.strip() == FINISHED.format(n=4, before=f"{before['total']:,}",
                                               after=f"{after['total']:,}") + MEMORY_FALLBACK
    assert len(server.requests) == n + 1 and server.requests[-1].is_summary
    assert after["compaction_count"] == 1 and after["basis"] == "estimated" and after["head"] == before["head"]

    r = kernel.run("%compact")
    assert r.stdout.strip() == NO_OP
    assert len(server.requests) == n + 1  # no request for a no-op
    assert kernel.occupancy()["total"] == after["total"]


def test_overflow_in_the_kernel_recovers_once_then_reports(kernel, server, ocw_db_reader):
    new_session(kernel, "k-overflow")
    for i in range(4):
        server.script(text=f"Reply {i}: " + "green leaves grow " * 50)
        chat(kernel, f"Turn {i}. " + USER)
    n = len(server.requests)
    server.script(overflow=True)
    server.script(text="Summary: garden notes.")
    server.script(text="Recovered answer.")
    r = chat(kernel, "go on")
    assert r.final_text() == "Recovered answer."
    assert "Compacting context…" in r.stdout and "Context compacted: covered" in r.stdout
    assert [(q.status, q.is_summary) for q in server.requests[n:]] == [(400, False), (200, True), (200, False)]

    # Again, in the next turn: the reactive compaction has nothing left to fold (summary +
    # the five-message tail), the retry overflows too, and that is the end of the turn.
    n = len(server.requests)
    s, nodes = read_db(kernel, ocw_db_reader, "k-overflow")
    server.script(overflow=True, times=2)
    server.script(text="never sent", times=2)
    r = kernel.run("%%chat\nand again", ok=False)
    assert not r.ok and r.reply["content"]["ename"] == "UsageError"
    assert NO_OP in r.stdout
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("UsageError: ") and "still too long" in lines[0]
    assert not r.errors  # no traceback message
    assert [(q.status, q.is_summary) for q in server.requests[n:]] == [(400, False), (400, False)]
    assert server.pending == 2
    s2, nodes2 = read_db(kernel, ocw_db_reader, "k-overflow")
    assert s2["head"] == s["head"]
    assert [x for x in nodes2 if x["role"] != "llm"] == [x for x in nodes if x["role"] != "llm"]
    while server.pending:  # leave nothing scripted for the next test
        server._scripts.pop()


def test_reactive_compact_off_ask_and_auto_through_the_magics(kernel, server, ocw_db_reader):
    """Issue 23: `%config Ocw.reactive_compact` decides what a refusal as too long does,
    counted on the server: off and ask send the one refused request and stop the cell
    (one line, the fixes, nothing stored or compacted); auto compacts and retries."""
    new_session(kernel, "k-reactive")
    for i in range(4):
        server.script(text=f"Reply {i}: " + "green leaves grow " * 50)
        chat(kernel, f"Turn {i}. " + USER)
    try:
        for mode, words in (("off", "recovery is off"), ("ask", "reactive_compact = 'ask'")):
            assert kernel.run(f"%config Ocw.reactive_compact = '{mode}'").ok
            s, nodes = read_db(kernel, ocw_db_reader, "k-reactive")
            n = len(server.requests)
            server.script(overflow=True)
            r = kernel.run("%%chat\ngo on", ok=False)
            assert not r.ok and r.reply["content"]["ename"] == "UsageError" and not r.errors
            lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
            assert len(lines) == 1 and words in lines[0] and "%compact" in lines[0] and "%new" in lines[0]
            assert "Compacting context" not in r.stdout
            assert [(q.status, q.is_summary) for q in server.requests[n:]] == [(400, False)]
            s2, nodes2 = read_db(kernel, ocw_db_reader, "k-reactive")
            assert s2["head"] == s["head"] and nodes2 == nodes
        assert kernel.run("%config Ocw.reactive_compact = 'auto'").ok
        n = len(server.requests)
        server.script(overflow=True)
        server.script(text="Summary: garden notes.")
        server.script(text="Recovered answer.")
        r = chat(kernel, "go on")
        assert r.final_text() == "Recovered answer." and "Context compacted: covered" in r.stdout
        assert [(q.status, q.is_summary) for q in server.requests[n:]] == [(400, False), (200, True), (200, False)]
        r = kernel.run("%config Ocw.reactive_compact = 'sometimes'", ok=False)
        assert "reactive_compact" in r.stderr + "".join(str(m) for m in r.errors)
    finally:
        kernel.run("%config Ocw.reactive_compact = 'auto'")


# -- the stop button ------------------------------------------------------------------------


def test_interrupting_the_kernel_mid_stream_stores_nothing(kernel, server, ocw_db_reader):
    new_session(kernel, "k-interrupt")
    for i in range(2):
        chat(kernel, f"before {i}")
    s, nodes = read_db(kernel, ocw_db_reader, "k-interrupt")
    occ = kernel.occupancy()
    server.script(text="slow " * 80, chunk_delay=0.05)
    streaming = threading.Event()

    def on_msg(m):
        if m["msg_type"] == "update_display_data" and "slow slow" in m["content"]["data"]["text/plain"]:
            streaming.set()

    def stop_button():
        if streaming.wait(20):
            kernel.km.interrupt_kernel()

    t = threading.Thread(target=stop_button)
    t.start()
    r = kernel.run("%%chat\nstream slowly please", on_msg=on_msg, ok=False)
    t.join()
    assert streaming.is_set()
    assert r.reply["content"]["ename"] == "UsageError"
    assert r.stderr.strip() == "UsageError: Interrupted: nothing of this turn was saved; run the cell again to resend it."
    final = r.final_text()
    assert final.startswith("slow slow") and "Interrupted" not in final  # one message, in the error line
    assert final.count("slow") < 80  # it really stopped midway
    s2, nodes2 = read_db(kernel, ocw_db_reader, "k-interrupt")
    assert (s2["head"], nodes2) == (s["head"], nodes)
    assert kernel.occupancy()["total"] == occ["total"]
    assert server.wait_closed(3.0), f"{server.open_connections} connection(s) left open"

    server.script(text="Back to normal.")
    r = chat(kernel, "next")
    assert r.final_text() == "Back to normal."
    assert [m["role"] for m in server.requests[-1].messages] == ["system"] + ["user", "assistant"] * 2 + ["user"]
    s3, nodes3 = read_db(kernel, ocw_db_reader, "k-interrupt")
    assert len(nodes3) == len(nodes) + 2 and nodes3[-3]["id"] == s["head"]


# -- other surfaces in the kernel -------------------------------------------------------------


def test_context_shows_the_widget_and_config_errors_reach_the_cell(kernel):
    new_session(kernel, "k-context")
    chat(kernel, "hello")
    r = kernel.run("%context")
    data = r.displays[0]["content"]["data"]
    assert "application/vnd.jupyter.widget-view+json" in data
    assert data["text/plain"].startswith("<ocw context: k-context")
    r = kernel.run("%context --text")
    assert r.stdout.startswith("Context — session 'k-context'") and "Basis: measured" in r.stdout

    r = kernel.run("%config Ocw.auto_compact = 5", ok=None)
    assert "Ocw.auto_compact = 5" in r.stdout + r.stderr and "between 0.1 and 0.99" in r.stdout + r.stderr
    assert kernel.py("ocw.config().auto_compact") == 0.8
    kernel.run("%config Ocw.auto_compact = 0.5")
    assert kernel.py("ocw.config().auto_compact") == 0.5
    kernel.run("%config Ocw.auto_compact = 0.8")


# -- a restart ---------------------------------------------------------------------------------


def test_a_restarted_kernel_resumes_the_session_from_the_file(kernel, server, ocw_db_reader):
    # The notebook's own session ("default": no JPY_SESSION_NAME here), compacted once.
    new_session(kernel, "default")
    for i in range(4):
        server.script(text=f"Reply {i}: " + "green leaves grow " * 50)
        chat(kernel, f"Turn {i}. " + USER)
    server.script(text="Summary: the garden plan.")
    r = kernel.run("%compact 300")
    assert r.stdout.startswith("Context compacted")
    server.script(text="One more, measured after the compaction.")
    chat(kernel, "one more")
    before = kernel.occupancy()
    table = kernel.run("%context --text").stdout
    assert before["compaction_count"] == 1 and before["basis"] == "measured"

    kernel.restart()
    r = kernel.run("%load_ext ocw\nimport ocw\nprint(ocw.current_session().name)")
    assert r.stdout.strip() == "default"
    after = kernel.occupancy()
    for key in ("total", "compaction_count", "head", "generation", "basis", "estimated_total"):
        assert after[key] == before[key], key
    assert kernel.run("%context --text").stdout == table
    # And the conversation goes on from there, summary included.
    n = len(server.requests)
    server.script(text="Resumed.")
    assert chat(kernel, "still there?").final_text() == "Resumed."
    sent = server.requests[n]
    assert "[Summary of the earlier conversation]" in json.dumps(sent.messages)
    assert "one more" in json.dumps(sent.messages)
    with open(kernel.log_path) as f:
        assert "terminate called" not in f.read()  # the old kernel exited cleanly


# -- commands users add, /doctor --send (issue 29) ----------------------------------------------


def shown(r: Run) -> str:
    """What a cell showed as text: its stdout and its displays' text/plain (a table has HTML too)."""
    return r.stdout + "".join(m["content"]["data"].get("text/plain", "") for m in r.displays)


def test_an_added_command_registers_runs_and_fails_in_one_line(kernel):
    r = kernel.run("@ocw.command('k-hello', help='say hello', args='[NAME]')\n"
                   "def k_hello(args):\n    print('printed')\n    return 'hello ' + (args or 'world')\n"
                   "@ocw.command('k-boom')\ndef k_boom():\n    raise RuntimeError('no table\\nhere')")
    assert r.stdout == "" and r.stderr == ""
    listed = shown(kernel.run("%ocw commands")).splitlines()
    k = [i for i, line in enumerate(listed) if line.startswith("/k-")]
    assert [listed[i].split()[0] for i in k] == ["/k-hello", "/k-boom"]
    assert listed[k[0]].endswith("say hello [added by this notebook]")
    assert listed[k[0] - 1].startswith("/doctor")  # after the built-ins, the last of which is /doctor
    assert kernel.run("%ocw run k-hello Ada").stdout == "printed\nhello Ada\n"
    r = kernel.run("%ocw run k-boom", ok=False)
    said = (r.stdout + r.stderr).strip()
    assert said == "UsageError: /k-boom failed: RuntimeError: no table here", said
    assert "Traceback" not in json.dumps([m["content"] for m in r.msgs])
    r = kernel.run("@ocw.command('compact')\ndef mine():\n    return 'MINE'")
    assert r.stderr.count("/compact is a built-in command") == 1
    assert "MINE" not in kernel.run("%ocw run compact").stdout


def test_an_entry_point_command_of_a_package_installed_in_a_temp_dir(kernel, tmp_path):
    site = tmp_path / "site"
    (site / "kdemo-0.1.dist-info").mkdir(parents=True)
    (site / "kdemo_cmds.py").write_text('def rows(args):\n    """Rows of a table."""\n    return f"42 rows in {args}"\n')
    (site / "kdemo-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: kdemo\nVersion: 0.1\n")
    (site / "kdemo-0.1.dist-info" / "entry_points.txt").write_text("[ocw.commands]\nrows = kdemo_cmds:rows\n")
    # Installed while the kernel runs: entry points are read once, so read them again.
    kernel.run(f"import sys; sys.path.insert(0, {str(site)!r})\n"
               "from ocw.notebook import user_commands; user_commands.load_entry_points(force=True)")
    (line,) = [x for x in shown(kernel.run("%ocw commands")).splitlines() if x.startswith("/rows")]
    assert line.endswith("Rows of a table. [added by kdemo]"), line
    assert kernel.run("%ocw run rows orders").stdout == "42 rows in orders\n"


def test_doctor_send_is_a_turn_the_server_receives(kernel, server, ocw_db_reader):
    new_session(kernel, "k-doctor")
    chat(kernel, "hello")
    before = len(server.requests)
    r = kernel.run("%ocw doctor --send")
    assert len(server.requests) == before + 1
    sent = server.requests[-1].messages[-1]
    assert sent["role"] == "user" and sent["content"].startswith("ocw doctor\n") and SECRET not in sent["content"]
    assert "echo: ocw doctor" in r.final_text()
    _, nodes = read_db(kernel, ocw_db_reader, "k-doctor")  # stored as a normal turn, in order
    assert [(x["role"], x["text"].split("\n")[0]) for x in nodes] == [
        ("user", "hello"), ("assistant", "echo: hello"), ("user", "ocw doctor"), ("assistant", "echo: ocw doctor")]


# -- secrets (last: it greps what every test above produced) ------------------------------------


def test_the_key_appears_in_no_output_log_or_file(kernel, server):
    new_session(kernel, "k-secret")
    for cell in ("%ocw doctor", "%config Ocw", "%sessions", "ocw.config()", "%config Ocw.api_key"):
        kernel.run(cell)
    server.script(status=401)
    r = kernel.run("%%chat\nhello", ok=False)
    assert "HTTP 401" in r.stderr
    doctor = kernel.run("%ocw doctor").stdout
    assert "API key:       present (OPENAI_API_KEY)" in doctor and "— reachable" in doctor
    assert any(q.auth for q in server.requests)  # the key was really used...
    kernel.restart()  # ...and the file is closed (checkpointed) by a clean exit
    everything = json.dumps([m["content"] for m in kernel.all], ensure_ascii=False)
    assert "Context compacted" in everything and "HTTP 401" in everything  # we grep real outputs
    assert SECRET not in everything
    with open(kernel.log_path, errors="replace") as f:
        assert SECRET not in f.read()
    files = [p for p in kernel.db.parent.iterdir() if p.name.startswith("kernel.duckdb")]
    assert files and kernel.db.stat().st_size > 0
    for p in files:
        assert SECRET.encode() not in p.read_bytes(), p
