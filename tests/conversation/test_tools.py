"""`@ocw.tool` registration and schemas, the registry's call handling, the
built-in tools, the code-execution opt-in, display and redaction (issue 7)."""
from __future__ import annotations

import typing
from typing import Annotated, Dict, List, Literal, Optional, Union

import pytest
from IPython.utils.capture import capture_output

import ocw
from ocw.conversation import builtin_tools
from ocw.notebook import report
from ocw.text.errors import ToolError
from ocw.conversation.toolbox import ToolRegistry
from ocw.conversation.tools import Tool, registered, render_result
from ocw.conversation.request import unpaired_tool_blocks_as_text


def schema_of(fn) -> dict:
    return Tool(fn).input_schema


def prop(fn, name: str = "x") -> dict:
    return schema_of(fn)["properties"][name]


# -- schemas from type hints -------------------------------------------------------------
def test_schema_for_each_supported_hint():
    def f_str(x: str): ...
    def f_int(x: int): ...
    def f_float(x: float): ...
    def f_bool(x: bool): ...
    def f_list(x: list[int]): ...
    def f_typing_list(x: List[str]): ...
    def f_bare_list(x: list): ...
    def f_dict(x: dict[str, float]): ...
    def f_typing_dict(x: Dict[str, bool]): ...
    def f_bare_dict(x: dict): ...
    def f_nested(x: list[dict[str, list[int]]]): ...
    def f_literal(x: Literal["csv", "parquet"]): ...
    def f_literal_int(x: Literal[1, 2, 3]): ...
    def f_literal_mixed(x: Literal["auto", 0]): ...
    def f_optional(x: Optional[int]): ...
    def f_pipe_none(x: str | None): ...
    def f_union(x: Union[int, str]): ...
    def f_opt_list(x: Optional[list[str]]): ...
    def f_annotated(x: Annotated[str, "the table's name"]): ...

    assert prop(f_str) == {"type": "string"}
    assert prop(f_int) == {"type": "integer"}
    assert prop(f_float) == {"type": "number"}
    assert prop(f_bool) == {"type": "boolean"}
    assert prop(f_list) == {"type": "array", "items": {"type": "integer"}}
    assert prop(f_typing_list) == {"type": "array", "items": {"type": "string"}}
    assert prop(f_bare_list) == {"type": "array"}
    assert prop(f_dict) == {"type": "object", "additionalProperties": {"type": "number"}}
    assert prop(f_typing_dict) == {"type": "object", "additionalProperties": {"type": "boolean"}}
    assert prop(f_bare_dict) == {"type": "object"}
    assert prop(f_nested) == {"type": "array", "items": {"type": "object", "additionalProperties":
                                                         {"type": "array", "items": {"type": "integer"}}}}
    assert prop(f_literal) == {"enum": ["csv", "parquet"], "type": "string"}
    assert prop(f_literal_int) == {"enum": [1, 2, 3], "type": "integer"}
    assert prop(f_literal_mixed) == {"enum": ["auto", 0]}
    assert prop(f_optional) == {"type": ["integer", "null"]}
    assert prop(f_pipe_none) == {"type": ["string", "null"]}
    assert prop(f_union) == {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert prop(f_opt_list) == {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]}
    assert prop(f_annotated) == {"type": "string", "description": "the table's name"}
    for f in (f_str, f_optional, f_union):  # no default: required, even when it may be null
        assert schema_of(f)["required"] == ["x"]


def test_defaults_make_arguments_optional_and_are_shown():
    def top_rows(table: str, n: int = 5, fmt: Literal["md", "csv"] = "md", cols: Optional[list[str]] = None,
                 *, strict: bool = False) -> str:
        """The first n rows of a table.

        Longer text stays in the description too."""

    t = Tool(top_rows)
    assert t.name == "top_rows"
    assert t.description == "The first n rows of a table.\n\nLonger text stays in the description too."
    assert t.input_schema == {
        "type": "object",
        "properties": {
            "table": {"type": "string"},
            "n": {"type": "integer", "default": 5},
            "fmt": {"enum": ["md", "csv"], "type": "string", "default": "md"},
            "cols": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}], "default": None},
            "strict": {"type": "boolean", "default": False},
        },
        "required": ["table"],
    }
    assert t.definition() == {"name": "top_rows", "description": t.description, "input_schema": t.input_schema}


