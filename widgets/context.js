// ocw context widget — the browser side of ocw.widgets.ring.ContextWidget.
//
// One self-contained ES module (anywidget loads it from a Blob URL, so it has
// no imports at all). Python owns the state: the session publishes occupancy
// and compaction events, the widget's traitlets mirror them, and this module
// only shows them and sends actions back ({action: "compact", session_id}).
// It never computes occupancy; it formats numbers and a percent from `ratio`.
//
// Every word it shows comes from Python in the `labels` traitlet (ocw.widgets.ring.
// UI_LABELS, the one source); a key missing there shows as the key itself.
// When the kernel goes away (restart, shutdown) the widget manager marks the
// model's comm dead and triggers "comm_live_update": the view then says it is
// disconnected and disables its controls, since nothing it sends would arrive.

const CATEGORIES = ["system", "tools", "summary", "memory", "pins", "messages", "free"];

// Ring colors by occupancy ratio (DESIGN.md §6): green < 50 %, yellow 50–80 %,
// red ≥ 80 %. There is no separate "suggestion" state or border.
const YELLOW_FROM = 0.5;
const RED_FROM = 0.8;

// Every traitlet the view reads; a change to any of them re-renders.
const WATCHED = [
  "session_id",
  "session_name",
  "total",
  "window",
  "ratio",
  "breakdown",
  "percents",
  "window_source",
  "basis",
  "encoding",
  "calibration",
  "generation",
  "compaction_count",
  "compaction_inferred",
  "auto_paused",
  "left_out",
  "usage_unverified",
  "summarizer",
  "pruned_results",
  "pruned_tokens",
  "encoding_exact",
  "busy",
  "message",
  "panel_open",
  "reserve_ratio",
  "lang",
  "labels",
];

const RING_R = 27;

let instances = 0;

/** The color class of the progress arc for an occupancy ratio. */
export function colorClass(ratio) {
  const r = Number(ratio) || 0;
  if (r >= RED_FROM) return "ocw-ring-red";
  if (r >= YELLOW_FROM) return "ocw-ring-yellow";
  return "ocw-ring-green";
}

/** 3992 -> "3,992" (locale-independent, so tests and screenshots agree). */
export function formatInt(n) {
  const v = Math.round(Number(n) || 0);
  const s = String(Math.abs(v)).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  return v < 0 ? "-" + s : s;
}

/** 0.4994 -> "49.9%" (one decimal). */
export function formatPercent(ratio) {
  const r = Number(ratio);
  if (!Number.isFinite(r)) return "—";
  return (Math.max(0, r) * 100).toFixed(1) + "%";
}

/** Python's labels; a missing key reads as the key (visible, never a crash). */
export function labelTable(labels) {
  const table = labels && typeof labels === "object" ? labels : {};
  return new Proxy(table, {
    get: (t, key) => (typeof key === "string" && typeof t[key] === "string" ? t[key] : key),
  });
}

// A figure with its unit, or "X → Y tokens": one piece that never breaks across lines.
const FIGURE = /\d[\d,.]*(?:\s*→\s*\d[\d,.]*)?(?:\s*(?:tokens|%))?/g;

/** Fill `node` with `text`, each figure in a no-wrap span. */
export function setTextKeepingFigures(node, text) {
  node.replaceChildren();
  let last = 0;
  for (const m of String(text).matchAll(FIGURE)) {
    if (m.index > last) node.append(document.createTextNode(text.slice(last, m.index)));
    const span = document.createElement("span");
    span.className = "ocw-nowrap";
    span.textContent = m[0];
    node.append(span);
    last = m.index + m[0].length;
  }
  if (last < text.length) node.append(document.createTextNode(text.slice(last)));
}

function fill(template, values) {
  return String(template).replace(/\{(\w+)\}/g, (m, k) => (k in values ? values[k] : m));
}

function h(tag, cls, attrs) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (attrs) for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

function breakdownEntries(breakdown) {
  const b = breakdown && typeof breakdown === "object" ? breakdown : {};
  const tokens = (v) => {
    if (v && typeof v === "object") v = v.tokens;
    const n = Number(v);
    return Number.isFinite(n) ? n : 0;
  };
  const keys = CATEGORIES.filter((k) => k in b).concat(
    Object.keys(b).filter((k) => !CATEGORIES.includes(k)),
  );
  return keys.map((k) => [k, tokens(b[k])]);
}

