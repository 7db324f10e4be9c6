"""The UI text of ocw's widgets and tables, in English and Chinese: its one source.

The widgets receive it in their `labels` traitlet (widgets/*.js have no table of
their own; a missing key shows as the key), `%context --text` reads it here, and
js/test/ui_labels.json, the copy the JS tests use, is checked against it.
Pure data: importing it pulls in no widget library.
"""
from __future__ import annotations

from .i18n import normalize_lang

# UI strings, per language, sent to the browser in the `labels` traitlet. This is
# their one source: widgets/context.js has no table of its own (a missing key shows
# as the key), and js/test/ui_labels.json, the copy the JS tests use, is checked
# against it by tests/test_widgets.py.
UI_LABELS: dict[str, dict[str, str]] = {
    "en": {
        "title": "Context window",
        "cat_system": "System prompt",
        "cat_tools": "Tool definitions",
        "cat_summary": "Summary",
        "cat_messages": "Messages",
        "cat_free": "Free space",
        "total": "Total",
        "window": "Window",
        "tokens": "tokens",
        "basis": "Basis",
        "encoding": "Encoding",
        "estimate": "estimate",
        "estimated": "estimated",
        "measured": "measured",
        "calibration": "measured ÷ estimated",
        "window_from": "Window from",
        "reserve": "Auto-compaction at",
        "off": "off",
        "count": "Compactions",
        "count_info": (
            "ocw counts its own compactions exactly. Compactions done by the provider are "
            "inferred from drops in provider-reported usage, so the count may be approximate."
        ),
        "inferred": "{n} inferred",
        "info_label": "About the compaction count",
        "compact_now": "Compact now",
        "compacting": "Compacting…",
        "empty": "No session yet — start one with %%chat",
        "no_session": "No session",
        "ring_label": "Context {pct} full: {used} of {window} tokens",
        "ring_label_empty": "Context: no session yet",
        "panel": "Context breakdown",
        "disconnected": "Disconnected: the kernel restarted or stopped. Run %context again for a live view.",
        "table_title": "Context — session {name}, model {model}",
        "reserve_line": "{pct} line",
        "rows_scaled": "the rows are scaled to add up to the total",
        "inferred_note": "{n} inferred from a drop in provider-reported usage; inferred counts are approximate",
        "pruned": "Pruned tool output",
        "pruned_value": "{n} results, {tokens} tokens replaced by one-line stubs",
    },
    "zh": {
        "title": "上下文窗口",
        "cat_system": "系统提示词",
        "cat_tools": "工具定义",
        "cat_summary": "摘要",
        "cat_messages": "消息",
        "cat_free": "剩余空间",
        "total": "合计",
        "window": "窗口",
        "tokens": "tokens",
        "basis": "依据",
        "encoding": "编码",
        "estimate": "估算",
        "estimated": "估算",
        "measured": "实测",
        "calibration": "实测 ÷ 估算",
        "window_from": "窗口来源",
        "reserve": "自动压缩阈值",
        "off": "关闭",
        "count": "压缩次数",
        "count_info": (
            "ocw 自己执行的压缩会被准确计数；服务商执行的压缩是根据服务商报告的用量下降推断的，"
            "因此该计数可能是近似值。"
        ),
        "inferred": "其中 {n} 次为推断",
        "info_label": "关于压缩次数",
        "compact_now": "立即压缩",
        "compacting": "正在压缩…",
        "empty": "尚无会话 — 用 %%chat 开始对话",
        "no_session": "无会话",
        "ring_label": "上下文已用 {pct}：{used} / {window} tokens",
        "ring_label_empty": "上下文：尚无会话",
        "panel": "上下文明细",
        "disconnected": "已断开：内核已重启或停止。请重新运行 %context 以获得实时视图。",
        "table_title": "上下文 — 会话 {name}，模型 {model}",
        "reserve_line": "{pct} 线",
        "rows_scaled": "各行已按比例缩放，合计等于总数",
        "inferred_note": "其中 {n} 次根据服务商报告的用量下降推断，推断的次数是近似值",
        "pruned": "已精简的工具输出",
        "pruned_value": "{n} 个结果，{tokens} tokens 已替换为一行摘要",
    },
}


def ui_labels(lang: str | None) -> dict[str, str]:
    """The UI strings of the widget in one language (en or zh)."""
    return dict(UI_LABELS[normalize_lang(lang)])


