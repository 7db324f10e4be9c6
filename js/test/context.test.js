// Drives widgets/context.js (the browser side of ocw.widgets.ring.ContextWidget)
// in jsdom with a fake anywidget model.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import widget, { colorClass, formatInt, formatPercent } from "../../widgets/context.js";
// Python's UI_LABELS (ocw/widgets/ring.py), the one source of the widget's words; tests/widgets/test_widgets.py
// fails if this copy differs from it.
import { fakeModel as makeModel } from "./fake_model.js";
import UI_LABELS from "./ui_labels.json";

const WIDGETS = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "widgets");
const SOURCE = readFileSync(join(WIDGETS, "context.js"), "utf8");
const CSS = readFileSync(join(WIDGETS, "context.css"), "utf8");

/** The fake model (fake_model.js) holding this widget's traitlets, `initial` on top. */
function fakeModel(initial = {}) {
  const state = {
    session_id: "s1",
    session_name: "default",
    total: 3992,
    window: 8000,
    ratio: 0.499,
    breakdown: { system: 120, tools: 0, summary: 0, messages: 3872, free: 4008 },
    basis: "estimated",
    encoding: "o200k_base",
    calibration: null,
    generation: 0,
    compaction_count: 0,
    busy: false,
    message: "",
    panel_open: false,
    reserve_ratio: 0.8,
    lang: "en",
    labels: UI_LABELS.en,
    ...initial,
  };
  return makeModel(state);
}

let el;
let cleanup;

function mount(initial) {
  const model = fakeModel(initial);
  cleanup = widget.render({ model, el });
  return model;
}

const $ = (sel) => el.querySelector(sel);
const $$ = (sel) => [...el.querySelectorAll(sel)];
const colorsOf = (node) =>
  ["ocw-ring-green", "ocw-ring-yellow", "ocw-ring-red"].filter((c) => node.classList.contains(c));

beforeEach(() => {
  el = document.createElement("div");
  document.body.append(el);
});

afterEach(() => {
  if (cleanup) cleanup();
  cleanup = undefined;
  el.remove();
});

describe("module shape", () => {
  it("exports an anywidget render function", () => {
    expect(typeof widget.render).toBe("function");
  });

  it("formats numbers and percents", () => {
    expect(formatInt(3992)).toBe("3,992");
    expect(formatInt(1234567)).toBe("1,234,567");
    expect(formatInt(0)).toBe("0");
    expect(formatPercent(0.499)).toBe("49.9%");
    expect(formatPercent(0.5)).toBe("50.0%");
    expect(formatPercent(1.2)).toBe("120.0%");
  });

  it("picks the color class by ratio", () => {
    expect(colorClass(0)).toBe("ocw-ring-green");
    expect(colorClass(0.499)).toBe("ocw-ring-green");
    expect(colorClass(0.5)).toBe("ocw-ring-yellow");
    expect(colorClass(0.799)).toBe("ocw-ring-yellow");
    expect(colorClass(0.8)).toBe("ocw-ring-red");
    expect(colorClass(1.3)).toBe("ocw-ring-red");
  });
});

