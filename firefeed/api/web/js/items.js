// Items: one item by its key, as each source brought it, after each rule, and as each export writes it
// with its findings (GET .../items/{key}).
import { $, el, field, say, table, announce } from "./dom.js";
import { api, projectPath, errorText } from "./api.js";
import { state } from "./state.js";

const cellText = (v) => (Array.isArray(v) ? v.join(", ") : v === null || v === undefined ? "" : String(v));

export function mount() {
  $("view-items").append(
    el("h2", { id: "items-heading" }, "Items"),
    el(
      "form",
      { id: "item-form", class: "bar", role: "search", onsubmit: (e) => (e.preventDefault(), find()) },
      field("Item key", el("input", { type: "search", id: "item-key", autocomplete: "off", required: true })),
      el("button", { type: "submit" }, "Find"),
    ),
    el("p", { id: "item-note", class: "note", role: "status" }),
    el("div", { id: "item-view" }),
  );
}

export function show(project) {
  $("items-heading").textContent = "Items of " + project;
}

function fieldTable(cls, fields, values) {
  return table(cls, ["field", "value"], fields.map((f, i) => el("tr", { dataset: { field: f } }, el("th", { scope: "row", class: "mono" }, f), el("td", {}, cellText(values[i])))));
}

// The item after the project's rules: each field's value, whether a rule changed it, and what set it.
function afterTable(item) {
  const fields = item.fields || [];
  const changed = new Set(item.changed || []);
  const origin = item.origin || [];
  return table(
    "item-after",
    ["field", "value", "set by"],
    fields.map((f, i) =>
      el(
        "tr",
        { dataset: { field: f }, class: changed.has(i) ? "changed" : null },
        el("th", { scope: "row", class: "mono" }, f),
        el("td", {}, cellText((item.values || [])[i]), changed.has(i) ? el("span", { class: "changed-mark" }, " ✎ changed") : null),
        el("td", { class: "origin" }, originText(origin[i])),
      ),
    ),
  );
}

function originText(origin) {
  if (!origin) return "";
  const at = String(origin).indexOf(":");
  const kind = String(origin).slice(0, at), name = String(origin).slice(at + 1);
  return kind === "rule" ? `rule ${name}` : kind === "source" ? `source ${name}` : String(origin);
}

async function find() {
  const project = state.project;
  const key = $("item-key").value.trim();
  if (!key) return;
  say($("item-note"), "muted", "looking…");
  $("item-view").replaceChildren();
  try {
    const item = await api("GET", projectPath(project, "items", key));
    if (state.project !== project) return;
    render(item);
    say($("item-note"), "ok", `item ${item.key}`);
    announce(`item ${item.key} found`);
  } catch (err) {
    // A 404 names what is missing (no source has that key), in the API's words.
    if (err.status === 404) say($("item-note"), "bad", err.message);
    else if (err.status !== 401) say($("item-note"), "bad", errorText(err));
  }
}

function render(item) {
  const parts = [el("h3", {}, "As each source brought it")];
  for (const s of item.sources || []) {
    parts.push(el("h4", {}, "Source ", el("span", { class: "mono" }, s.name)), fieldTable("item-source", s.fields, s.values));
  }
  parts.push(el("h3", {}, "After each rule"));
  const trail = (item.rules || []).map((r) =>
    el(
      "li",
      { dataset: { rule: r.rule } },
      el("strong", {}, r.rule),
      r.excluded ? " — excluded the item" : r.matched ? "" : " — did not match",
      r.changes.length
        ? el("ul", {}, ...r.changes.map((c) => el("li", {}, el("span", { class: "mono" }, c.field), `: ${cellText(c.before)} → ${cellText(c.after)}`)))
        : r.matched && !r.excluded ? " — matched, changed nothing" : null,
    ),
  );
  parts.push(trail.length ? el("ol", { class: "item-rules" }, ...trail) : el("p", { class: "muted" }, "no rule reached it"));
  parts.push(el("h3", {}, "After the project's rules"));
  if (item.excluded_by) parts.push(el("p", { class: "item-excluded" }, `excluded by ${item.excluded_by}: no export writes it`));
  parts.push(afterTable(item));
  parts.push(el("h3", {}, "In each export"));
  for (const e of item.exports || []) {
    const box = el("section", { class: "item-export", dataset: { export: e.name } }, el("h4", {}, "Export ", el("span", { class: "mono" }, e.name)));
    if (e.excluded_by) box.append(el("p", {}, `not written: excluded by ${e.excluded_by}`));
    else box.append(fieldTable("item-export-row", e.columns || [], e.cells || []));
    const findings = e.findings || [];
    box.append(
      findings.length
        ? table("item-findings", ["severity", "check", "message"], findings.map((f) => el("tr", { class: "finding finding-" + f.severity }, el("td", {}, f.severity), el("td", {}, f.check), el("td", {}, f.message))))
        : el("p", { class: "muted" }, "no findings"),
    );
    parts.push(box);
  }
  $("item-view").replaceChildren(...parts);
}
