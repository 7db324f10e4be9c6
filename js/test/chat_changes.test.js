// The chat widget's changes protocol (ocw/widgets/changes.py ↔ widgets/chat.js): a turn
// arrives as "ocw-changes" custom messages applied in order; a view that is behind — a
// gap in the revisions, or a model whose state predates changes — asks chat_snapshot
// and shows the whole current state.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import widget, { applyOps, CHANGED } from "../../widgets/chat.js";
import SLASH_MENU from "./slash_menu.json";
import { fakeModel as makeModel } from "./fake_model.js";
import UI_LABELS from "./ui_labels.json";

const user = (n, text) => ({ id: `n_u${n}`, end_id: `n_u${n}`, depth: n, role: "user", time: "10:00",
  preview: text, text });
const reply = (n, html) => ({ id: `n_r${n}`, end_id: `n_r${n}`, depth: n, role: "assistant", time: "10:00",
  preview: "reply", html, tools: [], thinking: "" });
const ITEMS = [user(1, "first question"), reply(2, "<p>first answer</p>")];

function fakeModel(initial = {}) {
  return makeModel({
    session_id: "s1", session_name: "demo", head: "n_r2", messages: ITEMS, has_older: false, summary: {},
    capsules: [], branches: [], notes: [], pending: "", streaming: "", stream_steps: [], busy: "",
    commands: SLASH_MENU, lang: "en", labels: UI_LABELS.en, ring: null, snapshot_revision: 3, ...initial,
  });
}

/** experimental.invoke: each call recorded, answered by the test (`answer(i, response)`). */
function fakeInvoke() {
  const calls = [];
  const invoke = vi.fn((name, msg) => new Promise((resolve, reject) => calls.push({ name, msg, resolve, reject })));
  invoke.calls = calls;
  invoke.answer = (i, response) => calls[i].resolve([response, []]);
  return invoke;
}

let el;
const cleanups = [];
function mount(model, invoke) {
  const view = document.createElement("div");
  el.append(view);
  cleanups.push(widget.render({ model, el: view, experimental: { invoke }, host: null }));
  return view;
}
const flush = () => new Promise((r) => setTimeout(r, 0));
const shown = (view) => [...view.querySelectorAll(".ocw-thread article.ocw-msg")].map((a) => a.dataset.id);
const changes = (rev, ops) => ({ kind: "ocw-changes", rev, ops });
const TURN = [
  { name: "head", keep: 3, add: "4" },
  { name: "messages", at: 2, remove: 0, items: [user(3, "second question"), reply(4, "<p>second</p>")] },
];

beforeEach(() => {
  el = document.createElement("div");
  document.body.append(el);
});
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
  el.remove();
});

describe("applyOps", () => {
  it("splices lists, patches one entry's keys, extends strings in UTF-16 units, sets values, in order", () => {
    const state = { messages: [1, 2, 3], streaming: "a😀b", branches: [{ id: "x", length: 2, preview: "p" }],
      head: "n_1" };
    const before = state.messages;
    const changed = applyOps(state, [
      { name: "messages", at: 3, remove: 0, items: [4, 5] },
      { name: "messages", at: 1, remove: 1, items: ["two"] },
      { name: "streaming", keep: 3, add: "c" }, // "a😀" is 3 UTF-16 units
      { name: "branches", index: 0, set: { id: "y", length: 4 }, drop: ["preview"] },
      { name: "head", value: "n_2" },
    ]);
    expect(state.messages).toEqual([1, "two", 3, 4, 5]);
    expect(before).toEqual([1, 2, 3]); // the model's own value is never changed in place
    expect(state.streaming).toBe("a😀c");
    expect(state.branches).toEqual([{ id: "y", length: 4 }]);
    expect(state.head).toBe("n_2");
    expect([...changed].sort()).toEqual(["branches", "head", "messages", "streaming"]);
  });

  it("an entry's {$held: name} field is the string held before the message (a turn's text sent once)", () => {
    const state = { pending: "the question", streaming: "<p>the reply</p>", messages: [] };
    applyOps(state, [
      { name: "pending", value: "" },
      { name: "streaming", value: "" },
      { name: "messages", at: 0, remove: 0, items: [{ id: "n_u1", text: { $held: "pending" } },
        { id: "n_r2", html: { $held: "streaming" }, tools: [] }] },
    ]);
    expect(state.messages).toEqual([{ id: "n_u1", text: "the question" },
      { id: "n_r2", html: "<p>the reply</p>", tools: [] }]);
    expect(state.pending).toBe("");
    expect(() => applyOps({ messages: [] }, [{ name: "messages", at: 0, remove: 0,
      items: [{ text: { $held: "pending" } }] }])).toThrow(); // nothing held: out of step
  });

  it("throws on an op that does not fit what is held (the view then asks for a snapshot)", () => {
    expect(() => applyOps({ messages: [1] }, [{ name: "messages", at: 1, remove: 1, items: [] }])).toThrow();
    expect(() => applyOps({ messages: [1] }, [{ name: "messages", at: 2, remove: 0, items: [] }])).toThrow();
    expect(() => applyOps({ streaming: "ab" }, [{ name: "streaming", keep: 3, add: "" }])).toThrow();
    expect(() => applyOps({ branches: [] }, [{ name: "branches", index: 0, set: {}, drop: [] }])).toThrow();
    expect(() => applyOps({}, [{ name: "labels", value: {} }])).toThrow(); // not a changed traitlet
    expect(CHANGED).toContain("messages");
  });
});