def test_the_decorator_registers_and_keeps_the_function_callable():
    @ocw.tool
    def double(x: int) -> int:
        "Twice x."
        return 2 * x

    @ocw.tool(name="triple_it", description="Three times x.")
    def triple(x: int) -> int:
        return 3 * x

    try:
        assert double(4) == 8 and triple(2) == 6
        assert registered()["double"] is double and registered()["triple_it"].description == "Three times x."
        assert Tool(lambda: 1, name="no_doc").description == "Call no_doc."
    finally:
        ocw.conversation.tools.unregister("double")
        ocw.conversation.tools.unregister("triple_it")
    assert "double" not in registered()


class Table:
    pass


@pytest.mark.parametrize("make, message", [
    (lambda: _fn("def f(*rows: int): ..."), r"f: \*rows cannot be described to a model; name each argument"),
    (lambda: _fn("def f(x: int, **opts: int): ..."), r"f: \*\*opts cannot be described"),
    (lambda: _fn("def f(t: Table): ..."), r"f\(t\): type Table cannot be expressed as JSON"),
    (lambda: _fn("def f(ids: set[int]): ..."), r"f\(ids\): set\[int\] cannot be expressed in JSON; use list"),
    (lambda: _fn("def f(p: tuple[int, int]): ..."), r"tuple\[int, int\] cannot be expressed in JSON"),
    (lambda: _fn("def f(x): ..."), r"f\(x\) needs a type hint"),
    (lambda: _fn("def f(x: int, y): ..."), r"f\(y\) needs a type hint"),
    (lambda: _fn("def f(x: typing.Any): ..."), r"f\(x\): Any says nothing the model can use"),
    (lambda: _fn("def f(m: dict[int, str]): ..."), r"dict keys must be str"),
    (lambda: _fn("def f(m: list[Table]): ..."), r"f\(m\): type Table cannot be expressed"),
    (lambda: _fn("def f(x: 'Undefined'): ..."), r"type hints cannot be resolved \(NameError"),
    (lambda: _fn("async def f(x: int): ..."), r"async functions cannot be tools"),
    (lambda: (lambda x: x), r"tool name '<lambda>' must be"),
])
def test_registration_errors_are_clear_and_immediate(make, message):
    fn = make()
    before = registered()
    with pytest.raises(ToolError, match=message):
        ocw.tool(fn)
    assert registered() == before  # nothing half-registered


def _fn(src: str):
    ns = {"Table": Table, "typing": typing}
    exec(src, ns)
    return ns["f"]


def test_a_registration_error_says_what_to_use_instead():
    with pytest.raises(ToolError) as e:
        ocw.tool(_fn("def f(t: Table): ..."))
    assert "str, int, float, bool, list[...], dict[str, ...], Literal[...]" in e.value.user_message()


# -- running calls -------------------------------------------------------------------------------
def call(name, input=None, id="call_1"):
    return {"type": "tool_use", "id": id, "name": name, "input": {} if input is None else input}


@pytest.fixture
def registry():
    saved = registered()
    ocw.conversation.tools._REGISTERED.clear()

    @ocw.tool
    def add(a: int, b: float = 0.5) -> float:
        "a + b"
        return a + b

    @ocw.tool
    def fail(why: str) -> str:
        "Fails."
        raise ValueError(why)

    @ocw.tool
    def leave() -> str:
        "Exits."
        raise SystemExit(3)

    @ocw.tool
    def stop() -> str:
        "The stop button."
        raise KeyboardInterrupt

    @ocw.tool
    def pick(mode: Literal["a", "b"], tags: list[str] = [], n: int = None) -> dict:  # noqa: B006
        "Echo."
        return {"mode": mode, "tags": tags, "n": n}

    @ocw.tool
    def chatty() -> None:
        "Prints."
        print("working on it")

    yield ToolRegistry()
    ocw.conversation.tools._REGISTERED.clear()
    ocw.conversation.tools._REGISTERED.update(saved)


