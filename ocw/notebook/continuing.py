"""`%new --from-summary [N]` (and `/new --from-summary` in the chat widget): the command's
part — checking N, refusing when there is nothing to carry, and making the seeding all
or nothing. What is carried is decided in ocw/conversation/continue_from.py."""
from __future__ import annotations

from ocw.conversation import continue_from
from ocw.text import checks, i18n
from ocw.text.errors import InvalidArgument, OcwError


def new_from_summary(rt, name: str | None, turns: int) -> str:
    """A fresh session seeded with the current one's active summary and memory (and pins)
    and its last `turns` turns, linked to it. If the seed cannot be stored, the new
    session is taken back and the old one stays current (nothing half-written). No
    defaults here: N's default (2) is the command's, `--from-summary`'s const in actions."""
    if name is not None:
        checks.name(name, "--name")
    checks.integer(turns, "N", low=0)
    if turns > continue_from.MAX_TURNS:
        raise InvalidArgument(f"--from-summary carries at most {continue_from.MAX_TURNS} turns, not {turns}",
                              hint="a fresh session is meant to start small")
    origin = rt.require_session()
    lang = rt.config.lang
    messages, link = continue_from.seed(origin, turns, lang)
    if not messages and not continue_from.carried_pins(origin):
        raise OcwError(i18n.text("from_summary_nothing", lang, name=origin.name),
                       hint=i18n.text("from_summary_nothing_hint", lang))
    s, undo = rt.open_new_session(name, {continue_from.ORIGIN_KEY: link}, continue_from.carried_pins(origin))
    try:
        if messages:
            s.append_many(messages)
    except BaseException:
        undo()
        raise
    return continue_from.said(s, rt.store.session_rows([origin.id])[origin.id]["name"], link, lang)
