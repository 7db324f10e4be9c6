"""Where an automatic compaction lands (issue 23, deliverable 4): well under the line,
so that steady traffic never compacts on two consecutive turns.

Before this rule a 2,048-token window with ~480-token turns compacted on 16 of 24
turns: the kept tail (five messages, up to half the window) plus the summary left
the session at 49–61 %, and the next turn crossed 80 % again. Now the automatic
pass aims at LANDING_SHARE of the window *with the message being sent*: the tail may
hold what is left once the system prompt and tools, the incoming message and the
summary's allowance are counted. On a large window that room exceeds the default
tail (10 % of the window, at most 40k), so nothing changes there; on a small one the
tail shrinks, down to nothing, and more is folded.

Why the next turn then stays under the line: it starts at most LANDING_SHARE plus one
reply, and adds one message; with the 80 % line that leaves 30 % of the window for
the two. A single message larger than that is a turn no tail rule can absorb.
Pure: figures in, a figure out.
"""
from __future__ import annotations

LANDING_SHARE = 0.5  # an automatic compaction aims here, the incoming message included
SUMMARY_SHARE = 0.25  # the room set aside for the summary (prose, identifiers, memory)


def landing_tail_room(window: int, *, fixed: float, incoming: float, share: float = LANDING_SHARE) -> float:
    """The most the kept tail may hold (calibrated tokens): `share` of the window less
    the system prompt and tool definitions (`fixed`), the message being sent
    (`incoming`) and the summary's allowance. Never negative (0: fold everything)."""
    return max(0.0, share * window - fixed - incoming - SUMMARY_SHARE * window)
