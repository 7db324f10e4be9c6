// Drives widgets/chat.js (the browser side of ocw.widgets.chat.ChatWidget) in jsdom with a
// fake anywidget model, a fake experimental.invoke (whose answers each test controls) and a
// fake host. Every rule of seed 004's slash menu has a test here.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import widget, { CLOSE_MS, matchCommands, menuQuery, parseCommand } from "../../widgets/chat.js";
import SLASH_MENU from "./slash_menu.json";
import { fakeModel as makeModel } from "./fake_model.js";
import UI_LABELS from "./ui_labels.json";

const WIDGETS = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "widgets");
const CSS = readFileSync(join(WIDGETS, "chat.css"), "utf8");
const SOURCE = readFileSync(join(WIDGETS, "chat.js"), "utf8");

// The table ocw.notebook.commands.slash_menu("en") sends: a checked copy (tests/widgets/test_chat_widget.py
// fails if it differs from Python's), so these tests run against the real command table.
const COMMANDS = SLASH_MENU;

const ITEMS = [
  { id: "n_a1", end_id: "n_a1", depth: 1, role: "user", time: "10:00", preview: "first question", text: "first question" },
  { id: "n_a2", end_id: "n_a2", depth: 2, role: "assistant", time: "10:00", preview: "first answer",
    html: "<p>first <strong>answer</strong></p>", tools: [], thinking: "" },
  { id: "n_a3", end_id: "n_a3", depth: 3, role: "user", time: "10:01", preview: "second", text: "second <b>q</b>" },
  { id: "n_a4", end_id: "n_a5", depth: 5, role: "assistant", time: "10:01", preview: "🔧 read_file", html: "",
    tools: [{ call_id: "c1", name: "read_file", args: '{"path": "a.txt"}', status: "ok", result: "<img src=x>" }],
    thinking: "" },
];

/** The fake model (fake_model.js) holding this widget's traitlets, `initial` on top. */
function fakeModel(initial = {}) {
  const state = {
    session_id: "s1",
    session_name: "notebooks/demo.ipynb",
    head: "n_a5",
    messages: ITEMS,
    has_older: false,
    summary: {},
    capsules: [],
    branches: [],
    notes: [],
    pending: "",
    streaming: "",
    stream_steps: [],
    busy: "",
    commands: COMMANDS,
    lang: "en",
    labels: UI_LABELS.en,
    ring: "anywidget:ring-1",
    ...initial,
  };
  return makeModel(state);
}

/** experimental.invoke as anywidget provides it: a promise per request, rejected when its
 * signal aborts. Each call is recorded; `answer(i, response)` resolves the i-th. */
function fakeInvoke() {
  const calls = [];
  const invoke = vi.fn((name, msg, options = {}) => {
    let resolve;
    let reject;
    const promise = new Promise((res, rej) => {
      resolve = res;
      reject = rej;
    });
    const call = { name, msg, signal: options.signal, resolve, reject };
    if (options.signal) options.signal.addEventListener("abort", () => reject(options.signal.reason));
    calls.push(call);
    return promise;
  });
  invoke.calls = calls;
  invoke.answer = (i, response) => calls[i].resolve([response, []]);
  return invoke;
}

let el;
let cleanup;
let invoke;
let host;

function mount(initial) {
  const model = fakeModel(initial);
  invoke = fakeInvoke();
  host = {
    rendered: [],
    getWidget: vi.fn(async (ref) => ({ render: async ({ el: slot }) => host.rendered.push({ ref, slot }) })),
  };
  cleanup = widget.render({ model, el, experimental: { invoke }, host });
  return model;
}

const $ = (sel) => el.querySelector(sel);
const $$ = (sel) => [...el.querySelectorAll(sel)];
const flush = () => new Promise((r) => setTimeout(r, 0));
const input = () => $(".ocw-input");
const menu = () => $(".ocw-menu");
const optionNames = () => $$(".ocw-menu-item").map((o) => o.dataset.name);
const menuOpen = () => !menu().hidden && !menu().classList.contains("ocw-menu-closing");

function type(value) {
  const i = input();
  i.value = value;
  i.dispatchEvent(new Event("input", { bubbles: true }));
}
function key(k, extra = {}) {
  const e = new KeyboardEvent("keydown", { key: k, bubbles: true, cancelable: true, ...extra });
  input().dispatchEvent(e);
  return e;
}

beforeEach(() => {
  el = document.createElement("div");
  document.body.append(el);
});

afterEach(() => {
  if (cleanup) cleanup();
  cleanup = undefined;
  vi.useRealTimers();
  el.remove();
});

describe("pure helpers", () => {
  it("menuQuery: open only for a leading / and no whitespace", () => {
    expect(menuQuery("/")).toBe("");
    expect(menuQuery("/co")).toBe("co");
    expect(menuQuery("/compact")).toBe("compact");
    expect(menuQuery("/compact ")).toBe(null);
    expect(menuQuery("/compact\n")).toBe(null);
    expect(menuQuery(" /co")).toBe(null);
    expect(menuQuery("co")).toBe(null);
    expect(menuQuery("")).toBe(null);
  });

  it("matchCommands keeps the table's order and matches the name's start", () => {
    expect(matchCommands(COMMANDS, "co").map((c) => c.name)).toEqual(["compact", "context"]);
    expect(matchCommands(COMMANDS, "session").map((c) => c.name)).toEqual(["sessions", "session"]);
    expect(matchCommands(COMMANDS, "").length).toBe(COMMANDS.length);
    expect(matchCommands(COMMANDS, "pact")).toEqual([]);
  });

  it("parseCommand: the first word must be a registered command", () => {
    expect(parseCommand("/compact 2000", COMMANDS)).toMatchObject({ command: { name: "compact" }, args: "2000" });
    expect(parseCommand("/rewind", COMMANDS)).toMatchObject({ command: { name: "rewind" }, args: "" });
    expect(parseCommand("  /branch n_ab12  ", COMMANDS)).toMatchObject({ args: "n_ab12" });
    expect(parseCommand("/etc/hosts is missing", COMMANDS)).toBe(null);
    expect(parseCommand("/compacting now", COMMANDS)).toBe(null);
    expect(parseCommand("compact", COMMANDS)).toBe(null);
  });
});