def test_a_good_call_returns_its_value_as_text(registry):
    assert registry.run(call("add", {"a": 2})) == {"type": "tool_result", "tool_use_id": "call_1", "content": "2.5",
                                                   "is_error": False}
    assert registry.run(call("pick", {"mode": "a", "tags": ["x"], "n": None}))["content"] == \
        '{"mode": "a", "tags": ["x"], "n": null}'
    assert render_result("text") == "text" and render_result(None) == "null" and render_result((1, "é")) == '[1, "é"]'
    assert render_result(Table()).startswith("<test_tools.Table object")


@pytest.mark.parametrize("c, expected", [
    (call("fail", {"why": "disk full"}), "fail raised ValueError: disk full"),
    (call("leave"), "leave raised SystemExit: 3"),
    (call("nope"), "unknown tool 'nope'; available: add, fail, leave, stop, pick, chatty"),
    (call("add", {"_raw": '{"a": 1'}), "malformed arguments for add: expected a JSON object, got '{\"a\": 1'"),
    (call("add", ["a"]), "malformed arguments for add: expected a JSON object, got ['a']"),
    (call("add", {"a": "2"}), 'bad arguments for add: a must be integer, not "2"'),
    (call("add", {"a": True}), "bad arguments for add: a must be integer, not true"),
    (call("add", {}), "bad arguments for add: missing required argument 'a'"),
    (call("add", {"a": 1, "c": 2}), "bad arguments for add: unknown argument 'c'; add takes a, b"),
    (call("pick", {"mode": "c"}), 'bad arguments for pick: mode must be one of "a", "b", not "c"'),
    (call("pick", {"mode": "a", "tags": ["x", 2]}), "bad arguments for pick: tags[1] must be string, not 2"),
])
def test_failures_come_back_as_error_results(registry, c, expected):
    res = registry.run(c)
    assert res == {"type": "tool_result", "tool_use_id": "call_1", "content": expected, "is_error": True}


def test_numbers_fit_number_and_the_stop_button_is_not_swallowed(registry):
    assert registry.run(call("add", {"a": 1, "b": 2}))["content"] == "3"
    with pytest.raises(KeyboardInterrupt):
        registry.run(call("stop"))


def test_what_a_tool_prints_still_shows(registry, capsys):
    assert registry.run(call("chatty"))["content"] == "null"
    assert capsys.readouterr().out == "working on it\n"


# -- built-in tools ---------------------------------------------------------------------------------
class FakeShell:
    def __init__(self, **ns):
        import math

        self.user_ns_hidden = {"In": [], "exit": None}
        self.user_ns = {"In": [], "Out": {}, "exit": None, "_": 1, "_secret_helper": 2, "math": math,
                        "helper": lambda: 1, "Table": Table, **ns}

    def transform_cell(self, code):
        return code


def builtins_for(shell, **kw):
    return builtin_tools.make(shell, **kw)


def test_list_variables_names_types_and_sizes_only_the_users_data():
    tools = builtins_for(FakeShell(rows=[1, 2, 3], name="ocw", n=7, table={"a": 1}))
    assert sorted(tools) == ["describe_variable", "list_variables", "read_file"]  # no run_python
    assert tools["list_variables"]() == "n: int\nname: str (len 3)\nrows: list (len 3)\ntable: dict (len 1)"
    assert builtins_for(FakeShell())["list_variables"]() == "(no variables)"


def test_describe_variable_is_bounded():
    big = list(range(1_000_000))
    text = builtins_for(FakeShell(big=big, s="x" * 100_000))["describe_variable"]("big")
    assert text.startswith("list (len 1,000,000)\n[0, 1, 2,") and len(text) < 1_000
    text = builtins_for(FakeShell(s="x" * 100_000))["describe_variable"]("s")
    assert text.startswith("str (len 100,000)") and len(text) <= 4_100
    with pytest.raises(KeyError, match="no variable named 'nope'; call list_variables"):
        builtins_for(FakeShell())["describe_variable"]("nope")


