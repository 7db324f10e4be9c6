"""The kernel-side controller the magics and widgets call.

It owns the configuration, the store, the current session and the providers,
so `%compact` and the panel's Compact now button run the same code
(`Runtime.compact`). Magics stay a dozen lines each.
"""
from __future__ import annotations

import atexit
import datetime as _dt
import os
import threading
import weakref
from typing import TYPE_CHECKING

from . import i18n
from .config import Ocw
from .errors import OcwError, SessionNotFound

if TYPE_CHECKING:  # imported when used: %load_ext must not load DuckDB
    from .sessions import Store


def notebook_session_name() -> str:
    """A notebook's session is named after the notebook (Jupyter tells the kernel
    its path in JPY_SESSION_NAME), so reopening it resumes the conversation."""
    path = os.environ.get("JPY_SESSION_NAME", "").strip()
    return path or "default"


class Runtime:
    def __init__(self, shell=None, config: Ocw | None = None):
        self.shell = shell
        self.config = config or Ocw(parent=getattr(shell, "config", None) and shell)
        self._store: Store | None = None
        self._store_path: str | None = None
        self.current = None
        self._providers: dict = {}
        self._lock = threading.RLock()
        # The widgets on screen, weakly: a closed widget (its comm gone, ipywidgets'
        # registry done with it) drops out instead of being refreshed forever.
        self.widgets: weakref.WeakSet = weakref.WeakSet()
        self.tools = None  # a ToolRegistry, created on first use
        self._probed: set = set()  # (session, provider, model, base URL) whose window was asked for
        self.config.observe(self._on_auto_compact_change, names=["auto_compact"])
        self.config.observe(self._on_lang_change, names=["lang"])
        # Close the DuckDB file before the interpreter tears down: left to the
        # finalizer (or to the idle-release thread racing it), closing at exit
        # aborts the process ("terminate called ...") often enough to notice.
        atexit.register(self.close)

    def _on_auto_compact_change(self, change) -> None:
        """`%config Ocw.auto_compact = …` moves the panel's line at once."""
        if self.current is not None:
            self.current.reserve_ratio = change["new"]
            self.current._publish()

    def _on_lang_change(self, change) -> None:
        """`%config Ocw.lang = 'zh'` switches what is already on screen too: every
        widget this kernel shows (labels and message line) and the session's texts."""
        if self.current is not None:
            self.current.lang = change["new"]
        for w in list(self.widgets):
            w.lang = change["new"]

    # -- store and sessions -----------------------------------------------------------
    @property
    def store(self) -> Store:
        with self._lock:
            if self._store is None or self._store_path != self.config.db:
                if self._store is not None:
                    self._store.close()
                from .sessions import Store

                self._store = Store(self.config.db)
                self._store_path = self.config.db
                self.current = None
            return self._store

    def current_session(self):
        """The session `%compact`, `%context`, `%rewind` act on: the one this kernel
        used last, else the notebook's stored session; None if there is none yet."""
        if self.current is not None:
            self.current.sync()
            return self.current
        try:
            s = self.store.open_session(notebook_session_name())
        except SessionNotFound:
            return None
        self._make_current(s)
        return s

    def require_session(self):
        s = self.current_session()
        if s is None:
            raise OcwError(i18n.text("no_session", self.config.lang), hint="run a %%chat cell")
        return s

    def session_for(self, name: str | None = None, *, new: bool = False, model: str | None = None,
                    provider: str | None = None):
        cfg = self.config
        provider = provider or cfg.provider
        name = name or (self.current.name if self.current is not None else notebook_session_name())
        if new:
            self._file_away(name)
        s = None
        store = self.store  # (re)opens the store first: a session of a closed store is not reused
        if not new and self.current is not None and self.current.store is store and self.current.name == name:
            s = self.current  # no lookup by name every cell: the session object is kept
            s.sync()
        elif not new:
            try:
                s = self.store.open_session(name)
            except SessionNotFound:
                s = None
        if s is None:
            want = model or cfg.model or self._default_model(provider)
            s = self.store.create_session(
                name=name, model=want, provider=provider, context_window=cfg.context_window or cfg.resolved_window(want),
                system_prompt=cfg.system_prompt, metadata={"tool_result_cap": cfg.tool_result_cap},
            )
        else:
            same_provider = s.provider_name == provider
            want = model or cfg.model or (s.model if same_provider else self._default_model(provider))
            window = cfg.context_window or (s.configured_window if want == s.model else cfg.resolved_window(want))
            if want != s.model or not same_provider or window != s.configured_window:
                s.reset_context(model=want, context_window=window, provider=provider)
        self._make_current(s)
        return s

    def _default_model(self, provider: str) -> str:
        from .providers.registry import info

        return info(provider).default_model

    def _file_away(self, name: str) -> None:
        try:
            old = self.store.open_session(name)
        except SessionNotFound:
            return
        stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        old.rename(f"{name} @ {stamp} ({old.id})")

    def _make_current(self, s) -> None:
        self.current = s
        s.lang = self.config.lang
        s.reserve_ratio = self.config.auto_compact  # 0: automatic compaction is off
        for w in list(self.widgets):
            w.attach(s)

    def new_session(self, name: str | None = None):
        return self.session_for(name, new=True)

    # -- providers --------------------------------------------------------------------
    def provider_for(self, session):
        from .providers import make_provider
        from .providers.registry import resolve_key

        cfg = self.config
        # The key is resolved here, on every turn, so that `%env OPENAI_API_KEY=...` after
        # an AuthError takes effect on the next cell (a cached provider would keep the old one).
        api_key = resolve_key(session.provider_name, cfg.api_key)
        key = (session.provider_name, session.model, cfg.base_url, api_key, session.context_window,
               cfg.timeout, cfg.max_retries)
        p = self._providers.get(key)
        if p is None:
            p = make_provider(session.provider_name, model=session.model, base_url=cfg.base_url,
                              api_key=api_key, timeout=cfg.timeout, max_retries=cfg.max_retries,
                              context_window=session.context_window)
            self._providers[key] = p
        session.provider = p
        return p

    # -- actions ----------------------------------------------------------------------
    def chat(self, text: str, *, session: str | None = None, new: bool = False, model: str | None = None,
             provider: str | None = None, tools: bool | None = None, on_text=None, on_system=None, on_tool=None):
        if not text or not text.strip():
            raise OcwError("the %%chat cell is empty", hint="write your message below the %%chat line")
        s = self.session_for(session, new=new, model=model, provider=provider)
        # The model sees the user's @ocw.tool functions, plus the built-in read-only
        # tools when turned on (%%chat --tools or %config Ocw.tools = True).
        registry = self.tool_registry().active(builtins=self.config.tools if tools is None else tools, session=s)
        if self.config.tool_result_cap > 0 and s.tool_result_cap != self.config.tool_result_cap:
            s.set_tool_result_cap(self.config.tool_result_cap)  # %config Ocw.tool_result_cap, from now on
        from .turn import run_turn

        provider = self.provider_for(s)
        self._probe_window(s, provider, on_system)
        return run_turn(
            s, text, provider, threshold=self.config.auto_compact, lang=self.config.lang,
            tools=registry, max_steps=self.config.max_tool_steps, max_output_tokens=self.config.max_output_tokens,
            on_text=on_text, on_system=on_system, on_tool=on_tool,
        )

    def _probe_window(self, session, provider, on_system=None) -> None:
        """Ask the server for its window once per session and provider in this kernel
        (llama.cpp /props, Ollama /api/show, model lists; a short timeout, never an
        error): a local server's window is often smaller than ocw would assume."""
        probe = getattr(provider, "probe_window", None)
        key = (session.id, session.provider_name, session.model, self.config.base_url)
        if probe is None or key in self._probed:
            return
        self._probed.add(key)
        found = probe()
        if not found:
            return
        from .turn import learn_window

        note = learn_window(session, *found, reported=True, lang=self.config.lang)
        if note and on_system is not None:
            on_system(note)

    def tool_registry(self):
        from .tools import ToolRegistry

        if self.tools is None:
            self.tools = ToolRegistry(self.shell, self.config)
        return self.tools

    def compact(self, keep_recent_tokens: int | None = None, session_id: str | None = None):
        """The one manual-compaction path: `%compact` and the panel's button."""
        s = self.require_session()
        if session_id is not None and s.id != session_id:
            s = self.store.open_session(session_id)
        return s.compact(keep_recent_tokens=keep_recent_tokens, trigger="manual", provider=self.provider_for(s))

    def compact_action(self, session_id: str) -> str:
        """The panel's Compact now: same path as %compact; returns the system message."""
        try:
            return self.compact(session_id=session_id).message(self.config.lang)
        except OcwError as e:
            return e.user_message()

    def context_widget(self):
        from .widgets import ContextWidget

        w = ContextWidget(session=self.current_session(), compact=self.compact_action, lang=self.config.lang)
        self.widgets.add(w)
        return w

    def forget_widget(self, w) -> None:
        self.widgets.discard(w)

    def close(self) -> None:
        atexit.unregister(self.close)
        for p in self._providers.values():
            try:
                p.close()
            except Exception:
                pass
        self._providers.clear()
        for w in list(self.widgets):
            w.detach()
        self.widgets.clear()
        if self._store is not None:
            self._store.close()
            self._store = None
        self.current = None  # its store is closed: the next cell opens the session again
