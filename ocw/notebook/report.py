"""Plain-text views for the magics: the context table, branches, sessions,
the doctor report, tool calls. No secrets: the doctor says whether a key is
present, never its value."""
from __future__ import annotations

import importlib.metadata
import json
import os
import platform

from ocw.notebook.frontend import shown_name
from ocw.notebook.items import branch_items
from ocw.text import i18n
from ocw.text.safe_html import preview  # noqa: F401  (re-exported)
from ocw.text.secrets import redact  # noqa: F401  (re-exported)



def no_session(lang: str | None = None) -> str:
    return i18n.text("no_session", lang)


def context_table(session, lang: str | None = None) -> str:
    """The breakdown as text (a terminal's `%context`), in the UI's language: the same
    figures as the panel — rows that add up to the total, percents to 100.0."""
    from ocw.text.ui_text import ui_labels

    L = ui_labels(lang)
    occ = session.occupancy()
    w = occ["window"]

    def row(label: str, value: str, rest: str = "") -> str:
        return f"  {label:<18} {value:>9}" + (f"  {rest}" if rest else "")

    lines = [L["table_title"].format(name=repr(shown_name(occ["session_name"])), model=session.model)]
    for cat, n in occ["breakdown"].items():
        lines.append(row(L.get(f"cat_{cat}", cat), f"{n:,}", f"{occ['percents'][cat]:>5}%"))
    lines.append(row(L["total"], f"{occ['total']:,}") + f" / {w:,} {L['tokens']} ({100 * occ['ratio']:.1f}%)")
    if occ.get("window_source", "configured") != "configured":
        lines.append(row(L["window_from"], f"{w:,}", occ["window_source"]))
    if occ["reserve_ratio"]:
        lines.append(row(L["reserve"], f"{occ['reserve']:,}", "(" + L["reserve_line"].format(
            pct=f"{occ['reserve_ratio']:.0%}") + ")"))
    else:
        lines.append(row(L["reserve"], L["off"]))
    pruned = occ.get("pruned")
    if pruned:
        lines.append(f"  {L['pruned']}: " + L["pruned_value"].format(n=f"{pruned['results']:,}",
                                                                   tokens=f"{pruned['tokens']:,}"))
    if occ.get("left_out"):
        n = occ["left_out"]
        lines.append(f"  {L['left_out']}: " + (L["left_out_value_one"] if n == 1 else L["left_out_value"].format(n=n)))
    if occ.get("auto_paused"):
        lines.append(f"  {L['reserve']}: {L['auto_paused']}")
    if occ.get("usage_unverified"):
        lines.append(f"  {L['unverified']}: " + L["unverified_value"].format(n=occ["usage_unverified"]))
    basis = L[occ["basis"]]
    if occ.get("calibration"):
        basis += f" ({L['calibration']} = {occ['calibration']:.2f}"
        if occ.get("calibration_samples"):  # how much it rests on (issue 23)
            basis += ", " + i18n.text("cal_samples", lang, n=occ["calibration_samples"])
        basis += f"; {L['rows_scaled']})" if occ.get("calibrated") else ")"
    encoding = occ["encoding"] if occ.get("encoding_exact", True) else f"{occ['encoding']} ({L['estimate']})"
    lines.append(f"  {L['basis']}: {basis}; {L['encoding']}: {encoding}")
    own = occ.get("summarizer")
    if own:  # a summarizer of its own (Ocw.summary_model): its window and calibration, not the chat's
        lines.append(f"  {L['summarizer']}: " + L["summarizer_value"].format(
            name=own["name"], window=f"{own['window']:,}", calibration=f"{own['calibration']:.2f}",
            samples=own["samples"]))
    count, inferred = occ["compaction_count"], occ.get("compaction_inferred", 0)
    # only an inferred count is approximate: say so only then
    lines.append(f"  {L['count']}: {count}" + (f" ({L['inferred_note'].format(n=inferred)})" if inferred else ""))
    return "\n".join(lines)


def status_line(session, lang: str | None = None, reactive: str = "auto") -> str:
    """The quiet line after a %%chat reply: the ring's figure in one line
    (`context 58 % · 12,345 / 21,000 · auto-compact at 80 % · 2 compactions`). A line
    that cannot fire says so: "paused" after three failures, "off" when turned off, and
    "overflow recovery off" when a refusal will not compact (Ocw.reactive_compact)."""
    from ocw.conversation.compaction import auto_compact_paused

    occ = session.occupancy()
    ratio = occ["reserve_ratio"]
    auto = (i18n.text("status_auto_off", lang) if not ratio
            else i18n.text("status_auto_paused", lang) if auto_compact_paused(session)
            else i18n.text("status_auto", lang, pct=round(100 * ratio)))
    if reactive != "auto":
        auto += " · " + i18n.text("status_reactive_off", lang)
    n = occ["compaction_count"]
    line = i18n.text("status_line", lang, pct=round(100 * occ["ratio"]), used=f"{occ['total']:,}",
                     window=f"{occ['window']:,}", auto=auto,
                     count=i18n.text("status_count", lang, n=n, s="s" if n != 1 else ""))
    if occ.get("pruned", {}).get("results"):
        line += " · " + i18n.text("status_pruned", lang)
    if occ.get("left_out"):  # the figures are what the last request sent (issue 23)
        n = occ["left_out"]
        line += " · " + i18n.text("status_left_out", lang, n=n, s="s" if n != 1 else "")
    return line


