"""Shared pytest fixtures (each team appends its imports)."""
from refserver import refserver  # noqa: F401  (loopback OpenAI + Anthropic server)

# -- store fixtures (tests/store/test_store.py & co.) ---------------------------------
import pytest as _pytest  # noqa: E402


@_pytest.fixture
def tmp_db(tmp_path):
    """A path for a fresh DuckDB file (not created yet)."""
    return str(tmp_path / "ocw-test.duckdb")


@_pytest.fixture
def store(tmp_db):
    """An `ocw.Store` on a temp DuckDB file, closed after the test."""
    import ocw

    s = ocw.Store(tmp_db)
    yield s
    s.close()


# -- agent tools (issue 7): a real IPython shell with %load_ext ocw on a throwaway file --
import pytest as _pytest  # noqa: E402


@_pytest.fixture
def ocw_shell(tmp_path):
    """(shell, runtime): InteractiveShell.instance() with ocw freshly loaded on
    tmp_path/ocw.duckdb, no @ocw.tool left from other tests; all undone after."""
    from IPython.core.interactiveshell import InteractiveShell

    import ocw.notebook.magics
    import ocw.conversation.tools
    from ocw.notebook.magics import get_runtime

    shell = InteractiveShell.instance()
    if "ocw" in shell.extension_manager.loaded:
        shell.extension_manager.unload_extension("ocw")
    if get_runtime() is not None:  # loaded by hand, not through %load_ext
        ocw.notebook.magics.unload_ipython_extension(shell)
    shell.config.pop("Ocw", None)
    saved = dict(ocw.conversation.tools._REGISTERED)
    ocw.conversation.tools._REGISTERED.clear()
    before = set(shell.user_ns)
    shell.extension_manager.load_extension("ocw")
    rt = get_runtime()
    rt.config.db = str(tmp_path / "ocw.duckdb")
    try:
        yield shell, rt
    finally:
        shell.extension_manager.unload_extension("ocw")
        shell.config.pop("Ocw", None)
        for k in set(shell.user_ns) - before:
            shell.user_ns.pop(k, None)
        ocw.conversation.tools._REGISTERED.clear()
        ocw.conversation.tools._REGISTERED.update(saved)


# -- notebook surface (issue 5): env-configured shells, a DuckDB reader -----------
import os as _os  # noqa: E402

DUMMY_KEY = "sk-dummy-KEY-0123456789abcdef"  # a key-like string the tests grep for
_OCW_ENV_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "JPY_SESSION_NAME")


@_pytest.fixture
def ocw_env(tmp_path, monkeypatch):
    """No OCW_* settings or provider keys from outside, and a fresh OCW_DB (returned)."""
    for k in list(_os.environ):
        if k.startswith("OCW_") or k in _OCW_ENV_KEYS:
            monkeypatch.delenv(k, raising=False)
    db = tmp_path / "ocw.duckdb"
    monkeypatch.setenv("OCW_DB", str(db))
    return db


@_pytest.fixture
def openai_env(ocw_env, refserver, monkeypatch):
    """ocw configured by environment variables for the loopback OpenAI-compatible
    server, a dummy key and a small window. Returns the refserver."""
    monkeypatch.setenv("OCW_PROVIDER", "openai")
    monkeypatch.setenv("OCW_BASE_URL", refserver.openai_url)
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    monkeypatch.setenv("OCW_CONTEXT_WINDOW", "2000")
    return refserver


def _reset_ocw(shell) -> None:
    import ocw.notebook.magics

    if "ocw" in shell.extension_manager.loaded:
        shell.extension_manager.unload_extension("ocw")
    if ocw.notebook.magics.get_runtime() is not None:  # loaded by hand, not through %load_ext
        ocw.notebook.magics.unload_ipython_extension(shell)
    ocw.notebook.magics._state.clear()
    shell.config.pop("Ocw", None)  # what %config Ocw.x = ... merged into the shell's config


