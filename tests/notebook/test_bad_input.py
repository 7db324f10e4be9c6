"""Issue 11 item 5: the bad-input table.

Every magic, every `%config Ocw.*` option, every public API entry point and the
OCW_* environment variables, fed bad values. Each row runs against real parts
(an IPython InteractiveShell with ocw loaded, the loopback OpenAI server, a
DuckDB file holding a conversation) and measures, rather than assumes:

- traceback   the error was not one line: a magic must raise a UsageError whose
              text is one line (and `%config`, IPython's own magic, must log one
              line); the API must raise ocw's InvalidArgument (a ValueError and an
              OcwError) or another OcwError — not a TypeError, KeyError, DuckDB error
- silent      the value was accepted, or something a user reads back changed
              (the option, the session's model/window/head/name/metadata, which
              session is current, which file the store uses)
- half-write  any row of the DuckDB file differs (all columns, rev included)
- data loss   a session or message that was there is gone
- foreign     a file the row pointed at (another app's database, a text file,
              a folder...) differs by sha256, or something was left beside it
- model       a request reached the server (bad text is refused before the call)
- unclear     the one line does not name the argument, option or variable

Every row must have all of them at zero; the summary test at the end prints the
counts for the closing note. The API's rule: a bad argument raises
`ocw.text.errors.InvalidArgument` (a ValueError); a bad database path raises
`BadDatabasePath`, a foreign or newer file `ForeignDatabase` / `NewerSchema`
(all StoreErrors, all OcwErrors). `record_usage` follows the compaction-count
rules: a value that is not a valid provider sample is ignored (returns False,
writes nothing) — those rows assert exactly that.
"""
from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import duckdb
import pytest
from IPython.core.error import UsageError

import ocw
from ocw.store.duckdb import migrations, ownership
from ocw.text.errors import BadDatabasePath, ForeignDatabase, InvalidArgument, NewerSchema, OcwError, SessionNotFound, StoreError
from ocw.notebook.magics import get_runtime
from ocw.store.duckdb.store import DUCKDB_CONFIG

RESULTS: dict[str, dict] = {}
MEASURES = ("traceback", "silent", "half_write", "data_loss", "foreign", "model", "unclear")


# -- files a row can point at (all under <tmp>/files, fingerprinted as a tree) ------------------


def _db(path: Path, *sql) -> str:
    con = duckdb.connect(str(path), config=DUCKDB_CONFIG)
    for q in sql:
        con.execute(q)
    con.close()
    return str(path)


def _foreign_with_wal(d: Path) -> str:
    path = d / "crashed.duckdb"
    subprocess.run([sys.executable, "-c", f"""
import duckdb, os
c = duckdb.connect({str(path)!r})
c.execute("CREATE TABLE t (a INTEGER)"); c.execute("CHECKPOINT"); c.execute("INSERT INTO t VALUES (1)")
os._exit(0)
"""], check=True)
    assert (d / "crashed.duckdb.wal").exists()
    return str(path)


def _newer(d: Path) -> str:
    path = d / "future.duckdb"
    con = duckdb.connect(str(path), config=DUCKDB_CONFIG)
    ownership.migrate(con)
    con.execute("UPDATE ocw_meta SET value = '99' WHERE key = 'schema_version'")
    con.execute("UPDATE ocw_meta SET value = '9.1.0' WHERE key = 'needs_ocw'")
    con.close()
    return str(path)


def _under_file(d: Path) -> str:
    (d / "notes.txt").write_text("my notes")
    return str(d / "notes.txt" / "ocw.duckdb")


def _text(d: Path) -> str:
    (d / "diary.duckdb").write_text("dear diary\n" * 50)
    return str(d / "diary.duckdb")


def _folder(d: Path) -> str:
    (d / "folder").mkdir()
    (d / "folder" / "keep.txt").write_text("x")
    return str(d / "folder")


FILES: dict[str, Callable[[Path], str]] = {
    "foreign": lambda d: _db(d / "theirs.duckdb", "CREATE TABLE invoices (id INTEGER)", "INSERT INTO invoices VALUES (1)"),
    "foreign-wal": _foreign_with_wal,
    "clash": lambda d: _db(d / "clash.duckdb", "CREATE TABLE sessions (user_id INTEGER)"),
    "foreign-schema_version": lambda d: _db(d / "sv.duckdb", "CREATE TABLE schema_version (version INTEGER)",
                                            "INSERT INTO schema_version VALUES (7)", "CREATE TABLE accounts (id INTEGER)"),
    "newer": _newer,
    "text": _text,
    "folder": _folder,
    "under-file": _under_file,
    "uncreatable": lambda d: "/proc/ocw-cannot-exist/ocw.duckdb",
    "devnull": lambda d: "/dev/null",
}