describe("ring", () => {
  it.each([
    [0.499, "ocw-ring-green", "49.9%"],
    [0.5, "ocw-ring-yellow", "50.0%"],
    [0.799, "ocw-ring-yellow", "79.9%"],
    [0.8, "ocw-ring-red", "80.0%"],
    [0.95, "ocw-ring-red", "95.0%"],
  ])("ratio %s -> %s and %s", (ratio, cls, text) => {
    mount({ ratio });
    const arc = $(".ocw-ring-arc");
    expect(colorsOf(arc)).toEqual([cls]);
    expect($(".ocw-ring-percent").textContent).toBe(text);
  });

  it("has a neutral base, used/window text and an accessible label", () => {
    mount();
    expect($(".ocw-ring-base")).not.toBeNull();
    expect(colorsOf($(".ocw-ring-base"))).toEqual([]);
    expect($(".ocw-ring-used").textContent).toBe("3,992 / 8,000 tokens");
    const ring = $(".ocw-ring");
    expect(ring.getAttribute("role")).toBe("button");
    expect(ring.getAttribute("tabindex")).toBe("0");
    expect(ring.getAttribute("aria-label")).toBe("Context 49.9% full: 3,992 of 8,000 tokens");
    expect(ring.getAttribute("aria-expanded")).toBe("false");
  });

  it("draws the arc length from the ratio, clamped to 100 %", () => {
    const model = mount({ ratio: 0.25 });
    expect($(".ocw-ring-arc").getAttribute("stroke-dasharray")).toBe("25 75");
    model.set("ratio", 1.4);
    expect($(".ocw-ring-arc").getAttribute("stroke-dasharray")).toBe("100 0");
    expect($(".ocw-ring-percent").textContent).toBe("140.0%");
  });

  it("never shows a suggestion border at any ratio", () => {
    const model = mount({ ratio: 0 });
    for (const ratio of [0, 0.1, 0.49, 0.5, 0.79, 0.8, 0.9, 1, 1.5]) {
      model.set("ratio", ratio);
      for (const node of el.querySelectorAll("*")) {
        const cls = node.getAttribute("class") || "";
        expect(cls).not.toMatch(/suggest|border/i);
      }
      expect(colorsOf($(".ocw-ring-arc"))).toHaveLength(1);
    }
  });

  it("shows and clears the busy state", () => {
    const model = mount();
    const ring = $(".ocw-ring");
    const button = $(".ocw-compact");
    expect(ring.classList.contains("ocw-busy")).toBe(false);
    expect(ring.getAttribute("aria-busy")).toBe("false");
    expect(button.disabled).toBe(false);

    model.set("busy", true);
    expect(ring.classList.contains("ocw-busy")).toBe(true);
    expect(ring.getAttribute("aria-busy")).toBe("true");
    expect(button.disabled).toBe(true);

    model.set("busy", false);
    expect(ring.classList.contains("ocw-busy")).toBe(false);
    expect(ring.getAttribute("aria-busy")).toBe("false");
    expect(button.disabled).toBe(false);
  });

  it("toggles the panel on click", () => {
    const model = mount();
    const ring = $(".ocw-ring");
    expect($(".ocw-panel").hidden).toBe(true);
    ring.click();
    expect(model.get("panel_open")).toBe(true);
    expect(model.saves).toBe(1);
    expect($(".ocw-panel").hidden).toBe(false);
    expect(ring.getAttribute("aria-expanded")).toBe("true");
    ring.click();
    expect(model.get("panel_open")).toBe(false);
    expect(model.saves).toBe(2);
    expect($(".ocw-panel").hidden).toBe(true);
  });

  it.each(["Enter", " "])("toggles the panel with %j", (key) => {
    const model = mount();
    const ring = $(".ocw-ring");
    const ev = new KeyboardEvent("keydown", { key, bubbles: true, cancelable: true });
    ring.dispatchEvent(ev);
    expect(ev.defaultPrevented).toBe(true);
    expect(model.get("panel_open")).toBe(true);
    expect(model.saves).toBe(1);
    ring.dispatchEvent(new KeyboardEvent("keydown", { key, bubbles: true }));
    expect(model.get("panel_open")).toBe(false);
  });

  it("closes an open panel with Escape on the ring and keeps the key from the notebook; a closed one lets it go", () => {
    const model = mount({ panel_open: true });
    const ring = $(".ocw-ring");
    const esc = new KeyboardEvent("keydown", { key: "Escape", bubbles: true, cancelable: true });
    ring.dispatchEvent(esc);
    expect(model.get("panel_open")).toBe(false);
    expect(esc.defaultPrevented).toBe(true); // JupyterLab would also leave edit mode on it
    const again = new KeyboardEvent("keydown", { key: "Escape", bubbles: true, cancelable: true });
    ring.dispatchEvent(again);
    expect(model.get("panel_open")).toBe(false);
    expect(again.defaultPrevented).toBe(false);
  });

  it("closes the panel on Escape pressed elsewhere and on a click outside, not inside", () => {
    const model = mount({ panel_open: true });
    const outside = document.createElement("textarea");
    document.body.append(outside);
    try {
      // A click inside the panel keeps it open.
      $(".ocw-panel").dispatchEvent(new MouseEvent("click", { bubbles: true }));
      expect(model.get("panel_open")).toBe(true);
      // Escape in another element, even one that stops the key from bubbling (the chat composer).
      outside.addEventListener("keydown", (e) => e.stopPropagation());
      outside.dispatchEvent(new KeyboardEvent("keydown", { key: "Escape", bubbles: true }));
      expect(model.get("panel_open")).toBe(false);
      expect($(".ocw-panel").hidden).toBe(true);
      model.set("panel_open", true);
      // Another key elsewhere does nothing; an open combobox keeps its Escape (its list closes).
      outside.dispatchEvent(new KeyboardEvent("keydown", { key: "a", bubbles: true }));
      outside.setAttribute("aria-expanded", "true");
      outside.dispatchEvent(new KeyboardEvent("keydown", { key: "Escape", bubbles: true }));
      expect(model.get("panel_open")).toBe(true);
      // A click outside closes it.
      outside.dispatchEvent(new MouseEvent("click", { bubbles: true }));
      expect(model.get("panel_open")).toBe(false);
      expect($(".ocw-panel").hidden).toBe(true);
    } finally {
      outside.remove();
    }
  });

  it("stops listening to the document once removed", () => {
    const model = mount({ panel_open: true });
    cleanup();
    cleanup = undefined;
    document.body.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    expect(model.get("panel_open")).toBe(true);
  });

  it("keeps the panel open for keys other than Escape pressed inside it; Escape there closes it", () => {
    const model = mount({ panel_open: true });
    const button = $(".ocw-compact");
    for (const key of ["Tab", "ArrowDown", "a", "Enter"]) {
      const ev = new KeyboardEvent("keydown", { key, bubbles: true, cancelable: true });
      button.dispatchEvent(ev);
      expect(model.get("panel_open")).toBe(true);
      expect($(".ocw-panel").hidden).toBe(false);
    }
    const esc = new KeyboardEvent("keydown", { key: "Escape", bubbles: true, cancelable: true });
    button.dispatchEvent(esc);
    expect(model.get("panel_open")).toBe(false);
    expect(esc.defaultPrevented).toBe(true);
    expect(document.activeElement).toBe($(".ocw-ring"));
  });

  it("ignores other keys", () => {
    const model = mount();
    $(".ocw-ring").dispatchEvent(new KeyboardEvent("keydown", { key: "a", bubbles: true }));
    expect(model.get("panel_open")).toBe(false);
    expect(model.saves).toBe(0);
  });
});