describe("slash menu (seed 004)", () => {
  it("opens upward when the input starts with / and has no space", () => {
    mount();
    expect(menu().hidden).toBe(true);
    type("/");
    expect(menuOpen()).toBe(true);
    expect(optionNames()).toEqual(COMMANDS.map((c) => c.name));
    type("/co");
    expect(optionNames()).toEqual(["compact", "context"]);
    // Upward: the menu sits above the composer (bottom: 100% of it), not below.
    const rule = /\.ocw-chat \.ocw-menu \{([^}]*)\}/.exec(CSS)[1];
    expect(rule).toMatch(/position:\s*absolute/);
    expect(rule).toMatch(/bottom:\s*calc\(100%/);
    expect(rule).not.toMatch(/\btop:/);
    expect(menu().nextElementSibling).toBe(input());
  });

  it("does not open for text that does not start with /, or has a space", () => {
    mount();
    for (const v of ["hello", " /co", "a/b", "/co mpact"]) {
      type(v);
      expect(menu().hidden, v).toBe(true);
    }
    type("/zzz"); // no command matches: nothing to show
    expect(menu().hidden).toBe(true);
  });

  it("closes over 380 ms when a space is typed", () => {
    vi.useFakeTimers();
    mount();
    type("/compact");
    expect(menuOpen()).toBe(true);
    type("/compact ");
    expect(menu().hidden).toBe(false);
    expect(menu().classList.contains("ocw-menu-closing")).toBe(true);
    expect(input().getAttribute("aria-expanded")).toBe("false");
    vi.advanceTimersByTime(CLOSE_MS - 1);
    expect(menu().hidden).toBe(false);
    vi.advanceTimersByTime(1);
    expect(menu().hidden).toBe(true);
    expect(CLOSE_MS).toBe(380);
  });

  it("a closing menu never swallows Enter: what was typed runs", () => {
    vi.useFakeTimers();
    mount();
    type("/compact");
    type("/compact 2000"); // closing now, still on screen
    expect(menu().hidden).toBe(false);
    expect(menu().classList.contains("ocw-menu-closing")).toBe(true);
    const e = key("Enter");
    expect(e.defaultPrevented).toBe(true);
    // The typed arguments, not the menu's pick (which would drop them).
    expect(invoke.calls.map((c) => [c.name, c.msg])).toEqual([["chat_run", { name: "compact", args: "2000" }]]);
  });

  it("a closing menu never swallows Enter: text that is no command is sent as chat", async () => {
    vi.useFakeTimers();
    mount();
    type("/co");
    type("/co is short for cobalt");
    expect(menu().classList.contains("ocw-menu-closing")).toBe(true);
    key("Enter");
    expect(invoke.calls.map((c) => [c.name, c.msg])).toEqual([["chat_send", { text: "/co is short for cobalt" }]]);
  });

  it("the Send button runs the highlighted command while the menu is open, as Enter does", () => {
    mount();
    type("/comp");
    expect(menu().hidden).toBe(false);
    $(".ocw-send").click(); // the pick runs /compact, not the typed "/comp" (no such command)
    expect(invoke.calls.map((c) => [c.name, c.msg])).toEqual([["chat_run", { name: "compact", args: "" }]]);
  });

  it("the message being sent shows under You until the kernel has it", () => {
    const model = mount();
    model.set("pending", "tell me more");
    const pending = $(".ocw-live .ocw-pending");
    expect(pending.querySelector(".ocw-msg-role").textContent).toBe(UI_LABELS.en.chat_you);
  });

  it("Enter runs a registered command with its arguments", () => {
    mount();
    type("/compact 2000");
    key("Enter");
    expect(invoke.calls.map((c) => [c.name, c.msg])).toEqual([["chat_run", { name: "compact", args: "2000" }]]);
    expect(input().value).toBe(""); // dispatched: the composer is clear for the next message
  });

  it("Enter sends anything else as chat, slashes included", async () => {
    mount();
    const texts = ["hello there", "/etc/hosts is missing", "/no such thing"];
    for (const [i, text] of texts.entries()) {
      type(text);
      key("Enter");
      expect([invoke.calls[i].name, invoke.calls[i].msg]).toEqual(["chat_send", { text }]);
      invoke.answer(i, { ok: true });
      await flush();
    }
    expect(invoke.calls.length).toBe(3);
  });

  it("a lone unknown /word asks first; Enter again sends it, an edit asks again", async () => {
    mount();
    type("/sumary");
    key("Enter");
    expect(invoke.calls).toEqual([]);
    expect(input().value).toBe("/sumary");
    expect($(".ocw-chat-alert").hidden).toBe(false);
    expect($(".ocw-chat-alert").textContent).toBe("Unknown command — send it as a message with Enter again?");
    type("/sumar"); // edited: a new question
    key("Enter");
    expect(invoke.calls).toEqual([]);
    key("Enter");
    expect(invoke.calls.map((c) => [c.name, c.msg])).toEqual([["chat_send", { text: "/sumar" }]]);
    expect($(".ocw-chat-alert").hidden).toBe(true);
    invoke.answer(0, { ok: true });
    await flush();
    type("/summary"); // a registered one never asks
    key("Escape");
    key("Enter");
    expect(invoke.calls.map((c) => c.name)).toEqual(["chat_send", "chat_run"]);
  });

  it("the unknown-command question is in Chinese under zh", () => {
    mount({ lang: "zh", labels: UI_LABELS.zh });
    type("/nosuch");
    key("Enter");
    expect($(".ocw-chat-alert").textContent).toBe("未知命令——再按一次 Enter 将其作为消息发送？");
    expect(invoke.calls).toEqual([]);
  });

  it.each(["compact", "context", "rewind", "branch", "new", "clear", "sessions", "doctor"])(
    "the optional-argument command /%s runs on Enter in the menu", (name) => {
      mount();
      type(`/${name}`);
      expect(optionNames()[0]).toBe(name);
      key("Enter");
      expect(invoke.calls.map((c) => [c.name, c.msg])).toEqual([["chat_run", { name, args: "" }]]);
      expect(menu().hidden).toBe(true);
    });

  it.each(["compact", "rewind", "branch", "doctor"])("the optional-argument command /%s runs on a click", (name) => {
    mount();
    type("/");
    $(`.ocw-menu-item[data-name="${name}"]`).click();
    expect(invoke.calls.map((c) => [c.name, c.msg])).toEqual([["chat_run", { name, args: "" }]]);
  });

  it("a required-argument command fills the prefix and waits (Enter, click, or typed bare)", () => {
    mount();
    type("/sess");
    expect(optionNames()).toEqual(["sessions", "session"]);
    key("ArrowDown");
    key("Enter");
    expect(input().value).toBe("/session ");
    expect(invoke.calls).toEqual([]);
    type("/");
    $('.ocw-menu-item[data-name="session"]').click();
    expect(input().value).toBe("/session ");
    expect(invoke.calls).toEqual([]);
    type("/session");
    key("Escape");
    key("Enter"); // the menu is closed: the bare command still waits for its argument
    expect(input().value).toBe("/session ");
    expect(invoke.calls).toEqual([]);
    type("/session notebooks/old.ipynb");
    key("Enter");
    expect(invoke.calls.map((c) => c.msg)).toEqual([{ name: "session", args: "notebooks/old.ipynb" }]);
  });

  it("/help sets the input to / so the menu opens again", () => {
    mount();
    type("/he");
    key("Enter");
    expect(input().value).toBe("/");
    expect(menuOpen()).toBe(true);
    expect(optionNames()).toEqual(COMMANDS.map((c) => c.name));
    type("/help");
    key("Escape");
    key("Enter"); // typed in full, menu closed: the same
    expect(input().value).toBe("/");
    expect(menuOpen()).toBe(true);
    expect(invoke.calls).toEqual([]);
  });

  it("with no session a command keeps the input and says Start a conversation first", () => {
    mount({ session_id: "", messages: [], head: "" });
    const alert = $(".ocw-chat-alert");
    expect(alert.getAttribute("role")).toBe("alert");
    expect(alert.hidden).toBe(true);
    for (const typed of ["/compact", "/compact 2000", "/rewind 1", "/branch"]) {
      type(typed);
      key("Escape");
      key("Enter");
      expect(input().value).toBe(typed);
      expect(alert.hidden).toBe(false);
      expect(alert.textContent).toBe("Start a conversation first");
    }
    type("/rew");
    key("Enter"); // picked in the menu: the same
    expect(input().value).toBe("/rew");
    expect(invoke.calls).toEqual([]);
    // A command that needs no session still runs.
    type("/new");
    key("Enter");
    expect(invoke.calls.map((c) => c.msg)).toEqual([{ name: "new", args: "" }]);
  });

  it("the kernel's own no-session answer puts the text back and says so", async () => {
    mount();
    type("/compact 100");
    key("Enter");
    expect(input().value).toBe("");
    invoke.answer(0, { ok: false, no_session: true, error: "Start a conversation first" });
    await flush();
    expect(input().value).toBe("/compact 100");
    expect($(".ocw-chat-alert").textContent).toBe("Start a conversation first");
  });
});