function render({ model, el }) {
  const uid = `ocw-${++instances}-${Math.random().toString(36).slice(2, 8)}`;
  const panelId = `${uid}-panel`;
  const tipId = `${uid}-tip`;
  const disposers = [];
  const listen = (target, type, fn, capture = false) => {
    target.addEventListener(type, fn, capture);
    disposers.push(() => target.removeEventListener(type, fn, capture));
  };

  // ---- DOM (built once; update() only changes text, classes, attributes) ----
  const root = h("div", "ocw-context");

  const ring = h("div", "ocw-ring", {
    role: "button",
    tabindex: "0",
    "aria-controls": panelId,
    "aria-expanded": "false",
    "aria-busy": "false",
  });
  const graphic = h("div", "ocw-ring-graphic");
  // Static markup, parsed by the HTML parser so the SVG namespace needs no URI.
  graphic.innerHTML =
    '<svg class="ocw-ring-svg" viewBox="0 0 64 64" aria-hidden="true" focusable="false">' +
    `<circle class="ocw-ring-base" cx="32" cy="32" r="${RING_R}" fill="none"></circle>` +
    `<circle class="ocw-ring-arc ocw-ring-green" cx="32" cy="32" r="${RING_R}" fill="none"` +
    ' pathLength="100" stroke-dasharray="0 100" transform="rotate(-90 32 32)"></circle>' +
    `<circle class="ocw-ring-spinner" cx="32" cy="32" r="${RING_R}" fill="none"` +
    ' pathLength="100" stroke-dasharray="18 82"></circle>' +
    "</svg>";
  const arc = graphic.querySelector(".ocw-ring-arc");
  const percent = h("span", "ocw-ring-percent");
  graphic.append(percent);
  const ringText = h("div", "ocw-ring-text");
  const ringName = h("span", "ocw-ring-name");
  const used = h("span", "ocw-ring-used");
  const ringStatus = h("span", "ocw-ring-status");
  ringText.append(ringName, used, ringStatus);
  ring.append(graphic, ringText);

  const panel = h("div", "ocw-panel", { id: panelId, role: "region" });
  panel.hidden = true;
  const panelTitle = h("div", "ocw-panel-title");
  const empty = h("div", "ocw-empty");
  const body = h("div", "ocw-panel-body");

  const bar = h("div", "ocw-bar", { "aria-hidden": "true" });
  const barSegs = h("div", "ocw-bar-segs");
  const reserveMark = h("div", "ocw-reserve-mark");
  bar.append(barSegs, reserveMark);

  const rows = h("div", "ocw-rows", { role: "table" });

  const facts = h("div", "ocw-facts");
  const fact = (cls) => {
    const label = h("div", `ocw-fact-label ${cls}-label`);
    const value = h("div", `ocw-fact-value ${cls}`);
    facts.append(label, value);
    return [label, value];
  };
  const [totalLabel, totalValue] = fact("ocw-total");
  const [reserveLabel, reserveValue] = fact("ocw-reserve");
  const [basisLabel, basisValue] = fact("ocw-basis");
  const [encodingLabel, encodingValue] = fact("ocw-encoding");
  const [sourceLabel, sourceValue] = fact("ocw-window-source");
  const [prunedLabel, prunedValue] = fact("ocw-pruned");
  const [leftOutLabel, leftOutValue] = fact("ocw-left-out");
  const [unverifiedLabel, unverifiedValue] = fact("ocw-unverified");
  const [summarizerLabel, summarizerValue] = fact("ocw-summarizer");

  const countRow = h("div", "ocw-count-row");
  const countLabel = h("span", "ocw-count-label");
  const count = h("span", "ocw-count");
  const infoWrap = h("span", "ocw-info-wrap");
  const info = h("button", "ocw-info", { type: "button", "aria-describedby": tipId });
  info.textContent = "i";
  const tooltip = h("span", "ocw-tooltip", { id: tipId, role: "tooltip" });
  infoWrap.append(info, tooltip);
  countRow.append(countLabel, count, infoWrap);

  body.append(bar, rows, facts, countRow);

  const footer = h("div", "ocw-footer");
  const compact = h("button", "ocw-compact", { type: "button" });
  footer.append(compact);
  panel.append(panelTitle, empty, body, footer);

  const message = h("div", "ocw-message", { "aria-live": "polite", role: "status" });

  root.append(ring, panel, message);
  el.append(root);

  // ---- state -> DOM ----
  // Is the kernel side there? The widget manager keeps the model's comm_live
  // and triggers "comm_live_update" when it changes; anywidget's model proxy
  // does not expose comm_live itself. The manager only ever turns a rendered
  // model's comm dead (a restarted kernel makes new models), so an update we
  // cannot read means disconnected.
  function commIsLive(afterUpdate) {
    if (typeof model.comm_live === "boolean") return model.comm_live;
    return !afterUpdate;
  }
  let live = commIsLive(false); // false: nothing sent would arrive
  const labels = () => labelTable(model.get("labels"));

  function renderRows(L, entries, windowSize, percents) {
    rows.replaceChildren();
    barSegs.replaceChildren();
    let offset = 0;
    for (const [cat, tokens] of entries) {
      const share = windowSize > 0 ? tokens / windowSize : NaN;
      const row = h("div", "ocw-row", { role: "row", "data-category": cat });
      const name = h("span", "ocw-row-name", { role: "cell" });
      const swatch = h("span", "ocw-swatch", { "aria-hidden": "true" });
      const label = L[`cat_${cat}`];
      name.append(swatch, document.createTextNode(label === `cat_${cat}` ? cat : label));
      const tok = h("span", "ocw-row-tokens", { role: "cell" });
      tok.textContent = formatInt(tokens);
      const pct = h("span", "ocw-row-share", { role: "cell" });
      // The session's own percents (they add up to 100.0 %); computed here only as a fallback.
      pct.textContent = percents && percents[cat] !== undefined ? `${percents[cat]}%` : formatPercent(share);
      row.append(name, tok, pct);
      rows.append(row);
      if (cat !== "free" && windowSize > 0 && tokens > 0 && offset < 100) {
        const width = Math.min(100 - offset, (tokens / windowSize) * 100);
        const seg = h("span", "ocw-bar-seg", { "data-category": cat });
        seg.style.left = `${offset}%`;
        seg.style.width = `${width}%`;
        barSegs.append(seg);
        offset += width;
      }
    }
  }

  function update() {
    const L = labels();
    const sessionId = model.get("session_id") || "";
    const hasSession = sessionId !== "";
    const busy = !!model.get("busy");
    const open = !!model.get("panel_open");
    const total = Number(model.get("total")) || 0;
    const windowSize = Number(model.get("window")) || 0;
    const ratio = hasSession ? Number(model.get("ratio")) || 0 : 0;
    const pctText = formatPercent(ratio);

    root.setAttribute("lang", model.get("lang") === "zh" ? "zh" : "en");
    root.dataset.state = !live ? "disconnected" : hasSession ? "ready" : "empty";
    root.classList.toggle("ocw-disconnected", !live);

    // Ring.
    ring.classList.toggle("ocw-busy", busy);
    ring.setAttribute("aria-busy", busy ? "true" : "false");
    ring.setAttribute("aria-expanded", open ? "true" : "false");
    arc.classList.remove("ocw-ring-green", "ocw-ring-yellow", "ocw-ring-red");
    arc.classList.add(colorClass(ratio));
    const arcLen = Math.min(100, Math.max(0, ratio * 100));
    arc.setAttribute("stroke-dasharray", `${arcLen} ${100 - arcLen}`);
    arc.style.visibility = arcLen > 0 ? "" : "hidden";
    percent.textContent = hasSession ? pctText : "—";
    percent.classList.toggle("ocw-ring-percent-long", percent.textContent.length > 5);
    const fullName = model.get("session_name") || sessionId;
    // A notebook's session is named by its path; the file name is what a reader needs.
    const shortName = fullName.split("/").pop() || fullName;
    ringName.textContent = hasSession ? shortName : L.no_session;
    ringName.title = hasSession ? fullName : "";
    // The figures are what the last request sent; say how many older messages it left out.
    const leftOut = hasSession ? Number(model.get("left_out")) || 0 : 0;
    used.textContent = hasSession
      ? `${formatInt(total)} / ${formatInt(windowSize)} ${L.tokens}` +
        (leftOut > 0 ? ` · ${fill(L.left_out_short, { n: formatInt(leftOut) })}` : "")
      : "";
    // Automatic compaction that cannot fire is said on the ring itself, not only in the panel.
    const reserveNow = Number(model.get("reserve_ratio"));
    const autoState = !hasSession ? "" : Number.isFinite(reserveNow) && reserveNow <= 0 ? "off"
      : model.get("auto_paused") ? "paused" : "";
    root.dataset.auto = autoState || "on";
    ringStatus.textContent = !live ? L.disconnected : busy ? L.compacting
      : autoState === "off" ? L.auto_off_short : autoState === "paused" ? L.auto_paused_short : "";
    ringStatus.hidden = ringStatus.textContent === "";
    const aria = hasSession
      ? fill(L.ring_label, { pct: pctText, used: formatInt(total), window: formatInt(windowSize) })
      : L.ring_label_empty;
    ring.setAttribute("aria-label", aria);
    ring.title = aria;

    // Panel.
    panel.hidden = !open;
    panel.classList.toggle("ocw-open", open);
    panel.setAttribute("aria-label", L.panel);
    panelTitle.textContent = hasSession ? `${L.title} · ${shortName}` : L.title;
    empty.textContent = L.empty;
    empty.hidden = hasSession;
    body.hidden = !hasSession;

    renderRows(L, hasSession ? breakdownEntries(model.get("breakdown")) : [], windowSize, model.get("percents"));
    const reserve = Number(model.get("reserve_ratio"));
    const reservePct = Number.isFinite(reserve) ? Math.min(100, Math.max(0, reserve * 100)) : 80;
    const autoOff = Number.isFinite(reserve) && reserve <= 0; // automatic compaction is off
    reserveMark.hidden = autoOff;
    reserveMark.style.left = `${reservePct}%`;
    reserveMark.title = `${L.reserve} ${autoOff ? L.off : formatPercent(reservePct / 100)}`;

    totalLabel.textContent = L.total;
    totalValue.textContent = `${formatInt(total)} / ${formatInt(windowSize)} ${L.tokens}`;
    reserveLabel.textContent = L.reserve;
    reserveValue.textContent = autoOff ? L.off
      : model.get("auto_paused") ? `${formatPercent(reservePct / 100)} — ${L.auto_paused}` : formatPercent(reservePct / 100);
    basisLabel.textContent = L.basis;
    const basis = model.get("basis") === "measured" ? "measured" : "estimated";
    const cal = model.get("calibration");
    let basisText = L[basis];
    if (typeof cal === "number" && Number.isFinite(cal)) {
      basisText += ` ×${cal.toFixed(2)}`;
      basisValue.title = L.calibration;
    } else {
      basisValue.removeAttribute("title");
    }
    basisValue.textContent = basisText;
    basisValue.dataset.basis = basis;
    encodingLabel.textContent = L.encoding;
    const enc = model.get("encoding") || "";
    encodingValue.textContent = !enc ? "—" : model.get("encoding_exact") === false ? `${enc} (${L.estimate})` : enc;
    const source = model.get("window_source") || "configured";
    sourceLabel.textContent = L.window_from;
    sourceValue.textContent = source;
    sourceLabel.hidden = sourceValue.hidden = source === "configured";
    // Old tool output shown as stubs: its own line, only when there is some.
    const prunedResults = Number(model.get("pruned_results")) || 0;
    prunedLabel.textContent = L.pruned;
    prunedValue.textContent = fill(L.pruned_value, {
      n: formatInt(prunedResults),
      tokens: formatInt(model.get("pruned_tokens")),
    });
    prunedLabel.hidden = prunedValue.hidden = prunedResults <= 0;
    leftOutLabel.textContent = L.left_out;
    leftOutValue.textContent = leftOut === 1 ? L.left_out_value_one : fill(L.left_out_value, { n: formatInt(leftOut) });
    leftOutLabel.hidden = leftOutValue.hidden = leftOut <= 0;
    const unverified = hasSession ? Number(model.get("usage_unverified")) || 0 : 0;
    unverifiedLabel.textContent = L.unverified;
    unverifiedValue.textContent = fill(L.unverified_value, { n: formatInt(unverified) });
    unverifiedLabel.hidden = unverifiedValue.hidden = unverified <= 0;
    // A summarizer of its own (Ocw.summary_model): its name, window and calibration, only when set.
    const own = hasSession ? model.get("summarizer") || {} : {};
    summarizerLabel.textContent = L.summarizer;
    summarizerValue.textContent = own.name ? fill(L.summarizer_value, {
      name: own.name,
      window: formatInt(own.window),
      calibration: Number(own.calibration || 1).toFixed(2),
      samples: formatInt(own.samples || 0),
    }) : "";
    summarizerLabel.hidden = summarizerValue.hidden = !own.name;

    countLabel.textContent = L.count;
    const inferred = Number(model.get("compaction_inferred")) || 0;
    count.textContent =
      formatInt(model.get("compaction_count")) + (inferred > 0 ? ` (${fill(L.inferred, { n: formatInt(inferred) })})` : "");
    info.setAttribute("aria-label", L.info_label);
    tooltip.textContent = L.count_info;

    compact.textContent = busy ? L.compacting : L.compact_now;
    compact.disabled = !live || !hasSession || busy;
    compact.setAttribute("aria-disabled", compact.disabled ? "true" : "false");

    const msg = model.get("message") || "";
    setTextKeepingFigures(message, msg);
    message.hidden = msg === "";
  }

  function onCommLive() {
    live = commIsLive(true);
    update();
  }

  function disconnected() {
    if (!live) return;
    live = false;
    update();
  }

  // ---- browser -> Python ----
  function togglePanel() {
    model.set("panel_open", !model.get("panel_open"));
    model.save_changes();
  }

  listen(ring, "click", () => togglePanel());
  listen(ring, "keydown", (e) => {
    if (e.key === "Enter" || e.key === " " || e.key === "Spacebar") {
      e.preventDefault();
      togglePanel();
    } else if (e.key === "Escape" && model.get("panel_open")) {
      e.preventDefault();
      togglePanel();
    }
  });
  listen(panel, "keydown", (e) => {
    if (e.key === "Escape" && !infoWrap.contains(e.target) && model.get("panel_open")) {
      e.preventDefault();
      togglePanel();
      ring.focus();
    }
  });

  // The panel is a popover: Escape anywhere (a combobox with its list open keeps its own
  // Escape) and a click outside the ring and the panel close it. Capture phase, because the
  // chat composer stops its keys from bubbling to the notebook. A click, not a mousedown:
  // closing on the press reflows the page between press and release, so the notebook took
  // the click on a cell's prompt for a click elsewhere (the browser test caught it).
  const closePanel = () => {
    if (!model.get("panel_open")) return;
    model.set("panel_open", false);
    model.save_changes();
  };
  const doc = el.ownerDocument || document;
  listen(doc, "keydown", (e) => {
    if (e.key !== "Escape" || !model.get("panel_open") || root.contains(e.target)) return;
    const t = e.target;
    if (t && typeof t.getAttribute === "function" && t.getAttribute("aria-expanded") === "true") return;
    closePanel();
  }, true);
  listen(doc, "click", (e) => {
    if (!root.contains(e.target)) closePanel();
  }, true);

  listen(compact, "click", () => {
    const sessionId = model.get("session_id") || "";
    if (!live || sessionId === "" || model.get("busy")) return;
    try {
      model.send({ action: "compact", session_id: sessionId });
    } catch (e) {
      disconnected(); // the kernel connection is gone ("Cannot send")
    }
  });

  // The info tooltip shows on hover and on keyboard focus (CSS); a tap or click
  // pins it open; Escape dismisses it until the pointer or focus leaves.
  listen(info, "click", (e) => {
    e.stopPropagation();
    infoWrap.classList.remove("ocw-tooltip-dismissed");
    infoWrap.classList.toggle("ocw-tooltip-open");
  });
  listen(info, "keydown", (e) => {
    if (e.key === "Escape") {
      e.stopPropagation();
      infoWrap.classList.remove("ocw-tooltip-open");
      infoWrap.classList.add("ocw-tooltip-dismissed");
    }
  });
  const reset = () => infoWrap.classList.remove("ocw-tooltip-dismissed");
  listen(infoWrap, "mouseleave", reset);
  listen(info, "blur", () => {
    reset();
    infoWrap.classList.remove("ocw-tooltip-open");
  });

  // ---- Python -> browser ----
  for (const name of WATCHED) model.on(`change:${name}`, update);
  model.on("comm_live_update", onCommLive);
  update();

  return () => {
    for (const name of WATCHED) model.off(`change:${name}`, update);
    model.off("comm_live_update", onCommLive);
    for (const dispose of disposers.splice(0)) dispose();
    root.remove();
  };
}

export default { render };