def tree(root: Path) -> dict:
    """sha256 of every file under root (and every folder), so a change or a leftover shows."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs:
            out[os.path.relpath(os.path.join(dirpath, name), root)] = "dir"
        for name in files:
            p = os.path.join(dirpath, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


# -- the rows ----------------------------------------------------------------------------------------


@dataclass
class Row:
    kind: str  # magic | config | env | api
    label: str
    action: Any  # magic/config: cell text ({path} = the row's file); env: (VAR, value); api: fn(ctx)
    names: str  # what the one line must name
    file: str | None = None
    error: type = InvalidArgument  # api rows: the class it must raise
    ignored: bool = False  # api rows: a value the rules ignore (returns False, writes nothing)


def M(label, cell, names, file=None):
    return Row("magic", label, cell, names, file)


def C(option, value, file=None, names=None):
    label = f"Ocw.{option} = <{file}>" if file else f"Ocw.{option} = {value}"
    return Row("config", label, f"%config Ocw.{option} = {value}", names or option, file)


def E(var, value, file=None, names=None):
    label = f"{var}=<{file}>" if file else f"{var}={value!r}"
    return Row("env", label, (var, value), names or var, file)


def A(label, fn, names, error=InvalidArgument, file=None, ignored=False):
    return Row("api", label, fn, names, file, error, ignored)


SUR = "\ud800"  # a lone surrogate: half of a character, which DuckDB cannot store
NAN = float("nan")

MAGIC_ROWS = [
    M("chat: empty cell", "%%chat\n", "empty"),
    M("chat: blank cell", "%%chat\n   \n\t ", "empty"),
    M("chat: lone surrogate", f"%%chat\nhello {SUR} there", "lone surrogate"),
    M("chat: low surrogate alone", "%%chat\nend \udfff", "lone surrogate"),
    M("chat: reversed pair", "%%chat\n\udc00\ud800", "lone surrogate"),
    M("chat: --session ''", "%%chat --session ''\nhi", "--session"),
    M("chat: --session blank", "%%chat --session '   '\nhi", "--session"),
    M("chat: --session tab", "%%chat --session 'a\tb'\nhi", "--session"),
    M("chat: --session surrogate", f"%%chat --session x{SUR}\nhi", "--session"),
    M("chat: --session missing", "%%chat --session\nhi", "--session"),
    M("chat: --model ''", "%%chat --model ''\nhi", "--model"),
    M("chat: --model with space", "%%chat --model 'gpt 4o'\nhi", "--model"),
    M("chat: --model surrogate", f"%%chat --model m{SUR}\nhi", "--model"),
    M("chat: --model NUL", "%%chat --model 'a\x00b'\nhi", "--model"),
    M("chat: --provider unknown", "%%chat --provider gemini\nhi", "--provider"),
    M("chat: --provider case", "%%chat --provider OpenAI\nhi", "--provider"),
    M("chat: --provider missing", "%%chat --provider\nhi", "--provider"),
    M("chat: unknown option", "%%chat --bogus\nhi", "--bogus"),
    M("chat: stray word", "%%chat hello\nhi", "hello"),
    M("chat: --tools=yes", "%%chat --tools=yes\nhi", "--tools"),
    M("chat: --new --session ''", "%%chat --new --session ''\nhi", "--session"),
    M("chat: --new --model ''", "%%chat --new --model ''\nhi", "--model"),
    M("compact: word", "%compact abc", "%compact"),
    M("compact: negative", "%compact -5", "%compact"),
    M("compact: fraction", "%compact 1.5", "%compact"),
    M("compact: 2k", "%compact 2k", "%compact"),
    M("compact: superscript two", "%compact ²", "%compact"),
    M("compact: fullwidth digits", "%compact ２０００", "%compact"),
    M("compact: over 2**31", "%compact 99999999999", "%compact"),
    M("compact: two numbers", "%compact 10 20", "%compact"),
    M("compact: hex", "%compact 0x10", "%compact"),
    M("context: unknown option", "%context --bogus", "--bogus"),
    M("context: stray word", "%context now", "now"),
    M("rewind: zero", "%rewind 0", "n (turns to rewind)"),
    M("rewind: negative", "%rewind -1", "%rewind"),
    M("rewind: more than the branch", "%rewind 99", "cannot rewind 99"),
    M("rewind: fraction", "%rewind 1.5", "%rewind"),
    M("rewind: superscript", "%rewind ²", "not on the current branch"),
    M("rewind: over 2**31", "%rewind 99999999999999999999", "%rewind"),
    M("rewind: unknown node", "%rewind n_doesnotexist", "n_doesnotexist"),
    M("rewind: two numbers", "%rewind 1 2", "%rewind"),
    M("branch: unknown node", "%branch n_nope", "n_nope"),
    M("branch: a number", "%branch 123", "123"),
    M("branch: two ids", "%branch a b", "a b"),
    M("new: --name ''", "%new --name ''", "--name"),
    M("new: --name blank", "%new --name '  '", "--name"),
    M("new: --name tab", "%new --name 'a\tb'", "--name"),
    M("new: --name surrogate", f"%new --name s{SUR}", "--name"),
    M("new: --name missing", "%new --name", "--name"),
    M("new: unknown option", "%new --bogus", "--bogus"),
    M("new: stray word", "%new please", "please"),
    M("sessions: stray word", "%sessions all", "%sessions"),
    M("sessions: option", "%sessions --all", "%sessions"),
    M("ocw: unknown command", "%ocw bogus", "bogus"),
    M("ocw: case", "%ocw HELP", "HELP"),
    M("ocw: help extra", "%ocw help me", "me"),
    M("ocw: doctor extra", "%ocw doctor now", "now"),
    M("ocw: tools extra", "%ocw tools all", "all"),
    M("ocw: allow-code extra", "%ocw allow-code please", "please"),
    M("ocw: deny-code extra", "%ocw deny-code x", "x"),
    # issue 25: the newer surfaces
    M("ocw: retry-save extra", "%ocw retry-save now", "now"),
    M("ocw: export to /proc", "%ocw export /proc/chat.md", "/proc"),
    M("ocw: export into a missing folder/", "%ocw export no/such/dir/", "no folder"),
    M("ocw: export under a file", "%ocw export {path}/chat.md", "no folder", "text"),
    M("new: --name with U+202E", "%new --name abc\u202edef", "bidirectional"),
    M("new: --name 2,000 chars", "%new --name " + "n" * 2000, "at most 1,024"),
    M("compact: focus 1 MB", "%compact -- " + "k" * 1_000_000, "at most 2,000"),
]

CONFIG_ROWS = [
    C("provider", "'gemini'"), C("provider", "''"), C("provider", "None"), C("provider", "1"),
    C("model", "''"), C("model", "'  '"), C("model", "'gpt 4o'"), C("model", "'a\\nb'"), C("model", "5"),
    C("model", f"'m{SUR}'".encode("unicode_escape").decode()),
    C("base_url", "''"), C("base_url", "'localhost:11434'"), C("base_url", "'ftp://host/v1'"),
    C("base_url", "'http://'"), C("base_url", "'http://a b/v1'"), C("base_url", "5"),
    C("api_key", "''"), C("api_key", "'sk has spaces'"), C("api_key", "'sk-\\n'"), C("api_key", "'ключ-1234'"),
    C("api_key", "5"),
    C("context_window", "-1"), C("context_window", "2**31"), C("context_window", "True"), C("context_window", "1.5"),
    C("context_window", "'8k'"), C("context_window", "None"),
    C("db", "''"), C("db", "'   '"), C("db", "5"), C("db", "None"), C("db", "'mysql://host/ocw'"),
    C("db", "'md:mydb'"), C("db", "{path!r}", "folder"), C("db", "{path!r}", "under-file"),
    C("db", "{path!r}", "text"), C("db", "{path!r}", "foreign"), C("db", "{path!r}", "foreign-wal"),
    C("db", "{path!r}", "clash"), C("db", "{path!r}", "foreign-schema_version"), C("db", "{path!r}", "newer"),
    C("db", "{path!r}", "devnull"),
    C("lang", "'fr'"), C("lang", "''"), C("lang", "None"),
    C("auto_compact", "float('nan')"), C("auto_compact", "float('inf')"), C("auto_compact", "-0.5"),
    C("auto_compact", "1.0"), C("auto_compact", "5"), C("auto_compact", "0.05"), C("auto_compact", "'abc'"),
    C("auto_compact", "True"),
    C("system_prompt", f"'be {SUR}'".encode("unicode_escape").decode()), C("system_prompt", "5"),
    C("system_prompt", "None"),
    C("max_output_tokens", "0"), C("max_output_tokens", "-1"), C("max_output_tokens", "2**31"),
    C("max_output_tokens", "True"), C("max_output_tokens", "1.5"),
    C("timeout", "-1"), C("timeout", "0"), C("timeout", "float('nan')"), C("timeout", "float('inf')"),
    C("timeout", "True"), C("timeout", "'abc'"), C("timeout", "None"),
    C("lock_timeout", "-1"), C("lock_timeout", "0"), C("lock_timeout", "float('nan')"),
    C("lock_timeout", "float('inf')"), C("lock_timeout", "True"), C("lock_timeout", "'abc'"),
    C("max_retries", "-1"), C("max_retries", "11"), C("max_retries", "True"), C("max_retries", "2.5"),
    C("tools", "'yes'"), C("tools", "2"),
    C("max_tool_steps", "0"), C("max_tool_steps", "1001"), C("max_tool_steps", "True"),
    C("tool_result_cap", "0"), C("tool_result_cap", "-1"), C("tool_result_cap", "2**31"),
    C("debug", "'yes'"), C("debug", "2"),
    C("summary_provider", "'gemini'"), C("summary_provider", "''"), C("summary_provider", "5"),
    C("summary_model", "''"), C("summary_model", "'gpt 4o'"), C("summary_model", "5"),
    C("summary_base_url", "''"), C("summary_base_url", "'ftp://host/v1'"), C("summary_base_url", "'localhost:8081'"),
]

ENV_ROWS = [
    E("OCW_DB", "   "), E("OCW_DB", "{path}", "under-file"), E("OCW_DB", "{path}", "uncreatable"),
    E("OCW_DB", "{path}", "folder"), E("OCW_DB", "{path}", "text"), E("OCW_DB", "{path}", "foreign"),
    E("OCW_DB", "{path}", "foreign-wal"), E("OCW_DB", "{path}", "clash"), E("OCW_DB", "{path}", "newer"),
    E("OCW_DB", "{path}", "devnull"), E("OCW_DB", "mysql://host/ocw"), E("OCW_DB", "md:mydb"),
    E("OCW_PROVIDER", "opneai"), E("OCW_PROVIDER", "gemini"), E("OCW_PROVIDER", "1"),
    E("OCW_CONTEXT_WINDOW", "32k"), E("OCW_CONTEXT_WINDOW", "-5"), E("OCW_CONTEXT_WINDOW", "2147483648"),
    E("OCW_CONTEXT_WINDOW", "1.5"), E("OCW_CONTEXT_WINDOW", "nan"), E("OCW_CONTEXT_WINDOW", "²"),
    E("OCW_AUTO_COMPACT", "abc"), E("OCW_AUTO_COMPACT", "nan"), E("OCW_AUTO_COMPACT", "inf"),
    E("OCW_AUTO_COMPACT", "-0.5"), E("OCW_AUTO_COMPACT", "150"), E("OCW_AUTO_COMPACT", "0.05"),
    E("OCW_AUTO_COMPACT", "1.0"),
    E("OCW_LANG", "fr"), E("OCW_LANG", "zn"), E("OCW_LANG", "english"),
    E("OCW_DEBUG", "maybe"), E("OCW_DEBUG", "2"), E("OCW_DEBUG", "yes please"),
    E("OCW_MODEL", "gpt 4o"), E("OCW_MODEL", " "),
    E("OCW_BASE_URL", "localhost:11434"), E("OCW_BASE_URL", "ftp://host/v1"),
    E("OCW_SUMMARY_PROVIDER", "gemini"), E("OCW_SUMMARY_MODEL", "gpt 4o"), E("OCW_SUMMARY_BASE_URL", "ftp://host/v1"),
]


def _summary_like(ctx):
    return ctx.s.append("llm", "x", name="context/summary")


API_ROWS = [
    # ocw.Store
    A("Store('')", lambda c: ocw.Store(""), "empty", BadDatabasePath),
    A("Store(blank)", lambda c: ocw.Store("  \t"), "empty", BadDatabasePath),
    A("Store(42)", lambda c: ocw.Store(42), "as text", BadDatabasePath),
    A("Store(bytes)", lambda c: ocw.Store(b"/tmp/x.duckdb"), "as text", BadDatabasePath),
    A("Store(url)", lambda c: ocw.Store("mysql://h/db"), "URL", BadDatabasePath),
    A("Store(NUL)", lambda c: ocw.Store("a\x00b"), "NUL", BadDatabasePath),
    A("Store(surrogate path)", lambda c: ocw.Store("x\udcff.duckdb"), "Unicode", BadDatabasePath),
    A("Store(folder)", lambda c: ocw.Store(c.path), "directory", BadDatabasePath, "folder"),
    A("Store(under a file)", lambda c: ocw.Store(c.path), "not a folder", BadDatabasePath, "under-file"),
    A("Store(uncreatable)", lambda c: ocw.Store(c.path), "cannot create the folder", BadDatabasePath, "uncreatable"),
    A("Store(text file)", lambda c: ocw.Store(c.path), "not a DuckDB database", BadDatabasePath, "text"),
    A("Store(/dev/null)", lambda c: ocw.Store(c.path), "not a regular file", BadDatabasePath, "devnull"),
    A("Store(foreign)", lambda c: ocw.Store(c.path), "invoices", ForeignDatabase, "foreign"),
    A("Store(foreign + wal)", lambda c: ocw.Store(c.path), "another application", ForeignDatabase, "foreign-wal"),
    A("Store(clashing sessions)", lambda c: ocw.Store(c.path), "sessions", ForeignDatabase, "clash"),
    A("Store(foreign schema_version)", lambda c: ocw.Store(c.path), "accounts", ForeignDatabase,
      "foreign-schema_version"),
    A("Store(newer schema)", lambda c: ocw.Store(c.path), "9.1.0", NewerSchema, "newer"),
    A("Store(idle_close=-1)", lambda c: ocw.Store(c.tmp / "o.duckdb", idle_close=-1), "idle_close"),
    A("Store(lock_timeout=nan)", lambda c: ocw.Store(c.tmp / "o.duckdb", lock_timeout=NAN), "lock_timeout"),
    # create_session
    *[A(f"create_session(context_window={v!r})", lambda c, v=v: c.store.create_session(context_window=v),
        "context_window") for v in (True, False, 0, -5, 2**31, 1.5, "8k", NAN, None)],
    *[A(f"create_session(model={v!r})", lambda c, v=v: c.store.create_session(model=v), "model")
      for v in ("", None, 5, "gpt 4o", SUR)],
    *[A(f"create_session(name={v!r})", lambda c, v=v: c.store.create_session(name=v), "name")
      for v in ("", "  ", "a\nb", 5, SUR, " padded ")],
    A("create_session(name=existing)", lambda c: c.store.create_session(name="main"), "main", StoreError),
    *[A(f"create_session(system_prompt={v!r})", lambda c, v=v: c.store.create_session(system_prompt=v),
        "system_prompt") for v in (None, 5, SUR)],
    *[A(f"create_session(provider={v!r})", lambda c, v=v: c.store.create_session(provider=v), "provider")
      for v in ("gemini", None, "OpenAI")],
    *[A(f"create_session(metadata={v!r})", lambda c, v=v: c.store.create_session(metadata=v), "metadata")
      for v in ("x", {1: "a"}, {"x": NAN}, {"x": object()}, {"context_compaction_count": -1},
                {"tool_result_cap": 0}, {"k": SUR}, {"t": (1, 2)})],
    # append / append_many
    *[A(f"append(role={v!r})", lambda c, v=v: c.s.append(v, "x"), "role") for v in ("bot", None, 5)],
    *[A(f"append(content={v!r})", lambda c, v=v: c.s.append("user", v), "content" if v != SUR else "surrogate")
      for v in (None, 5, [], [{"type": "image"}], SUR, f"ok {SUR}")],
    A("append(block without text)", lambda c: c.s.append("user", [{"type": "text"}]), "lacks text"),
    A("append(text not str)", lambda c: c.s.append("user", [{"type": "text", "text": 5}]), "text"),
    A("append(tool_use input str)", lambda c: c.s.append(
        "assistant", [{"type": "tool_use", "id": "t1", "name": "f", "input": "x"}]), "input"),
    *[A(f"append(name={v!r})", lambda c, v=v: c.s.append("user", "x", name=v), "name") for v in (5, "", "a\nb")],
    A("append(a summary)", _summary_like, "summary"),
    *[A(f"append_many({v!r})", lambda c, v=v: c.s.append_many(v), "messages")
      for v in ("x", [], [("user",)], [("user", "a", "n", "extra")], [5], None)],
    A("append_many(second bad)", lambda c: c.s.append_many([("user", "fine"), ("bot", "x")]), "role"),
    A("append_many(second unstorable)", lambda c: c.s.append_many([("user", "fine"), ("assistant", SUR)]),
      "messages[1]"),
    # compact
    *[A(f"compact(keep_recent_tokens={v!r})", lambda c, v=v: c.s.compact(keep_recent_tokens=v),
        "keep_recent_tokens") for v in (-1, 1.5, "100", True, 2**31)],
    *[A(f"compact(trigger={v!r})", lambda c, v=v: c.s.compact(trigger=v), "trigger") for v in ("sometimes", None)],
    A("compact(provider='openai')", lambda c: c.s.compact(provider="openai"), "provider"),
    # rewind / rewind_turns / checkout
    *[A(f"rewind({v!r})", lambda c, v=v: c.s.rewind(v), "node_id" if not isinstance(v, str) else v)
      for v in ("n_nope", 5, ["x"])],
    *[A(f"rewind_turns({v!r})", lambda c, v=v: c.s.rewind_turns(v), "rewind")
      for v in (0, -1, 99, 1.5, "1", True, None, 2**31)],
    *[A(f"checkout({v!r})", lambda c, v=v: c.s.checkout(v), "node_id" if not isinstance(v, str) else v)
      for v in ("n_nope", None, 5)],
    A("checkout(a node of another session)", lambda c: c.s.checkout(c.other_node), "not a message"),
    # reset_context
    *[A(f"reset_context(context_window={v!r})", lambda c, v=v: c.s.reset_context(context_window=v), "context_window")
      for v in (0, -5, NAN, 2**31, True, 1.5)],
    *[A(f"reset_context(model={v!r})", lambda c, v=v: c.s.reset_context(model=v), "model") for v in ("", 5, "a b")],
    A("reset_context(provider='gemini')", lambda c: c.s.reset_context(provider="gemini"), "provider"),
    # record_usage: invalid samples are ignored by the count rules; a bad source is refused
    *[A(f"record_usage({v!r})", lambda c, v=v: c.s.record_usage(v), "", ignored=True)
      for v in (None, -1, "100", True, NAN, 1.5)],
    *[A(f"record_usage(source={v!r})", lambda c, v=v: c.s.record_usage(100, source=v), "source")
      for v in ("", 5, None)],
    # set_tool_result_cap / set_metadata / rename / open_session
    *[A(f"set_tool_result_cap({v!r})", lambda c, v=v: c.s.set_tool_result_cap(v), "cap")
      for v in (0, -1, 1.5, "100", True, None, 2**31)],
    *[A(f"set_metadata({k}={v!r})", lambda c, k=k, v=v: c.s.set_metadata(**{k: v}), k if k != "x" else "set_metadata")
      for k, v in (("x", NAN), ("x", object()), ("x", SUR), ("context_compaction_count", -1),
                   ("context_compaction_count", "3"), ("tool_result_cap", 10), ("context_window", "x"))],
    *[A(f"rename({v!r})", lambda c, v=v: c.s.rename(v), "new_name") for v in ("", "  ", None, 5, "a\nb", SUR)],
    A("rename(existing)", lambda c: c.s.rename("other"), "other", StoreError),
    *[A(f"open_session({v!r})", lambda c, v=v: c.store.open_session(v), "id_or_name") for v in ("", None, 5)],
    A("open_session(missing)", lambda c: c.store.open_session("nope"), "nope", SessionNotFound),
]

ROWS = MAGIC_ROWS + CONFIG_ROWS + ENV_ROWS + API_ROWS


def _ids(rows):
    return [r.label for r in rows]


def record(row: Row, outcome: dict) -> None:
    RESULTS[f"{row.kind}: {row.label}"] = outcome
    bad = {k: v for k, v in outcome.items() if k in MEASURES and v}
    assert not bad, f"{row.kind} row {row.label!r}: {bad}; message: {outcome.get('message')!r} {outcome.get('state')}"


def make_file(row: Row, tmp_path: Path) -> tuple[Path, str | None]:
    files = tmp_path / "files"
    files.mkdir()
    return files, (FILES[row.file](files) if row.file else None)


def lost(before: str, after: str) -> bool:
    import json

    a, b = json.loads(before), json.loads(after)
    return any({r["id"] for r in a[t]} - {r["id"] for r in b[t]} for t in ("sessions", "nodes"))


# -- magics and %config, in a real shell against the loopback server ------------------------------


def _session_state(rt) -> tuple:
    s = rt.current
    if s is None:
        return (rt._store_path,)
    return (rt._store_path, s.id, s.name, s.model, s.provider_name, s.context_window, s.head, s.generation,
            s.tool_result_cap, tuple(s.branch()))


def _config_state(cfg) -> dict:
    out = {}
    for name in sorted(cfg.traits(config=True)):
        try:
            out[name] = repr(getattr(cfg, name))
        except OcwError as e:
            out[name] = f"error: {e}"
    return out


@pytest.mark.parametrize("row", MAGIC_ROWS + CONFIG_ROWS, ids=_ids(MAGIC_ROWS + CONFIG_ROWS))
def test_magic_and_config_rows(row, oip, openai_env, tmp_path, store_dump, capsys, caplog):
    srv = openai_env
    assert oip.run_cell("%%chat\nThe conversation so far.").error_in_exec is None
    rt = get_runtime()
    files, path = make_file(row, tmp_path)
    store = rt.store
    before = (store_dump(store), tree(files), _session_state(rt), _config_state(rt.config), len(srv.requests))
    capsys.readouterr()
    caplog.clear()

    with caplog.at_level(logging.ERROR):
        res = oip.run_cell(row.action.replace("{path!r}", repr(path)) if path else row.action)
    out, err = capsys.readouterr()
    records = [r for r in caplog.records if r.levelno >= logging.ERROR]
    if row.kind == "magic":
        refused = isinstance(res.error_in_exec, UsageError)
        message = str(res.error_in_exec) if refused else ""
        one_line = refused and "\n" not in message and message in err and not records
    else:  # IPython's %config logs a refused value as one error line
        refused = res.error_in_exec is None and len(records) == 1
        message = records[0].getMessage() if refused else ""
        one_line = refused and "\n" not in message and records[0].exc_info is None
    dump = store_dump(store)
    record(row, {
        "traceback": not one_line or "Traceback" in out + err,
        "silent": not refused or _session_state(rt) != before[2] or _config_state(rt.config) != before[3],
        "half_write": dump != before[0],
        "data_loss": lost(before[0], dump),
        "foreign": tree(files) != before[1],
        "model": len(srv.requests) != before[4],
        "unclear": row.names not in message,
        "message": message,
        "state": (_session_state(rt), before[2], _config_state(rt.config), before[3]),
    })


# -- environment variables: a conversation on file, then a kernel with a bad value -----------------------

ENV_TRAIT = {"OCW_DB": "db", "OCW_PROVIDER": "provider", "OCW_CONTEXT_WINDOW": "context_window",
             "OCW_AUTO_COMPACT": "auto_compact", "OCW_LANG": "lang", "OCW_DEBUG": "debug", "OCW_MODEL": "model",
             "OCW_BASE_URL": "base_url", "OCW_SUMMARY_PROVIDER": "summary_provider",
             "OCW_SUMMARY_MODEL": "summary_model", "OCW_SUMMARY_BASE_URL": "summary_base_url"}


@pytest.mark.parametrize("row", ENV_ROWS, ids=_ids(ENV_ROWS))
def test_environment_rows(row, ocw_env, ip, tmp_path, monkeypatch, store_dump, capsys):
    st = ocw.Store(str(ocw_env))  # the user's conversation, written before this kernel
    s = st.create_session(name="default")
    s.append_many([("user", "kept question"), ("assistant", "kept answer")])
    st.close()
    files, path = make_file(row, tmp_path)
    var, value = row.action
    monkeypatch.setenv(var, value.replace("{path}", path) if path else value)
    folder_before = tree(files)
    before = store_dump(ocw.Store(str(ocw_env)))

    res = ip.run_cell("%%chat\nhello")
    out, err = capsys.readouterr()
    refused = isinstance(res.error_in_exec, UsageError)
    message = str(res.error_in_exec) if refused else ""
    rt = get_runtime()
    try:  # read the option back: refused, or (OCW_DB) exactly the path given — never a fallback
        got = getattr(rt.config, ENV_TRAIT[var])
        silently_other = not (var == "OCW_DB" and got == os.environ[var])
    except OcwError:
        silently_other = False
    rt.close()
    after = store_dump(ocw.Store(str(ocw_env)))
    record(row, {
        "traceback": not refused or "\n" in message or "Traceback" in out + err,
        "silent": not refused or silently_other,
        "half_write": after != before,
        "data_loss": lost(before, after),
        "foreign": tree(files) != folder_before,
        "model": False,  # offline: no server; the store shows no turn (half_write)
        "unclear": row.names not in message,
        "message": message,
    })


# -- the public API ---------------------------------------------------------------------------------------


def beside(folder: Path) -> list[str]:
    """What else is in the folder (a relative path must not create anything there)."""
    return sorted(n for n in os.listdir(folder) if not n.startswith("api.duckdb"))


class Ctx:
    def __init__(self, tmp: Path, path: str | None):
        self.tmp, self.path = tmp, path
        self.store = ocw.Store(str(tmp / "api.duckdb"))
        self.s = self.store.create_session(name="main", model="gpt-4o", context_window=64_000,
                                           system_prompt="Be brief.", metadata={"tag": "t"})
        self.s.append_many([("user", "q1"), ("assistant", "a1"), ("user", "q2"), ("assistant", "a2")])
        self.s.record_usage(1_000)
        other = self.store.create_session(name="other")
        self.other_node = other.append("user", "elsewhere")

    def state(self) -> tuple:
        s = self.s
        return (s.name, s.model, s.provider_name, s.context_window, s.system_prompt, s.head, tuple(s.branch()),
                s.metadata, s.tool_result_cap, s.generation, s.compaction_count)


@pytest.mark.parametrize("row", API_ROWS, ids=_ids(API_ROWS))
def test_api_rows(row, tmp_path, store_dump, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative path must not land in the repository
    files, path = make_file(row, tmp_path)
    ctx = Ctx(tmp_path, path)
    before = (store_dump(ctx.store), tree(files), ctx.state(), beside(tmp_path))
    error, returned = None, None
    try:
        returned = row.action(ctx)
    except Exception as e:  # noqa: BLE001 - classified below
        error = e
    if row.ignored:
        refused, message = error is None and returned is False, ""
        one_line = error is None
    else:
        refused = isinstance(error, row.error) and isinstance(error, (OcwError, ValueError))
        message = error.user_message() if isinstance(error, OcwError) else str(error)
        one_line = isinstance(error, OcwError) and "\n" not in message
    ctx.store.close()
    reopened = ocw.Store(str(tmp_path / "api.duckdb"))
    dump = store_dump(reopened)
    read_back = reopened.open_session(ctx.s.id)
    reopened.close()
    record(row, {
        "traceback": not one_line,
        "silent": not refused or ctx.state() != before[2]
        or (read_back.model, read_back.context_window, read_back.name, read_back.metadata)
        != (before[2][1], before[2][3], before[2][0], before[2][7]),
        "half_write": dump != before[0],
        "data_loss": lost(before[0], dump),
        "foreign": tree(files) != before[1] or beside(tmp_path) != before[3],
        "model": False,
        "unclear": row.names not in message,
        "message": message,
    })


# -- the closing count ------------------------------------------------------------------------------------


def test_zz_summary(capsys):
    """Counts for the closing note. Runs last in this module (file order)."""
    assert len(RESULTS) == len(ROWS), f"only {len(RESULTS)} of {len(ROWS)} rows ran"
    assert len(ROWS) >= 121
    counts = {m: sum(1 for r in RESULTS.values() if r[m]) for m in MEASURES}
    by_kind = {k: sum(1 for key in RESULTS if key.startswith(k + ":")) for k in ("magic", "config", "env", "api")}
    with capsys.disabled():
        print(f"\nbad-input table: {len(RESULTS)} rows ({', '.join(f'{k} {n}' for k, n in by_kind.items())}); "
              f"tracebacks {counts['traceback']}, silent-wrong {counts['silent']}, "
              f"foreign files modified {counts['foreign']}, data loss {counts['data_loss']}, "
              f"half-writes {counts['half_write']}, model called {counts['model']}, unclear {counts['unclear']}")
    assert counts == dict.fromkeys(MEASURES, 0)


def test_sessions_share_on_a_duckdb_file_says_it_is_for_the_team_database(ip, capsys):
    """Sharing opens rows to another database role: a DuckDB file has none. One line,
    and the file's sessions unchanged."""
    ip.run_cell("%%chat\nhello")
    capsys.readouterr()
    import ocw

    before = [(s["id"], s["name"]) for s in ocw.current_session().store.sessions()]
    r = ip.run_cell("%sessions --share default mate")
    out, err = capsys.readouterr()
    assert r.error_in_exec is not None and out == ""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "sessions are shared on the team database only" in lines[0], err
    assert [(s["id"], s["name"]) for s in ocw.current_session().store.sessions()] == before