describe("keyboard: the ARIA combobox pattern", () => {
  it("names the parts: combobox, listbox, options, the active descendant", () => {
    mount();
    const i = input();
    expect(i.getAttribute("role")).toBe("combobox");
    expect(i.getAttribute("aria-autocomplete")).toBe("list");
    expect(i.getAttribute("aria-controls")).toBe(menu().id);
    expect(menu().getAttribute("role")).toBe("listbox");
    expect(i.getAttribute("aria-expanded")).toBe("false");
    type("/co");
    expect(i.getAttribute("aria-expanded")).toBe("true");
    const opts = $$(".ocw-menu-item");
    expect(opts.every((o) => o.getAttribute("role") === "option" && o.id)).toBe(true);
    expect(i.getAttribute("aria-activedescendant")).toBe(opts[0].id);
    expect(opts.map((o) => o.getAttribute("aria-selected"))).toEqual(["true", "false"]);
  });

  it("Down and Up move the active option and wrap around", () => {
    mount();
    type("/co");
    const active = () => $$(".ocw-menu-item").findIndex((o) => o.getAttribute("aria-selected") === "true");
    expect(active()).toBe(0);
    expect(key("ArrowDown").defaultPrevented).toBe(true);
    expect(active()).toBe(1);
    expect(input().getAttribute("aria-activedescendant")).toBe($$(".ocw-menu-item")[1].id);
    key("ArrowDown");
    expect(active()).toBe(0); // wrapped
    key("ArrowUp");
    expect(active()).toBe(1); // wrapped the other way
    key("Enter");
    expect(invoke.calls.map((c) => c.msg)).toEqual([{ name: "context", args: "" }]);
  });

  it("the active option stays put while the query narrows", () => {
    mount();
    type("/c");
    key("ArrowDown"); // context
    expect($$(".ocw-menu-item")[1].dataset.name).toBe("context");
    type("/co");
    expect($$(".ocw-menu-item").find((o) => o.getAttribute("aria-selected") === "true").dataset.name).toBe("context");
  });

  it("Tab completes the active command without running it; a space then closes the menu", () => {
    vi.useFakeTimers();
    mount();
    type("/co");
    expect(key("Tab").defaultPrevented).toBe(true);
    expect(input().value).toBe("/compact ");
    expect(invoke.calls).toEqual([]);
    expect(input().getAttribute("aria-expanded")).toBe("false");
    type("/compact 500");
    key("Enter");
    expect(invoke.calls.map((c) => c.msg)).toEqual([{ name: "compact", args: "500" }]);
  });

  it("Escape closes the menu and keeps the text", () => {
    mount();
    type("/co");
    expect(key("Escape").defaultPrevented).toBe(true);
    expect(menu().hidden).toBe(true);
    expect(input().getAttribute("aria-expanded")).toBe("false");
    expect(input().hasAttribute("aria-activedescendant")).toBe(false);
    expect(input().value).toBe("/co");
    expect(invoke.calls).toEqual([]);
    // Escape with the menu closed leaves everything alone.
    expect(key("Escape").defaultPrevented).toBe(false);
  });

  it("Up/Down/Tab are the textarea's own while the menu is closed; Shift+Enter is a new line", () => {
    mount();
    type("hello");
    expect(key("ArrowDown").defaultPrevented).toBe(false);
    expect(key("Tab").defaultPrevented).toBe(false);
    expect(key("Enter", { shiftKey: true }).defaultPrevented).toBe(false);
    expect(invoke.calls).toEqual([]);
  });

  it("the composer owns its keys: none of them reaches the notebook (document or the cell)", () => {
    mount();
    const seen = [];
    const spy = (e) => seen.push(`${e.type}:${e.key}`);
    for (const t of ["keydown", "keyup", "keypress"]) {
      document.addEventListener(t, spy);
      el.addEventListener(t, spy);
    }
    try {
      type("line one");
      key("Enter", { shiftKey: true }); // a new line, not the notebook's run-and-advance
      key("Escape"); // not the notebook's command mode
      key("Tab");
      type("/");
      expect(menuOpen()).toBe(true);
      key("ArrowDown");
      key("ArrowUp");
      key("Tab");
      type("/");
      key("Escape");
      for (const t of ["keyup", "keypress"]) {
        input().dispatchEvent(new KeyboardEvent(t, { key: "Enter", shiftKey: true, bubbles: true }));
      }
      type("hello");
      key("Enter"); // the send
      expect(seen).toEqual([]);
      // A key outside the composer still bubbles: the spy is live, so [] above can fail.
      $(".ocw-conversation").dispatchEvent(new KeyboardEvent("keydown", { key: "j", bubbles: true }));
      expect(seen).toEqual(["keydown:j", "keydown:j"]);
    } finally {
      for (const t of ["keydown", "keyup", "keypress"]) {
        document.removeEventListener(t, spy);
        el.removeEventListener(t, spy);
      }
    }
  });

  it("Lumino's keymap stops at the composer (data-lm-suppress-shortcuts)", () => {
    mount();
    expect(input().closest("[data-lm-suppress-shortcuts]")).not.toBe(null);
    expect($(".ocw-conversation").closest("[data-lm-suppress-shortcuts]")).toBe(null);
  });

  it("an IME's Enter is not a send", () => {
    mount();
    type("你好");
    expect(key("Enter", { isComposing: true }).defaultPrevented).toBe(false);
    expect(invoke.calls).toEqual([]);
  });
});

