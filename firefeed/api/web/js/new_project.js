// Create a project from the page: a form for the common keys (sources, rules, exports, lookups,
// schedule), or the same spec as YAML text for the rest ("Edit as YAML"); created through PUT.
import { $, el, field, say, announce } from "./dom.js";
import { api, projectPath, errorText } from "./api.js";
import { state } from "./state.js";
import { yamlEditor, problemsOf } from "./editor.js";
import { toYaml } from "./yaml.js";

const FORMATS = ["", "csv", "tsv", "json", "jsonl", "xml"];
const EXPORT_FORMATS = ["csv", "tsv", "json", "jsonl", "google-xml"];
export const OPS = ["eq", "ne", "contains", "not_contains", "starts_with", "ends_with", "in", "not_in", "matches",
  "empty", "not_empty", "gt", "gte", "lt", "lte", "length_gt", "length_lt"];

let editor = null;
let asYaml = false;

const input = (name, props) => el("input", { type: "text", name, autocomplete: "off", ...(props || {}) });
const select = (name, options, value) =>
  el("select", { name }, ...options.map((o) => el("option", { value: o, selected: o === value }, o === "" ? "(from the name)" : o)));

// One row of a list section: labelled controls and a remove button; `what` names the row for labels.
function rowOf(kind, what, controls) {
  const row = el("div", { class: "form-row", dataset: { kind } });
  const remove = el("button", { type: "button", class: "remove", onclick: () => row.remove() }, `Remove ${what}`);
  row.append(...controls.map(([label, control, hint]) => field(label, control, hint)), remove);
  return row;
}

const ROWS = {
  source: (n) =>
    rowOf("source", `source ${n}`, [
      [`Source ${n} name`, input("name", { value: n === 1 ? "main" : "" })],
      [`Source ${n} URL or file`, input("url", { placeholder: "https://… or main.csv" })],
      [`Source ${n} format`, select("format", FORMATS, "")],
      ...(n > 1 ? [[`Source ${n} mode`, select("mode", ["enrich", "append"], "enrich")]] : []),
    ]),
  rule: (n) =>
    rowOf("rule", `rule ${n}`, [
      [`Rule ${n} name`, input("name")],
      [`Rule ${n}: when field`, input("when_field"), "empty: every item"],
      [`Rule ${n}: operator`, select("when_op", OPS, "eq")],
      [`Rule ${n}: compared value`, input("when_value")],
      [`Rule ${n}: set field`, input("set")],
      [`Rule ${n}: to the value`, input("value"), "a text; {field} is a field's value"],
    ]),
  export: (n) =>
    rowOf("export", `export ${n}`, [
      [`Export ${n} name`, input("name", { value: n === 1 ? "feed" : "" })],
      [`Export ${n} format`, select("format", EXPORT_FORMATS, "csv")],
      [`Export ${n} file`, input("path", { value: n === 1 ? "feed.csv" : "" })],
    ]),
  lookup: (n) =>
    rowOf("lookup", `lookup ${n}`, [
      [`Lookup ${n} name`, input("name")],
      [`Lookup ${n} key column`, input("key")],
      [`Lookup ${n} URL or file`, input("url"), "empty: rows kept in the spec, added from the Values view"],
    ]),
};

function section(kind, title, initial) {
  const list = el("div", { class: "form-list", dataset: { list: kind } });
  const add = el(
    "button",
    { type: "button", class: "add", onclick: () => list.append(ROWS[kind](list.children.length + 1)) },
    `Add ${kind}`,
  );
  for (let i = 1; i <= initial; i++) list.append(ROWS[kind](i));
  return el("fieldset", { class: "form-section" }, el("legend", {}, title), list, add);
}