describe("panel", () => {
  it("shows a row per category with tokens and share of the window", () => {
    mount({ panel_open: true });
    const rows = $$(".ocw-row");
    expect(rows.map((r) => r.dataset.category)).toEqual([
      "system",
      "tools",
      "summary",
      "messages",
      "free",
    ]);
    const messages = $('.ocw-row[data-category="messages"]');
    expect(messages.querySelector(".ocw-row-name").textContent).toBe("Messages");
    expect(messages.querySelector(".ocw-row-tokens").textContent).toBe("3,872");
    expect(messages.querySelector(".ocw-row-share").textContent).toBe("48.4%");
    expect($(".ocw-total").textContent).toContain("3,992 / 8,000");
    expect($(".ocw-reserve").textContent).toBe("80.0%");
    expect($(".ocw-reserve-mark").style.left).toBe("80%");
  });

  it("draws one bar segment per used category, side by side, never past the window", () => {
    const model = mount({ panel_open: true });
    const segs = () => $$(".ocw-bar-seg").map((x) => [x.dataset.category, x.style.left, x.style.width]);
    // system 120, tools 0, summary 0, messages 3,872 of 8,000: no segment for empty ones nor free
    expect(segs()).toEqual([
      ["system", "0%", "1.5%"],
      ["messages", "1.5%", "48.4%"],
    ]);
    model.set("breakdown", { system: 2000, tools: 0, summary: 4000, messages: 4000, free: 0 }); // over: 10,000
    expect(segs()).toEqual([
      ["system", "0%", "25%"],
      ["summary", "25%", "50%"],
      ["messages", "75%", "25%"], // cut at the window's end, not 50 %
    ]);
    model.set("window", 0);
    expect(segs()).toEqual([]);
  });

  it("says off, with no mark, when automatic compaction is off; a ratio above 0 is a percent and a mark", () => {
    const model = mount({ reserve_ratio: 0 });
    expect($(".ocw-reserve").textContent).toBe("off");
    expect($(".ocw-reserve-mark").hidden).toBe(true);
    expect($(".ocw-reserve-mark").title).toBe(`${UI_LABELS.en.reserve} off`);
    model.set("reserve_ratio", 0.01);
    expect($(".ocw-reserve").textContent).toBe("1.0%");
    expect($(".ocw-reserve-mark").hidden).toBe(false);
    model.set("lang", "zh");
    model.set("labels", UI_LABELS.zh);
    model.set("reserve_ratio", 0);
    expect($(".ocw-reserve").textContent).toBe(UI_LABELS.zh.off);
  });

  it("shows the session's own percents, which add up to 100.0 %", () => {
    // Measured: the rows were scaled to the measured total and the percents rounded by
    // largest remainder in Python; the panel shows them as they are, never its own.
    // Thirds of a full window: computed here they would read 33.3 × 3 = 99.9 %.
    mount({
      panel_open: true,
      basis: "measured",
      total: 3,
      window: 3,
      breakdown: { system: 1, tools: 0, summary: 1, messages: 1, free: 0 },
      percents: { system: "33.4", tools: "0.0", summary: "33.3", messages: "33.3", free: "0.0" },
    });
    const shares = $$(".ocw-row-share").map((r) => r.textContent);
    expect(shares).toEqual(["33.4%", "0.0%", "33.3%", "33.3%", "0.0%"]);
    const sum = shares.reduce((a, s) => a + Number.parseFloat(s), 0);
    expect(Math.round(sum * 10) / 10).toBe(100);
  });

  it("shows the basis, calibration and encoding", () => {
    const model = mount({ panel_open: true });
    expect($(".ocw-basis").textContent).toBe("estimated");
    expect($(".ocw-encoding").textContent).toBe("o200k_base");
    model.set("calibration", 1.034);
    model.set("basis", "measured");
    expect($(".ocw-basis").textContent).toBe("measured ×1.03");
    model.set("encoding", "cl100k_base");
    model.set("encoding_exact", false);
    expect($(".ocw-encoding").textContent).toBe("cl100k_base (estimate)");
    model.set("labels", UI_LABELS.zh);
    expect($(".ocw-encoding").textContent).toBe("cl100k_base (估算)");
    model.set("encoding_exact", true);
    expect($(".ocw-encoding").textContent).toBe("cl100k_base");
  });

  it("says how many compactions were inferred, and only when some were", () => {
    const model = mount({ panel_open: true, compaction_count: 3, compaction_inferred: 0 });
    expect($(".ocw-count").textContent).toBe("3");
    model.set("compaction_inferred", 1);
    expect($(".ocw-count").textContent).toBe("3 (1 inferred)");
    model.set("labels", UI_LABELS.zh);
    expect($(".ocw-count").textContent).toBe("3 (其中 1 次为推断)");
    model.set("compaction_inferred", 0);
    expect($(".ocw-count").textContent).toBe("3");
  });

  it("says on the ring and in the panel when automatic compaction is paused or off (issue 23)", () => {
    const model = mount({ panel_open: true });
    const status = $(".ocw-ring-status");
    expect(status.hidden).toBe(true);
    expect($(".ocw-reserve").textContent).toBe("80.0%");
    model.set("auto_paused", true);
    expect(status.hidden).toBe(false);
    expect(status.textContent).toBe("auto-compact paused");
    expect($(".ocw-reserve").textContent).toBe("80.0% — paused after 3 failed compactions (Compact now still works)");
    model.set("labels", UI_LABELS.zh);
    expect(status.textContent).toBe("自动压缩已暂停");
    model.set("labels", UI_LABELS.en);
    model.set("reserve_ratio", 0);
    expect(status.textContent).toBe("auto-compact off");
    expect($(".ocw-reserve").textContent).toBe("off");
    model.set("reserve_ratio", 0.8);
    model.set("auto_paused", false);
    expect(status.hidden).toBe(true);
    model.set("busy", true);
    expect(status.textContent).toBe("Compacting…");
  });

  it("says how many older messages the last request left out, plural-correct (issue 23)", () => {
    const model = mount({ panel_open: true, left_out: 0 });
    expect($(".ocw-ring-used").textContent).toBe("3,992 / 8,000 tokens");
    expect($(".ocw-left-out").hidden).toBe(true);
    model.set("left_out", 1);
    expect($(".ocw-ring-used").textContent).toBe("3,992 / 8,000 tokens · 1 left out");
    expect($(".ocw-left-out").hidden).toBe(false);
    expect($(".ocw-left-out").textContent).toBe("1 older message was not sent; the figures show what was sent");
    model.set("left_out", 3);
    expect($(".ocw-left-out").textContent).toBe("3 older messages were not sent; the figures show what was sent");
    model.set("labels", UI_LABELS.zh);
    expect($(".ocw-ring-used").textContent).toBe("3,992 / 8,000 tokens · 3 条未发送");
    expect($(".ocw-left-out").textContent).toBe("3 条较早的消息未发送；数字显示的是实际发送的内容");
  });

  it("shows unverified usage reports, and only when there are some (issue 23)", () => {
    const model = mount({ panel_open: true, usage_unverified: 0 });
    expect($(".ocw-unverified").hidden).toBe(true);
    model.set("usage_unverified", 2);
    expect($(".ocw-unverified").hidden).toBe(false);
    expect($(".ocw-unverified").textContent).toBe("2 reports below what the request holds: unverified, not used");
  });

  it("shows a summarizer of its own, and only when one is set (issue 27)", () => {
    const model = mount({ panel_open: true, summarizer: {} });
    expect($(".ocw-summarizer").hidden).toBe(true);
    expect($(".ocw-summarizer-label").hidden).toBe(true);
    model.set("summarizer", { name: "openai/tiny-summarizer", window: 1024, calibration: 1.9, samples: 2 });
    expect($(".ocw-summarizer").hidden).toBe(false);
    expect($(".ocw-summarizer-label").textContent).toBe("Summarizer");
    expect($(".ocw-summarizer").textContent).toBe(
      "openai/tiny-summarizer (its own; window 1,024 tokens, measured ÷ estimated = 1.90, samples: 2)");
    model.set("labels", UI_LABELS.zh);
    expect($(".ocw-summarizer-label").textContent).toBe("摘要模型");
    expect($(".ocw-summarizer").textContent).toBe(
      "openai/tiny-summarizer（独立；窗口 1,024 tokens，实测 ÷ 估算 = 1.90，样本数：2）");
    model.set("summarizer", {});
    expect($(".ocw-summarizer").hidden).toBe(true);
  });

  it("shows pruned tool output as its own line, and only when some was pruned", () => {
    const model = mount({ panel_open: true, pruned_results: 0, pruned_tokens: 0 });
    expect($(".ocw-pruned").hidden).toBe(true);
    expect($(".ocw-pruned-label").hidden).toBe(true);
    model.set("pruned_tokens", 10805);
    model.set("pruned_results", 5);
    expect($(".ocw-pruned").hidden).toBe(false);
    expect($(".ocw-pruned-label").textContent).toBe("Pruned tool output");
    expect($(".ocw-pruned").textContent).toBe("5 results, 10,805 tokens replaced by one-line stubs");
    model.set("labels", UI_LABELS.zh);
    expect($(".ocw-pruned").textContent).toBe("5 个结果，10,805 tokens 已替换为一行摘要");
    model.set("pruned_results", 0);
    expect($(".ocw-pruned").hidden).toBe(true);
  });

  it("shows the pruned line from one pruned result on (0 hides it, 1 shows it)", () => {
    const model = mount({ panel_open: true, pruned_results: 1, pruned_tokens: 412 });
    expect($(".ocw-pruned").hidden).toBe(false);
    expect($(".ocw-pruned-label").hidden).toBe(false);
    expect($(".ocw-pruned").textContent).toBe("1 results, 412 tokens replaced by one-line stubs");
    model.set("pruned_results", 0);
    expect($(".ocw-pruned").hidden).toBe(true);
    expect($(".ocw-pruned-label").hidden).toBe(true);
  });

  it("shows the compaction count with an accessible info tooltip", () => {
    const model = mount({ panel_open: true, compaction_count: 2 });
    expect($(".ocw-count").textContent).toBe("2");
    const info = $(".ocw-info");
    const tip = $(".ocw-tooltip");
    expect(info.tagName).toBe("BUTTON");
    expect(tip.getAttribute("role")).toBe("tooltip");
    expect(info.getAttribute("aria-describedby")).toBe(tip.id);
    expect(tip.textContent).toMatch(/inferred from drops in provider-reported usage/);
    expect(tip.textContent).toMatch(/approximate/);
    // A tap pins it open; Escape dismisses it.
    info.click();
    expect(info.parentElement.classList.contains("ocw-tooltip-open")).toBe(true);
    info.dispatchEvent(new KeyboardEvent("keydown", { key: "Escape", bubbles: true }));
    expect(info.parentElement.classList.contains("ocw-tooltip-open")).toBe(false);
    expect(info.parentElement.classList.contains("ocw-tooltip-dismissed")).toBe(true);
    expect(model.get("panel_open")).toBe(true); // the tooltip's Escape is its own: the panel stays
    model.set("compaction_count", 3);
    expect($(".ocw-count").textContent).toBe("3");
  });

  it("keeps a dismissed tooltip dismissed until the pointer leaves its wrapper, not the button inside it", () => {
    mount({ panel_open: true });
    const info = $(".ocw-info");
    const wrap = info.parentElement;
    info.dispatchEvent(new KeyboardEvent("keydown", { key: "Escape", bubbles: true }));
    expect(wrap.classList.contains("ocw-tooltip-dismissed")).toBe(true);
    // The pointer leaves the button for the tooltip beside it: still inside the wrapper.
    info.dispatchEvent(new MouseEvent("mouseleave", { bubbles: false }));
    expect(wrap.classList.contains("ocw-tooltip-dismissed")).toBe(true);
    $(".ocw-tooltip").dispatchEvent(new MouseEvent("mouseleave", { bubbles: false }));
    expect(wrap.classList.contains("ocw-tooltip-dismissed")).toBe(true);
    wrap.dispatchEvent(new MouseEvent("mouseleave", { bubbles: false })); // out of the wrapper: hover shows it again
    expect(wrap.classList.contains("ocw-tooltip-dismissed")).toBe(false);
  });

  it("gives each view its own tooltip id", () => {
    mount();
    const other = document.createElement("div");
    document.body.append(other);
    const second = widget.render({ model: fakeModel(), el: other });
    const a = el.querySelector(".ocw-tooltip").id;
    const b = other.querySelector(".ocw-tooltip").id;
    expect(a).not.toBe(b);
    expect(document.querySelectorAll(`#${b}`)).toHaveLength(1);
    second();
    other.remove();
  });

  it("Compact now sends exactly {action, session_id}", () => {
    const model = mount({ panel_open: true, session_id: "abc123" });
    $(".ocw-compact").click();
    expect(model.sent).toEqual([{ action: "compact", session_id: "abc123" }]);
    expect(model.get("panel_open")).toBe(true);
  });

  it("disables Compact now with no session and sends nothing", () => {
    const model = mount({ session_id: "", session_name: "", ratio: 0, total: 0, window: 0 });
    const button = $(".ocw-compact");
    expect(button.disabled).toBe(true);
    button.click();
    button.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    expect(model.sent).toEqual([]);
  });

  it("disables Compact now while busy and sends nothing", () => {
    const model = mount({ busy: true });
    const button = $(".ocw-compact");
    expect(button.disabled).toBe(true);
    button.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    expect(model.sent).toEqual([]);
  });

  it("enables Compact now once a session attaches", () => {
    const model = mount({ session_id: "" });
    expect($(".ocw-compact").disabled).toBe(true);
    model.set("session_id", "s2");
    expect($(".ocw-compact").disabled).toBe(false);
  });

  it("shows an empty state with no session, never an error", () => {
    mount({
      session_id: "",
      session_name: "",
      total: 0,
      window: 0,
      ratio: 0,
      breakdown: {},
      panel_open: true,
      labels: { empty: "No session yet — start one with %%chat" },
    });
    expect($(".ocw-context").dataset.state).toBe("empty");
    expect($(".ocw-empty").hidden).toBe(false);
    expect($(".ocw-empty").textContent).toBe("No session yet — start one with %%chat");
    expect($(".ocw-panel-body").hidden).toBe(true);
    expect($$(".ocw-row")).toHaveLength(0);
    expect($(".ocw-ring-percent").textContent).toBe("—");
    expect(colorsOf($(".ocw-ring-arc"))).toEqual(["ocw-ring-green"]);
  });

  it("shows the last message in a polite live region", () => {
    const model = mount();
    const msg = $(".ocw-message");
    expect(msg.getAttribute("aria-live")).toBe("polite");
    expect(msg.hidden).toBe(true);
    model.set("message", "Context compacted: covered 12 older messages, 9,800 → 2,100 tokens");
    expect(msg.hidden).toBe(false);
    expect(msg.textContent).toBe(
      "Context compacted: covered 12 older messages, 9,800 → 2,100 tokens",
    );
  });

  it("uses the labels Python sends", () => {
    const model = mount({ panel_open: true });
    model.set("labels", { compact_now: "立即压缩", cat_messages: "消息", count: "压缩次数" });
    expect($(".ocw-compact").textContent).toBe("立即压缩");
    expect($('.ocw-row[data-category="messages"] .ocw-row-name').textContent).toBe("消息");
    expect($(".ocw-count-label").textContent).toBe("压缩次数");
  });

  it("shows text from the kernel as text, not markup", () => {
    const model = mount();
    model.set("message", "<img src=x onerror=alert(1)>");
    model.set("session_name", "<b>x</b>");
    expect(el.querySelector("img")).toBeNull();
    expect(el.querySelector("b")).toBeNull();
    expect($(".ocw-message").textContent).toBe("<img src=x onerror=alert(1)>");
  });
});