describe("requests: answered, failed, refused, disconnected", () => {
  it("a send passes its own abort signal (never anywidget's 3 s default)", () => {
    mount();
    type("hello");
    key("Enter");
    expect(invoke.calls[0].signal).toBeInstanceOf(AbortSignal);
    expect(invoke.calls[0].signal.aborted).toBe(false);
  });

  it("a failed send shows the error and puts the text back", async () => {
    mount();
    type("please summarise the thread");
    key("Enter");
    expect(input().value).toBe("");
    expect($(".ocw-chat-status").textContent).toBe("Replying…");
    invoke.answer(0, { ok: false, error: "AuthError: the key was refused — set OPENAI_API_KEY" });
    await flush();
    expect(input().value).toBe("please summarise the thread");
    expect($(".ocw-chat-alert").textContent).toBe("Failed: AuthError: the key was refused — set OPENAI_API_KEY");
    expect($(".ocw-chat-status").textContent).toBe("");
  });

  it("a failure keeps what was typed meanwhile too", async () => {
    mount();
    type("first");
    key("Enter");
    type("draft of the next");
    invoke.answer(0, { ok: false, error: "boom" });
    await flush();
    expect(input().value).toBe("first\n\ndraft of the next");
  });

  it("sending while a turn runs is refused with a message, the text kept", async () => {
    mount();
    type("one");
    key("Enter");
    type("two");
    key("Enter");
    expect(invoke.calls.length).toBe(1);
    expect(input().value).toBe("two");
    expect($(".ocw-chat-alert").textContent).toBe(UI_LABELS.en.chat_busy_refused);
    type("/compact");
    key("Enter");
    expect(invoke.calls.length).toBe(1);
    invoke.answer(0, { ok: true });
    await flush();
    type("two");
    key("Enter");
    expect(invoke.calls.map((c) => c.msg)).toEqual([{ text: "one" }, { text: "two" }]);
  });

  it("a kernel that goes away aborts what is waiting, says so and disables the controls", async () => {
    const model = mount();
    type("hello");
    key("Enter");
    model.comm_live = false;
    model.trigger("comm_live_update");
    await flush();
    expect(invoke.calls[0].signal.aborted).toBe(true);
    expect($(".ocw-chat").dataset.state).toBe("disconnected");
    expect(input().disabled).toBe(true);
    expect($(".ocw-send").disabled).toBe(true);
    expect($$(".ocw-graph-node").every((b) => b.disabled)).toBe(true);
    expect($(".ocw-chat-status").textContent).toBe(UI_LABELS.en.chat_disconnected);
    expect(input().value).toBe("hello"); // put back: never lost
    // Nothing more is sent.
    $(".ocw-send").click();
    expect(invoke.calls.length).toBe(1);
  });
});

