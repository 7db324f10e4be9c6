"""Issue 29: commands users add (`@ocw.command`, the `ocw.commands` entry points) and
`/doctor --send`, in a real IPython shell on a real DuckDB file; the chat widget's side
through anywidget's own command dispatch (tests/widgets/test_chat_widget.py's `invoke`).
The same in a real kernel: tests/test_kernel.py; in JupyterLab:
tests/widgets/test_browser_chat_commands.py; the menu's browser side: js/test/chat_commands.test.js.
"""
from __future__ import annotations

import sys
import textwrap

import pytest
from IPython.core.error import UsageError

import ocw
from ocw.notebook import user_commands
from ocw.notebook.commands import COMMANDS, slash_menu
from ocw.notebook.magics import get_runtime

BUILTIN_SLASH = [e["name"] for e in slash_menu("en")]


@pytest.fixture(autouse=True)
def fresh_registry():
    user_commands.clear()
    yield
    user_commands.clear()


def cell(ip, code: str):
    return ip.run_cell(textwrap.dedent(code))


def define_hello(ip):
    r = cell(ip, '''
        import ocw
        from IPython.display import Markdown, HTML

        @ocw.command("hello", help="say hello", args="[NAME]")
        def hello(args):
            print("printed first")
            return f"hello {args or 'world'}"

        def table():
            """Markdown back: **bold** and a <script>alert(1)</script> that must stay text."""
            return Markdown("**bold** <script>alert(1)</script>")

        ocw.command("md", table)
        ocw.command("raw", lambda: HTML('<strong>ok</strong><img src=x onerror=alert(1)><script>alert(2)</script>'),
                    help="html back")
        ''')
    assert r.error_in_exec is None, r.error_in_exec


def test_an_added_command_is_listed_after_the_builtins_marked_and_runs_from_a_cell(ip, capsys):
    define_hello(ip)
    menu = slash_menu("en", user_commands.added())
    assert [e["name"] for e in menu] == BUILTIN_SLASH + ["hello", "md", "raw"]
    assert menu[-3] == {"name": "hello", "args": "[NAME]", "required": False, "help": "say hello",
                        "needs_session": False, "by": "added by this notebook"}
    assert menu[-2]["help"] == "Markdown back: **bold** and a <script>alert(1)</script> that must stay text."
    assert all("by" not in e for e in menu[:len(BUILTIN_SLASH)])
    capsys.readouterr()

    ip.run_line_magic("ocw", "commands")
    out = capsys.readouterr().out.splitlines()
    assert out[-3].startswith("/hello [NAME]") and out[-3].endswith("say hello [added by this notebook]")
    assert out[0].startswith("/compact") and out[0].endswith("[built in]")
    ip.run_line_magic("ocw", "help")
    out = capsys.readouterr().out.splitlines()
    assert out[len(COMMANDS)].startswith("/hello [NAME]") and out[len(COMMANDS)].endswith("(added by this notebook)")
    assert out[len(COMMANDS) - 1].startswith("%ocw deny-code")

    ip.run_line_magic("ocw", "run hello Ada")
    assert capsys.readouterr().out == "printed first\nhello Ada\n"
    ip.run_line_magic("ocw", "run /hello")  # the slash may be typed too
    assert capsys.readouterr().out == "printed first\nhello world\n"


def test_output_html_is_sanitized_markdown_is_rendered_safely_and_secrets_are_redacted(ip, monkeypatch):
    define_hello(ip)
    md = user_commands.run("md")
    assert md.html == "<p><strong>bold</strong> &lt;script&gt;alert(1)&lt;/script&gt;</p>\n"
    raw = user_commands.run("raw")
    assert "<strong>ok</strong>" in raw.html and "script" not in raw.html and "onerror" not in raw.html
    assert raw.text == "ok"
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-0123456789-secret")
    ocw.command("leak", lambda: print("token is tok-0123456789-secret") or "again tok-0123456789-secret")
    said = user_commands.run("leak")
    assert "tok-0123456789-secret" not in said.text and said.text.count("[redacted]") == 2


