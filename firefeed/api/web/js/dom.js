// DOM helpers shared by every view. Data reaches the page only as text nodes or attributes (never
// innerHTML), so a company's names, values, rule names and errors cannot inject markup.

export const $ = (id) => document.getElementById(id);

// el("td", {class: "num"}, "12"): an element whose children are nodes or text.
export function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value === true) node.setAttribute(key, "");
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function fill(parent, rows) {
  parent.replaceChildren(...rows);
}

export const fmtInt = (n) => (n === null || n === undefined ? "-" : Number(n).toLocaleString("en"));
export const fmtSec = (s) => (s === null || s === undefined ? "-" : Number(s).toFixed(2));
export const fmtTime = (iso) => (iso ? new Date(iso).toLocaleString() : "-");
export const shortId = (id) => (id ? String(id).slice(0, 8) : "");

export function statusBadge(status) {
  return el("span", { class: "status status-" + String(status).toLowerCase() }, status);
}

// A labelled control: every input of the page has a <label> tied to it by id.
let controlSeq = 0;
export function field(labelText, control, hint) {
  if (!control.id) control.id = "ctl-" + ++controlSeq;
  return el(
    "div",
    { class: "field" },
    el("label", { for: control.id }, labelText),
    control,
    hint ? el("span", { class: "muted hint" }, hint) : null,
  );
}

// A column head: a text, or NUM(text) for a column of numbers (head and cells both right-aligned, #48).
export const NUM = (label) => ({ label, num: true });
const headCell = (h) => el("th", { scope: "col", class: h.num ? "num" : null }, h.num ? h.label : h);

export function table(cls, heads, rows, props) {
  return el(
    "table",
    { class: cls, ...(props || {}) },
    el(
      "thead",
      {},
      el("tr", {}, ...heads.map(headCell)),
    ),
    el("tbody", {}, ...rows),
  );
}

// Polite announcements for async results (screen readers hear them; the region is visually hidden).
export function announce(text) {
  const live = $("live");
  if (!live) return;
  live.textContent = "";
  // A fresh text after a tick is read again even when it repeats the last one.
  setTimeout(() => (live.textContent = text), 30);
}

// A status line of a view: role=status regions are announced when their text changes.
export function say(node, kind, text) {
  node.className = "note note-" + kind;
  node.textContent = text;
}

export function debounce(fn, ms) {
  let timer = null;
  const wrapped = (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
  wrapped.cancel = () => clearTimeout(timer);
  return wrapped;
}

export async function copyText(button, text) {
  try {
    await navigator.clipboard.writeText(text);
    button.textContent = "copied";
  } catch {
    button.textContent = "copy failed";
  }
}
