"""The one table of ocw's commands: magics, `%ocw help`, and the chat widget's slash menu.

Every place that lists or dispatches a command reads this table, so the help,
the menu and the magics cannot drift (seed 004: the slash commands that drive
compaction). A command's `required` says whether it needs an argument: the
slash menu runs an optional-argument command on selection or Enter, and fills
the prefix and waits for one that needs its argument. A command's magic and
its slash command both run its one action (ocw/notebook/actions.py, keyed by
these names), so both say and do the same thing (tests/widgets/test_chat_widget.py
checks that every command has its action and its magic).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ocw.text.i18n import normalize_lang


@dataclass(frozen=True)
class Command:
    name: str  # the key, and the slash name (/compact)
    usage: str  # how it is typed in a notebook
    help: dict[str, str]  # what it does, per language
    args: str = ""  # its arguments, as the slash menu shows them
    required: bool = False  # an argument is required (the menu fills the prefix and waits)
    slash: bool = True  # offered in the chat widget's slash menu
    aliases: tuple[str, ...] = field(default=())  # other slash names (the seed's /clear is /new)
    needs_session: bool = False  # with no session the widget says "Start a conversation first"


COMMANDS: tuple[Command, ...] = (
    Command("chat", "%%chat [--session NAME] [--new] [--model M] [--provider P] [--tools]",
            {"en": "send the cell to the model; the reply streams below. Outside code, {name}, {In[n]}, {Out[n]} "
                   "and {Err} bring in a variable, a cell's source or result, the last error ({{ }}: literal braces)",
             "zh": "把单元格内容发送给模型；回复在下方流式显示。代码之外，{name}、{In[n]}、{Out[n]}、{Err} "
                   "分别引入变量、单元格源码或结果、最近的错误（{{ }} 表示字面花括号）"}, slash=False),
    Command("compact", "%compact [keep_recent_tokens] [-- what to keep] | --undo",
            {"en": "fold older turns into the rolling summary now; after --, what the summary must keep; "
                   "--undo: the newest summary stops being used and the one before it is again (nothing deleted)",
             "zh": "立即把较早的对话折叠进滚动摘要；-- 之后写明摘要必须保留的内容；"
                   "--undo：停用最新的摘要，恢复使用前一个（不删除任何内容）"},
            args="[keep_recent_tokens] [-- what to keep] | --undo", needs_session=True),
    Command("summary", "%summary [--all]",
            {"en": "the active summary, what it covers, when and by which trigger it was made, the compactions so far "
                   "(--all: superseded summaries too)",
             "zh": "当前摘要、覆盖范围、生成时间与触发方式，以及历次压缩（--all：也列出已被取代的摘要）"},
            args="[--all]", needs_session=True),
    Command("context", "%context [--text]",
            {"en": "show the occupancy ring and breakdown panel (text table with --text)",
             "zh": "显示上下文占用圆环和明细面板（--text 显示文本表格）"}),
    Command("rewind", "%rewind [N | node_id]",
            {"en": "move HEAD back N turns (default 1) or to a node; the next %%chat forks",
             "zh": "把 HEAD 回退 N 轮（默认 1）或到某个节点；下一次 %%chat 会分叉"}, args="[N | node_id]",
            needs_session=True),
    Command("branch", "%branch [node_id]",
            {"en": "list the branches, or switch HEAD to one",
             "zh": "列出分支，或把 HEAD 切换到某个分支"}, args="[node_id]", needs_session=True),
    Command("new", "%new [--name NAME] [--from-summary [N]]",
            {"en": "start a fresh session for this notebook (the old one is kept); --from-summary: seeded with the "
                   "current one's summary, memory and last N turns (default 2), linked to it",
             "zh": "为此笔记本开始一个新会话（旧会话会保留）；--from-summary：以当前会话的摘要、记忆和最近 N 轮对话"
                   "（默认 2）开始，并与其关联"}, args="[--name NAME] [--from-summary [N]]", aliases=("clear",)),
    Command("sessions", "%sessions [--delete NAME [--yes] | --share NAME ROLE | --unshare NAME ROLE]",
            {"en": "list sessions with size and last use; --delete NAME says what it would delete, --yes deletes "
                   "the session and everything of it; --share NAME ROLE lets a database role see and continue it "
                   "(team database), --unshare takes that back",
             "zh": "列出会话及其大小和最近使用时间；--delete NAME 说明将删除的内容，加 --yes 则删除该会话及其全部内容；"
                   "--share NAME ROLE 让某个数据库角色查看并继续该会话（团队数据库），--unshare 撤销共享"},
            args="[--delete NAME [--yes] | --share NAME ROLE | --unshare NAME ROLE]"),
    Command("export", "%ocw export [--format md|json] [PATH]",
            {"en": "write the branch as Markdown (summaries marked) or the whole session as JSON; default: beside "
                   "the notebook",
             "zh": "把当前分支导出为 Markdown（标出摘要）或把整个会话导出为 JSON；默认保存在笔记本旁边"},
            args="[--format md|json] [PATH]", needs_session=True),
    Command("session", "%session NAME",
            {"en": "continue another stored session (by name or id) from now on",
             "zh": "从现在起继续另一个已保存的会话（按名称或 id）"}, args="NAME", required=True),
    Command("chat-widget", "%chat",
            {"en": "the chat widget for the current session: conversation, graph, slash commands, ring "
                   "(also ocw.chat())",
             "zh": "当前会话的聊天组件：对话、分支图、斜杠命令、圆环（也可用 ocw.chat()）"}, slash=False),
    Command("pin", "%pin TEXT | %pin {name}",
            {"en": "pin text, or a variable's value as it is now: the model reads it verbatim with every request, "
                   "after every compaction (its own row in the panel)",
             "zh": "固定一段文字，或变量当前的值：每次请求、每次压缩之后模型都会逐字读取它（面板中单独一行）"},
            args="TEXT | {name}", required=True),
    Command("pins", "%pins",
            {"en": "the pins, numbered, with their time and size",
             "zh": "列出已固定的内容（编号、时间和大小）"}),
    Command("unpin", "%unpin N",
            {"en": "take pin N out of what the model reads (recorded, nothing is deleted)",
             "zh": "把第 N 个固定从模型读取的内容中移除（会被记录，不删除任何内容）"}, args="N", required=True),
    Command("memory", "%memory [--all] [--forget N]",
            {"en": "the session memory (its sections, each item with its turn) and the pins; --forget N: the model "
                   "no longer reads item N; --all: what was forgotten too",
             "zh": "会话记忆（按部分列出，每项注明轮次）和固定内容；--forget N：模型不再读取第 N 项；--all：也列出已遗忘的项"},
            args="[--all] [--forget N]"),
    Command("help", "%ocw help", {"en": "this list", "zh": "本列表"}),
    Command("commands", "%ocw commands",
            {"en": "every slash command: the built-ins, then those added (@ocw.command, installed packages) "
                   "and by whom",
             "zh": "所有斜杠命令：先是内置命令，再是添加的命令（@ocw.command、已安装的软件包）及其添加者"},
            slash=False),  # the slash menu is this list already
    Command("run", "%ocw run NAME [ARGS]",
            {"en": "run a slash command in a cell (an added one too): its output shows below",
             "zh": "在单元格中运行一个斜杠命令（包括添加的命令）：输出显示在下方"}, slash=False),
    Command("doctor", "%ocw doctor [--send]",
            {"en": "provider, key present or not, base URL reachability, tokenizer, database, versions; --send: "
                   "send the report (secrets removed) to the model as your message",
             "zh": "服务商、密钥是否存在、基础 URL 是否可达、分词器、数据库、版本；--send：把报告（已移除密钥）"
                   "作为你的消息发送给模型"}, args="[--send]"),
    Command("tools", "%ocw tools", {"en": "the tools the model can call", "zh": "模型可以调用的工具"}, slash=False),
    Command("allow-code", "%ocw allow-code",
            {"en": "let the model run Python in this kernel (run_python), for the current session only",
             "zh": "允许模型在此内核中运行 Python（run_python），仅限当前会话"}, slash=False),
    Command("retry-save", "%ocw retry-save",
            {"en": "store the reply a failed write left on screen only (a full disk, a lock wait, a lost connection)",
             "zh": "保存因写入失败（磁盘已满、等待锁超时、连接中断）而仅显示在屏幕上的回复"}, slash=False),
    Command("deny-code", "%ocw deny-code",
            {"en": "take that back (a new session or a restarted kernel starts without it)",
             "zh": "撤销上述许可（新会话或重启的内核默认不允许）"}, slash=False),
)

BY_NAME = {c.name: c for c in COMMANDS} | {a: c for c in COMMANDS for a in c.aliases}


def _added_rows(added, lang: str) -> list[tuple[str, str]]:
    """(usage, help) of each added command (ocw/notebook/user_commands.py), after the built-ins."""
    return [(f"/{c.name}{' ' + c.args if c.args else ''}", f"{c.help} ({c.by(lang)})".lstrip()) for c in added]


def help_lines(lang: str | None, added=()) -> list[str]:
    """`%ocw help`: one line per command, usage then what it does; the added ones last."""
    lang = normalize_lang(lang)
    rows = [(c.usage, c.help[lang]) for c in COMMANDS] + _added_rows(added, lang)
    width = max(len(u) for u, _ in rows)
    return [f"{u.ljust(width)}  {h}" for u, h in rows]


NBSP = "\u00a0"


def help_html(lang: str | None, added=()) -> str:
    """`%ocw help` in a notebook: a table, so a narrow output wraps the help between
    words while each usage stays on one line (JupyterLab breaks long plain-text lines
    anywhere, mid-word included)."""
    import html

    lang = normalize_lang(lang)
    # No-break spaces keep a usage on one line (the sanitizer keeps no style attribute).
    rows = "".join(f"<tr><td><code>{html.escape(u).replace(' ', NBSP)}</code></td>"
                   f"<td>{html.escape(h)}</td></tr>"
                   for u, h in [(c.usage, c.help[lang]) for c in COMMANDS] + _added_rows(added, lang))
    return f"<table><tbody>{rows}</tbody></table>"


def slash_menu(lang: str | None, added=()) -> list[dict]:
    """The chat widget's slash menu: name, arguments, whether one is required, help; then
    the added commands (which no built-in shadows), each marked `by` who added it."""
    lang = normalize_lang(lang)
    out = []
    for c in COMMANDS:
        if c.slash:
            for name in (c.name, *c.aliases):
                out.append({"name": name, "args": c.args, "required": c.required, "help": c.help[lang],
                            "needs_session": c.needs_session})
    taken = {e["name"] for e in out}
    for c in added:
        if c.name not in taken:
            taken.add(c.name)
            out.append({"name": c.name, "args": c.args, "required": c.required, "help": c.help,
                        "needs_session": False, "by": c.by(lang)})
    return out