def test_a_command_that_raises_is_one_line_and_nothing_else(ip, capsys):
    r = cell(ip, '''
        import ocw
        @ocw.command("boom")
        def boom(args):
            raise ValueError("the table\\nis missing")
        ''')
    assert r.error_in_exec is None
    capsys.readouterr()
    r = cell(ip, "%ocw run boom now")
    assert isinstance(r.error_in_exec, UsageError)
    captured = capsys.readouterr()
    said = (captured.out + captured.err).strip()
    assert said == "UsageError: /boom failed: ValueError: the table is missing", said
    assert "Traceback" not in said


def test_a_builtins_name_runs_the_builtin_shows_once_and_is_told_once(ip, capsys):
    r = cell(ip, '''
        import ocw
        @ocw.command("compact", help="my own compact")
        def my_compact():
            return "MINE RAN"
        ''')
    assert r.error_in_exec is None
    err = capsys.readouterr().err
    assert err.count("/compact is a built-in command: the built-in runs, not the /compact added by this "
                     "notebook. Register yours under another name.") == 1
    menu = slash_menu("en", user_commands.added())
    assert [e["name"] for e in menu].count("compact") == 1
    assert next(e for e in menu if e["name"] == "compact")["help"].startswith("fold older turns")
    # The built-in runs (with no session it says so); the added one never does.
    ip.run_line_magic("ocw", "run compact")
    out = capsys.readouterr().out
    assert out.strip() == "Start a conversation first" and "MINE RAN" not in out
    # Told once: registering it again, %ocw help and %ocw commands say nothing more of it.
    cell(ip, 'ocw.command("compact", my_compact)')
    ip.run_line_magic("ocw", "help")
    ip.run_line_magic("ocw", "commands")
    captured = capsys.readouterr()
    assert "is a built-in command" not in captured.out + captured.err


@pytest.mark.parametrize("bad", ["two words", "", "1st", "x" * 41, "a/b"])
def test_a_bad_name_is_one_line_and_registers_nothing(ip, bad):
    with pytest.raises(UsageError, match="A command name is a letter followed by"):
        ocw.command(bad, lambda: "x")
    assert user_commands.added() == []


def test_longest_name_is_40_characters(ip):
    ocw.command("x" * 40, lambda: "ok")
    assert user_commands.run("x" * 40).text == "ok"


def test_an_entry_point_command_of_an_installed_package(ip, tmp_path, monkeypatch, capsys):
    pkg = tmp_path / "site"
    pkg.mkdir()
    (pkg / "ocw_demo_cmds.py").write_text(textwrap.dedent('''
        def stats(args):
            """Row counts of the demo tables."""
            return f"3 tables {args}".strip()
        stats.ocw_args = "[TABLE]"

        def compact():
            return "the package's compact"
        '''))
    info = pkg / "ocw_demo_cmds-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ocw-demo-cmds\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[ocw.commands]\nstats = ocw_demo_cmds:stats\ncompact = ocw_demo_cmds:compact\n"
        "broken = ocw_demo_cmds:missing\n")
    monkeypatch.syspath_prepend(str(pkg))
    monkeypatch.delitem(sys.modules, "ocw_demo_cmds", raising=False)
    user_commands.clear()

    added = user_commands.added()
    assert [(c.name, c.help, c.args, c.who) for c in added] == [
        ("stats", "Row counts of the demo tables.", "[TABLE]", "ocw-demo-cmds")]
    assert slash_menu("en", added)[-1]["by"] == "added by ocw-demo-cmds"
    assert slash_menu("zh", added)[-1]["by"] == "由 ocw-demo-cmds 添加"
    ip.run_line_magic("ocw", "run stats orders")
    captured = capsys.readouterr()
    assert captured.out.endswith("3 tables orders\n")
    # Told once, where the commands were first listed: the shadowed /compact, the broken one.
    assert "/compact is a built-in command: the built-in runs, not the /compact added by ocw-demo-cmds." \
        in captured.out
    assert "The command /broken of package ocw-demo-cmds could not be loaded (AttributeError" in captured.out
    ip.run_line_magic("ocw", "commands")
    assert "could not be loaded" not in capsys.readouterr().out