describe("conversation", () => {
  it("shows model text only from the kernel's html, the rest as text", () => {
    mount();
    const msgs = $$(".ocw-conversation .ocw-thread .ocw-msg");
    expect(msgs.map((m) => m.dataset.id)).toEqual(["n_a1", "n_a2", "n_a3", "n_a4"]);
    expect(msgs[1].querySelector(".ocw-msg-html strong").textContent).toBe("answer");
    expect(msgs[2].querySelector(".ocw-msg-text").textContent).toBe("second <b>q</b>");
    expect(msgs[2].querySelector("b")).toBe(null);
    const tool = msgs[3].querySelector("details.ocw-tool");
    expect(tool.open).toBe(false); // collapsed
    expect(tool.querySelector("summary").textContent).toBe('🔧 read_file({"path": "a.txt"}) → ok');
    expect(tool.querySelector("pre").textContent).toBe("<img src=x>");
    expect(el.querySelector("img")).toBe(null);
    // innerHTML is set only from `html`, `streaming` and step html (the kernel's sanitized output).
    const sinks = [...SOURCE.matchAll(/\.innerHTML\s*=\s*([^;]+);/g)].map((m) => m[1].trim());
    expect(sinks).toEqual(["item.html", "note.html", 'summary.html || ""', "step.html", "html"]);
  });

  it("marks a failed tool step as failed (data-status drives its red line), an ok one as ok", () => {
    const failedStep = { ...ITEMS[3], tools: [{ ...ITEMS[3].tools[0], status: "error", result: "no such file" }] };
    mount({ messages: [...ITEMS.slice(0, 3), failedStep] });
    const tool = $(".ocw-thread details.ocw-tool");
    expect(tool.dataset.status).toBe("error");
    expect(tool.querySelector("summary").textContent).toBe('🔧 read_file({"path": "a.txt"}) → error');
    expect(CSS).toMatch(/\.ocw-tool\[data-status="error"\] \.ocw-tool-line \{[^}]*color: var\(--ocw-red\)/);
    cleanup();
    mount();
    expect($(".ocw-thread details.ocw-tool").dataset.status).toBe("ok");
  });

  it("Undo on a capsule still shown after the session went away says there is none and asks nothing", () => {
    // session_id is ordinary state and the summary a change: a view can hold the capsule a moment longer
    mount({ session_id: "", summary: { id: "n_s1", cover_count: 2, time: "10:05", html: "<p>text</p>" } });
    type("a draft");
    $(".ocw-thread button.ocw-summary-undo").click();
    expect(invoke.calls).toEqual([]);
    expect($(".ocw-chat-alert").textContent).toBe("Start a conversation first");
    expect($(".ocw-chat-alert").hidden).toBe(false);
    expect(input().value).toBe("a draft");
    expect($(".ocw-chat-status").textContent).toBe("");
  });

  it("a running compaction's status counts the seconds on between its steps", () => {
    vi.useFakeTimers();
    const model = mount();
    model.set("progress", { call: 2, calls: 5, elapsed: 3.1 });
    expect($(".ocw-chat-status").textContent).toBe("Compacting… 2 of 5 · 3 s");
    vi.advanceTimersByTime(2_000);
    expect($(".ocw-chat-status").textContent).toBe("Compacting… 2 of 5 · 5 s");
    // ten minutes on one step (a long history, a slow local model): the clock jumps, the next tick shows it
    vi.setSystemTime(Date.now() + 597_500);
    vi.advanceTimersByTime(500);
    expect($(".ocw-chat-status").textContent).toBe("Compacting… 2 of 5 · 603 s");
    model.set("progress", {});
    expect($(".ocw-chat-status").textContent).toBe("");
    vi.advanceTimersByTime(1_000);
    expect($(".ocw-chat-status").textContent).toBe("");
  });

  it("streams the reply as the kernel re-renders it", () => {
    const model = mount();
    model.set("pending", "tell me more");
    const pending = $(".ocw-live .ocw-pending");
    expect(pending.querySelector(".ocw-msg-text").textContent).toBe("tell me more");
    model.set("streaming", "<p>Par</p>");
    const streaming = $(".ocw-streaming");
    expect(streaming.hidden).toBe(false);
    expect(streaming.querySelector(".ocw-msg-html").textContent).toBe("Par");
    expect(streaming.querySelector(".ocw-msg-role").textContent).toBe("Assistant · Replying…");
    model.set("streaming", "<p>Partial <em>reply</em></p>");
    expect($(".ocw-streaming em").textContent).toBe("reply");
    model.set("stream_steps", [{ html: "<p>Let me look.</p>" }, { tool: { name: "ls", args: "{}", status: "ok", result: "a\nb" } }]);
    expect($$(".ocw-live .ocw-streaming-step").map((n) => n.textContent)).toEqual(["Let me look."]);
    expect($(".ocw-live .ocw-tool summary").textContent).toBe("🔧 ls({}) → ok");
    // The turn is over (Python clears the three together): nothing transient is left.
    model.set("pending", "");
    model.set("streaming", "");
    model.set("stream_steps", []);
    expect($(".ocw-live").children.length).toBe(0);
  });

  it("the active summary is a capsule at the top that opens to its text and coverage", () => {
    mount({ summary: { id: "n_s1", cover_count: 2, time: "10:05", html: "<p>They discussed <code>a.txt</code></p>" },
      capsules: [{ id: "n_s0", cover_count: 1, active: false, time: "" }, { id: "n_s1", cover_count: 2, active: true, time: "" }] });
    const capsule = $(".ocw-thread").firstElementChild;
    expect(capsule.matches("details.ocw-summary-capsule")).toBe(true);
    expect(capsule.open).toBe(false);
    expect(capsule.querySelector(".ocw-summary-covers").textContent).toBe("covers the first 2 messages");
    expect(capsule.querySelector(".ocw-summary-body code").textContent).toBe("a.txt");
    // The messages it covers are marked; the others not.
    const covered = $$(".ocw-thread .ocw-msg").map((m) => m.classList.contains("ocw-covered"));
    expect(covered).toEqual([true, true, false, false]);
  });

  it("the summary capsule shows the session memory: a section per kind, each item with its turn, as text", () => {
    mount({ summary: { id: "n_s1", cover_count: 2, time: "", html: "<p>Prose.</p>", memory: [
      { kind: "instruction", items: [{ text: "From now on answer in Chinese.", turn: 3 }] },
      { kind: "setting", items: [{ text: "batch_size = 128", turn: 9 }, { text: "lr = <img src=x onerror=alert(1)>", turn: 4 }] },
    ] }, capsules: [{ id: "n_s1", cover_count: 2, active: true, time: "" }] });
    const box = $(".ocw-summary-capsule .ocw-summary-memory");
    expect(box.querySelector(".ocw-memory-title").textContent).toBe("Session memory");
    expect($$(".ocw-memory-section").map((s) => s.querySelector(".ocw-memory-heading").textContent))
      .toEqual(["Standing instructions and preferences", "Current settings and values"]);
    expect($$(".ocw-memory-item").map((li) => [li.querySelector(".ocw-memory-text").textContent,
      li.querySelector(".ocw-memory-turn").textContent])).toEqual([
      ["From now on answer in Chinese.", "turn 3"], ["batch_size = 128", "turn 9"],
      ["lr = <img src=x onerror=alert(1)>", "turn 4"]]);
    expect(box.querySelector("img")).toBe(null); // model text is never parsed as HTML
    expect($(".ocw-summary-body").textContent).toBe("Prose.");
  });

  it("a summary without memory shows no memory box", () => {
    mount({ summary: { id: "n_s1", cover_count: 2, time: "", html: "<p>Prose.</p>" },
      capsules: [{ id: "n_s1", cover_count: 2, active: true, time: "" }] });
    expect($(".ocw-summary-capsule")).not.toBe(null);
    expect($(".ocw-summary-memory")).toBe(null);
  });

  it("Undo on the summary capsule runs /compact --undo without opening the capsule", () => {
    mount({ summary: { id: "n_s1", cover_count: 2, time: "10:05", html: "<p>text</p>" },
      capsules: [{ id: "n_s0", cover_count: 1, active: true, time: "" },
        { id: "n_s1", cover_count: 4, active: false, undone: true, time: "" }] });
    const capsule = $(".ocw-thread .ocw-summary-capsule");
    const undo = capsule.querySelector("button.ocw-summary-undo");
    expect(undo.textContent).toBe("Undo");
    expect(undo.title).toContain("%compact --undo");
    undo.click();
    expect(capsule.open).toBe(false);
    expect(invoke.calls.map((c) => [c.name, c.msg])).toEqual([["chat_run", { name: "compact", args: "--undo" }]]);
    // The graph names an undone summary as undone, and what only it covered is not marked covered.
    const labels = $$(".ocw-graph-capsule").map((n) => n.textContent);
    expect(labels.some((t) => t.endsWith("· undone"))).toBe(true);
    expect(labels.some((t) => t.endsWith("· superseded"))).toBe(false);
    const old = $$(".ocw-thread .ocw-msg").map((m) => m.classList.contains("ocw-covered-old"));
    expect(old).toEqual([false, false, false, false]);
  });

  it("system messages sit after the message they followed, one style per state", () => {
    mount({ notes: [
      { id: 1, kind: "started", text: "Compacting context…", after: "n_a2" },
      { id: 2, kind: "finished", text: "Context compacted: covered 2 older messages, 900 → 300 tokens", after: "n_a2" },
      { id: 3, kind: "no_op", text: "Context is already compacted; no older messages to fold.", after: "n_a5" },
      { id: 4, kind: "failed", text: "Context compaction failed: boom", after: "n_a5" },
      { id: 5, kind: "output", text: "Branches…", after: "" },
    ] });
    const seq = [...$(".ocw-thread").children].map((n) => n.dataset.note ? `note:${n.classList[1]}` : n.dataset.id);
    expect(seq).toEqual(["note:ocw-note-output", "n_a1", "n_a2", "note:ocw-note-started", "note:ocw-note-finished",
      "n_a3", "n_a4", "note:ocw-note-no_op", "note:ocw-note-failed"]);
    expect($(".ocw-note-output").tagName).toBe("PRE");
  });

  it("a command's result with html (/summary) shows that html; any other note only its text", () => {
    mount({ notes: [
      { id: 1, kind: "output", text: "Summary n_s1 [active]", html: "<p><strong>Summary n_s1</strong></p><blockquote><p>kept</p></blockquote>", after: "" },
      { id: 2, kind: "info", text: "<b>not html</b>", html: "<b>ignored</b>", after: "" },
      { id: 3, kind: "output", text: "<i>plain</i>", after: "" },
    ] });
    const [rich, info, plain] = $$(".ocw-note");
    expect(rich.tagName).toBe("DIV");
    expect(rich.querySelector("blockquote p").textContent).toBe("kept");
    expect(info.textContent).toBe("<b>not html</b>");
    expect(info.querySelector("b")).toBe(null);
    expect(plain.tagName).toBe("PRE");
    expect(plain.textContent).toBe("<i>plain</i>");
  });

  it("loads older messages on demand", async () => {
    const model = mount({ has_older: true });
    const btn = $(".ocw-load-older");
    expect(btn.hidden).toBe(false);
    btn.click();
    expect(invoke.calls.map((c) => [c.name, c.msg])).toEqual([["chat_older", {}]]);
    expect(btn.textContent).toBe("Loading…");
    model.set("messages", [{ id: "n_a0", end_id: "n_a0", depth: 1, role: "user", text: "zero" }, ...ITEMS]);
    model.set("has_older", false);
    invoke.answer(0, { ok: true, count: 1 });
    await flush();
    expect($(".ocw-load-older").hidden).toBe(true);
    expect($$(".ocw-thread .ocw-msg")[0].dataset.id).toBe("n_a0");
  });
});