@_pytest.fixture
def ip(ocw_env):
    """A real IPython InteractiveShell (the process-wide singleton, terminal-style:
    replies stream as text) with `%load_ext ocw` done on a fresh OCW_DB. Request
    env fixtures (openai_env, monkeypatch.setenv) *before* this one. Unloaded after,
    with ocw.notebook.magics._state reset, so nothing leaks into the next test."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    _reset_ocw(shell)
    before = set(shell.user_ns)
    shell.run_line_magic("load_ext", "ocw")
    try:
        yield shell
    finally:
        _reset_ocw(shell)
        for k in set(shell.user_ns) - before:
            shell.user_ns.pop(k, None)


@_pytest.fixture
def oip(openai_env, ip):
    """`ip` configured for the loopback OpenAI-compatible server (see openai_env)."""
    return ip


def read_ocw_db(path) -> dict:
    """Sessions and nodes of a DuckDB file, read through ocw's Store (it waits for a
    kernel that holds the file, then lets go). Nodes in insertion order."""
    import json

    from ocw.conversation.sessions import Store

    st = Store(str(path))
    try:
        with st.db.connect() as con:
            sessions = con.execute(
                "SELECT id, name, head_id, metadata, model FROM sessions ORDER BY created_at").fetchall()
            nodes = con.execute(
                "SELECT id, session_id, parent_id, role, name, content FROM nodes ORDER BY seq").fetchall()
    finally:
        st.close()
    parents = {n[0]: n[2] for n in nodes}

    def covered(boundary):  # a summary covers the branch from the root to its boundary (its parent)
        out = []
        while boundary is not None:
            out.append(boundary)
            boundary = parents[boundary]
        return out[::-1]

    out_nodes = []
    for nid, sid, parent, role, name, content in nodes:
        blocks = json.loads(content)
        out_nodes.append({"id": nid, "session_id": sid, "parent_id": parent, "role": role, "name": name,
                          "text": "".join(b.get("text", "") for b in blocks if isinstance(b, dict)),
                          "covers": covered(parent) if name == "context/summary" else None})
    return {"sessions": [{"id": i, "name": n, "head": h, "metadata": json.loads(m or "{}"), "model": mo}
                         for i, n, h, m, mo in sessions],
            "nodes": out_nodes}


@_pytest.fixture
def ocw_db_reader():
    """read_ocw_db(path) -> {"sessions": [...], "nodes": [...]}"""
    return read_ocw_db


# -- compaction engine (issue 3): a recording fake summarizer, a raw session dump --
import pytest as _pytest  # noqa: E402


class FakeSummarizer:
    """A summarizer stand-in with the provider interface `compact` uses.

    Records every call (messages, system, max_tokens, the prompt's token count and
    its input text). Answers with `answer` — a string, or a function of the call
    record — or raises `raises`. With `gate`, it sets `entered` and then blocks
    until the gate opens (to hold a compaction mid-call)."""

    name = "fake"
    model = "fake-summarizer"
    offline = True

    def __init__(self, answer="Summary: the earlier turns, in brief.", *, context_window=None, raises=None,
                 gate=None, encoding="cl100k_base"):
        import threading

        self.answer = answer
        self.context_window = context_window
        self.raises = raises
        self.gate = gate
        self.entered = threading.Event()
        self.encoding = encoding
        self.calls: list[dict] = []

    def complete(self, messages, system=None, max_tokens=None):
        from ocw.providers.base import Reply, Usage
        from ocw.text.tokens import count_message, count_text

        text = "\n".join(b.get("text", "") for m in messages for b in m["content"] if b.get("type") == "text")
        prompt = count_text(system or "", self.encoding) + sum(
            count_message(m["role"], m["content"], self.encoding) for m in messages)
        record = {"messages": messages, "system": system, "max_tokens": max_tokens,
                  "prompt_tokens": prompt, "input": text, "index": len(self.calls)}
        self.calls.append(record)
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(30)
        if self.raises is not None:
            raise self.raises
        out = self.answer(record) if callable(self.answer) else self.answer
        return Reply(content=[{"type": "text", "text": out}], usage=Usage(prompt, 10), stop_reason="end_turn")

    def stream(self, messages, *, system=None, tools=None, max_tokens=None, on_event=None):
        return self.complete(messages, system=system, max_tokens=max_tokens)

    def close(self):
        pass


@_pytest.fixture
def fake_summarizer():
    """The FakeSummarizer class: `fake_summarizer(answer, context_window=..., raises=...)`."""
    return FakeSummarizer


def _session_dump(store, session_id: str) -> str:
    """Every row of `sessions` and `nodes` for one session, as JSON, read by raw SQL."""
    import json

    with store.db.connect() as con:
        out = {}
        for table, where, order in (("sessions", "id", "id"), ("nodes", "session_id", "seq")):
            cur = con.execute(f"SELECT * FROM {table} WHERE {where} = ? ORDER BY {order}", [session_id])
            cols = [d[0] for d in cur.description]
            out[table] = [dict(zip(cols, row)) for row in cur.fetchall()]
    return json.dumps(out, default=str, sort_keys=True)


@_pytest.fixture
def session_dump():
    """`session_dump(store, session_id)` -> a JSON string of the session's rows."""
    return _session_dump


