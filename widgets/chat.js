// ocw chat widget — the browser side of ocw.widgets.chat.ChatWidget.
//
// One self-contained ES module (anywidget loads it from a Blob URL: no imports).
// Python owns the state: the conversation, the graph, the system messages and
// the slash menu's command table arrive in traitlets (the conversation's as changes with
// a revision: applyOps, onChanges; a view that is behind asks chat_snapshot); this module shows them
// and asks for actions with anywidget's request/response commands
// (experimental.invoke), each of which resolves or rejects — a failure shows a
// message and the text typed is kept, never lost.
//
// Safety: the only innerHTML this module sets from data is an `html` field or
// `streaming`, which the kernel produced with ocw.text.safe_html (the %%chat
// renderer). Everything else — user text, tool output, previews — is textContent.
//
// The slash menu follows seed 004 exactly: it opens upward while the input
// starts with "/" and has no space; a space closes it (over 380 ms, and a
// closing menu never takes Enter); Enter runs a registered command, otherwise
// sends the text as chat; commands whose arguments are optional run on
// selection or Enter, those with required ones fill the prefix and wait;
// /help sets the input to "/" so the menu opens again; with no session, a
// command that needs one keeps the input and says "Start a conversation first".
// Keyboard: the ARIA combobox pattern (Up/Down move, Enter picks, Tab
// completes, Escape closes).

export const CLOSE_MS = 380;

// Every traitlet the conversation and graph read.
const CONVERSATION = ["messages", "has_older", "summary", "capsules", "branches", "notes", "head", "pending",
  "stream_steps", "session_id", "labels", "lang", "origin"];

// The traitlets Python sends as changes, not state (ocw/widgets/changes.py): each view
// holds their values, whole from the model's state, then changed by "ocw-changes" messages.
export const CHANGED = ["messages", "has_older", "summary", "capsules", "branches", "notes", "head", "pending",
  "streaming", "stream_steps", "busy"];

let instances = 0;

/** One "ocw-changes" message's ops applied in order to `state` (name -> value), as
 * ocw/widgets/changes.py made them: a list's splice, one entry's changed keys, a string's
 * kept prefix plus what follows, or a new value. New lists and objects (a model's values are never changed in
 * place). Returns the names changed; throws on an op that does not fit what is held
 * (the view is then out of step and asks for a snapshot). */
export function applyOps(state, ops) {
  const changed = new Set();
  // A list entry's field {"$held": name}: the string `name` held before this message
  // (Python does not send a turn's text twice).
  const before = { ...state };
  const deref = (entry) => {
    if (!entry || typeof entry !== "object" || Array.isArray(entry)) return entry;
    const out = { ...entry };
    for (const [k, v] of Object.entries(out)) {
      if (v && typeof v === "object" && typeof v.$held === "string" && Object.keys(v).length === 1) {
        if (!CHANGED.includes(v.$held) || typeof before[v.$held] !== "string") throw new Error(`no held ${v.$held}`);
        out[k] = before[v.$held];
      }
    }
    return out;
  };
  for (const op of Array.isArray(ops) ? ops : []) {
    const name = op && op.name;
    if (!CHANGED.includes(name)) throw new Error(`no such value: ${name}`);
    if ("value" in op) state[name] = op.value;
    else if ("keep" in op) {
      const held = String(state[name] ?? "");
      if (!(op.keep >= 0 && op.keep <= held.length)) throw new Error(`${name}: keep ${op.keep} of ${held.length}`);
      state[name] = held.slice(0, op.keep) + String(op.add ?? "");
    } else if ("index" in op) {
      const held = Array.isArray(state[name]) ? state[name] : [];
      const entry = held[op.index];
      if (!entry || typeof entry !== "object" || !op.set || typeof op.set !== "object") {
        throw new Error(`${name}: no entry ${op.index} of ${held.length}`);
      }
      const changedEntry = { ...entry, ...deref(op.set) };
      for (const k of Array.isArray(op.drop) ? op.drop : []) delete changedEntry[k];
      state[name] = held.slice(0, op.index).concat([changedEntry], held.slice(op.index + 1));
    } else {
      const held = Array.isArray(state[name]) ? state[name] : [];
      const { at, remove } = op;
      if (!(at >= 0 && remove >= 0 && at + remove <= held.length && Array.isArray(op.items))) {
        throw new Error(`${name}: splice ${at}+${remove} of ${held.length}`);
      }
      state[name] = held.slice(0, at).concat(op.items.map(deref), held.slice(at + remove));
    }
    changed.add(name);
  }
  return changed;
}

/** Python's labels; a missing key reads as the key (visible, never a crash). */
export function labelTable(labels) {
  const table = labels && typeof labels === "object" ? labels : {};
  return new Proxy(table, {
    get: (t, key) => (typeof key === "string" && typeof t[key] === "string" ? t[key] : key),
  });
}

function fill(template, values) {
  return String(template).replace(/\{(\w+)\}/g, (m, k) => (k in values ? values[k] : m));
}

/** The menu's query: the text after "/" while the input starts with "/" and has no
 * whitespace; null when the menu must be closed. */
export function menuQuery(value) {
  const v = String(value ?? "");
  if (!v.startsWith("/") || /\s/.test(v)) return null;
  return v.slice(1);
}

/** The menu's commands: one entry per name, the first of each — the built-ins come first
 * in the table, then the added ones (marked `by`), so a built-in's name is the built-in
 * (seed 004's duplicate-names item: shown once, dispatched to the built-in). */
export function uniqueCommands(commands) {
  const seen = new Set();
  return (Array.isArray(commands) ? commands : []).filter((c) => {
    if (!c || seen.has(c.name)) return false;
    seen.add(c.name);
    return true;
  });
}