describe("updates and cleanup", () => {
  it("re-renders on change: events", () => {
    const model = mount({ panel_open: true });
    model.set("total", 6400);
    model.set("ratio", 0.8);
    model.set("breakdown", { system: 100, messages: 6300, free: 1600 });
    expect($(".ocw-ring-percent").textContent).toBe("80.0%");
    expect($(".ocw-ring-used").textContent).toBe("6,400 / 8,000 tokens");
    expect(colorsOf($(".ocw-ring-arc"))).toEqual(["ocw-ring-red"]);
    expect($$(".ocw-row").map((r) => r.dataset.category)).toEqual(["system", "messages", "free"]);
    model.set("session_name", "research");
    expect($(".ocw-ring-name").textContent).toBe("research");
    model.set("session_name", "/home/ana/projects/sales/analysis.ipynb");
    expect($(".ocw-ring-name").textContent).toBe("analysis.ipynb");
    expect($(".ocw-ring-name").title).toBe("/home/ana/projects/sales/analysis.ipynb");
    expect($(".ocw-panel-title").textContent).toContain("analysis.ipynb");
    model.set("panel_open", false);
    expect($(".ocw-panel").hidden).toBe(true);
  });

  it("removes every model listener and the DOM on cleanup", () => {
    const model = fakeModel();
    expect(model.listenerCount()).toBe(0);
    const dispose = widget.render({ model, el });
    expect(model.listenerCount()).toBeGreaterThan(0);
    const ring = el.querySelector(".ocw-ring");
    const button = el.querySelector(".ocw-compact");
    dispose();
    expect(model.listenerCount()).toBe(0);
    expect(el.querySelector(".ocw-context")).toBeNull();
    expect(el.childNodes).toHaveLength(0);
    // Detached nodes no longer talk to the model.
    ring.click();
    button.click();
    expect(model.saves).toBe(0);
    expect(model.sent).toEqual([]);
  });

  it("can render twice on one model and clean up each view", () => {
    const model = fakeModel();
    const other = document.createElement("div");
    const d1 = widget.render({ model, el });
    const d2 = widget.render({ model, el: other });
    const perView = model.listenerCount() / 2;
    model.set("ratio", 0.9);
    expect(other.querySelector(".ocw-ring-percent").textContent).toBe("90.0%");
    d1();
    expect(model.listenerCount()).toBe(perView);
    d2();
    expect(model.listenerCount()).toBe(0);
  });
});