export function mount() {
  editor = yamlEditor({ id: "new-yaml", label: "The new project's spec as YAML", project: () => projectId() || "new" });
  const form = el(
    "form",
    { id: "new-form", novalidate: true },
    el(
      "fieldset",
      { class: "form-section" },
      el("legend", {}, "Project"),
      field("Project id", input("project", { id: "new-project-id", pattern: "[A-Za-z0-9][A-Za-z0-9_-]{0,63}", required: true }), "letters, digits, - and _"),
      field("Display name", input("name", { id: "new-name" })),
      field("Item key field", input("key", { id: "new-key", value: "id" })),
      field("Schedule (cron, UTC)", input("schedule", { id: "new-schedule", placeholder: "0 * * * *" }), "empty: runs only when asked"),
    ),
    section("source", "Sources (the first is the primary)", 1),
    section("rule", "Rules", 0),
    section("lookup", "Lookups", 0),
    section("export", "Exports", 1),
  );
  editor.root.hidden = true;
  $("view-new").append(
    el("h2", { id: "new-heading" }, "New project"),
    form,
    editor.root,
    el(
      "div",
      { class: "bar" },
      el("button", { type: "button", id: "new-create", class: "primary", onclick: create }, "Create project"),
      el("button", { type: "button", id: "new-as-yaml", onclick: toggleYaml }, "Edit as YAML"),
    ),
    el("p", { id: "new-note", class: "note", role: "status" }),
  );
}

export function show() {}

const projectId = () => (asYaml ? (/^project:\s*"?([^"\n]+)"?\s*$/m.exec(editor.text) || [])[1] : $("new-project-id").value.trim());

function rows(kind) {
  return [...document.querySelectorAll(`#new-form [data-list=${kind}] .form-row`)].map((row) =>
    Object.fromEntries([...row.querySelectorAll("input, select")].map((c) => [c.name, c.value.trim()])),
  );
}

// The form as a spec object, in the key order a person writes it.
function specFromForm() {
  const spec = { company: state.company, project: $("new-project-id").value.trim() };
  const name = $("new-name").value.trim();
  if (name) spec.name = name;
  const key = $("new-key").value.trim();
  if (key && key !== "id") spec.key = key;
  const schedule = $("new-schedule").value.trim();
  if (schedule) spec.schedule = schedule;
  spec.sources = rows("source").map((s, i) => {
    const out = { name: s.name, url: s.url };
    if (s.format) out.format = s.format;
    if (i > 0 && s.mode) out.mode = s.mode;
    return out;
  });
  const lookups = rows("lookup").map((l) => {
    const out = { name: l.name, key: l.key };
    if (l.url) out.url = l.url;
    else out.rows = [];
    return out;
  });
  if (lookups.length) spec.lookups = lookups;
  const rules = rows("rule").map((r) => {
    const rule = {};
    if (r.name) rule.name = r.name;
    if (r.when_field) {
      rule.when = { field: r.when_field, op: r.when_op };
      if (!["empty", "not_empty"].includes(r.when_op)) rule.when.value = r.when_value;
    }
    rule.then = r.set ? [{ set: r.set, value: r.value }] : [];
    return rule;
  });
  if (rules.length) spec.rules = rules;
  spec.exports = rows("export").map((e) => ({ name: e.name, format: e.format, path: e.path }));
  return spec;
}

function toggleYaml() {
  if (asYaml) return;
  asYaml = true;
  editor.text = toYaml(specFromForm());
  $("new-form").hidden = true;
  editor.root.hidden = false;
  $("new-as-yaml").disabled = true;
  editor.textarea.focus();
  editor.check();
}

async function create() {
  const project = projectId();
  if (!project) {
    say($("new-note"), "bad", "a project id is needed");
    if (!asYaml) $("new-project-id").focus();
    return;
  }
  say($("new-note"), "muted", "creating…");
  const body = asYaml ? { yaml: editor.text } : specFromForm();
  try {
    await api("PUT", projectPath(project), body);
    say($("new-note"), "ok", `project ${project} created`);
    announce(`project ${project} created`);
    reset();
    await state.projectSaved(project, "spec");
  } catch (err) {
    if (err.status === 401) return;
    say($("new-note"), "bad", "not created: " + errorText(err));
    if (err.status === 422 && asYaml) {
      editor.showProblems(problemsOf(err));
      editor.check();
    }
  }
}

// After a project is created, the form starts again empty.
function reset() {
  asYaml = false;
  $("view-new").replaceChildren();
  mount();
}
