// The spec as a form, for the common keys: the project's name, key and schedule, its sources, lookups and
// exports (and, for a new project, simple rules). Editing an existing spec keeps every key the form does
// not show: each row remembers the entry it came from and only the form's keys are written over it.
import { el, field } from "./dom.js";

const FORMATS = ["", "csv", "tsv", "json", "jsonl", "xml"];
const EXPORT_FORMATS = ["csv", "tsv", "json", "jsonl", "google-xml"];
export const OPS = ["eq", "ne", "contains", "not_contains", "starts_with", "ends_with", "in", "not_in", "matches",
  "empty", "not_empty", "gt", "gte", "lt", "lte", "length_gt", "length_lt"];

const text = (v) => (v === undefined || v === null ? "" : String(v));
const input = (name, value, props) => el("input", { type: "text", name, autocomplete: "off", value: text(value), ...(props || {}) });
const select = (name, options, value) =>
  el("select", { name }, ...options.map((o) => el("option", { value: o, selected: o === text(value) }, o === "" ? "(from the name)" : o)));

// One row of a list section: labelled controls and a remove button; `what` names the row for labels.
function rowOf(kind, what, index, controls) {
  const row = el("div", { class: "form-row", dataset: { kind, index: index === null ? "" : String(index) } });
  const remove = el("button", { type: "button", class: "remove", onclick: () => row.remove() }, `Remove ${what}`);
  row.append(...controls.map(([label, control, hint]) => field(label, control, hint)), remove);
  return row;
}

// Each kind's row: (its number, the stored entry or {}, that entry's index or null).
const ROWS = {
  source: (n, v, i) =>
    rowOf("source", `source ${n}`, i, [
      [`Source ${n} name`, input("name", v.name ?? (n === 1 && i === null ? "main" : ""))],
      [`Source ${n} URL or file`, input("url", v.url, { placeholder: "https://… or main.csv" })],
      [`Source ${n} format`, select("format", FORMATS, v.format ?? "")],
      ...(n > 1 ? [[`Source ${n} mode`, select("mode", ["enrich", "append"], v.mode ?? "enrich")]] : []),
    ]),
  rule: (n, v, i) =>
    rowOf("rule", `rule ${n}`, i, [
      [`Rule ${n} name`, input("name", v.name)],
      [`Rule ${n}: when field`, input("when_field"), "empty: every item"],
      [`Rule ${n}: operator`, select("when_op", OPS, "eq")],
      [`Rule ${n}: compared value`, input("when_value")],
      [`Rule ${n}: set field`, input("set")],
      [`Rule ${n}: to the value`, input("value"), "a text; {field} is a field's value"],
    ]),
  export: (n, v, i) =>
    rowOf("export", `export ${n}`, i, [
      [`Export ${n} name`, input("name", v.name ?? (n === 1 && i === null ? "feed" : ""))],
      [`Export ${n} format`, select("format", EXPORT_FORMATS, v.format ?? "csv")],
      [`Export ${n} file`, input("path", v.path ?? (n === 1 && i === null ? "feed.csv" : ""))],
    ]),
  lookup: (n, v, i) =>
    rowOf("lookup", `lookup ${n}`, i, [
      [`Lookup ${n} name`, input("name", v.name)],
      [`Lookup ${n} key column`, input("key", v.key)],
      [`Lookup ${n} URL or file`, input("url", v.url), "empty: rows kept in the spec, added from the Values view"],
    ]),
};

function section(kind, title, entries) {
  const list = el("div", { class: "form-list", dataset: { list: kind } });
  const add = el(
    "button",
    { type: "button", class: "add", onclick: () => list.append(ROWS[kind](list.children.length + 1, {}, null)) },
    `Add ${kind}`,
  );
  entries.forEach(([v, i], n) => list.append(ROWS[kind](n + 1, v, i)));
  return el("fieldset", { class: "form-section" }, el("legend", {}, title), list, add);
}