describe("a view applies changes and asks for a snapshot when behind", () => {
  it("asks once when rendered; a current view gets no state back and applies the turn's changes in order", async () => {
    const model = fakeModel();
    const invoke = fakeInvoke();
    const view = mount(model, invoke);
    expect(invoke.calls.map((c) => [c.name, c.msg])).toEqual([["chat_snapshot", { rev: 3 }]]);
    invoke.answer(0, { ok: true, rev: 3 });
    await flush();
    expect(shown(view)).toEqual(["n_u1", "n_r2"]);
    model.trigger("msg:custom", changes(4, TURN), []);
    expect(shown(view)).toEqual(["n_u1", "n_r2", "n_u3", "n_r4"]);
    expect(view.querySelector(".ocw-graph-row.ocw-head").dataset.id).toBe("n_r4");
    // rev 5 patches entry 3 (a tool result joined the reply), then rev 6 streams into the live area.
    model.trigger("msg:custom", changes(5, [{ name: "messages", index: 3, set: { html: "<p>second, <em>longer</em></p>" },
      drop: [] }]), []);
    expect(view.querySelector('[data-id="n_r4"] .ocw-msg-html').innerHTML).toBe("<p>second, <em>longer</em></p>");
    model.trigger("msg:custom", changes(6, [{ name: "pending", value: "third" }, { name: "busy", value: "send" }]), []);
    model.trigger("msg:custom", changes(7, [{ name: "streaming", value: "<p>thi</p>" }]), []);
    model.trigger("msg:custom", changes(8, [{ name: "streaming", keep: 6, add: "rd reply</p>" }]), []);
    expect(view.querySelector(".ocw-streaming .ocw-msg-html").innerHTML).toBe("<p>third reply</p>");
    expect(view.querySelector(".ocw-pending").textContent).toContain("third");
    model.trigger("msg:custom", changes(8, [{ name: "streaming", value: "stale" }]), []); // already held: ignored
    expect(view.querySelector(".ocw-streaming .ocw-msg-html").innerHTML).toBe("<p>third reply</p>");
    expect(invoke.calls).toHaveLength(1); // never behind: no second request
    expect(model.get("messages")).toBe(ITEMS); // the model's state is untouched
  });

  it("a gap in the revisions asks for a snapshot; changes after it are applied on top", async () => {
    const model = fakeModel();
    const invoke = fakeInvoke();
    const view = mount(model, invoke);
    invoke.answer(0, { ok: true, rev: 3 });
    await flush();
    model.trigger("msg:custom", changes(5, [{ name: "head", value: "n_r6" }]), []); // rev 4 was missed
    expect(invoke.calls.map((c) => [c.name, c.msg])[1]).toEqual(["chat_snapshot", { rev: 3 }]);
    expect(shown(view)).toEqual(["n_u1", "n_r2"]); // nothing half-applied meanwhile
    const all = [...ITEMS, user(3, "q"), reply(4, "<p>a</p>"), user(5, "q2"), reply(6, "<p>b</p>")];
    model.trigger("msg:custom", changes(6, [{ name: "messages", at: 6, remove: 0, items: [user(7, "q3")] }]), []);
    invoke.answer(1, { ok: true, rev: 5, state: { messages: all, head: "n_r6" } });
    await flush();
    expect(shown(view)).toEqual(["n_u1", "n_r2", "n_u3", "n_r4", "n_u5", "n_r6", "n_u7"]);
    expect(invoke.calls).toHaveLength(2);
  });

  it("an op that does not fit asks for a snapshot instead of showing something wrong", async () => {
    const model = fakeModel();
    const invoke = fakeInvoke();
    const view = mount(model, invoke);
    invoke.answer(0, { ok: true, rev: 3 });
    await flush();
    model.trigger("msg:custom", changes(4, [{ name: "messages", at: 9, remove: 0, items: [user(3, "x")] }]), []);
    expect(invoke.calls[1].name).toBe("chat_snapshot");
    invoke.answer(1, { ok: true, rev: 4, state: { messages: [...ITEMS, user(3, "x")] } });
    await flush();
    expect(shown(view)).toEqual(["n_u1", "n_r2", "n_u3"]);
  });

  it("a view rendered after changes (its model's state is older) shows the whole current state", async () => {
    const model = fakeModel();
    const invoke = fakeInvoke();
    const first = mount(model, invoke);
    invoke.answer(0, { ok: true, rev: 3 });
    await flush();
    model.trigger("msg:custom", changes(4, TURN), []);
    expect(shown(first)).toHaveLength(4);
    // A second view (or the same output rendered again) starts from the model: rev 3.
    const second = mount(model, invoke);
    expect(shown(second)).toEqual(["n_u1", "n_r2"]);
    expect(invoke.calls[1].msg).toEqual({ rev: 3 });
    invoke.answer(1, { ok: true, rev: 4, state: { messages: [...ITEMS, user(3, "second question"),
      reply(4, "<p>second</p>")], head: "n_r4" } });
    await flush();
    expect(shown(second)).toEqual(["n_u1", "n_r2", "n_u3", "n_r4"]);
    model.trigger("msg:custom", changes(5, [{ name: "messages", at: 4, remove: 0, items: [user(5, "next")] }]), []);
    expect(shown(first)).toEqual(shown(second));
    expect(shown(second)).toHaveLength(5);
  });

  it("the whole state arriving on the model (a reload) is taken as current", async () => {
    const model = fakeModel();
    const invoke = fakeInvoke();
    const view = mount(model, invoke);
    invoke.answer(0, { ok: true, rev: 3 });
    await flush();
    model.set("snapshot_revision", 9);
    model.set("messages", [...ITEMS, user(3, "from the state")]);
    expect(shown(view)).toEqual(["n_u1", "n_r2", "n_u3"]);
    model.trigger("msg:custom", changes(10, [{ name: "messages", at: 3, remove: 0, items: [reply(4, "<p>ok</p>")] }]), []);
    expect(shown(view)).toEqual(["n_u1", "n_r2", "n_u3", "n_r4"]);
    expect(invoke.calls).toHaveLength(1);
  });

  it("model text in a change is shown only as the kernel's sanitized html field, user text as text", async () => {
    const model = fakeModel();
    const invoke = fakeInvoke();
    const view = mount(model, invoke);
    invoke.answer(0, { ok: true, rev: 3 });
    await flush();
    model.trigger("msg:custom", changes(4, [{ name: "messages", at: 2, remove: 0,
      items: [user(3, "<img src=x onerror=alert(1)>")] }]), []);
    const node = view.querySelector('[data-id="n_u3"] .ocw-msg-text');
    expect(node.textContent).toBe("<img src=x onerror=alert(1)>");
    expect(view.querySelector('[data-id="n_u3"] img')).toBe(null);
  });

  it("the cleanup removes the custom-message listener with the rest", () => {
    const model = fakeModel();
    mount(model, fakeInvoke());
    expect(model.listenerCount()).toBeGreaterThan(0);
    cleanups.pop()();
    expect(model.listenerCount()).toBe(0);
  });
});
