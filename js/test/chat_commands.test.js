// widgets/chat.js with commands users add (issue 29): their place in the slash menu, their
// marking, a name a built-in already has (shown once, dispatched to the built-in), and the
// jump-to-latest button, which must never cover the open menu or the composer.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import widget, { matchCommands, parseCommand, uniqueCommands } from "../../widgets/chat.js";
import SLASH_MENU from "./slash_menu.json";
import { fakeModel } from "./fake_model.js";
import UI_LABELS from "./ui_labels.json";

const CSS = readFileSync(join(dirname(fileURLToPath(import.meta.url)), "..", "..", "widgets", "chat.css"), "utf8");

// What ocw.notebook.commands.slash_menu(lang, added) sends: the built-ins, then each added
// command marked `by` (tests/notebook/test_user_commands.py pins the Python side).
const HELLO = { name: "hello", args: "[NAME]", required: false, help: "say hello", needs_session: false,
  by: "added by this notebook" };
const STATS = { name: "stats", args: "", required: false, help: "table sizes", needs_session: false,
  by: "added by ocw-demo-commands" };
// A front end that appended an added /compact (seed 004's unified registry did): still one entry.
const CLASH = { name: "compact", args: "", required: false, help: "someone else's compact", needs_session: false,
  by: "added by clashpkg" };
const WITH_ADDED = [...SLASH_MENU, HELLO, STATS];

let el;
let cleanup;
let calls;

function mount(initial = {}) {
  const model = fakeModel({
    session_id: "s1", session_name: "demo", head: "n_a2",
    messages: [
      { id: "n_a1", end_id: "n_a1", depth: 1, role: "user", time: "10:00", preview: "q", text: "q" },
      { id: "n_a2", end_id: "n_a2", depth: 2, role: "assistant", time: "10:00", preview: "a", html: "<p>a</p>",
        tools: [], thinking: "" },
    ],
    has_older: false, summary: {}, capsules: [], branches: [], notes: [], pending: "", streaming: "",
    stream_steps: [], busy: "", commands: WITH_ADDED, lang: "en", labels: UI_LABELS.en, ring: null, ...initial,
  });
  calls = [];
  const invoke = vi.fn((name, msg) => {
    calls.push({ name, msg });
    return new Promise(() => {}); // the kernel's answer does not matter here
  });
  cleanup = widget.render({ model, el, experimental: { invoke }, host: null });
  return model;
}

const $ = (sel) => el.querySelector(sel);
const $$ = (sel) => [...el.querySelectorAll(sel)];
const names = () => $$(".ocw-menu-item").map((o) => o.dataset.name);
function type(value) {
  const i = $(".ocw-input");
  i.value = value;
  i.dispatchEvent(new Event("input", { bubbles: true }));
}
function key(k) {
  $(".ocw-input").dispatchEvent(new KeyboardEvent("keydown", { key: k, bubbles: true, cancelable: true }));
}

beforeEach(() => {
  el = document.createElement("div");
  document.body.append(el);
});
afterEach(() => {
  if (cleanup) cleanup();
  cleanup = undefined;
  el.remove();
});

describe("added commands in the slash menu", () => {
  it("come after every built-in, in the order added, each marked by who added it", () => {
    mount();
    type("/");
    const builtins = SLASH_MENU.map((c) => c.name);
    expect(names()).toEqual([...builtins, "hello", "stats"]);
    const items = $$(".ocw-menu-item");
    const marked = items.filter((i) => i.classList.contains("ocw-menu-added")).map((i) => i.dataset.name);
    expect(marked).toEqual(["hello", "stats"]);
    expect(items.at(-2).querySelector(".ocw-menu-by").textContent).toBe("added by this notebook");
    expect(items.at(-1).querySelector(".ocw-menu-by").textContent).toBe("added by ocw-demo-commands");
    // A built-in carries no marking.
    expect(items[0].querySelector(".ocw-menu-by")).toBe(null);
  });

  it("an added command runs on Enter with its words, as a built-in does", () => {
    mount();
    type("/hello Ada");
    key("Enter");
    expect(calls).toEqual([{ name: "chat_run", msg: { name: "hello", args: "Ada" } }]);
    expect($(".ocw-input").value).toBe("");
  });

  it("an added command picked in the menu runs at once (its argument is optional)", () => {
    mount();
    type("/he");
    expect(names()).toEqual(["help", "hello"]);
    key("ArrowDown");
    key("Enter");
    expect(calls).toEqual([{ name: "chat_run", msg: { name: "hello", args: "" } }]);
  });

  it("a name a built-in has is shown once — the built-in's entry — and dispatched to the built-in", () => {
    mount({ commands: [...WITH_ADDED, CLASH], session_id: "" });
    type("/comp");
    expect(names()).toEqual(["compact"]);
    const item = $(".ocw-menu-item");
    expect(item.classList.contains("ocw-menu-added")).toBe(false);
    expect(item.querySelector(".ocw-menu-help").textContent).toBe(SLASH_MENU[0].help);
    // The built-in needs a session (the added one would not): with none, nothing is asked
    // of the kernel and the input stays — the built-in's rule, so the built-in was picked.
    key("Enter");
    expect(calls).toEqual([]);
    expect($(".ocw-chat-alert").textContent).toBe(UI_LABELS.en.chat_no_session);
    expect($(".ocw-input").value).toBe("/comp");
  });

  it("the pure helpers keep the first of each name", () => {
    const list = [...WITH_ADDED, CLASH, { ...HELLO, help: "a second hello" }];
    expect(uniqueCommands(list).filter((c) => c.name === "compact")).toEqual([SLASH_MENU[0]]);
    expect(uniqueCommands(list).filter((c) => c.name === "hello")).toEqual([HELLO]);
    expect(matchCommands(list, "compact")).toEqual([SLASH_MENU[0]]);
    expect(parseCommand("/compact 200", list)).toEqual({ command: SLASH_MENU[0], args: "200" });
    expect(parseCommand("/stats", list)).toEqual({ command: STATS, args: "" });
  });
});

