"""The fixed texts ocw writes into a model's request, read by the side that writes
them (the compaction engine, the turn) and by the side that reads them (the
built-in offline model), so neither takes them from the other's layer.
"""
from __future__ import annotations

# The compaction engine starts a summary request's system prompt with this marker,
# so the offline model knows to summarize instead of chatting.
SUMMARY_MARKER = "<ocw:summarize>"
# What the user asked the summary to keep (`%compact -- ...`) travels in the same
# system prompt between these tags, so any summarizer reads it, the offline one too.
FOCUS_OPEN, FOCUS_CLOSE = "<user-focus>", "</user-focus>"
# The rolling summary goes out as a user message that starts with this line.
SUMMARY_PREFIX = "[Summary of the earlier conversation]\n"
# A note ocw adds to a request (the pruned-context note) starts with this.
SYSTEM_NOTE_PREFIX = "[system note] "
# The stub that replaces a pruned tool result (ocw/context/prune.py) starts with this;
# a summarizer never harvests its figures ("returned 1,776 tokens") as facts.
PRUNED_STUB_OPEN = "[old tool output pruned:"
# A real summarizer is asked for the session memory as JSON between these tags, after its
# summary (ocw/context/memory_model.py parses it); the current memory goes in between
# CURRENT_MEMORY_OPEN/CLOSE in the request.
MEMORY_OPEN, MEMORY_CLOSE = "<memory>", "</memory>"
CURRENT_MEMORY_OPEN, CURRENT_MEMORY_CLOSE = "<current-memory>", "</current-memory>"
MEMORY_REQUEST = f"""Then write the session memory: one JSON object between {MEMORY_OPEN} and {MEMORY_CLOSE}, the
{CURRENT_MEMORY_OPEN} updated by the new turns (a later statement wins). Copy values verbatim
from them; invent none. Keys, each a list: "instructions" (the user's standing instructions,
quoted), "decisions" [{{"chosen","over"}}], "settings" [{{"name","value"}}], "todos", "closed",
"working_set" [{{"kind","value"}}] (files, URLs, commits, tables, errors; newest first),
"retracted" (values the user said are wrong or gone)."""
