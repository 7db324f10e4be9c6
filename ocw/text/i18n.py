"""System-message texts (DESIGN.md §4), English and Chinese.

One function turns a compaction event into its text, so manual and automatic
compaction — and the panel — always say the same thing.
"""
from __future__ import annotations

MESSAGES = {
    "en": {
        "started": "Compacting context…",
        "finished": "Context compacted: covered {n} older message{s}, {before} → {after} tokens",
        "failed": "Context compaction failed",
        "failed_error": "Context compaction failed: {error}",
        "no_op": "Context is already compacted; no older messages to fold.",
        "no_op_short": "Nothing to compact yet: the conversation has fewer than 4 messages.",
        "no_op_tail": "Nothing to compact yet: the whole conversation fits in the recent part that compaction keeps.",
        "no_session": "Start a conversation first",
        "session_deleted": "Session {name!r} was deleted; the next message starts a new session.",
        "shared": "Shared session {name!r} with database role {role}: it sees and continues it from now on.",
        "unshared": "Session {name!r} is no longer shared with {role}.",
        "already_shared": "Session {name!r} was already shared with {role}; nothing changed.",
        "not_shared": "Session {name!r} was not shared with {role}; nothing changed.",
        "window_learned": "The model's context window is {window} tokens ({source}); ocw plans with it from now on "
                          "(it assumed {before}).",
        "source_overflow": "stated in the server's error",
        "no_usage": "The server sends no token usage with its replies; the ring shows ocw's estimates.",
        "message_too_big": "This message alone is about {tokens} tokens, more than the model's window of {window} "
                           "tokens can take",
        "message_too_big_hint": "shorten it, or split it over several %%chat cells",
        "still_too_long": "The request is still too long for the model (its window is {window} tokens) after "
                          "compacting once this turn",
        "still_too_long_hint": "keep less with %compact {keep}, or start a new session with %new",
        "auto_paused": "Automatic compaction is paused for this session after 3 failures in a row; %compact still works.",
        "refused_off": "The server refused the request as too long (its window is {window} tokens); nothing was "
                       "stored or compacted: recovery is off (Ocw.reactive_compact = 'off')",
        "refused_off_hint": "fold older messages with %compact (or keep less: %compact {keep}), or start over with %new; "
                            "%config Ocw.reactive_compact = 'auto' recovers by itself",
        "refused_ask": "The server refused the request as too long (its window is {window} tokens); nothing was "
                       "stored or compacted (Ocw.reactive_compact = 'ask')",
        "refused_ask_hint": "compact now with %compact (or keep less: %compact {keep}) and run this cell again, "
                            "or start over with %new",
        "memory_fallback": "The summarizer's session memory did not parse; ocw's own memory pass was used.",
        "structural_summary": "The summarizer's window ({window} tokens) has no room for a model-written summary; "
                              "a structural summary (no model call) was used.",
        "structural_small": "Too little was older than the kept part for a model-written summary to come out "
                            "smaller; a structural summary (no model call) was used.",
        "status_auto_paused": "auto-compact paused (%compact works)",
        "status_reactive_off": "overflow recovery off",
        "cal_samples": "{n} samples",  # the %context table: what the calibration rests on
        # Issue 23: figures of what was sent, usage that cannot be right.
        "status_left_out": "{n} older message{s} left out",
        "usage_unverified": "{n} usage report{s} below what the request holds: unverified, not used "
                            "(a gateway's own count?)",
        "snipped": "The request was still over the window after compaction; {n} older message{s} left out of this "
                   "request only (still kept in the session).",
        "snipped_uncompacted": "The request was over the window and nothing was compacted this turn; {n} older "
                               "message{s} left out of this request only (still kept in the session; %compact folds "
                               "them into the summary).",
        "busy": "A compaction is already running for this session; wait for it to finish.",
        # Compaction failure reasons in ocw's own words (quoted by "failed_error").
        "err_summarizer_window": "the summarizer's window ({window} tokens) is too small to summarize anything",
        "err_empty_summary": "the summarizer returned an empty summary",
        "err_not_smaller": "the summary ({new} tokens) is not smaller than what it replaces ({old} tokens); "
                           "nothing was saved",
        "err_interrupted": "interrupted; nothing was saved",
        "step_limit": "Stopped after {n} tool step{s} (the limit, %config Ocw.max_tool_steps = {limit}); "
                      "the calls and results are saved, ask again to continue.",
        "unsaved_hint": "the reply above was not stored; %ocw retry-save stores it once the database can be "
                        "written again (until the session moves on or the kernel restarts)",
        "retry_saved": "Stored the reply that had not been saved ({n} messages) in session {name!r}.",
        "retry_nothing": "Nothing waits to be stored: every reply of this kernel was saved.",
        # The quiet line after each %%chat reply (%config Ocw.status_line = False turns it off).
        "status_line": "context {pct} % · {used} / {window} · {auto} · {count}",
        "status_auto": "auto-compact at {pct} %",
        "status_auto_off": "auto-compact off",
        "status_count": "{n} compaction{s}",
        "status_pruned": "old tool output pruned",
        "pruned": "Pruned old tool output: {n} result{s} replaced by one-line stubs (the store keeps them whole), "
                  "{before} → {after} tokens",
        # Commands users add (ocw/notebook/user_commands.py) and /doctor --send.
        "cmd_bad_name": "A command name is a letter followed by letters, digits, - or _ (at most 40), got {name!r}: "
                        "e.g. @ocw.command(\"hello\")",
        "cmd_not_callable": "ocw.command({name!r}, fn): fn must be a function, got {kind}",
        "cmd_shadowed": "/{name} is a built-in command: the built-in runs, not the /{name} added by {who}. "
                        "Register yours under another name.",
        "cmd_replaced": "/{name} (added by {old}) is now the one added by {who}.",
        "cmd_load_failed": "The command /{name} of package {who} could not be loaded ({error}); the others work.",
        "cmd_failed": "/{name} failed: {error}",
        "cmd_unknown": "There is no command /{name}: %ocw commands lists them.",
        "cmd_added_by": "added by {who}",
        "cmd_builtin": "built in",
        "cmd_this_notebook": "this notebook",
        "cmd_none_added": "No added commands yet: @ocw.command(\"name\") on a function adds one (run it with "
                          "/name in the chat widget or %ocw run name in a cell).",
        "doctor_offer": "To ask the model about this report: /doctor --send in the chat widget, "
                        "%ocw doctor --send in a cell (secrets removed).",
        "doctor_sent": "Sending the doctor report to the model as your message (secrets removed).",
        # %compact --undo (ocw/conversation/undo.py)
        # progress while compacting (ocw/notebook/progress.py, the ring, the chat widget)
        "progress": "Compacting… {call} of {calls} · {elapsed} s",
        "compact_stopped": "Compaction stopped: nothing was saved; the session is as it was",
        "compact_stopped_hint": "run %compact again when you want it",
        # compaction hooks (ocw/conversation/hooks.py)
        "no_op_vetoed": "Compaction skipped: a pre_compact hook vetoed it ({reason}).",
        "hook_error": "{event} hook {name} raised {error}; it was skipped",
        # %new --from-summary (ocw/conversation/continue_from.py)
        "from_summary_note": "This conversation continues session {name!r}. What it had established:",
        "from_summary_done": "New session {name!r} continues {origin!r}: {what}; model {model}, window {window} tokens, "
                             "{tokens} tokens to start with.",
        "from_summary_summary": "its active summary and memory",
        "from_summary_no_summary": "no summary (none was active there)",
        "from_summary_turns": "the last {n} turn{s}",
        "from_summary_pins": "{n} pin{s}",
        "from_summary_nothing": "Nothing to continue from: session {name!r} has no summary and no turns yet",
        "from_summary_nothing_hint": "chat first, or start afresh with %new",
        "undo_nothing": "Nothing to undo: no summary is active on this branch",
        "undo_nothing_hint": "%summary --all lists every summary; %compact folds older turns again",
        "undo_done_prev": "Undid compaction {summary}: summary {active} is active again, {before} → {after} tokens "
                          "(nothing deleted; compactions so far: {count}, {undone} undone).",
        "undo_done_none": "Undid compaction {summary}: no summary is active now, the whole branch is read again, "
                          "{before} → {after} tokens (nothing deleted; compactions so far: {count}, {undone} undone).",
    },
    "zh": {
        "started": "正在压缩上下文…",
        "finished": "上下文已压缩：覆盖了 {n} 条较早的消息，{before} → {after} tokens",
        "failed": "上下文压缩失败",
        "failed_error": "上下文压缩失败：{error}",
        "no_op": "当前上下文已是压缩状态，没有可压缩的旧消息。",
        "no_op_short": "暂无可压缩的内容：对话还不到 4 条消息。",
        "no_op_tail": "暂无可压缩的内容：整个对话都在压缩时保留的最近部分之内。",
        "no_session": "请先开始对话",
        "session_deleted": "会话 {name!r} 已删除；下一条消息将开始一个新会话。",
        "shared": "已将会话 {name!r} 共享给数据库角色 {role}：从现在起它可以查看并继续该会话。",
        "unshared": "会话 {name!r} 不再共享给 {role}。",
        "already_shared": "会话 {name!r} 已共享给 {role}；没有变化。",
        "not_shared": "会话 {name!r} 没有共享给 {role}；没有变化。",
        "window_learned": "模型的上下文窗口为 {window} tokens（{source}）；ocw 今后按此规划（此前假定为 {before}）。",
        "source_overflow": "服务器错误信息中给出",
        "no_usage": "服务器的回复不包含 token 用量；圆环显示的是 ocw 的估算。",
        "message_too_big": "仅这一条消息就约有 {tokens} tokens，超过了模型 {window} tokens 的窗口",
        "message_too_big_hint": "请缩短它，或拆分到多个 %%chat 单元格中",
        "still_too_long": "本轮压缩一次之后，请求对模型来说仍然太长（其窗口为 {window} tokens）",
        "still_too_long_hint": "用 %compact {keep} 保留更少内容，或用 %new 开始新会话",
        "auto_paused": "本会话的自动压缩已连续失败 3 次，现已暂停；仍可使用 %compact。",
        "refused_off": "服务器以请求过长为由拒绝了它（其窗口为 {window} tokens）；未保存也未压缩任何内容：溢出恢复已关闭"
                       "（Ocw.reactive_compact = 'off'）",
        "refused_off_hint": "用 %compact 折叠较早的消息（或用 %compact {keep} 保留更少），或用 %new 重新开始；"
                            "%config Ocw.reactive_compact = 'auto' 可自动恢复",
        "refused_ask": "服务器以请求过长为由拒绝了它（其窗口为 {window} tokens）；未保存也未压缩任何内容"
                       "（Ocw.reactive_compact = 'ask'）",
        "refused_ask_hint": "现在用 %compact 压缩（或用 %compact {keep} 保留更少）后重新运行本单元格，或用 %new 重新开始",
        "memory_fallback": "摘要模型返回的会话记忆无法解析；已改用 ocw 自己的记忆提取。",
        "structural_summary": "摘要模型的窗口（{window} tokens）容不下模型撰写的摘要；已改用结构化摘要（不调用模型）。",
        "structural_small": "保留部分之前的内容太少，模型撰写的摘要无法更小；已改用结构化摘要（不调用模型）。",
        "status_auto_paused": "自动压缩已暂停（%compact 仍可用）",
        "status_reactive_off": "溢出恢复已关闭",
        "cal_samples": "{n} 个样本",
        "status_left_out": "{n} 条较早的消息未发送",
        "usage_unverified": "{n} 次用量报告低于请求实际包含的内容：未经核实，未采用（可能是网关自己的计数）",
        "snipped": "压缩后请求仍超出窗口；本次请求省略了 {n} 条较早的消息（会话中仍保留）。",
        "snipped_uncompacted": "请求超出窗口，且本轮没有进行压缩；本次请求省略了 {n} 条较早的消息"
                               "（会话中仍保留；%compact 可将其折叠进摘要）。",
        "busy": "本会话已有压缩正在进行，请等待其完成。",
        "err_summarizer_window": "摘要模型的窗口（{window} tokens）太小，无法生成摘要",
        "err_empty_summary": "摘要模型返回了空摘要",
        "err_not_smaller": "摘要（{new} tokens）不比它替代的内容（{old} tokens）小；未保存任何内容",
        "err_interrupted": "已中断；未保存任何内容",
        "step_limit": "已执行 {n} 步工具调用，达到上限（%config Ocw.max_tool_steps = {limit}）；调用与结果已保存，可继续提问。",
        "unsaved_hint": "上面的回复未能保存；数据库可写后运行 %ocw retry-save 即可保存（在会话继续之前或内核重启之前有效）",
        "retry_saved": "已保存先前未能保存的回复（{n} 条消息），会话 {name!r}。",
        "retry_nothing": "没有待保存的内容：此内核的每条回复都已保存。",
        "status_line": "上下文 {pct} % · {used} / {window} · {auto} · {count}",
        "status_auto": "{pct} % 时自动压缩",
        "status_auto_off": "自动压缩已关闭",
        "status_count": "已压缩 {n} 次",
        "status_pruned": "旧工具输出已精简",
        "pruned": "已精简旧的工具输出：{n} 个结果替换为一行摘要（存储中仍完整保留），{before} → {after} tokens",
        "cmd_bad_name": "命令名须以字母开头，后接字母、数字、- 或 _（最多 40 个），收到 {name!r}：例如 @ocw.command(\"hello\")",
        "cmd_not_callable": "ocw.command({name!r}, fn)：fn 必须是函数，收到 {kind}",
        "cmd_shadowed": "/{name} 是内置命令：运行的是内置命令，而不是 {who} 添加的 /{name}。请换一个名字注册。",
        "cmd_replaced": "/{name}（由 {old} 添加）现在是 {who} 添加的那个。",
        "cmd_load_failed": "无法加载软件包 {who} 的命令 /{name}（{error}）；其他命令照常可用。",
        "cmd_failed": "/{name} 失败：{error}",
        "cmd_unknown": "没有命令 /{name}：%ocw commands 会列出所有命令。",
        "cmd_added_by": "由 {who} 添加",
        "cmd_builtin": "内置",
        "cmd_this_notebook": "此笔记本",
        "cmd_none_added": "还没有添加的命令：在函数上使用 @ocw.command(\"name\") 即可添加（在聊天组件中用 /name，"
                          "在单元格中用 %ocw run name 运行）。",
        "doctor_offer": "想让模型看看这份报告：在聊天组件中输入 /doctor --send，在单元格中运行 %ocw doctor --send（密钥已移除）。",
        "doctor_sent": "正在把诊断报告作为你的消息发送给模型（密钥已移除）。",
        "progress": "正在压缩… 第 {call} / {calls} 步 · {elapsed} 秒",
        "compact_stopped": "压缩已停止：未保存任何内容，会话保持原样",
        "compact_stopped_hint": "需要时再次运行 %compact",
        "no_op_vetoed": "已跳过压缩：pre_compact 钩子否决了它（{reason}）。",
        "hook_error": "{event} 钩子 {name} 抛出了 {error}；已跳过",
        "from_summary_note": "此对话延续会话 {name!r}。此前已确立的内容：",
        "from_summary_done": "新会话 {name!r} 延续 {origin!r}：{what}；模型 {model}，窗口 {window} tokens，起始 {tokens} tokens。",
        "from_summary_summary": "其当前摘要与记忆",
        "from_summary_no_summary": "无摘要（原会话没有生效的摘要）",
        "from_summary_turns": "最近 {n} 轮对话",
        "from_summary_pins": "{n} 条固定内容",
        "from_summary_nothing": "无可延续的内容：会话 {name!r} 还没有摘要，也没有对话",
        "from_summary_nothing_hint": "先进行对话，或用 %new 重新开始",
        "undo_nothing": "没有可撤销的压缩：此分支上没有生效的摘要",
        "undo_nothing_hint": "%summary --all 列出所有摘要；%compact 可再次折叠较早的对话",
        "undo_done_prev": "已撤销压缩 {summary}：摘要 {active} 重新生效，{before} → {after} tokens"
                          "（未删除任何内容；累计压缩 {count} 次，其中 {undone} 次已撤销）。",
        "undo_done_none": "已撤销压缩 {summary}：当前没有生效的摘要，模型重新读取整个分支，{before} → {after} tokens"
                          "（未删除任何内容；累计压缩 {count} 次，其中 {undone} 次已撤销）。",
    },
}