def test_describe_a_dataframe_shows_shape_dtypes_and_head():
    import pandas as pd  # in the dev extra (pyproject) so this path is always tested
    df = pd.DataFrame({"region": ["north", "south", "east", "west", "centre", "islands"],
                       "revenue": [1.5, 2.0, 3.25, 4.0, 5.5, 6.0]})
    text = builtins_for(FakeShell(df=df))["describe_variable"]("df")
    lines = text.splitlines()
    assert lines[0] == "pandas.DataFrame (shape 6×2)"
    assert lines[1] == "dtypes:" and lines[2].split() == ["region", str(df.dtypes["region"])]
    assert lines[3].split() == ["revenue", "float64"]
    assert "head:" in lines and "north" in text and "centre" in text and "islands" not in text  # 5 rows
    text = builtins_for(FakeShell(s=df["revenue"]))["describe_variable"]("s")
    assert text.startswith("pandas.Series (shape 6), dtype float64\nhead:\n0    1.50\n")
    # other pandas values (no head) and non-pandas values with a dtype (no head) are shown by repr
    import numpy as np  # installed with pandas

    text = builtins_for(FakeShell(t=pd.Timestamp("2024-05-01")))["describe_variable"]("t")
    assert text == "pandas.Timestamp\nTimestamp('2024-05-01 00:00:00')"
    text = builtins_for(FakeShell(a=np.arange(3)))["describe_variable"]("a")
    assert text == "numpy.ndarray (shape 3)\narray([0, 1, 2])"


def test_read_file_is_bounded_and_text_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("hello\n" * 10_000)
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01" * 100)
    read = builtins_for(None)["read_file"]
    assert read("notes.txt", max_chars=12) == "hello\nhello\n\n[… file continues; 60,000 bytes in all]"
    assert len(read("notes.txt")) < 20_100
    assert read("notes.txt", max_chars=100_000).endswith("60,000 bytes in all]")  # the bound holds
    with pytest.raises(FileNotFoundError, match="missing.txt is not a file"):
        read("missing.txt")
    with pytest.raises(ValueError, match="binary"):
        read("blob.bin")


def test_read_file_stays_inside_the_notebook_folder(tmp_path, monkeypatch):
    """The model drives this tool: it must not reach ~/.ssh or /etc, nor escape by
    `..` or a symlink; files in subfolders are fine."""
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    (work / "data" / "a.txt").write_text("inside")
    (tmp_path / "secret.txt").write_text("outside")
    (work / "link.txt").symlink_to(tmp_path / "secret.txt")
    monkeypatch.chdir(work)
    read = builtins_for(None)["read_file"]
    assert read("data/a.txt") == "inside"
    for bad in ("../secret.txt", str(tmp_path / "secret.txt"), "link.txt", "/etc/passwd"):
        with pytest.raises(PermissionError, match="outside the notebook's folder"):
            read(bad)


# -- code execution: only behind the per-session opt-in ------------------------------------------
def test_run_python_exists_only_for_a_session_that_opted_in(ocw_shell, capsys):
    shell, rt = ocw_shell
    shell.run_cell_magic("chat", "", "hello")
    first = rt.current_session()
    reg = rt.tool_registry()
    assert "run_python" not in reg.active(builtins=True, session=first).tools()
    assert reg.active(builtins=False, session=first) is None  # nothing to offer
    shell.run_line_magic("ocw", "doctor")
    assert "no code execution (%ocw allow-code" in capsys.readouterr().out

    shell.run_line_magic("ocw", "allow-code")
    assert "Code execution is ON for session 'default'" in capsys.readouterr().out
    assert "run_python" in reg.active(builtins=False, session=first).tools()
    shell.run_line_magic("ocw", "doctor")
    assert "CODE EXECUTION IS ON for session 'default'" in capsys.readouterr().out
    shell.run_line_magic("ocw", "tools")
    out = capsys.readouterr().out
    assert "run_python(code) — Run Python code in the user's notebook kernel" in out
    assert "Code execution is ON for session 'default' (%ocw deny-code)." in out

    # The model runs code through it, in the user's namespace.
    shell.run_cell_magic("chat", "", 'please call run_python with code="total = 6 * 7; print(total); total + 1"')
    assert shell.user_ns["total"] == 42
    assert '→ ok: 42 43' in capsys.readouterr().out
    shell.run_cell_magic("chat", "", 'please call run_python with code="1 / 0"')
    assert "→ error: run_python raised RuntimeError: Traceback" in capsys.readouterr().out

    # A new session starts without it; the old one keeps it until deny-code.
    shell.run_line_magic("new", "")
    second = rt.current_session()
    assert second.id != first.id and "run_python" not in reg.active(builtins=True, session=second).tools()
    assert reg.code_execution_enabled(first)
    shell.run_line_magic("ocw", "deny-code")
    assert not reg.code_execution_enabled(second) and reg.code_execution_enabled(first)
    reg.enable_code_execution(False, session=first)
    assert not reg.code_execution_enabled(first)