def branches_table(session) -> str:
    """Every branch with what tells them apart (the chat widget's graph shows the same):
    its length, its last message's time, where it leaves the current branch and a
    preview of its first differing message."""
    rows = branch_items(session.branch_tree())
    if not rows:
        return "No messages yet."
    lines = ["Branches (leaves of the conversation):"]
    for b in rows:
        if not b["leaf"]:
            continue  # HEAD inside a branch: said below
        mark = "*" if b["current"] else " "
        line = f" {mark} {b['id']}  {b['length']:>4} messages  ends with {b['role']}  {b['time']}"
        if not b["current"]:
            where = f"after message {b['fork_depth']}" if b["fork_id"] else "from the start"
            line += f"  forks {where}: “{b['preview']}”" + (f" … “{b['ending']}”" if b["ending"] else "")
        lines.append(line.rstrip())
    if session.head is not None and not any(b["current"] and b["leaf"] for b in rows):
        lines.append(f" * HEAD is at {session.head} (inside a branch; the next %%chat forks here)")
    lines.append("Switch with %branch <id>.")
    return "\n".join(lines)


def sessions_table(rows: list[dict], current=None, origins: dict[str, str] | None = None) -> str:
    """One line per session. The name comes last and whole: a notebook's session is
    named by its path, and two notebooks often differ only deep inside it, so any
    cut could make two sessions look the same. Column widths follow the content.
    `origins`: the session each one continues (%new --from-summary), shown after its name."""
    origins = origins or {}
    if not rows:
        return "No sessions yet; start one with %%chat."
    id_w = max(len("id"), *(len(str(r["id"])) for r in rows))
    model_w = max(len("model"), *(len(str(r["model"])) for r in rows))
    lines = [f"   {'id':<{id_w}}  {'model':<{model_w}}  {'messages':>8}  {'tokens':>9}  {'last use':<16}  name"]
    for r in rows:
        mark = "*" if current is not None and r["id"] == current.id else " "
        last = r["updated_at"].strftime("%Y-%m-%d %H:%M") if r.get("updated_at") else "-"
        lines.append(f" {mark} {str(r['id']):<{id_w}}  {str(r['model']):<{model_w}}  {r['messages']:>8,}  "
                     f"{r['tokens']:>9,}  {last:<16}  {shown_name(r['name'])}"
                     + (f"  (shared by {r['shared_by']})" if r.get("shared_by") else "")
                     + (f"  ← from {shown_name(origins[r['id']])}" if r["id"] in origins else ""))
    return "\n".join(lines)


def _version(pkg: str) -> str:
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _reachable(base_url: str, timeout: float = 3.0) -> str:
    import httpx

    try:
        r = httpx.get(base_url, timeout=timeout, follow_redirects=False)
        return f"reachable (HTTP {r.status_code})"
    except httpx.HTTPError as e:
        return f"NOT reachable ({type(e).__name__})"