def normalize_lang(lang: str | None) -> str:
    lang = (lang or "en").lower()
    return "zh" if lang.startswith("zh") else "en"


def text(key: str, lang: str | None = None, **kw) -> str:
    return MESSAGES[normalize_lang(lang)][key].format(**kw)


def system_message(event: str, payload: dict | None = None, lang: str | None = None) -> str:
    """The system message for a compaction event: started, finished (or no-op), failed —
    then one line per compaction hook that raised (it was skipped; the compaction went on)."""
    payload = payload or {}
    said = _system_message(event, payload, lang)
    hook_lines = [text("hook_error", lang, event=e.get("event"), name=e.get("name"), error=e.get("error"))
                  for e in payload.get("hook_errors") or () if isinstance(e, dict)]
    return "\n".join([said, *hook_lines])


def _system_message(event: str, payload: dict, lang: str | None) -> str:
    if event == "compaction_started":
        return text("started", lang)
    if event == "compaction_progress":
        return text("progress", lang, call=payload.get("call", 1), calls=payload.get("calls", 1),
                    elapsed=f"{float(payload.get('elapsed') or 0):.1f}")
    if event == "compaction_finished":
        if payload.get("no_op"):
            kind = payload.get("no_op_kind")
            if kind == "vetoed":
                return text("no_op_vetoed", lang, reason=payload.get("reason") or "")
            return text({"too_short": "no_op_short", "nothing_older": "no_op_tail"}.get(kind, "no_op"), lang)
        n = payload.get("summarised_count", 0)
        done = text(
            "finished",
            lang,
            n=n,
            s="" if n == 1 else "s",
            before=f"{payload.get('tokens_before', 0):,}",
            after=f"{payload.get('tokens_after', 0):,}",
        )
        if payload.get("structural_window"):  # no model-written summary could fit: said in one line
            done += ("。" if normalize_lang(lang) == "zh" else ". ") + text("structural_summary", lang, window=f"{payload['structural_window']:,}")
        elif payload.get("structural_small"):  # too little to fold for a model's summary to be smaller
            done += ("。" if normalize_lang(lang) == "zh" else ". ") + text("structural_small", lang)
        if payload.get("memory_fallback"):  # the model's memory answer did not parse: said in one line
            done += ("。" if normalize_lang(lang) == "zh" else ". ") + text("memory_fallback", lang)
        return done
    if event == "compaction_failed":
        err = payload.get("error")
        if payload.get("error_key") in MESSAGES["en"]:  # ocw's own words: in the user's language
            err = text(payload["error_key"], lang, **(payload.get("error_params") or {}))
        return text("failed_error", lang, error=err) if err else text("failed", lang)
    raise ValueError(f"not a compaction event: {event!r}")