def test_doctor_offers_to_send_and_sends_the_report_as_a_normal_turn(oip, openai_env, dummy_key, capsys):
    refserver = openai_env
    r = cell(oip, "%ocw doctor --send")
    assert r.error_in_exec is None
    assert capsys.readouterr().out.strip() == "Start a conversation first"
    assert refserver.requests == []  # with no session nothing is sent
    cell(oip, "%%chat\nhello there")
    rt = get_runtime()
    s = rt.current_session()
    stored = s.node(s.head)["depth"]
    capsys.readouterr()
    cell(oip, "%ocw doctor")
    out = capsys.readouterr().out
    assert out.rstrip().endswith("To ask the model about this report: /doctor --send in the chat widget, "
                                 "%ocw doctor --send in a cell (secrets removed).")
    before = len(refserver.requests)
    r = cell(oip, "%ocw doctor --send")
    assert r.error_in_exec is None, r.error_in_exec
    assert len(refserver.requests) == before + 1
    sent = refserver.requests[-1].messages[-1]
    assert sent["role"] == "user" and sent["content"].startswith("ocw doctor\n  provider:      openai")
    assert "To ask the model" not in sent["content"] and dummy_key not in sent["content"]
    s = rt.current_session()
    assert s.node(s.head)["depth"] == stored + 2  # a normal turn: the report and the reply, stored
    assert capsys.readouterr().out.count("echo: ocw doctor") == 1  # the reply streamed below



def test_shortest_name_is_one_letter(ip):
    ocw.command("x", lambda: "ok")
    assert user_commands.run("x").text == "ok"


def test_the_menu_waits_for_an_argument_only_when_the_command_says_so(ip):
    ocw.command("plain", lambda: "ok")
    user_commands.add("bare", lambda: "ok", who="somepkg")  # as a package's entry point is added
    user_commands.command("direct", lambda: "ok")  # the module's own entry, behind ocw.command

    @ocw.command("needs", args="TEXT", required=True)
    def needs(args):
        return args

    menu = {e["name"]: e for e in slash_menu("en", user_commands.added())}
    assert menu["plain"]["required"] is False and menu["bare"]["required"] is False
    assert menu["direct"]["required"] is False
    assert menu["needs"]["required"] is True


@pytest.mark.parametrize("size, said", [(300, "ValueError: " + "y" * 288), (301, "ValueError: " + "y" * 287 + "…")])
def test_a_failures_line_is_cut_at_300_characters(ip, capsys, size, said):
    """`ValueError: ` and the message: 300 characters shown whole, 301 cut to 299 and a mark."""
    def boom():
        raise ValueError("y" * (size - len("ValueError: ")))

    ocw.command("boom", boom)
    with pytest.raises(UsageError) as e:
        ip.run_line_magic("ocw", "run boom")
    assert str(e.value) == f"/boom failed: {said}"


def test_running_a_name_nobody_added_says_so_in_the_users_language(ip):
    with pytest.raises(ocw.OcwError) as e:
        user_commands.run("nosuch")
    assert e.value.user_message().startswith("There is no command /nosuch: %ocw commands lists them.")
    with pytest.raises(ocw.OcwError) as e:
        user_commands.run("nosuch", lang="zh")
    assert e.value.user_message().startswith("没有命令 /nosuch：%ocw commands 会列出所有命令。")


def test_markdown_given_with_its_metadata_shows_the_markdown(ip):
    class Note:
        def _repr_markdown_(self):
            return "**kept**", {"isolated": True}  # IPython's (data, metadata) form

    ocw.command("note", lambda: Note())
    res = user_commands.run("note")
    assert res.text == "**kept**" and "<strong>kept</strong>" in res.html