describe("labels come from Python only", () => {
  it("has no word table of its own: a missing key shows as the key", () => {
    expect(SOURCE).not.toMatch(/DEFAULT_LABELS|Compact now|Context window|压缩/);
    mount({ panel_open: true, labels: { compact_now: "Compact now" } });
    expect($(".ocw-compact").textContent).toBe("Compact now");
    expect($(".ocw-total-label").textContent).toBe("total");
    expect($('.ocw-row[data-category="messages"] .ocw-row-name').textContent).toBe("messages");
  });

  it("every label the view reads exists in Python's table", () => {
    const used = new Set([...SOURCE.matchAll(/\bL\.([a-z_]+)/g)].map((m) => m[1]));
    for (const cat of ["system", "tools", "summary", "messages", "free"]) used.add(`cat_${cat}`);
    expect(used.size).toBeGreaterThan(20);
    for (const key of used) {
      expect(UI_LABELS.en, key).toHaveProperty(key);
      expect(UI_LABELS.zh, key).toHaveProperty(key);
    }
  });
});

describe("language switch with the widget on screen", () => {
  it("turns every label and the message line Chinese, with no English left", () => {
    const model = mount({
      panel_open: true,
      encoding: "cl100k_base",
      encoding_exact: false,
      compaction_count: 2,
      compaction_inferred: 1,
      message: "Context compacted: covered 12 older messages, 9,800 → 2,100 tokens",
    });
    expect($(".ocw-compact").textContent).toBe("Compact now");
    // What Python sends on %config Ocw.lang = 'zh': lang, labels, the message again.
    model.set("lang", "zh");
    model.set("labels", UI_LABELS.zh);
    model.set("message", "上下文已压缩：覆盖了 12 条较早的消息，9,800 → 2,100 tokens");
    expect($(".ocw-context").getAttribute("lang")).toBe("zh");
    expect($(".ocw-compact").textContent).toBe("立即压缩");
    expect($(".ocw-message").textContent).toBe("上下文已压缩：覆盖了 12 条较早的消息，9,800 → 2,100 tokens");
    const text = $(".ocw-context").textContent + $(".ocw-ring").getAttribute("aria-label");
    for (const [key, en] of Object.entries(UI_LABELS.en)) {
      if (UI_LABELS.zh[key] === en || en.length < 4) continue; // "tokens" is the same in both
      const words = en
        .replace(/\{\w+\}/g, " ")
        .split(/\s+/)
        .filter((w) => w.length > 3 && !UI_LABELS.zh[key].includes(w)); // %%chat is %%chat in both
      for (const w of words) expect(text, `${key}: "${w}" still English`).not.toContain(w);
    }
    expect(text).not.toContain("estimate");
    model.set("lang", "en");
    model.set("labels", UI_LABELS.en);
    expect($(".ocw-compact").textContent).toBe("Compact now");
  });
});

