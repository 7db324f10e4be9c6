"""The kernel-side controller the magics and widgets call.

It owns the configuration, the store, the current session and the providers,
so `%compact` and the panel's Compact now button run the same code
(`Runtime.compact`). Magics stay a dozen lines each.
"""
from __future__ import annotations

import atexit
import datetime as _dt
import threading
import weakref
from typing import TYPE_CHECKING

from ocw.text import checks
from ocw.text import i18n
from ocw.notebook.config import PROVIDER_NAMES, Ocw
from ocw.text.errors import OcwError, SessionNotFound

if TYPE_CHECKING:  # imported when used: %load_ext must not load DuckDB
    from ocw.conversation.sessions import Store


class Runtime:
    def __init__(self, shell=None, config: Ocw | None = None, make_widget=None):
        self.shell = shell
        # `make_widget(kind, runtime)` builds "ring" or "chat": the widgets layer sits
        # above this one, so the package root hands its builder in (ocw/__init__.py).
        self.make_widget = make_widget
        self.errors = None  # the last error a cell raised, for {Err} (set by the extension)
        self.warm_up = None  # the background warm-up thread %load_ext started (ocw.notebook.warmup)
        self.config = config or Ocw(parent=getattr(shell, "config", None) and shell)
        self._store: Store | None = None
        self._store_path: str | None = None
        self.current = None
        # The name of the current session just deleted: until a session is current again,
        # nothing is current, and the next %%chat starts a new session under that name
        # (not an older session the notebook's name would find).
        self._after_delete: str | None = None
        self._providers: dict = {}
        self._lock = threading.RLock()
        # The widgets on screen, weakly: a closed widget (its comm gone, ipywidgets'
        # registry done with it) drops out instead of being refreshed forever.
        self.widgets: weakref.WeakSet = weakref.WeakSet()
        self.tools = None  # a ToolRegistry, created on first use
        self._frontend = None  # ocw.notebook.frontend.Frontend, read on first use
        self._served: dict = {}  # (provider, base URL) -> the model that server lists as its own
        self._probed: set = set()  # (session, provider, model, base URL) whose window was asked for
        self.unsaved = None  # a reply shown but not stored (ocw.conversation.turn.Unsaved): %ocw retry-save
        self.rich_cells = lambda: False  # cells show display updates (set by the magics: ocw/notebook/progress.py)
        self._watched: weakref.WeakSet = weakref.WeakSet()  # sessions whose progress shows in cells
        self.config.observe(self._on_auto_compact_change, names=["auto_compact"])
        self.config.observe(self._on_lang_change, names=["lang"])
        # Close the DuckDB file before the interpreter tears down: left to the
        # finalizer (or to the idle-release thread racing it), closing at exit
        # aborts the process ("terminate called ...") often enough to notice.
        atexit.register(self.close)

    def frontend(self):
        """This kernel's front end (ocw/notebook/frontend.py), read once: a batch run's
        session name must not change mid-run. VS Code names the notebook in the namespace
        after the kernel starts, so an unknown front end is looked at again."""
        f = self._frontend
        if f is None or (f.kind == "kernel" and self.shell is not None
                         and isinstance(getattr(self.shell, "user_ns", {}).get("__vsc_ipynb_file__"), str)):
            from ocw.notebook import frontend

            f = self._frontend = frontend.current(self.shell)
        return f

    def notebook_session_name(self) -> str:
        """The session a cell continues when it names none (OCW_SESSION, else by front end)."""
        return self.frontend().session_name()

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
        """The store for `config.db`. A new path is opened first and swapped in only
        once it opened: a refused path leaves the old store and session untouched
        (and every command says why, until the path is fixed)."""
        with self._lock:
            if self._store is None or self._store_path != self.config.db:
                from ocw.conversation.sessions import Store

                ahead = self.warm_up.take(self.config.db) if self.warm_up is not None else None
                fresh = ahead or Store(self.config.db, lock_timeout=self.config.lock_timeout)
                old, self._store, self._store_path = self._store, fresh, self.config.db
                self.current = None
                if old is not None:
                    old.close()
            self._store.backend.lock_timeout = self.config.lock_timeout  # %config Ocw.lock_timeout, live
            return self._store

    def current_session(self):
        """The session `%compact`, `%context`, `%rewind` act on: the one this kernel
        used last, else the notebook's stored session; None if there is none yet."""
        store = self.store  # a changed Ocw.db is opened (or refused) before anything is read
        if self.current is not None:
            self.current.sync()
            return self.current
        if self._after_delete is not None:
            return None
        try:
            s = store.open_session(self.notebook_session_name())
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
        """The session a cell runs in, with the cell's options applied and kept."""
        return self._open_for_cell(name, new=new, model=model, provider=provider)[0]

    def _open_for_cell(self, name, *, new, model, provider, metadata: dict | None = None, pins: list[str] = ()):
        """Open (or create) the session and apply the cell's options. Returns the
        session and an `undo()` that takes every change back — the created session,
        the filed-away one's name, a model/provider/window switch, which session is
        current — as long as nothing was written since (see Store.undo_sessions)."""
        cfg = self.config
        provider = provider or cfg.provider
        after_delete = self._after_delete
        name = name or (self.current.name if self.current is not None else after_delete or self.notebook_session_name())
        store, previous = self.store, self.current
        if self.current is not None and self.current.store is store and self.current.name == name:
            old = self.current  # no lookup by name every cell: the session object is kept
            old.sync()
        else:
            try:
                old = store.open_session(name)
            except SessionNotFound:
                old = None
        restore, delete = [], []
        if old is not None and not new:
            s = old
            if cfg.tool_result_cap != s.tool_result_cap:
                s.set_tool_result_cap(cfg.tool_result_cap)  # %config Ocw.tool_result_cap, from now on
            same_provider = s.provider_name == provider
            want = model or cfg.model or (s.model if same_provider else self._default_model(provider))
            window = cfg.context_window or (s.configured_window if want == s.model else cfg.resolved_window(want))
            if want != s.model or not same_provider or window != s.configured_window:
                restore = [store.session_rows([s.id])[s.id]]
                s.reset_context(model=want, context_window=window, provider=provider)
        else:
            want = model or cfg.model or self._default_model(provider)
            archive = None
            if old is not None:  # --new: file the old one away in the same transaction
                stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
                archive = (old.id, f"{name} @ {stamp} ({old.id})")
                restore = [store.session_rows([old.id])[old.id]]
            s = store.create_session(
                name=name, model=want, provider=provider, context_window=cfg.context_window or cfg.resolved_window(want),
                system_prompt=cfg.system_prompt, metadata={"tool_result_cap": cfg.tool_result_cap, **(metadata or {})},
                archive=archive, pins=pins,
            )
            delete = [s.id]
        touched = [r["id"] for r in restore] + delete
        expect: dict[str, int] = {}
        self._make_current(s)

        def rearm() -> None:
            """Take what the store holds now as the state to undo from."""
            expect.clear()
            if not restore and delete == [s.id]:
                # Only the session this cell created: another kernel would have to find it
                # by name within this cell to write to it, so the rev this kernel wrote
                # (and its window probe moved) is the file's — no read (issue 28).
                expect[s.id] = s.rev
                return
            expect.update({sid: row["rev"] for sid, row in store.session_rows(touched).items()})

        def undo() -> bool:
            if touched and not store.undo_sessions(restore=restore, delete=delete, expect_rev=expect):
                return False  # something was written since: the options were used, they stay
            for row in restore:
                store.open_session(row["id"])._reload()
            if previous is not None:
                self._make_current(previous)
            else:
                self.current, self._after_delete = None, after_delete
                for w in list(self.widgets):
                    w.detach()
            return True

        rearm()
        undo.rearm = rearm
        return s, undo

    def _default_model(self, provider: str) -> str:
        return self.default_model(provider)[0]

    def default_model(self, provider: str) -> tuple[str, bool]:
        """The model a session uses when the user named none, and whether the server said
        it: with a base URL of a local or other server (not the official hosts) that
        server's own model from its model list, asked once per (provider, URL) — sending
        ocw's default name (gpt-4o-mini) to llama-server would name a model it lacks; else
        the provider's default. A server that does not answer is asked again next time."""
        from ocw.providers import make_provider
        from ocw.providers.registry import info, resolve_key

        p, cfg = info(provider), self.config
        if not cfg.base_url or p.key_env is None:
            return p.default_model, False
        key = (p.name, cfg.base_url)
        if key not in self._served:
            prov = make_provider(p.name, base_url=cfg.base_url, api_key=resolve_key(p.name, cfg.api_key),
                                 timeout=cfg.timeout, max_retries=0)
            try:
                found = prov.served_model()
            finally:
                prov.close()
            if not found:
                return p.default_model, False
            self._served[key] = found
        return self._served[key], True

    def _make_current(self, s) -> None:
        self.current, self._after_delete = s, None
        s.lang = self.config.lang
        s.reserve_ratio = self.config.auto_compact  # 0: automatic compaction is off
        if s not in self._watched:
            from ocw.notebook import progress

            progress.watch(s, lambda: self.rich_cells())
            self._watched.add(s)
        for w in list(self.widgets):
            w.attach(s)

    def delete_session(self, id_or_name: str, *, confirmed: bool) -> str:
        """`%sessions --delete NAME [--yes]`: without `confirmed`, say what would go and
        how to confirm; with it, delete the session and everything of it. Deleting the
        current session leaves no session current (the next %%chat starts afresh)."""
        checks.text(id_or_name, "--delete", allow_empty=False)
        store = self.store
        s = self.open_named(id_or_name)
        what = store.describe_deletion(s) if not confirmed else store.delete_session(s.id)
        figures = (f"{what['nodes']:,} message{'s' if what['nodes'] != 1 else ''}, {what['summaries']:,} "
                   f"summar{'ies' if what['summaries'] != 1 else 'y'}, compaction count {what['compactions']}")
        if not confirmed:
            quoted = repr(what["name"]) if " " in what["name"] or not what["name"] else what["name"]
            return (f"Would delete session {what['name']!r} ({what['id']}): {figures}. Nothing was deleted; "
                    f"to confirm: %sessions --delete {quoted} --yes")
        if self.current is not None and self.current.id == what["id"]:
            self.current, self._after_delete = None, what["name"]
            said = i18n.text("session_deleted", self.config.lang, name=what["name"])
            for w in list(self.widgets):
                w.detach()
                if hasattr(w, "say"):  # the chat widget says it in the conversation
                    w.say(said)
        return f"Deleted session {what['name']!r} ({what['id']}): {figures}; the name is free again."

    def new_session(self, name: str | None = None):
        if name is not None:
            checks.name(name, "--name")
        return self.session_for(name, new=True)

    def open_new_session(self, name: str | None, metadata: dict, pins: list[str] = ()):
        """A new session (the current one of that name filed away, as %new does) with
        `metadata` and `pins`, made current; returns it and an `undo()` that takes it back
        while nothing was written since (ocw/notebook/continuing.py seeds it)."""
        return self._open_for_cell(name, new=True, model=None, provider=None, metadata=metadata, pins=pins)

    # -- providers --------------------------------------------------------------------
    def provider_for(self, session):
        from ocw.providers import make_provider
        from ocw.providers.registry import resolve_key

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

    def summarizer_for(self, session, probe: bool = True):
        """The summarizer of its own compactions call, or None: the chat model (ocw/notebook/summarizer.py)."""
        from ocw.notebook.summarizer import summarizer_for

        return summarizer_for(self, session, probe=probe)

    # -- actions ----------------------------------------------------------------------
    def chat(self, text: str, *, session: str | None = None, new: bool = False, model: str | None = None,
             provider: str | None = None, tools: bool | None = None, on_text=None, on_system=None, on_tool=None):
        """One %%chat cell, all or nothing: the text and options are checked before
        anything changes, and if the cell ends with nothing stored (an error, the
        stop button) its options are taken back too — a failed `--provider openai`
        leaves the session on its old provider, a failed `--new` leaves the old
        session under its name."""
        checks.text(text, "the %%chat cell")
        if not text.strip():
            raise OcwError("the %%chat cell is empty", hint="write your message below the %%chat line")
        if session is not None:
            checks.name(session, "--session")
        if model is not None:
            checks.model(model, "--model")
        if provider is not None:
            checks.choice(provider, "--provider", PROVIDER_NAMES)
        s, undo = self._open_for_cell(session, new=new, model=model, provider=provider)
        probed = set(self._probed)
        try:
            # The model sees the user's @ocw.tool functions, plus the built-in read-only
            # tools when turned on (%%chat --tools or %config Ocw.tools = True).
            registry = self.tool_registry().active(builtins=self.config.tools if tools is None else tools, session=s)
            provider = self.provider_for(s)
            self._probe_window(s, provider, on_system)
            summarizer = self.summarizer_for(s)
            undo.rearm()  # a window the server reported is the cell's too: undone with it
            from ocw.conversation.turn import run_turn

            return run_turn(
                s, text, provider, threshold=self.config.auto_compact, lang=self.config.lang,
                tools=registry, max_steps=self.config.max_tool_steps, max_output_tokens=self.config.max_output_tokens,
                prune=self.config.prune_tool_output, reactive_compact=self.config.reactive_compact,
                summarizer=summarizer, on_text=on_text, on_system=on_system, on_tool=on_tool,
            )
        except BaseException as e:
            unsaved = getattr(e, "unsaved", None)
            if unsaved is not None:  # the reply is on screen, not stored: %ocw retry-save
                self.unsaved = unsaved
                e.hint = i18n.text("unsaved_hint", self.config.lang)
            try:
                if undo():
                    self._probed &= probed  # what the probe learned was undone too: ask again next time
            except OcwError:
                pass  # the cell's own error is the one to show; each undo step is one transaction
            raise

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
        from ocw.conversation.request import learn_window

        note = learn_window(session, *found, reported=True, lang=self.config.lang)
        if note and on_system is not None:
            on_system(note)

    def tool_registry(self):
        from ocw.conversation.toolbox import ToolRegistry

        if self.tools is None:
            self.tools = ToolRegistry(self.shell, self.config)
        return self.tools

    def compact(self, keep_recent_tokens: int | None = None, session_id: str | None = None,
                focus: str | None = None):
        """The one manual-compaction path: `%compact [N] [-- focus]` and the panel's button."""
        s = self.require_session()
        if session_id is not None and s.id != session_id:
            s = self.store.open_session(session_id)
        chat = self.provider_for(s)
        own = self.summarizer_for(s)
        return s.compact(keep_recent_tokens=keep_recent_tokens, trigger="manual", provider=own or chat,
                         focus=focus, own_summarizer=own is not None)

    def undo_compaction(self) -> str:
        """`%compact --undo` and the chat widget's Undo: the one line it says."""
        from ocw.conversation.undo import undo_message

        return undo_message(self.require_session().undo_compaction(), self.config.lang)

    def retry_save(self) -> str:
        """`%ocw retry-save`: store the reply a failed write left on screen only, under the
        HEAD it answered. Refused (one line, the reply kept) if the session moved on."""
        u = self.unsaved
        if u is None:
            return i18n.text("retry_nothing", self.config.lang)
        s = self.current if self.current is not None and self.current.id == u.session_id \
            else self.store.open_session(u.session_id)
        s.sync()
        if s.head != u.head:
            self.unsaved = None
            raise OcwError(f"session {s.name!r} moved on since that reply was shown; it was not stored",
                           hint="the reply is still on screen above: ask again, or copy what you need from it")
        ids = s.append_many(u.messages, usage=u.usage, basis=u.basis)  # failing again: one line, still kept
        self.unsaved = None
        return i18n.text("retry_saved", self.config.lang, n=len(ids), name=s.name)

    def compact_action(self, session_id: str) -> str:
        """The panel's Compact now: same path as %compact; returns the system message."""
        try:
            return self.compact(session_id=session_id).message(self.config.lang)
        except OcwError as e:
            return e.user_message()

    def context_widget(self):
        """The ring and panel for the current session (`%context`)."""
        return self._widget("ring")

    def chat_widget(self):
        """The chat widget for the current session (`%chat`, `ocw.chat()`), with its own
        ring, made like `%context`'s, so both follow the session."""
        return self._widget("chat")

    def _widget(self, kind: str):
        if self.make_widget is None:
            raise OcwError("widgets are not available here", hint="load ocw with %load_ext ocw")
        w = self.make_widget(kind, self)
        self.widgets.add(w)
        return w

    def switch_session(self, name: str):
        """`%session NAME`: continue a stored session (by name or id) from now on."""
        checks.text(name, "the session name or id", allow_empty=False)
        s = self.open_named(name)
        self._make_current(s)
        return s

    def open_named(self, name: str):
        """A stored session by id or name, a notebook's name also as %sessions shows it
        (relative to the working directory; ocw.notebook.frontend.shown_name)."""
        from ocw.notebook.frontend import stored_names

        first = None
        for candidate in stored_names(name):
            try:
                return self.store.open_session(candidate)
            except SessionNotFound as e:
                first = first or e  # the error names what was typed
        raise first

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
        if self.warm_up is not None:
            self.warm_up.close()
        if self._store is not None:
            self._store.close()
            self._store = None
        self.current = None  # its store is closed: the next cell opens the session again
