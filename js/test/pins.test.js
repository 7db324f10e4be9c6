// widgets/chat.js: a message's pin button and the /memory and /pins listings (issues 22.6, 29.2),
// in jsdom with the fake anywidget model and a fake experimental.invoke.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import widget from "../../widgets/chat.js";
import SLASH_MENU from "./slash_menu.json";
import { fakeModel as makeModel } from "./fake_model.js";
import UI_LABELS from "./ui_labels.json";

const ITEMS = [
  { id: "n_a1", end_id: "n_a1", depth: 1, role: "user", time: "10:00", preview: "q", text: "amounts are cents" },
  { id: "n_a2", end_id: "n_a2", depth: 2, role: "assistant", time: "10:00", preview: "a", html: "<p>ok</p>",
    tools: [], thinking: "" },
  { id: "n_a3", end_id: "n_a4", depth: 4, role: "assistant", time: "10:01", preview: "🔧", html: "",
    tools: [{ call_id: "c1", name: "read_file", args: "{}", status: "ok", result: "x" }], thinking: "" },
];

const MEMORY = {
  items: [
    { n: 1, kind: "instruction", section: "Standing instructions and preferences", text: "answer in Chinese", turn: 3 },
    { n: 2, kind: "setting", section: "Current settings and values", text: "batch_size = 64", turn: 1 },
    { n: 3, kind: "working", section: "Current settings and values", text: "<img src=x onerror=alert(1)>", turn: 5 },
  ],
  forgotten: [{ text: "data/raw/old.parquet", turn: 2, at: "10:05" }],
  pins: [{ n: 2, text: "the schema is orders(id, amount_cents)", at: "10:02", source: "text", tokens: 12 }],
  empty: UI_LABELS.en.mem_empty,
};

function fakeInvoke() {
  const calls = [];
  const invoke = vi.fn((name, msg, options = {}) => {
    let resolve;
    const promise = new Promise((res) => {
      resolve = res;
    });
    calls.push({ name, msg, resolve });
    return promise;
  });
  invoke.calls = calls;
  invoke.answer = (i, response) => calls[i].resolve([response, []]);
  return invoke;
}

let el;
let cleanup;
let invoke;

function mount(initial = {}) {
  const model = makeModel({
    session_id: "s1", session_name: "demo", head: "n_a4", messages: ITEMS, has_older: false, summary: {},
    capsules: [], branches: [], notes: [], pending: "", streaming: "", stream_steps: [], busy: "",
    commands: SLASH_MENU, lang: "en", labels: UI_LABELS.en, ring: null, ...initial,
  });
  invoke = fakeInvoke();
  cleanup = widget.render({ model, el, experimental: { invoke }, host: null });
  return model;
}

const $ = (sel) => el.querySelector(sel);
const $$ = (sel) => [...el.querySelectorAll(sel)];
const flush = () => new Promise((r) => setTimeout(r, 0));
const note = (id, data, text = "listing") => ({ id, kind: "output", text, after: "n_a4", data });

beforeEach(() => {
  el = document.createElement("div");
  document.body.append(el);
});
afterEach(() => {
  if (cleanup) cleanup();
  cleanup = undefined;
  el.remove();
});

describe("the pin button on a message", () => {
  it("is on user messages and assistant replies with text, not on a tool step", () => {
    mount();
    const pinned = $$(".ocw-msg").filter((m) => m.querySelector("button.ocw-pin")).map((m) => m.dataset.id);
    expect(pinned).toEqual(["n_a1", "n_a2"]);
    const b = $('.ocw-msg[data-id="n_a1"] button.ocw-pin');
    expect(b.textContent).toBe("Pin");
    expect(b.title).toBe(UI_LABELS.en.chat_pin_title);
  });

  it("asks the kernel to pin that stored message, and shows busy until it answers", async () => {
    mount();
    $('.ocw-msg[data-id="n_a2"] button.ocw-pin').click();
    expect(invoke.calls.map((c) => [c.name, c.msg])).toEqual([["chat_pin", { node_id: "n_a2" }]]);
    expect($(".ocw-chat-status").textContent).toBe("Running /pin…");
    $('.ocw-msg[data-id="n_a1"] button.ocw-pin').click(); // a second click while busy sends nothing
    expect(invoke.calls.length).toBe(1);
    invoke.answer(0, { ok: true, output: "Pinned as 1" });
    await flush();
    expect($(".ocw-chat-status").textContent).toBe("");
  });

  it("a refusal is shown as one line", async () => {
    mount();
    $('.ocw-msg[data-id="n_a1"] button.ocw-pin').click();
    invoke.answer(0, { ok: false, error: "nothing to pin" });
    await flush();
    expect($(".ocw-chat-alert").textContent).toBe("Failed: nothing to pin");
  });

  it("is labelled in Chinese with the Chinese labels", () => {
    mount({ lang: "zh", labels: UI_LABELS.zh });
    expect($('.ocw-msg[data-id="n_a1"] button.ocw-pin').textContent).toBe("固定");
  });
});