describe("message line", () => {
  it("keeps each figure, arrow and unit on one line", () => {
    const model = mount();
    model.set("message", "Context compacted: covered 3 older messages, 4,857 → 2,885 tokens");
    const spans = $$(".ocw-message .ocw-nowrap").map((n) => n.textContent);
    expect(spans).toEqual(["3", "4,857 → 2,885 tokens"]);
    expect($(".ocw-message").textContent).toBe("Context compacted: covered 3 older messages, 4,857 → 2,885 tokens");
    model.set("message", "上下文已压缩：覆盖了 3 条较早的消息，4,857 → 2,885 tokens");
    expect($$(".ocw-message .ocw-nowrap").map((n) => n.textContent)).toEqual(["3", "4,857 → 2,885 tokens"]);
    model.set("message", "Compacting context…");
    expect($$(".ocw-message .ocw-nowrap")).toHaveLength(0);
    expect(CSS).toMatch(/\.ocw-context \.ocw-nowrap\s*\{[^}]*white-space:\s*nowrap/);
  });
});

describe("disconnected (the kernel restarted)", () => {
  it("says so and disables Compact now when the comm goes dead", () => {
    const model = mount({ panel_open: true });
    const button = $(".ocw-compact");
    expect(button.disabled).toBe(false);
    expect($(".ocw-context").dataset.state).toBe("ready");
    // What the widget manager does on a kernel restart: comm_live = false + the event.
    model.comm_live = false;
    model.trigger("comm_live_update");
    expect($(".ocw-context").dataset.state).toBe("disconnected");
    expect($(".ocw-context").classList.contains("ocw-disconnected")).toBe(true);
    expect(button.disabled).toBe(true);
    expect(button.getAttribute("aria-disabled")).toBe("true");
    const status = $(".ocw-ring-status");
    expect(status.hidden).toBe(false);
    expect(status.textContent).toBe(UI_LABELS.en.disconnected);
    button.click();
    button.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    expect(model.sent).toEqual([]);
    // A later state change does not bring the controls back.
    model.set("busy", false);
    expect(button.disabled).toBe(true);
  });

  it("treats the event as a disconnect when the model proxy hides comm_live", () => {
    const model = mount();
    expect("comm_live" in model).toBe(false); // anywidget's proxy exposes no comm_live
    model.trigger("comm_live_update");
    expect($(".ocw-compact").disabled).toBe(true);
    expect($(".ocw-context").dataset.state).toBe("disconnected");
  });

  it("stays live on a comm_live_update that says the comm is live", () => {
    const model = mount();
    model.comm_live = true;
    model.trigger("comm_live_update");
    expect($(".ocw-compact").disabled).toBe(false);
    expect($(".ocw-ring-status").hidden).toBe(true);
  });

  it("a send that fails marks the view disconnected instead of throwing", () => {
    const model = mount({ panel_open: true });
    let tries = 0;
    model.send = () => {
      tries += 1;
      throw new Error("Cannot send");
    };
    $(".ocw-compact").click();
    expect(tries).toBe(1);
    expect($(".ocw-compact").disabled).toBe(true);
    expect($(".ocw-context").dataset.state).toBe("disconnected");
    $(".ocw-compact").click();
    expect(tries).toBe(1);
  });
});