def test_help_lists_the_opt_in_and_tools_lists_what_the_model_sees(ocw_shell, capsys):
    shell, rt = ocw_shell
    shell.run_line_magic("ocw", "help")
    out = capsys.readouterr().out
    assert "%ocw allow-code" in out and "%ocw deny-code" in out
    shell.run_line_magic("ocw", "tools")
    assert capsys.readouterr().out.startswith("No tools: register one with @ocw.tool")

    shell.run_cell('''
import ocw
@ocw.tool
def top_rows(table: str, n: int = 5) -> str:
    """The first n rows of a table in this notebook."""
    return table
''')
    shell.run_line_magic("config", "Ocw.tools = True")
    shell.run_line_magic("ocw", "tools")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Tools the model can call:"
    assert lines[1] == "  list_variables() — List the user's variables in this notebook: name, type, and shape or length."
    assert lines[2].startswith("  describe_variable(name) — Describe one variable of the notebook")
    assert lines[3].startswith("  read_file(path, max_chars?) — Read a text file")
    assert lines[4] == "  top_rows(table, n?) — The first n rows of a table in this notebook."
    assert lines[5] == ("Tool results over 4,000 tokens are cut in what the model reads (%config Ocw.tool_result_cap); "
                        "the store keeps them whole.")
    assert len(lines) == 6


# -- display and redaction -------------------------------------------------------------------------
def test_a_tool_call_shows_compactly_with_the_full_result_one_click_away(monkeypatch):
    monkeypatch.setenv("SERVICE_TOKEN", "tok-abcdef123456")
    c = call("read_file", {"path": "notes.txt", "token": "tok-abcdef123456"})
    r = {"type": "tool_result", "tool_use_id": "call_1", "is_error": False,
         "content": "first line\n" + "x" * 5000 + "\nlast line tok-abcdef123456"}
    with capture_output() as cap:
        report.show_tool_call(c, r, rich=True)
    (out,) = cap.outputs
    line = out.data["text/plain"]
    assert line.startswith('🔧 read_file({"path": "notes.txt", "token": "[redacted]"}) → ok: first line xxx')
    assert len(line) < 400
    html = out.data["text/html"]
    assert html.startswith('<details class="ocw-tool-call"><summary><code>🔧 read_file(')
    assert "last line [redacted]</pre></details>" in html and "x" * 5000 in html
    assert "tok-abcdef123456" not in line + html


def test_redact_hides_values_of_secret_looking_variables(monkeypatch):
    monkeypatch.setenv("MY_API_KEY", "sk-secret-zzz12345")
    monkeypatch.setenv("DB_PASSWORD", "hunter2-hunter2")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_0123456789")
    monkeypatch.setenv("HOME_DIR_NAME", "not-a-secret-value")
    text = "k=sk-secret-zzz12345 p=hunter2-hunter2 t=ghp_0123456789 h=not-a-secret-value"
    assert report.redact(text) == "k=[redacted] p=[redacted] t=[redacted] h=not-a-secret-value"


