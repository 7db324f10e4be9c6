"""System-message texts (DESIGN.md §4), English and Chinese.

One function turns a compaction event into its text, so manual and automatic
compaction — and the panel — always say the same thing.
"""
from __future__ import annotations

MESSAGES = {
    "en": {
        "started": "Compacting context…",
        "finished": "Context compacted: covered {n} older messages, {before} → {after} tokens",
        "failed": "Context compaction failed",
        "failed_error": "Context compaction failed: {error}",
        "no_op": "Context is already compacted; no older messages to fold.",
        "no_session": "Start a conversation first",
        "auto_paused": "Automatic compaction is paused for this session after 3 failures in a row; %compact still works.",
        "snipped": "The request was still over the window after compaction; {n} older messages were left out of this request only.",
        "busy": "A compaction is already running for this session; wait for it to finish.",
        "step_limit": "Stopped after {n} tool step{s} (the limit, %config Ocw.max_tool_steps = {limit}); "
                      "the calls and results are saved, ask again to continue.",
    },
    "zh": {
        "started": "正在压缩上下文…",
        "finished": "上下文已压缩：覆盖了 {n} 条较早的消息，{before} → {after} tokens",
        "failed": "上下文压缩失败",
        "failed_error": "上下文压缩失败：{error}",
        "no_op": "当前上下文已是压缩状态，没有可压缩的旧消息。",
        "no_session": "请先开始对话",
        "auto_paused": "本会话的自动压缩已连续失败 3 次，现已暂停；仍可使用 %compact。",
        "snipped": "压缩后请求仍超出窗口；本次请求省略了 {n} 条较早的消息（未修改会话）。",
        "busy": "本会话已有压缩正在进行，请等待其完成。",
        "step_limit": "已执行 {n} 步工具调用，达到上限（%config Ocw.max_tool_steps = {limit}）；调用与结果已保存，可继续提问。",
    },
}


def normalize_lang(lang: str | None) -> str:
    lang = (lang or "en").lower()
    return "zh" if lang.startswith("zh") else "en"


def text(key: str, lang: str | None = None, **kw) -> str:
    return MESSAGES[normalize_lang(lang)][key].format(**kw)


def system_message(event: str, payload: dict | None = None, lang: str | None = None) -> str:
    """The system message for a compaction event: started, finished (or no-op), failed."""
    payload = payload or {}
    if event == "compaction_started":
        return text("started", lang)
    if event == "compaction_finished":
        if payload.get("no_op"):
            return text("no_op", lang)
        return text(
            "finished",
            lang,
            n=payload.get("summarised_count", 0),
            before=f"{payload.get('tokens_before', 0):,}",
            after=f"{payload.get('tokens_after', 0):,}",
        )
    if event == "compaction_failed":
        err = payload.get("error")
        return text("failed_error", lang, error=err) if err else text("failed", lang)
    raise ValueError(f"not a compaction event: {event!r}")