describe("graph", () => {
  const branches = [
    { id: "n_a5", length: 5, time: "10:01", current: true, leaf: true, fork_id: "", fork_depth: 5, first_id: "", preview: "" },
    { id: "n_b9", length: 8, time: "09:40", current: false, leaf: true, fork_id: "n_a2", fork_depth: 2, first_id: "n_b3",
      preview: "try it with polars" },
  ];

  it("marks HEAD, hangs branches and capsules where they leave the branch", () => {
    mount({ branches, capsules: [{ id: "n_s0", cover_count: 1, active: false }, { id: "n_s1", cover_count: 2, active: true }] });
    const rows = [...$(".ocw-graph-rail").children].map((n) => n.className.split(" ")[0] + ":" + (n.dataset.id || ""));
    expect(rows).toEqual(["ocw-graph-row:n_a1", "ocw-graph-capsule:n_s0", "ocw-graph-row:n_a2", "ocw-graph-capsule:n_s1",
      "ocw-graph-branch:n_b9", "ocw-graph-row:n_a3", "ocw-graph-row:n_a5"]);
    const head = $(".ocw-graph-row.ocw-head");
    expect(head.dataset.id).toBe("n_a5");
    expect(head.querySelector(".ocw-graph-head").textContent).toBe("HEAD");
    expect(head.querySelector("button").disabled).toBe(true);
    expect($('.ocw-graph-capsule[data-id="n_s0"]').classList.contains("ocw-superseded")).toBe(true);
    expect($('.ocw-graph-capsule[data-id="n_s1"]').classList.contains("ocw-active")).toBe(true);
    const b = $(".ocw-graph-branch");
    expect(b.querySelector(".ocw-branch-where").textContent).toBe("after message 2");
    expect(b.querySelector(".ocw-branch-preview").textContent).toBe("“try it with polars”");
    expect(b.querySelector(".ocw-branch-meta").textContent).toBe("8 messages · 09:40");
    expect($$(".ocw-graph-row").map((r) => r.classList.contains("ocw-covered"))).toEqual([true, true, false, false]);
  });

  it("marks the rows a superseded summary covered, up to and including its last message", () => {
    // the active summary covers messages 1-2, a superseded one 1-3: row 3 is the boundary
    mount({ capsules: [{ id: "n_s0", cover_count: 3, active: false }, { id: "n_s1", cover_count: 2, active: true }] });
    const rows = $$(".ocw-graph-row");
    expect(rows.map((r) => Number(r.dataset.depth))).toEqual([1, 2, 3, 5]);
    expect(rows.map((r) => r.classList.contains("ocw-covered"))).toEqual([true, true, false, false]);
    expect(rows.map((r) => r.classList.contains("ocw-covered-old"))).toEqual([false, false, true, false]);
  });

  it("branches that leave alike show how each ends; a lone one shows no ending", () => {
    const alike = { fork_id: "n_a2", fork_depth: 2, first_id: "n_b3", current: false, leaf: true, length: 6, time: "09:40",
      preview: "Which retry policy?" };
    mount({ branches: [branches[0], { ...alike, id: "n_c1", ending: "and with polars?" },
      { ...alike, id: "n_c2", ending: "and with duckdb?" }] });
    const shown = $$(".ocw-graph-branch").map((b) => b.querySelector(".ocw-branch-ending").textContent);
    expect(shown).toEqual(["… “and with polars?”", "… “and with duckdb?”"]);
    expect($$(".ocw-graph-branch")[0].getAttribute("aria-label")).toContain("… and with polars?");
    cleanup();
    mount({ branches });
    expect($(".ocw-graph-branch .ocw-branch-ending").textContent).toBe("");
    expect($(".ocw-graph-branch").getAttribute("aria-label")).not.toContain("…");
  });

  it("a click on a message asks first, then rewinds to where that message ends", () => {
    mount({ branches });
    const nodes = $$(".ocw-graph-node");
    nodes[1].click();
    const confirm = $(".ocw-confirm");
    expect(confirm.hidden).toBe(false);
    expect(confirm.getAttribute("role")).toBe("alertdialog");
    expect(confirm.querySelector(".ocw-confirm-text").textContent).toBe(
      "Rewind to message 2? The next message starts a new branch; nothing is deleted.");
    expect(invoke.calls).toEqual([]);
    confirm.querySelector(".ocw-confirm-no").click();
    expect(confirm.hidden).toBe(true);
    expect(invoke.calls).toEqual([]);
    nodes[2].click();
    confirm.querySelector(".ocw-confirm-yes").click();
    expect(invoke.calls.map((c) => [c.name, c.msg])).toEqual([["chat_rewind", { node_id: "n_a3" }]]);
  });

  it("rewinding to a tool step goes to its results' end", () => {
    mount({ head: "n_a3" });
    $$(".ocw-graph-node")[3].click();
    $(".ocw-confirm-yes").click();
    expect(invoke.calls.map((c) => c.msg)).toEqual([{ node_id: "n_a5" }]);
  });

  it("a click on a branch switches to it", async () => {
    mount({ branches });
    $(".ocw-graph-branch").click();
    expect(invoke.calls.map((c) => [c.name, c.msg])).toEqual([["chat_branch", { node_id: "n_b9" }]]);
    invoke.answer(0, { ok: false, error: "'n_b9' is not a message of this session" });
    await flush();
    expect($(".ocw-chat-alert").textContent).toBe("Failed: 'n_b9' is not a message of this session");
  });
});