# -- pairing guard ---------------------------------------------------------------------------------
def test_a_call_or_result_left_alone_travels_as_text():
    use = {"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}}
    res = {"type": "tool_result", "tool_use_id": "c1", "content": "ok", "is_error": False}
    paired = [{"role": "user", "content": [{"type": "text", "text": "hi"}]},
              {"role": "assistant", "content": [use]}, {"role": "tool", "content": [res]}]
    assert unpaired_tool_blocks_as_text(paired) == paired
    lone_call = paired[:2] + [{"role": "user", "content": [{"type": "text", "text": "next"}]}]
    assert unpaired_tool_blocks_as_text(lone_call)[1]["content"] == [
        {"type": "text", "text": '[called f({"a": 1}); no result]'}]
    lone_result = [{"role": "llm", "name": "context/summary", "content": [{"type": "text", "text": "s"}]},
                   {"role": "tool", "content": [res]}]
    assert unpaired_tool_blocks_as_text(lone_result)[1]["content"] == [
        {"type": "text", "text": "[result of an earlier tool call] ok"}]


def test_moving_head_onto_a_lone_call_still_sends_a_valid_request(ocw_shell, refserver):
    shell, rt = ocw_shell
    cfg = rt.config
    cfg.provider, cfg.base_url, cfg.model, cfg.api_key = "openai", refserver.openai_url, "gpt-4o-mini", "sk-test"
    shell.run_cell("import ocw\n@ocw.tool\ndef ping() -> str:\n    'Ping.'\n    return 'pong'\n")
    refserver.script(tool_calls=[{"name": "ping", "input": {}}])
    refserver.script(text="pong it is")
    shell.run_cell_magic("chat", "", "ping please")
    s = rt.current_session()
    call_node = s.branch()[1]
    assert s.node(call_node)["content"][0]["type"] == "tool_use"
    shell.run_line_magic("rewind", "1")  # a turn is a user message: back to before it
    assert rt.current_session().head is None
    shell.run_line_magic("branch", call_node)  # HEAD onto the call, past its result
    refserver.script(text="fine")
    shell.run_cell_magic("chat", "", "and now?")
    msgs = refserver.requests[-1].messages
    assert not any(m["role"] == "tool" or m.get("tool_calls") for m in msgs)
    assert msgs[-2] == {"role": "assistant", "content": "[called ping({}); no result]"}


def test_a_tool_name_is_1_to_64_letters_digits_dashes_or_underscores():
    assert Tool(lambda: 1, name="f").name == "f"
    assert Tool(lambda: 1, name="a" * 64).name == "a" * 64
    for bad in ("", "a" * 65, "has space"):
        with pytest.raises(ToolError, match="must be"):
            Tool(lambda: 1, name=bad)  # "": the lambda's own name, <lambda>


def test_two_unknown_arguments_are_named_in_the_plural_and_no_tools_says_none(registry):
    res = registry.run(call("add", {"a": 1, "c": 2, "d": 3}))
    assert res["content"] == "bad arguments for add: unknown arguments 'c', 'd'; add takes a, b"
    ocw.conversation.tools._REGISTERED.clear()
    assert ToolRegistry().run(call("add"))["content"] == "unknown tool 'add'; available: none"


def test_a_bool_argument_an_optional_int_and_a_default_json_cannot_carry():
    marker = object()

    def f(flag: bool, n: int = None, tag: str = marker) -> str:  # noqa: B008
        "F."
        return f"{flag} {n}"

    t = Tool(f)
    assert t.input_schema["properties"]["flag"] == {"type": "boolean"}
    assert "default" not in t.input_schema["properties"]["tag"]  # an object no JSON can carry is not shown
    assert t.input_schema["properties"]["n"]["default"] is None
    assert t.check_arguments({"flag": True}) is None and t.check_arguments({"flag": False, "n": None}) is None
    assert t.check_arguments({"flag": "yes"}) == 'flag must be boolean, not "yes"'
    assert t.check_arguments({"flag": True, "n": "3"}) == 'n must be integer, not "3"'  # None is its default, "3" is not


def test_two_missing_arguments_are_named_in_the_plural():
    def f(a: int, b: int, c: int = 1) -> int:
        "F."
        return a

    assert Tool(f).check_arguments({}) == "missing required arguments 'a', 'b'"
    assert Tool(f).check_arguments({"b": 1}) == "missing required argument 'a'"
