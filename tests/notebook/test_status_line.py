"""The quiet status line says when the auto-compact line cannot fire (issue 23): paused
after three failures in a row, off when turned off, and overflow recovery off when
Ocw.reactive_compact is not 'auto' — in English and Chinese."""
from __future__ import annotations

import re

from ocw.notebook.report import status_line


def test_the_line_says_auto_paused_and_off(store):
    s = store.create_session(model="tiny", provider="openai", context_window=2_000, system_prompt="Be brief.")
    s.append_many([("user", "hello"), ("assistant", "hi")])
    s.reserve_ratio = 0.8
    assert re.fullmatch(r"context \d+ % · [\d,]+ / 2,000 · auto-compact at 80 % · 0 compactions", status_line(s))
    s.auto_compact_failures = 2  # one short of the pause: still armed
    assert "auto-compact at 80 %" in status_line(s)
    s.auto_compact_failures = 3
    line = status_line(s)
    assert "auto-compact paused (%compact works)" in line and "at 80 %" not in line
    assert "自动压缩已暂停" in status_line(s, "zh")
    s.reserve_ratio = 0
    assert "auto-compact off" in status_line(s)
    s.reserve_ratio, s.auto_compact_failures = 0.8, 0
    assert "overflow recovery off" not in status_line(s, reactive="auto")
    assert status_line(s, reactive="off").endswith("auto-compact at 80 % · overflow recovery off · 0 compactions")
    assert "overflow recovery off" in status_line(s, reactive="ask")
    assert "溢出恢复已关闭" in status_line(s, "zh", reactive="off")