describe("the view after a move", () => {
  const branches = [
    { id: "n_a5", length: 5, time: "10:01", current: true, leaf: true, fork_id: "", fork_depth: 5, first_id: "", preview: "" },
    { id: "n_b9", length: 8, time: "09:40", current: false, leaf: true, fork_id: "n_a2", fork_depth: 2, first_id: "n_b3",
      preview: "try it with polars" },
  ];
  /** jsdom lays nothing out: the conversation gets a height, a content height and a scroll position. */
  function layout(height) {
    const c = $(".ocw-conversation");
    let top = 0;
    Object.defineProperty(c, "scrollHeight", { configurable: true, get: () => height.value });
    Object.defineProperty(c, "clientHeight", { configurable: true, get: () => 200 });
    Object.defineProperty(c, "scrollTop", { configurable: true, get: () => top, set: (v) => { top = Math.min(v, height.value); } });
    return c;
  }
  const longer = [...ITEMS, { id: "n_b6", end_id: "n_b6", depth: 6, role: "user", time: "10:05", preview: "p", text: "p" }];

  it.each([
    ["a branch switch", () => $(".ocw-graph-branch").click()],
    ["a rewind", () => { $$(".ocw-graph-node")[1].click(); $(".ocw-confirm-yes").click(); }],
  ])("after %s the conversation shows the newest message, though the reader had scrolled up", async (_what, move) => {
    const model = mount({ branches });
    const height = { value: 1000 };
    const c = layout(height);
    c.scrollTop = 100; // the reader scrolled up to read
    c.dispatchEvent(new Event("scroll"));
    move();
    height.value = 1400;
    model.set("messages", longer); // the kernel's new branch arrives, then the answer
    expect(c.scrollTop).toBe(1400);
    invoke.answer(0, { ok: true, output: "" });
    await flush();
    expect(c.scrollTop).toBe(1400);
  });

  it("without a move, a reader who scrolled up stays where they are", () => {
    const model = mount({ branches });
    const height = { value: 1000 };
    const c = layout(height);
    c.scrollTop = 100;
    c.dispatchEvent(new Event("scroll"));
    height.value = 1400;
    model.set("messages", longer);
    expect(c.scrollTop).toBe(100);
  });
});