describe("jump to latest", () => {
  /** jsdom lays nothing out: give the conversation a height, content and a scroll position. */
  function layout(content) {
    const c = $(".ocw-conversation");
    let top = content - 200;
    Object.defineProperty(c, "scrollHeight", { configurable: true, get: () => content });
    Object.defineProperty(c, "clientHeight", { configurable: true, get: () => 200 });
    Object.defineProperty(c, "scrollTop", { configurable: true, get: () => top,
      set: (v) => { top = Math.max(0, Math.min(v, content - 200)); } });
    return c;
  }

  it("appears once the newest message is scrolled away and brings it back", () => {
    mount();
    const jump = $(".ocw-jump");
    expect(jump.hidden).toBe(true);
    const c = layout(1000);
    c.dispatchEvent(new Event("scroll"));
    expect(jump.hidden).toBe(true); // at the bottom: nothing to jump to
    c.scrollTop = 753; // 47 px from the bottom: still counts as at the bottom (under 48)
    c.dispatchEvent(new Event("scroll"));
    expect(jump.hidden).toBe(true);
    c.scrollTop = 752; // 48 px up: away from the newest message
    c.dispatchEvent(new Event("scroll"));
    expect(jump.hidden).toBe(false);
    expect(jump.textContent).toBe(UI_LABELS.en.chat_jump);
    expect(jump.getAttribute("aria-label")).toBe(UI_LABELS.en.chat_jump_label);
    jump.click();
    expect(c.scrollTop).toBe(800);
    expect(jump.hidden).toBe(true);
    expect(document.activeElement).toBe($(".ocw-input"));
  });

  it("sits in the footer after the composer and the ring — never inside the conversation, the composer or the menu — with the menu open", () => {
    mount();
    const c = layout(1000);
    c.scrollTop = 0;
    c.dispatchEvent(new Event("scroll"));
    type("/");
    const jump = $(".ocw-jump");
    const menu = $(".ocw-menu");
    expect(menu.hidden).toBe(false);
    expect(jump.hidden).toBe(false); // both shown at once
    expect(jump.parentElement).toBe($(".ocw-chat-footer"));
    expect([...jump.parentElement.children].map((n) => n.className)).toEqual(
      ["ocw-composer", "ocw-chat-ring", "ocw-jump"]);
    expect($(".ocw-composer").contains(jump)).toBe(false);
    expect(c.contains(jump)).toBe(false);
    expect(menu.contains(jump)).toBe(false);
  });

  it("its CSS lays it out in the footer's flow: no position and no z-index that could lift it over the menu", () => {
    const rules = [...CSS.replace(/\/\*[\s\S]*?\*\//g, "").matchAll(/([^{}]+)\{([^}]*)\}/g)]
      .filter(([, sel]) => sel.includes(".ocw-jump"));
    expect(rules.length).toBeGreaterThan(0);
    for (const [, , body] of rules) {
      expect(body).not.toMatch(/\bposition\s*:/);
      expect(body).not.toMatch(/z-index/);
    }
    // The menu keeps its own: it opens upward from the composer, over the conversation.
    expect(CSS).toMatch(/\.ocw-chat \.ocw-menu \{[^}]*position: absolute;[^}]*bottom: calc\(100% \+ 4px\)/);
  });

  it("speaks the labels' language", () => {
    mount({ lang: "zh", labels: UI_LABELS.zh });
    expect($(".ocw-jump").textContent).toBe("↓ 最新");
    expect($(".ocw-jump").title).toBe("跳到最新消息");
  });
});