describe("/memory in the conversation", () => {
  it("shows the sections with numbered items and their turns, the forgotten ones struck, and the pins", () => {
    mount({ notes: [note(1, { memory: MEMORY })] });
    const m = $(".ocw-memory");
    expect(m.querySelector(".ocw-mem-title").textContent).toBe("Session memory");
    expect($$(".ocw-memory .ocw-mem-section").map((s) => s.textContent)).toEqual([
      "Standing instructions and preferences", "Current settings and values",
      "Forgotten (no longer sent to the model)", UI_LABELS.en.pins_title]);
    const rows = $$(".ocw-memory ol .ocw-mem-item").map((li) => [li.dataset.n, li.querySelector(".ocw-mem-text").textContent,
      li.querySelector(".ocw-msg-time").textContent]);
    expect(rows).toEqual([["1", "answer in Chinese", "turn 3"], ["2", "batch_size = 64", "turn 1"],
      ["3", "<img src=x onerror=alert(1)>", "turn 5"]]);
    expect($$(".ocw-memory ol")[1].getAttribute("start")).toBe("2");
    expect(m.querySelector("img")).toBeNull(); // model-derived text is text, never markup
    expect(m.querySelector(".ocw-forgotten del").textContent).toBe("data/raw/old.parquet");
    const pin = m.querySelector('.ocw-mem-pin[data-pin="2"]');
    expect(pin.textContent).toContain("the schema is orders(id, amount_cents)");
    expect(pin.textContent).toContain("10:02 · 12 tokens");
  });

  it("forget runs /memory --forget N, then lists the memory again", async () => {
    mount({ notes: [note(1, { memory: MEMORY })] });
    const forget = $('.ocw-memory ol .ocw-mem-item[data-n="2"] button');
    expect(forget.textContent).toBe("Forget");
    forget.click();
    expect(invoke.calls.map((c) => [c.name, c.msg])).toEqual([["chat_run", { name: "memory", args: "--forget 2" }]]);
    invoke.answer(0, { ok: true, output: "Forgotten: batch_size = 64." });
    await flush();
    await flush();
    expect(invoke.calls.map((c) => [c.name, c.msg])[1]).toEqual(["chat_run", { name: "memory", args: "" }]);
  });

  it("unpin runs /unpin N with the pin's own number", () => {
    mount({ notes: [note(1, { memory: MEMORY })] });
    const unpin = $('.ocw-mem-pin[data-pin="2"] button');
    expect(unpin.textContent).toBe("Unpin");
    unpin.click();
    expect(invoke.calls.map((c) => [c.name, c.msg])).toEqual([["chat_run", { name: "unpin", args: "2" }]]);
  });

  it("only the newest listing has buttons (a forget renumbers the items)", () => {
    mount({ notes: [note(1, { memory: MEMORY }), note(2, { memory: MEMORY })] });
    const [older, newer] = $$(".ocw-memory");
    expect(older.querySelectorAll("button").length).toBe(0);
    expect(newer.querySelectorAll("button").length).toBe(4); // three forgets, one unpin
  });

  it("with no memory yet it says what will go there, and that nothing is pinned", () => {
    mount({ notes: [note(1, { memory: { items: [], forgotten: [], pins: [], empty: UI_LABELS.en.mem_empty } })] });
    expect($(".ocw-mem-empty").textContent).toBe(UI_LABELS.en.mem_empty);
    expect($(".ocw-mem-empty").textContent).toContain("your standing instructions and preferences, decisions");
    expect($$(".ocw-memory .ocw-mem-section").map((s) => s.textContent)).toEqual([
      "Nothing pinned yet: %pin TEXT, or %pin {name} for a variable's value as it is now."]);
    expect($$(".ocw-memory button")).toEqual([]);
  });

  it("/pins lists the pins with unpin buttons", () => {
    mount({ notes: [note(1, { pins: MEMORY.pins })] });
    expect($(".ocw-mem-title")).toBeNull();
    expect($('.ocw-mem-pin[data-pin="2"] button').textContent).toBe("Unpin");
  });

  it("is in Chinese with the Chinese labels", () => {
    mount({ lang: "zh", labels: UI_LABELS.zh, notes: [note(1, { memory: MEMORY })] });
    expect($(".ocw-mem-title").textContent).toBe("会话记忆");
    expect($(".ocw-memory ol .ocw-mem-item .ocw-msg-time").textContent).toBe("第 3 轮");
    expect($(".ocw-memory ol button").textContent).toBe("遗忘");
  });
});
