"""The summarizer of its own (Ocw.summary_provider / summary_model / summary_base_url), built
in the notebook layer like the chat's provider (Runtime.provider_for) and handed to the
conversation layer, which keeps its window and calibration apart from the chat's
(ocw/conversation/summarizer.py). Unset, nothing here runs and the chat model summarizes.
"""
from __future__ import annotations

from ocw.notebook.config import known_context_window


def summarizer_for(rt, session, probe: bool):
    """The summarizer of its own compactions call (Ocw.summary_provider / summary_model /
    summary_base_url), built here like the chat's provider; None when none is set (the
    chat model summarizes, as before). Its window is its model's known one, asked of its
    server once per session (as the chat's is) and kept apart from the chat's
    (ocw/conversation/summarizer.py). `probe` has no default here: Runtime.summarizer_for's is the one."""
    from ocw.providers import make_provider
    from ocw.providers.registry import info, resolve_key

    cfg = rt.config
    if not cfg.own_summarizer():
        session.summarizer = None
        return None
    name = cfg.summary_provider or session.provider_name
    same = name == session.provider_name
    model = cfg.summary_model or (session.model if same else info(name).default_model)
    base_url = cfg.summary_base_url or (cfg.base_url if same else None)
    # Ocw.api_key is the chat provider's: another provider's key comes from its own variable.
    api_key = resolve_key(name, cfg.api_key if same else None)
    window = known_context_window(model)
    key = ("summarizer", name, model, base_url, api_key, window, cfg.timeout, cfg.max_retries)
    p = rt._providers.get(key)
    if p is None:
        p = make_provider(name, model=model, base_url=base_url, api_key=api_key, timeout=cfg.timeout,
                          max_retries=cfg.max_retries, context_window=window)
        rt._providers[key] = p
    ask, probe = probe, getattr(p, "probe_window", None)
    probed = ("summarizer", session.id, name, model, base_url)
    if probe is not None and probed not in rt._probed and ask:
        rt._probed.add(probed)
        found = probe()
        if found:
            from ocw.conversation import summarizer

            summarizer.learn_window(session, p, found[0], found[1], reported=True)
    session.summarizer = p
    return p