@_pytest.fixture
def dummy_key():
    """The dummy key openai_env / anthropic_env put in the environment."""
    return DUMMY_KEY


@_pytest.fixture
def anthropic_env(ocw_env, refserver, monkeypatch):
    """Like openai_env, for the loopback server's Anthropic endpoint."""
    monkeypatch.setenv("OCW_PROVIDER", "anthropic")
    monkeypatch.setenv("OCW_BASE_URL", refserver.anthropic_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", DUMMY_KEY)
    monkeypatch.setenv("OCW_CONTEXT_WINDOW", "2000")
    return refserver


# -- real servers (issue 10): llama-server and llama-cpp-python from ../shared/realserver --
from realservers import llama_cpp_python_server, llama_server, pytest_report_header  # noqa: E402,F401
from litellm_proxy import (  # noqa: E402,F401
    _litellm_llama_cpp_python_proxy, _litellm_llama_server_proxy, litellm_llama_cpp_python, litellm_llama_server,
    pytest_runtest_protocol)


# -- bad input (issue 11): every row of a store, and of a file --------------------------
def _store_dump(store) -> str:
    """Every row of `sessions` and `nodes` (all columns), as JSON, read by raw SQL."""
    import json

    with store.db.connect() as con:
        out = {}
        for table, order in (("sessions", "id"), ("nodes", "seq")):
            cur = con.execute(f"SELECT * FROM {table} ORDER BY {order}")
            cols = [d[0] for d in cur.description]
            out[table] = [dict(zip(cols, row)) for row in cur.fetchall()]
    return json.dumps(out, default=str, sort_keys=True)


@_pytest.fixture
def store_dump():
    """`store_dump(store)` -> a JSON string of every session and node row."""
    return _store_dump


# -- PostgreSQL store (issue 16): a real server started by the tests ----------------
from pg_server import bouncer_url, pg_cluster, pg_url  # noqa: E402,F401

# -- mutation-killing tests (issue 13): an encoding where every byte is one token --
@_pytest.fixture(scope="session")
def byte_encoding(tmp_path_factory):
    """The name ("file:<path>") of a user .tiktoken file holding the 256 single bytes
    and nothing else: every byte of a text is one token, so counts are easy to predict
    and differ from cl100k's and o200k's."""
    import base64

    path = tmp_path_factory.mktemp("bytes-encoding") / "bytes.tiktoken"
    path.write_text("".join(f"{base64.b64encode(bytes([i])).decode()} {i}\n" for i in range(256)))
    return f"file:{path}"


@_pytest.fixture(autouse=True)
def _each_test_starts_from_a_kernel_that_has_read_nothing():
    """The content-addressed memos (ocw/text/memo.py) live as long as the process: a test
    that counts with a stand-in tokenizer would leave its counts for the next test, and a
    test that counts what is tokenized would see fewer calls after another test read the
    same lines. Each test starts with them empty."""
    from ocw.text.memo import forget_all

    forget_all()
    yield


@_pytest.fixture(autouse=True)
def _tools_registered_by_a_test_end_with_it():
    """A tool a test registers (`@ocw.tool` in a shell's cell, say) is unregistered when
    the test ends: the registry is process-wide, and a leftover tool's definition would
    be counted in every later test's requests (the tests would depend on their order)."""
    from ocw.conversation import tools

    before = dict(tools.registered())
    yield
    for name, tool in list(tools.registered().items()):
        if before.get(name) is not tool:
            tools.unregister(name)
    for name, tool in before.items():  # one a test replaced under the same name comes back
        if tools.registered().get(name) is not tool:
            tools._REGISTERED[name] = tool


from ipython_exit import pytest_sessionfinish  # noqa: E402,F401  (IPython's exit work before pytest's last line)