/** The commands whose name starts with the query, in the table's order. */
export function matchCommands(commands, query) {
  const q = String(query ?? "").toLowerCase();
  return uniqueCommands(commands).filter((c) => String(c.name).startsWith(q));
}

/** A registered command typed in full ("/compact 2000"): {command, args}; else null. */
export function parseCommand(text, commands) {
  const m = /^\/(\S+)(?:\s+([\s\S]*))?$/.exec(String(text ?? "").trim());
  if (!m) return null;
  const command = uniqueCommands(commands).find((c) => c.name === m[1]);
  return command ? { command, args: (m[2] || "").trim() } : null;
}

function h(tag, cls, attrs) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (attrs) for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

function text(tag, cls, value) {
  const node = h(tag, cls);
  node.textContent = value ?? "";
  return node;
}

function render({ model, el, experimental, host, signal }) {
  const uid = `ocw-chat-${++instances}-${Math.random().toString(36).slice(2, 8)}`;
  const disposers = [];
  const listen = (target, type, fn) => {
    target.addEventListener(type, fn);
    disposers.push(() => target.removeEventListener(type, fn));
  };
  const L = () => labelTable(model.get("labels"));

  // ---- the conversation's state: whole from the model, then Python's changes ----
  // `rev` is the revision of what this view holds; the model's own values are at its
  // `snapshot_revision` (the last state it got whole), which may be older than Python's.
  const held = {};
  let rev = 0;
  let snapshotAsked = false;
  let queued = []; // changes that arrived while a snapshot was on its way
  const get = (name) => (name in held ? held[name] : model.get(name));
  function adopt(name) {
    held[name] = model.get(name);
    const r = model.get("snapshot_revision");
    if (typeof r === "number") rev = r;
  }
  for (const name of CHANGED) adopt(name);

  // ---- DOM ----
  const root = h("div", "ocw-chat");
  const header = h("div", "ocw-chat-header");
  const title = h("span", "ocw-chat-title");
  const status = h("span", "ocw-chat-status", { role: "status" });
  header.append(title, status);

  const main = h("div", "ocw-chat-main");
  const graph = h("nav", "ocw-graph");
  const graphTitle = h("div", "ocw-graph-title");
  const rail = h("div", "ocw-graph-rail", { role: "list" });
  const confirmBox = h("div", "ocw-confirm", { role: "alertdialog", "aria-modal": "false" });
  confirmBox.hidden = true;
  const confirmText = h("p", "ocw-confirm-text", { id: `${uid}-confirm` });
  confirmBox.setAttribute("aria-describedby", `${uid}-confirm`);
  const confirmYes = h("button", "ocw-confirm-yes", { type: "button" });
  const confirmNo = h("button", "ocw-confirm-no", { type: "button" });
  confirmBox.append(confirmText, confirmYes, confirmNo);
  const graphOrigin = h("div", "ocw-graph-origin"); // %new --from-summary: the session this one continues
  graph.append(graphTitle, graphOrigin, rail, confirmBox);

  const conversation = h("section", "ocw-conversation", { role: "log" });
  const older = h("button", "ocw-load-older", { type: "button" });
  const thread = h("div", "ocw-thread");
  const live = h("div", "ocw-live"); // pending message, finished steps, the streaming reply
  const streamingMsg = h("article", "ocw-msg ocw-msg-assistant ocw-streaming", { "aria-busy": "true" });
  const streamingHead = h("header", "ocw-msg-head");
  const streamingRole = h("span", "ocw-msg-role");
  streamingHead.append(streamingRole);
  const streamingBody = h("div", "ocw-msg-html");
  streamingMsg.append(streamingHead, streamingBody);
  conversation.append(older, thread, live);
  main.append(graph, conversation);

  const footer = h("div", "ocw-chat-footer");
  // data-lm-suppress-shortcuts: Lumino (JupyterLab, Notebook 7) stops looking for a
  // shortcut at this element, so even a capture-phase keymap never sees the composer's keys.
  const composer = h("div", "ocw-composer", { "data-lm-suppress-shortcuts": "true" });
  const menu = h("ul", "ocw-menu", { role: "listbox", id: `${uid}-menu` });
  menu.hidden = true;
  const input = h("textarea", "ocw-input", {
    role: "combobox",
    rows: "2",
    "aria-autocomplete": "list",
    "aria-haspopup": "listbox",
    "aria-expanded": "false",
    "aria-controls": `${uid}-menu`,
  });
  const send = h("button", "ocw-send", { type: "button" });
  composer.append(menu, input, send);
  const ringSlot = h("div", "ocw-chat-ring");
  // Jump to latest: a flex item of the footer, after the ring — not laid over the
  // conversation — so it can cover neither the slash menu (which opens upward from the
  // composer, over the conversation) nor the composer (seed 004: a floating button at
  // z-index 7 over a composer at 5 overlapped the menu).
  const jump = h("button", "ocw-jump", { type: "button" });
  jump.hidden = true;
  footer.append(composer, ringSlot, jump);
  const alertBox = h("div", "ocw-chat-alert", { role: "alert" });
  alertBox.hidden = true;

  root.append(header, main, footer, alertBox);
  el.append(root);

  // ---- connection ----
  // The widget manager triggers "comm_live_update" when the kernel goes away; the
  // model proxy does not expose comm_live, so an update we cannot read means dead.
  let connected = typeof model.comm_live === "boolean" ? model.comm_live : true;
  const inflight = new Set(); // AbortControllers of requests waiting for an answer
  let busyWith = ""; // "send" or a command name while one of ours runs

  function request(name, msg) {
    if (!connected) return Promise.reject(new Error(L().chat_disconnected));
    if (!experimental || typeof experimental.invoke !== "function") {
      return Promise.reject(new Error("anywidget's experimental.invoke is missing (anywidget ≥ 0.11 needed)"));
    }
    // Our own signal, never anywidget's 3 s default: a turn takes as long as it takes;
    // a kernel that goes away aborts it (disconnected()).
    const controller = new AbortController();
    inflight.add(controller);
    let answer;
    try {
      answer = experimental.invoke(name, msg, { signal: controller.signal });
    } catch (e) {
      inflight.delete(controller);
      return Promise.reject(e);
    }
    return Promise.resolve(answer)
      .then((reply) => {
        const response = Array.isArray(reply) ? reply[0] : reply;
        if (!response || response.ok !== true) {
          const err = new Error((response && response.error) || "no answer");
          err.response = response || {};
          throw err;
        }
        return response;
      })
      .finally(() => inflight.delete(controller));
  }

  function disconnected() {
    if (!connected) return;
    connected = false;
    const reason = new Error(L().chat_disconnected);
    for (const c of [...inflight]) c.abort(reason);
    update();
  }

  // ---- alerts and status ----
  function showAlert(message) {
    alertBox.textContent = message;
    alertBox.hidden = !message;
  }
  function failed(err) {
    const msg = (err && err.message) || String(err);
    showAlert(msg === L().chat_disconnected ? msg : fill(L().chat_failed, { error: msg }));
  }

  // ---- the slash menu (seed 004) ----
  let menuState = "closed"; // "open" | "closing" | "closed"
  let matches = [];
  let active = 0;
  let closeTimer = null;

  function commands() {
    const c = model.get("commands");
    return Array.isArray(c) ? c : [];
  }

  function optionId(i) {
    return `${uid}-opt-${i}`;
  }

  function renderMenu() {
    menu.replaceChildren();
    menu.setAttribute("aria-label", L().chat_menu);
    matches.forEach((c, i) => {
      const item = h("li", "ocw-menu-item", { role: "option", id: optionId(i), "data-name": c.name });
      item.setAttribute("aria-selected", i === active ? "true" : "false");
      item.classList.toggle("ocw-active", i === active);
      item.append(text("span", "ocw-menu-name", `/${c.name}`));
      if (c.args) item.append(text("span", "ocw-menu-args", c.args));
      item.append(text("span", "ocw-menu-help", c.help || ""));
      if (c.by) {
        item.classList.add("ocw-menu-added"); // a command a user or a package added
        item.append(text("span", "ocw-menu-by", c.by));
      }
      item.addEventListener("mousedown", (e) => e.preventDefault()); // keep the focus in the input
      item.addEventListener("click", () => select(c));
      menu.append(item);
    });
  }

  function openMenu(found) {
    clearTimeout(closeTimer);
    closeTimer = null;
    const name = menuState === "open" && matches[active] ? matches[active].name : null;
    matches = found;
    const kept = name ? matches.findIndex((c) => c.name === name) : -1;
    active = kept >= 0 ? kept : 0;
    menuState = "open";
    menu.hidden = false;
    menu.classList.remove("ocw-menu-closing");
    input.setAttribute("aria-expanded", "true");
    renderMenu();
    input.setAttribute("aria-activedescendant", optionId(active));
  }

  function closeMenu(animated) {
    if (menuState === "closed") return;
    input.setAttribute("aria-expanded", "false");
    input.removeAttribute("aria-activedescendant");
    const finish = () => {
      closeTimer = null;
      menuState = "closed";
      menu.hidden = true;
      menu.classList.remove("ocw-menu-closing");
      matches = [];
      menu.replaceChildren();
    };
    if (!animated) {
      clearTimeout(closeTimer);
      finish();
      return;
    }
    if (menuState === "closing") return;
    menuState = "closing"; // still visible while it fades, but it no longer takes keys
    menu.classList.add("ocw-menu-closing");
    closeTimer = setTimeout(finish, CLOSE_MS);
  }

  function syncMenu() {
    const q = menuQuery(input.value);
    const found = q === null ? [] : matchCommands(commands(), q);
    if (found.length) openMenu(found);
    else closeMenu(true);
  }

  function moveActive(step) {
    if (!matches.length) return;
    active = (active + step + matches.length) % matches.length;
    renderMenu();
    input.setAttribute("aria-activedescendant", optionId(active));
    const node = menu.children[active];
    if (node && typeof node.scrollIntoView === "function") node.scrollIntoView({ block: "nearest" });
  }

  function setInput(value) {
    input.value = value;
    input.focus();
    input.setSelectionRange(value.length, value.length);
    syncMenu();
  }

  /** A command picked in the menu (Enter or a click). */
  function select(command) {
    if (command.name === "help") return setInput("/");
    if (command.required) return setInput(`/${command.name} `); // fill the prefix and wait
    closeMenu(false);
    runCommand(command, "");
  }

  let unknownAsked = null; // the unknown /word the user was asked about

  /** Enter with the menu closed or closing: a registered command runs, else chat. */
  function submit() {
    const value = input.value;
    if (!value.trim()) return;
    const parsed = parseCommand(value, commands());
    if (!parsed) {
      // A lone /word that is no command is most likely a typo (/sumary): ask once; Enter
      // again with the same text sends it as a message.
      if (/^\/[A-Za-z][\w-]*$/.test(value.trim()) && unknownAsked !== value) {
        unknownAsked = value;
        return showAlert(L().chat_unknown_command);
      }
      unknownAsked = null;
      return sendMessage(value);
    }
    const { command, args } = parsed;
    if (command.name === "help") return setInput("/");
    if (command.required && !args) return setInput(`/${command.name} `);
    closeMenu(false);
    runCommand(command, args);
  }

  function refuseWhileBusy() {
    if (!connected) {
      showAlert(L().chat_disconnected);
      return true;
    }
    if (busyWith) {
      showAlert(L().chat_busy_refused);
      return true;
    }
    return false;
  }

  /** The text back in the composer after a failure (never lost). */
  function restore(value) {
    if (input.value.trim() === "") input.value = value;
    else if (!input.value.includes(value)) input.value = `${value}\n\n${input.value}`;
    syncMenu();
  }

  function begin(what) {
    busyWith = what;
    update();
  }
  function end() {
    busyWith = "";
    update();
  }
  /** Ask the kernel for `kind` while busy with `what`; busy ends however it goes. */
  function busyRequest(what, kind, content) {
    begin(what);
    return request(kind, content).finally(end);
  }

  function runCommand(command, args) {
    const typed = input.value;
    if (refuseWhileBusy()) return;
    if (command.needs_session && !model.get("session_id")) {
      showAlert(L().chat_no_session); // the input stays as typed: nothing ran
      return;
    }
    showAlert("");
    input.value = "";
    busyRequest(command.name, "chat_run", { name: command.name, args })
      .catch((err) => {
        restore(typed);
        if (err.response && err.response.no_session) showAlert(L().chat_no_session);
        else failed(err);
      });
  }

  function sendMessage(value) {
    if (refuseWhileBusy()) return;
    showAlert("");
    input.value = "";
    closeMenu(false);
    busyRequest("send", "chat_send", { text: value })
      .catch((err) => {
        restore(value);
        failed(err);
      });
  }

  listen(input, "input", () => syncMenu());
  // The composer owns its keys: no keydown/keyup/keypress from it reaches the notebook
  // (Shift+Enter would run the cell and lose the draft; Escape would leave edit mode).
  const ownKey = (e) => e.stopPropagation();
  listen(composer, "keyup", ownKey);
  listen(composer, "keypress", ownKey);
  listen(composer, "keydown", ownKey);
  listen(input, "keydown", (e) => {
    if (e.isComposing || e.keyCode === 229) return; // an IME is composing: its Enter is not ours
    const open = menuState === "open" && matches.length > 0;
    if (open && (e.key === "ArrowDown" || e.key === "ArrowUp")) {
      e.preventDefault();
      moveActive(e.key === "ArrowDown" ? 1 : -1);
    } else if (open && e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      select(matches[active]);
    } else if (open && e.key === "Tab" && !e.shiftKey) {
      e.preventDefault();
      setInput(`/${matches[active].name} `); // complete; a space closes the menu
    } else if (open && e.key === "Escape") {
      e.preventDefault();
      closeMenu(false);
    } else if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault(); // a closing menu never swallows Enter: this is the submit path
      submit();
    }
  });
  listen(input, "blur", () => closeMenu(true));
  listen(send, "click", () => {
    if (menuState === "open" && matches.length && menuQuery(input.value) !== null) select(matches[active]);
    else submit();
  });

  // ---- the graph: rewind (confirmed) and branch switches ----
  let confirmTarget = null;
  function askRewind(item) {
    if (refuseWhileBusy()) return;
    confirmTarget = item;
    confirmText.textContent = fill(L().chat_rewind_confirm, { n: item.depth });
    confirmBox.hidden = false;
    confirmYes.focus();
  }
  function closeConfirm() {
    confirmBox.hidden = true;
    confirmTarget = null;
  }
  listen(confirmNo, "click", () => closeConfirm());
  listen(confirmBox, "keydown", (e) => {
    if (e.key === "Escape") {
      e.preventDefault();
      closeConfirm();
    }
  });
  listen(confirmYes, "click", () => {
    const item = confirmTarget;
    closeConfirm();
    if (!item || refuseWhileBusy()) return;
    stick = true; // the view follows the branch's newest message after the move
    busyRequest("rewind", "chat_rewind", { node_id: item.end_id }).then(scrollDown, failed);
  });
  function switchBranch(branch) {
    if (refuseWhileBusy()) return;
    stick = true; // the switched-to branch shows its newest message, not its first
    busyRequest("branch", "chat_branch", { node_id: branch.id }).then(scrollDown, failed);
  }
  let keepAnchor = null; // while older messages load: the scroll position to keep
  listen(older, "click", () => {
    if (!connected) return;
    older.disabled = true;
    older.textContent = L().chat_loading;
    keepAnchor = { height: conversation.scrollHeight, top: conversation.scrollTop };
    request("chat_older", {})
      .catch((err) => failed(err))
      .finally(() => {
        keepAnchor = null;
        older.textContent = L().chat_load_older;
        update();
      });
  });

  // ---- state -> DOM ----
  function toolStep(step) {
    const L_ = L();
    const d = h("details", "ocw-tool");
    d.dataset.status = step.status || "";
    const status = step.status === "error" ? L_.chat_tool_error : step.status === "ok" ? L_.chat_tool_ok : "";
    const line = `🔧 ${step.name || L_.chat_tool}(${step.args || ""})${status ? ` → ${status}` : ""}`;
    d.append(text("summary", "ocw-tool-line", line));
    if (step.result) d.append(text("pre", "ocw-tool-result", step.result));
    return d;
  }

  function messageNode(item, coveredUpTo) {
    const L_ = L();
    const role = ["user", "assistant", "tool", "system"].includes(item.role) ? item.role : "system";
    const node = h("article", `ocw-msg ocw-msg-${role}`, { "data-id": item.id, "data-depth": String(item.depth) });
    if (item.depth <= coveredUpTo) {
      node.classList.add("ocw-covered");
      node.title = L_.chat_covered;
    }
    const head = h("header", "ocw-msg-head");
    const who = { user: L_.chat_you, assistant: L_.chat_assistant, tool: L_.chat_tool, system: L_.chat_system }[role];
    head.append(text("span", "ocw-msg-role", who), text("span", "ocw-msg-time", item.time || ""));
    if (role === "user" || (role === "assistant" && item.html)) {
      // %pin of this stored message: the model reads it verbatim after every compaction.
      const pin = text("button", "ocw-pin", L_.chat_pin);
      pin.type = "button";
      pin.title = L_.chat_pin_title;
      pin.setAttribute("aria-label", `${L_.chat_pin_title} (${fill(L_.chat_message_n, { n: item.depth })})`);
      pin.disabled = !connected;
      pin.addEventListener("click", () => pinMessage(item));
      head.append(pin);
    }
    node.append(head);
    if (item.thinking) {
      const d = h("details", "ocw-thinking");
      d.append(text("summary", "", L_.chat_thinking), text("pre", "", item.thinking));
      node.append(d);
    }
    if (typeof item.html === "string" && item.html) {
      const body = h("div", "ocw-msg-html");
      body.innerHTML = item.html; // the kernel's sanitized HTML (ocw.text.safe_html), nothing else
      node.append(body);
    } else if (item.text) {
      node.append(text("div", "ocw-msg-text", item.text));
    }
    for (const step of item.tools || []) node.append(toolStep(step));
    return node;
  }

  function pinMessage(item) {
    if (refuseWhileBusy()) return;
    showAlert("");
    busyRequest("pin", "chat_pin", { node_id: item.id }).catch(failed);
  }

  /** A button that runs a slash command of the table (the same action as its magic). */
  function commandButton(label, name, args, then) {
    const b = text("button", "ocw-mem-action", label);
    b.type = "button";
    b.disabled = !connected;
    b.addEventListener("click", () => {
      if (refuseWhileBusy()) return;
      showAlert("");
      busyRequest(name, "chat_run", { name, args })
        .then(() => (then ? busyRequest(then, "chat_run", { name: then, args: "" }) : null))
        .catch(failed);
    });
    return b;
  }

  /** /memory and /pins: their rows, with forget and unpin buttons (appended records, never
   *  deletions). Only the newest listing has live buttons: a forget renumbers the items, so
   *  an older listing's numbers may no longer be the items it shows. */
  function memoryNode(note, live) {
    const L_ = L();
    const data = note.data.memory || { items: null, forgotten: [], pins: note.data.pins || [] };
    const node = h("div", "ocw-note ocw-note-output ocw-memory", { "data-note": String(note.id) });
    if (data.items) {
      node.append(text("div", "ocw-mem-title", L_.mem_title));
      if (!data.items.length) node.append(text("p", "ocw-mem-empty", data.empty || L_.mem_empty));
      let section = null;
      let list = null;
      for (const it of data.items) {
        if (it.section !== section) {
          section = it.section;
          node.append(text("div", "ocw-mem-section", section));
          list = h("ol", "ocw-mem-items", { start: String(it.n) });
          node.append(list);
        }
        const li = h("li", "ocw-mem-item", { "data-n": String(it.n) });
        li.append(text("span", "ocw-mem-text", it.text), text("span", "ocw-msg-time", fill(L_.mem_turn, { n: it.turn })));
        if (live) li.append(commandButton(L_.chat_forget, "memory", `--forget ${it.n}`, "memory"));
        list.append(li);
      }
      if ((data.forgotten || []).length) {
        node.append(text("div", "ocw-mem-section", L_.mem_forgotten));
        const ul = h("ul", "ocw-mem-forgotten");
        for (const f of data.forgotten) {
          const li = h("li", "ocw-mem-item ocw-forgotten");
          li.append(text("del", "ocw-mem-text", f.text), text("span", "ocw-msg-time", fill(L_.mem_forgotten_at, { at: f.at })));
          ul.append(li);
        }
        node.append(ul);
      }
    }
    const pins = data.pins || [];
    node.append(text("div", "ocw-mem-section", pins.length ? L_.pins_title : L_.pins_none));
    if (pins.length) {
      const ul = h("ul", "ocw-mem-pins");
      for (const p of pins) {
        const li = h("li", "ocw-mem-item ocw-mem-pin", { "data-pin": String(p.n) });
        li.append(text("span", "ocw-mem-n", `${p.n}.`), text("span", "ocw-mem-text", p.text),
          text("span", "ocw-msg-time", `${p.at} · ${p.tokens} tokens`));
        if (live) li.append(commandButton(L_.chat_unpin, "unpin", String(p.n), data.items ? "memory" : "pins"));
        ul.append(li);
      }
      node.append(ul);
    }
    return node;
  }

  function noteNode(note, newestListing) {
    const kind = ["started", "finished", "no_op", "failed", "info", "output"].includes(note.kind) ? note.kind : "info";
    if (kind === "output" && note.data && (note.data.memory || note.data.pins)) {
      return memoryNode(note, note.id === newestListing);
    }
    if (kind === "output" && typeof note.html === "string") {
      // A command's result with more than text (/summary): the kernel's sanitized HTML.
      const node = h("div", `ocw-note ocw-note-${kind} ocw-msg-html`, { "data-note": String(note.id) });
      node.innerHTML = note.html;
      return node;
    }
    const node = h(kind === "output" ? "pre" : "div", `ocw-note ocw-note-${kind}`, { "data-note": String(note.id) });
    node.textContent = note.text;
    return node;
  }

  function summaryNode(summary) {
    const L_ = L();
    const d = h("details", "ocw-summary-capsule", { "data-id": summary.id });
    const line = h("summary", "ocw-summary-line");
    line.append(text("span", "ocw-summary-label", L_.chat_summary),
      text("span", "ocw-summary-covers", fill(L_.chat_summary_covers, { n: summary.cover_count })),
      text("span", "ocw-msg-time", summary.time || ""));
    // Undo (%compact --undo): the summary before it renders again; nothing is deleted.
    const undo = text("button", "ocw-summary-undo", L_.chat_undo);
    undo.type = "button";
    undo.title = L_.chat_undo_title;
    undo.addEventListener("click", (e) => {
      e.preventDefault(); // a click inside <summary> would toggle the capsule
      e.stopPropagation();
      runCommand({ name: "compact", needs_session: true }, "--undo");
    });
    line.append(undo);
    const body = h("div", "ocw-msg-html ocw-summary-body");
    body.innerHTML = summary.html || ""; // the kernel's sanitized HTML
    d.append(line, body);
    const sections = Array.isArray(summary.memory) ? summary.memory : [];
    if (sections.length) d.append(capsuleMemoryNode(sections));
    return d;
  }

  // The session memory beside the summary: a section per kind, each item with its turn.
  // Items are plain text from the kernel, set as text (never parsed as HTML).
  function capsuleMemoryNode(sections) {
    const L_ = L();
    const box = h("div", "ocw-summary-memory");
    box.append(text("div", "ocw-memory-title", L_.chat_memory));
    for (const sec of sections) {
      const part = h("div", "ocw-memory-section", { "data-kind": String(sec.kind || "") });
      part.append(text("div", "ocw-memory-heading", L_[`chat_mem_${sec.kind}`] || String(sec.kind || "")));
      const list = h("ul", "ocw-memory-items");
      for (const it of sec.items || []) {
        const li = h("li", "ocw-memory-item");
        li.append(text("span", "ocw-memory-text", String(it.text ?? "")),
          text("span", "ocw-memory-turn", fill(L_.chat_memory_turn, { n: it.turn })));
        list.append(li);
      }
      part.append(list);
      box.append(part);
    }
    return box;
  }

  function renderThread() {
    const L_ = L();
    const items = get("messages") || [];
    const notes = get("notes") || [];
    const summary = get("summary") || {};
    const covered = summary && summary.id ? Number(summary.cover_count) || 0 : 0;
    // A note sits after the message it followed (HEAD then); the kernel sends only the
    // notes of this branch, so one whose message is not loaded (older) goes first.
    const endOf = new Map();
    for (const i of items) {
      endOf.set(i.id, i.end_id);
      endOf.set(i.end_id, i.end_id);
    }
    const byAfter = new Map();
    const top = [];
    for (const n of notes) {
      const at = n.after && endOf.get(n.after);
      if (at) {
        if (!byAfter.has(at)) byAfter.set(at, []);
        byAfter.get(at).push(n);
      } else top.push(n);
    }
    thread.replaceChildren();
    if (summary && summary.id) thread.append(summaryNode(summary));
    if (!items.length && !get("pending")) thread.append(text("p", "ocw-chat-empty", L_.chat_empty));
    const listings = notes.filter((n) => n.data && (n.data.memory || n.data.pins)).map((n) => n.id);
    const newest = listings.length ? listings[listings.length - 1] : null;
    for (const n of top) thread.append(noteNode(n, newest));
    for (const item of items) {
      thread.append(messageNode(item, covered));
      for (const n of byAfter.get(item.end_id) || []) thread.append(noteNode(n, newest));
    }
    older.hidden = !get("has_older");
    older.disabled = !connected;
    older.textContent = L_.chat_load_older;
  }

  function renderLive() {
    live.replaceChildren();
    const pending = get("pending") || "";
    if (pending) {
      const msg = h("article", "ocw-msg ocw-msg-user ocw-pending");
      const head = h("header", "ocw-msg-head");
      head.append(text("span", "ocw-msg-role", L().chat_you));
      msg.append(head, text("div", "ocw-msg-text", pending));
      live.append(msg);
    }
    for (const step of get("stream_steps") || []) {
      if (typeof step.html === "string") {
        const msg = h("article", "ocw-msg ocw-msg-assistant ocw-streaming-step");
        const body = h("div", "ocw-msg-html");
        body.innerHTML = step.html; // the kernel's sanitized HTML
        msg.append(body);
        live.append(msg);
      } else if (step.tool) live.append(toolStep(step.tool));
    }
    renderStreaming();
    if (pending) live.append(streamingMsg);
  }

  function renderStreaming() {
    const html = get("streaming") || "";
    streamingRole.textContent = `${L().chat_assistant} · ${L().chat_sending}`;
    streamingBody.innerHTML = html; // the kernel's sanitized HTML, re-rendered as the reply arrives
    streamingMsg.hidden = !html;
  }

  function renderGraph() {
    const L_ = L();
    const items = get("messages") || [];
    const capsules = get("capsules") || [];
    const branches = get("branches") || [];
    const head = get("head") || "";
    const active = capsules.find((c) => c.active);
    const activeUpTo = active ? active.cover_count : 0;
    const oldUpTo = Math.max(0, ...capsules.filter((c) => !c.active && !c.undone).map((c) => c.cover_count));
    graphTitle.textContent = L_.chat_graph;
    const origin = model.get("origin") || "";
    graphOrigin.textContent = origin ? fill(L_.chat_continues, { name: origin }) : "";
    graphOrigin.hidden = !origin;
    graph.setAttribute("aria-label", L_.chat_graph);
    rail.replaceChildren();

    const capsuleNode = (c) => {
      const node = text("div", `ocw-graph-capsule${c.active ? " ocw-active" : " ocw-superseded"}`,
        fill(L_.chat_capsule, { n: c.cover_count })
          + (c.active ? "" : ` · ${c.undone ? L_.chat_undone : L_.chat_superseded}`));
      node.dataset.id = c.id;
      node.dataset.cover = String(c.cover_count);
      node.setAttribute("role", "listitem");
      node.title = c.time || "";
      return node;
    };
    const branchNode = (b) => {
      const where = b.fork_id ? fill(L_.chat_branch_fork, { n: b.fork_depth }) : L_.chat_branch_start;
      const btn = h("button", "ocw-graph-branch", { type: "button", "data-id": b.id, role: "listitem" });
      btn.append(text("span", "ocw-branch-glyph", "↳"),
        text("span", "ocw-branch-where", where),
        text("span", "ocw-branch-preview", b.preview ? `“${b.preview}”` : ""),
        // Two branches that leave alike (a question asked again) differ in how they end.
        text("span", "ocw-branch-ending", b.ending ? `… “${b.ending}”` : ""),
        text("span", "ocw-branch-meta", `${fill(L_.chat_branch_length, { n: b.length })} · ${b.time || ""}`));
      btn.setAttribute("aria-label",
        `${fill(L_.chat_branch_switch, { n: b.length })}: ${where} ${b.preview || ""}${b.ending ? ` … ${b.ending}` : ""}`);
      btn.disabled = !connected;
      btn.addEventListener("click", () => switchBranch(b));
      return btn;
    };
    // Each capsule and fork hangs after the last loaded message at or above its depth
    // (the summary's last covered message, the branch's last shared one); those above
    // the loaded messages come first.
    const anchor = (depth) => {
      let at = -1;
      items.forEach((item, i) => {
        if (item.depth <= depth) at = i;
      });
      return at;
    };
    const after = new Map();
    const hang = (i, node) => {
      if (!after.has(i)) after.set(i, []);
      after.get(i).push(node);
    };
    for (const c of capsules) hang(anchor(c.cover_count), capsuleNode(c));
    for (const b of branches) if (!b.current) hang(anchor(b.fork_depth), branchNode(b));
    for (const node of after.get(-1) || []) rail.append(node);
    items.forEach((item, i) => {
      const row = h("div", "ocw-graph-row", { role: "listitem", "data-id": item.end_id, "data-depth": String(item.depth) });
      if (item.depth <= activeUpTo) row.classList.add("ocw-covered");
      else if (item.depth <= oldUpTo) row.classList.add("ocw-covered-old");
      const isHead = item.end_id === head;
      row.classList.toggle("ocw-head", isHead);
      const dot = h("button", `ocw-graph-node ocw-node-${item.role}`, { type: "button" });
      const label = `${fill(L_.chat_message_n, { n: item.depth })}: ${item.preview || ""}`;
      dot.setAttribute("aria-label", isHead ? `${label} (${L_.chat_head})` : label);
      dot.title = label;
      dot.disabled = !connected || isHead;
      dot.addEventListener("click", () => askRewind(item));
      row.append(dot, text("span", "ocw-graph-depth", String(item.depth)));
      if (isHead) row.append(text("span", "ocw-graph-head", L_.chat_head));
      rail.append(row);
      for (const node of after.get(i) || []) rail.append(node);
    });
    confirmYes.textContent = L_.chat_rewind;
    confirmNo.textContent = L_.chat_cancel;
  }

  // The conversation follows the newest message while the reader is at the bottom
  // (as they are at first); scrolling up to read stops that until they come back down.
  let stick = true;
  function atBottom() {
    return conversation.scrollHeight - conversation.scrollTop - conversation.clientHeight < 48;
  }
  function scrollDown() {
    conversation.scrollTop = conversation.scrollHeight;
    syncJump();
  }
  /** The jump button shows while the newest message is scrolled out of view. */
  function syncJump() {
    jump.hidden = atBottom();
  }
  listen(conversation, "scroll", () => {
    if (!keepAnchor) stick = atBottom();
    syncJump();
  });
  listen(jump, "click", () => {
    stick = true;
    scrollDown();
    input.focus();
  });
  if (typeof ResizeObserver === "function") {
    // Rendered before JupyterLab lays the output out, the first scroll has no height to
    // go by; and a streaming reply grows the content without any event of ours.
    const observer = new ResizeObserver(() => {
      if (stick && !keepAnchor) scrollDown();
    });
    observer.observe(conversation);
    observer.observe(thread);
    observer.observe(live);
    disposers.push(() => observer.disconnect());
  }

  function update() {
    const L_ = L();
    const hasSession = !!model.get("session_id");
    root.setAttribute("lang", model.get("lang") === "zh" ? "zh" : "en");
    root.dataset.state = !connected ? "disconnected" : hasSession ? "ready" : "empty";
    root.classList.toggle("ocw-disconnected", !connected);
    const name = model.get("session_name") || model.get("session_id") || "";
    title.textContent = name ? `${L_.chat_title} · ${name.split("/").pop()}` : L_.chat_title;
    title.title = name;
    const pyBusy = get("busy") || "";
    const what = busyWith || pyBusy;
    const progress = model.get("progress") || {};
    status.textContent = !connected ? L_.chat_disconnected : progress.call ? progressText(progress)
      : what === "send" ? L_.chat_sending : what ? fill(L_.chat_running, { name: what }) : "";
    root.classList.toggle("ocw-busy", !!what);
    input.disabled = !connected;
    send.disabled = !connected;
    send.textContent = L_.chat_send;
    jump.textContent = L_.chat_jump;
    jump.title = L_.chat_jump_label;
    jump.setAttribute("aria-label", L_.chat_jump_label);
    input.placeholder = L_.chat_placeholder;
    input.setAttribute("aria-label", L_.chat_input_label);
    conversation.setAttribute("aria-label", L_.chat_title);
    for (const b of rail.querySelectorAll("button")) b.disabled = !connected || b.closest(".ocw-head") !== null;
    for (const b of thread.querySelectorAll("button.ocw-pin, button.ocw-mem-action")) b.disabled = !connected;
    older.disabled = !connected;
  }

  // A running compaction: "Compacting… 2 of 5 · 3 s", the seconds counted on here between steps.
  let progressSeen = 0;
  let progressTimer = null;
  function progressText(p) {
    const elapsed = Number(p.elapsed || 0) + (Date.now() - progressSeen) / 1000;
    return fill(L().chat_progress, { call: p.call, calls: p.calls, elapsed: elapsed.toFixed(0) });
  }
  function onProgress() {
    progressSeen = Date.now();
    const on = !!(model.get("progress") || {}).call;
    if (on && progressTimer === null) progressTimer = setInterval(update, 500);
    if (!on && progressTimer !== null) {
      clearInterval(progressTimer);
      progressTimer = null;
    }
    update();
  }
  disposers.push(() => progressTimer !== null && clearInterval(progressTimer));

  function onConversation() {
    renderThread();
    renderLive();
    renderGraph();
    update();
    if (stick && !keepAnchor) scrollDown();
    else if (keepAnchor) {
      // Older messages came in above: the ones the reader was looking at stay in place.
      conversation.scrollTop = keepAnchor.top + (conversation.scrollHeight - keepAnchor.height);
      keepAnchor = { height: conversation.scrollHeight, top: conversation.scrollTop };
    }
    syncJump();
  }
  function onStreaming() {
    renderStreaming();
    if (get("pending") && !streamingMsg.isConnected) live.append(streamingMsg);
    if (stick) scrollDown();
  }
  /** Python's changes (ocw/widgets/changes.py), applied in order: a message that is not the
   *  next revision — this view missed one — or does not fit asks for a snapshot instead. */
  function onChanges(content) {
    if (!content || content.kind !== "ocw-changes") return;
    if (snapshotAsked) {
      queued.push(content);
      return;
    }
    if (content.rev <= rev) return; // already in what this view holds
    if (content.rev !== rev + 1) {
      queued.push(content);
      askSnapshot();
      return;
    }
    let changed;
    try {
      changed = applyOps(held, content.ops);
    } catch (err) {
      askSnapshot();
      return;
    }
    rev = content.rev;
    if ([...changed].every((name) => name === "busy")) update();
    else if ([...changed].every((name) => name === "streaming" || name === "busy")) {
      onStreaming();
      update();
    } else onConversation();
  }
  function askSnapshot() {
    if (snapshotAsked) return;
    snapshotAsked = true;
    request("chat_snapshot", { rev })
      .then((answer) => {
        const state = answer.state || {};
        for (const name of CHANGED) if (name in state) held[name] = state[name];
        rev = Number(answer.rev) || 0;
        snapshotAsked = false;
        const later = queued.filter((m) => m.rev > rev).sort((a, b) => a.rev - b.rev);
        queued = [];
        if (answer.state) onConversation();
        for (const m of later) onChanges(m);
      }, () => {
        snapshotAsked = false; // the next change that does not fit asks again
        queued = [];
      });
  }
  function onCommLive() {
    if (typeof model.comm_live === "boolean" && model.comm_live) {
      connected = true;
      update();
    } else disconnected();
  }
  function onCommands() {
    if (menuState === "open") syncMenu();
  }

  // Every model event the widget follows, in one table: on here, off in the cleanup.
  const modelEvents = [
    ...CONVERSATION.map((name) => [`change:${name}`, CHANGED.includes(name) ? () => {
      adopt(name); // the whole state arrived (a reload, a request for it): it is current
      onConversation();
    } : onConversation]),
    ["change:streaming", () => {
      adopt("streaming");
      onStreaming();
    }],
    ["msg:custom", onChanges],
    ["change:busy", () => {
      adopt("busy");
      update();
    }],
    ["change:progress", onProgress],
    ["change:session_name", update],
    ["change:commands", onCommands],
    ["comm_live_update", onCommLive],
  ];
  for (const [event, fn] of modelEvents) model.on(event, fn);
  onConversation();
  scrollDown();
  // Changes made after the model's state was sent never reach this new view: ask whether
  // there were any (the answer carries the whole state only if so).
  if (typeof model.get("snapshot_revision") === "number") askSnapshot();

  // ---- the ring: the ContextWidget `%context` shows, rendered here (not copied) ----
  const ringRef = model.get("ring");
  if (ringRef && host && typeof host.getWidget === "function") {
    Promise.resolve(host.getWidget(ringRef))
      .then((child) => child.render({ el: ringSlot, signal }))
      .catch((err) => {
        ringSlot.textContent = `ring: ${(err && err.message) || err}`;
      });
  }

  return () => {
    for (const [event, fn] of modelEvents) model.off(event, fn);
    clearTimeout(closeTimer);
    for (const c of [...inflight]) c.abort(new Error("closed"));
    for (const dispose of disposers.splice(0)) dispose();
    root.remove();
  };
}

export default { render };