// base: the stored spec being edited, or null for a new project (its id typed in the form).
export function projectForm(id, base) {
  const b = base || {};
  const stored = (key) => (b[key] || []).map((v, i) => [v, i]);
  const top = (name, label, value, props, hint) => field(label, input(name, value, { id: `${id}-${name}`, ...(props || {}) }), hint);
  const root = el(
    "form",
    { id, class: "project-form", novalidate: true, onsubmit: (e) => e.preventDefault() },
    el(
      "fieldset",
      { class: "form-section" },
      el("legend", {}, "Project"),
      base
        ? el("p", {}, "Project ", el("span", { class: "mono" }, b.project))
        : top("project", "Project id", "", { pattern: "[A-Za-z0-9][A-Za-z0-9_-]{0,63}", required: true }, "letters, digits, - and _"),
      top("name", "Display name", b.name),
      top("key", "Item key field", b.key ?? "id"),
      top("schedule", "Schedule (cron, UTC)", b.schedule, { placeholder: "0 * * * *" }, "empty: runs only when asked"),
    ),
    section("source", "Sources (the first is the primary)", base ? stored("sources") : [[{}, null]]),
    base ? el("p", { class: "muted" }, "Rules are edited in the Rules view.") : section("rule", "Rules", []),
    section("lookup", "Lookups", stored("lookups")),
    section("export", "Exports", base ? stored("exports") : [[{}, null]]),
  );

  const value = (name) => root.querySelector(`#${id}-${name}`).value.trim();
  const rows = (kind) =>
    [...root.querySelectorAll(`[data-list=${kind}] .form-row`)].map((row) => ({
      index: row.dataset.index === "" ? null : Number(row.dataset.index),
      v: Object.fromEntries([...row.querySelectorAll("input, select")].map((c) => [c.name, c.value.trim()])),
    }));
  // An edited entry: the stored one with the form's keys written over it (an empty optional key removed).
  const merged = (key, index, fields) => {
    const out = index === null ? {} : { ...b[key][index] };
    for (const [k, v] of Object.entries(fields)) {
      if (v === undefined) delete out[k];
      else out[k] = v;
    }
    return out;
  };

  // The spec the form describes, in the key order a person writes it (or the stored spec's own order).
  function read(company) {
    const spec = base ? { ...b } : { company, project: value("project") };
    const optional = (k, v, dflt) => {
      if (v && v !== dflt) spec[k] = v;
      else delete spec[k];
    };
    optional("name", value("name"));
    optional("key", value("key"), "id");
    optional("schedule", value("schedule"));
    spec.sources = rows("source").map(({ index, v }, i) =>
      merged("sources", index, { name: v.name, url: v.url, format: v.format || undefined, mode: i > 0 ? v.mode : undefined }),
    );
    const lookups = rows("lookup").map(({ index, v }) => {
      const old = index === null ? {} : b.lookups[index];
      const url = v.url || undefined;
      return merged("lookups", index, { name: v.name, key: v.key, url, rows: url ? undefined : old.rows || [] });
    });
    if (lookups.length) spec.lookups = lookups;
    else delete spec.lookups;
    if (!base) {
      const rules = rows("rule").map(({ v }) => {
        const rule = {};
        if (v.name) rule.name = v.name;
        if (v.when_field) {
          rule.when = { field: v.when_field, op: v.when_op };
          if (!["empty", "not_empty"].includes(v.when_op)) rule.when.value = v.when_value;
        }
        rule.then = v.set ? [{ set: v.set, value: v.value }] : [];
        return rule;
      });
      if (rules.length) spec.rules = rules;
    }
    spec.exports = rows("export").map(({ index, v }) => merged("exports", index, { name: v.name, format: v.format, path: v.path }));
    return spec;
  }

  return { root, read, projectId: () => (base ? b.project : value("project")), focus: () => root.querySelector("input").focus() };
}