# -- the edges that must be ACCEPTED (ocw/text/checks.py): a refusal table alone lets a check that
# -- refuses too much through ---------------------------------------------------------------------


def test_the_largest_window_duckdb_holds_is_accepted_and_read_back_one_more_is_refused(tmp_path):
    """INTEGER's top, 2**31-1 = 2,147,483,647: stored and read back from the file; 2**31 is a row above."""
    store = ocw.Store(str(tmp_path / "edge.duckdb"))
    s = store.create_session(name="big", context_window=2_147_483_647)
    small = store.create_session(name="small", context_window=1)
    with pytest.raises(InvalidArgument, match="from 1 to 2\\*\\*31-1, not 2147483648"):
        store.create_session(name="over", context_window=2_147_483_648)
    with pytest.raises(InvalidArgument, match="from 1 to 2\\*\\*31-1, not 0"):
        store.create_session(name="zero", context_window=0)
    store.close()
    again = ocw.Store(str(tmp_path / "edge.duckdb"))
    try:
        assert again.open_session(s.id).context_window == 2_147_483_647
        assert again.open_session(small.id).context_window == 1
        assert sorted(x["name"] for x in again.sessions()) == ["big", "small"]
    finally:
        again.close()


def test_an_empty_system_prompt_is_accepted_and_a_blank_session_name_is_not(tmp_path):
    """`text()` allows empty text unless told (a system prompt may be ""); a name may not be blank."""
    store = ocw.Store(str(tmp_path / "edge.duckdb"))
    try:
        s = store.create_session(name="plain", system_prompt="")
        assert store.open_session(s.id).system_prompt in ("", None)
        with pytest.raises(InvalidArgument, match="name is empty"):
            store.create_session(name="   ")
    finally:
        store.close()


def test_shown_escapes_a_control_or_a_bidi_character_in_a_stored_name_and_leaves_a_plain_one():
    from ocw.text.checks import shown

    assert shown("plan\nB") == "plan\\nB"          # a control alone
    assert shown("pay\u202eusd") == "pay\\u202eusd"  # a bidirectional control alone
    assert shown("plan B") == "plan B"


def test_a_lone_surrogate_in_model_text_becomes_the_replacement_character_at_any_depth():
    from ocw.text.checks import repaired

    assert repaired("ok \ud83d") == "ok \ufffd"
    assert repaired(["a\udc00", {"k\ud800": ["\udfff"]}, 3]) == ["a\ufffd", {"k\ufffd": ["\ufffd"]}, 3]