describe("ring and lifecycle", () => {
  it("renders the ContextWidget beside the composer through the host", async () => {
    mount();
    await flush();
    await flush();
    expect(host.getWidget).toHaveBeenCalledWith("anywidget:ring-1");
    expect(host.rendered.length).toBe(1);
    expect(host.rendered[0].slot).toBe($(".ocw-chat-footer .ocw-chat-ring"));
    expect($(".ocw-chat-ring").previousElementSibling).toBe($(".ocw-composer"));
  });

  it("speaks the labels' language", () => {
    const model = mount({ lang: "zh", labels: UI_LABELS.zh });
    expect($(".ocw-send").textContent).toBe("发送");
    expect($(".ocw-chat").getAttribute("lang")).toBe("zh");
    model.set("session_id", "");
    type("/compact");
    key("Enter");
    expect($(".ocw-chat-alert").textContent).toBe("请先开始对话");
  });

  it("a widget at revision 0: its first turn's changes apply after the snapshot answer, a patch without asking again", async () => {
    const model = mount({ snapshot_revision: 0 });
    expect(invoke.calls.map((c) => [c.name, c.msg])).toEqual([["chat_snapshot", { rev: 0 }]]);
    invoke.answer(0, { ok: true, rev: 0 });
    await flush();
    const turn = [{ name: "head", value: "n_a7" },
      { name: "messages", at: 4, remove: 0, items: [
        { id: "n_a6", end_id: "n_a6", depth: 6, role: "user", time: "10:02", preview: "third", text: "third" },
        { id: "n_a7", end_id: "n_a7", depth: 7, role: "assistant", time: "10:02", preview: "r", html: "<p>r</p>",
          tools: [], thinking: "" }] }];
    model.trigger("msg:custom", { kind: "ocw-changes", rev: 1, ops: turn }, []);
    const ids = () => $$(".ocw-thread .ocw-msg").map((m) => m.dataset.id);
    expect(ids()).toEqual(["n_a1", "n_a2", "n_a3", "n_a4", "n_a6", "n_a7"]);
    model.trigger("msg:custom", { kind: "ocw-changes", rev: 2,
      ops: [{ name: "messages", index: 5, set: { html: "<p>r, longer</p>" }, drop: [] }] }, []);
    expect($('[data-id="n_a7"] .ocw-msg-html').innerHTML).toBe("<p>r, longer</p>");
    expect(invoke.calls).toHaveLength(1); // never behind: no second snapshot
  });

  it("cleanup removes every listener and the DOM", () => {
    const model = mount();
    expect(model.listenerCount()).toBeGreaterThan(0);
    cleanup();
    cleanup = undefined;
    expect(model.listenerCount()).toBe(0);
    expect(el.children.length).toBe(0);
  });

  it("the Send button is styled from the theme's variables, not the native look", () => {
    const rule = /\.ocw-chat \.ocw-send \{([^}]*)\}/.exec(CSS)[1];
    expect(rule).toMatch(/background: var\(--ocw-accent\)/);
    expect(rule).toMatch(/color: var\(--jp-ui-inverse-font-color0/);
    expect(rule).toMatch(/border-radius/);
    expect(CSS).toMatch(/--ocw-accent: var\(--jp-brand-color1/); // the accent follows the theme
    expect(/\.ocw-chat \.ocw-send:disabled \{[^}]*background: var\(--ocw-bg-alt\)/.test(CSS)).toBe(true);
  });

  it("CSS classes are all ocw- prefixed", () => {
    const selectors = CSS.replace(/\/\*[\s\S]*?\*\//g, "").match(/\.[a-zA-Z][\w-]*/g);
    expect(selectors.length).toBeGreaterThan(20);
    expect(selectors.filter((s) => !s.startsWith(".ocw-"))).toEqual([]);
  });
});