def served_models(base_url: str, api_key: str | None, timeout: float = 3.0) -> list[str] | None:
    """The models an OpenAI-compatible server lists (GET {base}/models: llama.cpp, vLLM,
    Ollama, LM Studio, OpenAI), or None when it lists none. The base URL's root often
    answers 404 on a working server, so this is what tells it works."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        r = httpx.get(base_url.rstrip("/") + "/models", headers=headers, timeout=timeout, follow_redirects=False)
        data = r.json().get("data") if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    ids = [str(m["id"]) for m in data if isinstance(m, dict) and m.get("id")] if isinstance(data, list) else []
    return ids or None


def is_local(url: str) -> bool:
    """A server on this machine (or a private name), where no API key is expected."""
    from urllib.parse import urlsplit

    host = (urlsplit(url).hostname or "").lower()
    return host in ("localhost", "::1", "0.0.0.0") or host.startswith("127.") or host.endswith(".local")


def doctor(runtime) -> str:
    from ocw.text.tokens import encoding_for_model, get_encoding

    cfg = runtime.config
    s = runtime.current_session()
    provider = s.provider_name if s is not None else cfg.provider
    served_own = False
    if s is not None:
        model = s.model
    elif cfg.model:
        model = cfg.model
    else:  # what the next %%chat would use: a local server's own model, not ocw's default name
        model, served_own = runtime.default_model(cfg.provider)
    lines = ["ocw doctor"]
    lines.append(f"  provider:      {provider}" + (" (built in, no network, no key)" if provider == "offline" else ""))
    from ocw.providers.registry import info, key_source, resolve_key

    if info(provider).key_env:
        key = resolve_key(provider, cfg.api_key)
        url = cfg.base_url or info(provider).default_base_url
        served = served_models(url, key) if provider == "openai" else None
        if served and model not in served:  # ocw names a model the server does not list
            lines.append(f"  model:         {model} — the server lists {', '.join(served[:3])}; "
                         f"name it with OCW_MODEL={served[0]} or %config Ocw.model = {served[0]!r}")
        else:
            lines.append(f"  model:         {model}" + (" (the server's own, from its model list)" if served_own else ""))
        source = key_source(provider, cfg.api_key)
        if key:
            lines.append(f"  API key:       present ({source})")
        elif is_local(url):
            lines.append(f"  API key:       not set ({source}); a server on this machine needs none")
        else:
            lines.append(f"  API key:       MISSING ({source})")
        reach = f"reachable; it serves {len(served)} model{'s' if len(served) != 1 else ''}" if served else _reachable(url)
        lines.append(f"  base URL:      {url} — {reach}")
    else:
        lines.append(f"  model:         {model}")
        lines.append("  API key:       not needed")
        lines.append("  base URL:      none (offline)")
    enc = encoding_for_model(model)
    try:
        get_encoding(enc.name)
        status = "loaded offline"
    except Exception as e:  # pragma: no cover - reported, not raised
        status = f"FAILED to load: {e}"
    lines.append(f"  tokenizer:     {enc.label} — {status}")
    lines.append(f"  database:      {runtime.store.backend.describe()}")  # a URL: user, host, database only
    if s is not None:
        lines.append(f"  session:       {shown_name(s.name)!r} ({s.id}), window {s.context_window:,} tokens")
        unverified = s.occupancy().get("usage_unverified", 0)
        if unverified:
            lines.append("  usage:         " + i18n.text("usage_unverified", cfg.lang, n=unverified,
                                                         s="s" if unverified != 1 else ""))
    lines.append(f"  auto-compact:  {'off' if not cfg.auto_compact else f'at {cfg.auto_compact:.0%}'}; language {cfg.lang}")
    reg = runtime.tools
    if reg is not None and s is not None and reg.code_execution_enabled(s):
        lines.append(f"  tools:         CODE EXECUTION IS ON for session {s.name!r} (run_python can run code in "
                     "this kernel; %ocw deny-code turns it off)")
    else:
        lines.append("  tools:         read-only" + (" built-ins on" if cfg.tools else " built-ins off")
                     + "; no code execution (%ocw allow-code turns it on for the current session)")
    vers = ", ".join(f"{p} {_version(p)}" for p in ("ocw", "duckdb", "psycopg", "httpx", "tiktoken", "anywidget", "ipywidgets"))
    lines.append(f"  versions:      Python {platform.python_version()}, {vers}")
    return "\n".join(lines)


def tools_table(registry, session=None, cap: int | None = None) -> str:
    """What the model can see: each tool's name, arguments and first docstring line."""
    if registry is None:
        return "No tools: register one with @ocw.tool, or turn on the built-ins with %config Ocw.tools = True."
    lines = ["Tools the model can call:"]
    for d in registry.definitions():
        schema = d.get("input_schema", {})
        params = ", ".join(p + ("" if p in schema.get("required", []) else "?") for p in schema.get("properties", {}))
        desc = d.get("description", "").splitlines()[0] if d.get("description") else ""
        lines.append(f"  {d['name']}({params}) — {preview(desc, 100)}")
    cap = cap or (session.tool_result_cap if session is not None else None)
    if cap:
        lines.append(f"Tool results over {cap:,} tokens are cut in what the model reads "
                     "(%config Ocw.tool_result_cap); the store keeps them whole.")
    if session is not None and registry.code_execution_enabled(session):
        lines.append(f"Code execution is ON for session {session.name!r} (%ocw deny-code).")
    return "\n".join(lines)


def show_tool_call(call: dict, result: dict, *, rich: bool) -> None:
    """One compact line per call — name, arguments, a result preview — and the full
    result one click away (a <details> element) in a notebook. Arguments and result are
    untrusted text: shown escaped (safe_html.tool_call_bundle), never as markup."""
    from ocw.text.safe_html import plain_text, tool_call_bundle

    args = redact(json.dumps(call.get("input", {}), ensure_ascii=False))
    status = "error" if result.get("is_error") else "ok"
    content = redact(str(result.get("content", "")))
    line = f"🔧 {call.get('name')}({preview(args, 120)}) → {status}: {preview(content)}"
    if not rich:
        print(plain_text(line))
        return
    from IPython.display import display

    display(tool_call_bundle(line, content), raw=True)
