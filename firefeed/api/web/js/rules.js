// The rule editor: pick a rule, edit it as a form (the common shapes) or as YAML, and see at once what
// the sample's rows become (POST /preview with the draft, debounced): a grid of the output rows, the
// cells a rule changed marked with a sign and words (not colour alone), each cell's "why" (the source or
// rule that set it) on hover and on keyboard focus, and the excluded items listed apart.
import { $, el, field, debounce, say, announce } from "./dom.js";
import { api, projectPath, errorText } from "./api.js";
import { state } from "./state.js";
import { toYaml } from "./yaml.js";
import { OPS } from "./project_form.js";
import { forget as forgetSpec } from "./spec.js";

const PREVIEW_ITEMS = 20;
const PREVIEW_MS = 350;
// The actions the form edits, each with the keys it takes besides the field it acts on (SPEC "Rules");
// any other rule shape (several conditions, `else`, a lookup's default...) is edited as YAML.
const ACTION_PARAMS = {
  set: [["value", "value", "{field} is a field's value"]],
  append: [["value", "value"]],
  prepend: [["value", "value"]],
  copy: [["from", "from field"]],
  replace: [["find", "find"], ["with", "replace with"]],
  regex_replace: [["pattern", "pattern"], ["with", "replace with"]],
  truncate: [["length", "length"]],
  math: [["op", "operation", "add, subtract, multiply or divide"], ["value", "number"]],
  lowercase: [],
  uppercase: [],
  capitalize: [],
  trim: [],
  exclude: null, // no field: the item goes to no export
  lookup: "lookup", // {lookup, match, set: {target: column}}
};
const ACTIONS = Object.keys(ACTION_PARAMS);

const ed = {
  project: null,
  spec: null, // the stored spec (an object), the draft's base
  index: null, // the rule being edited (null: a new one, appended)
  mode: "form",
  seq: 0,
  preview: null,
};

export function mount() {
  const ruleText = el("textarea", { id: "rule-yaml", rows: "12", spellcheck: "false", wrap: "off", class: "yaml-text" });
  $("view-rules").append(
    el("h2", { id: "rules-heading" }, "Rules"),
    el(
      "div",
      { class: "rules-layout" },
      el(
        "div",
        { class: "rule-list-box" },
        el("h3", { id: "rule-list-heading" }, "Rules, in order"),
        el("ol", { id: "rule-list", "aria-labelledby": "rule-list-heading" }),
        el("button", { type: "button", id: "rule-new", onclick: () => pick(null) }, "New rule"),
        el("p", { id: "rule-channel-note", class: "muted" }),
      ),
      el(
        "div",
        { class: "rule-edit-box" },
        el("h3", { id: "rule-edit-heading" }, "Rule"),
        el(
          "fieldset",
          { class: "mode" },
          el("legend", {}, "Edit as"),
          el("label", {}, el("input", { type: "radio", name: "rule-mode", value: "form", id: "rule-mode-form", checked: true }), " form"),
          el("label", {}, el("input", { type: "radio", name: "rule-mode", value: "yaml", id: "rule-mode-yaml" }), " YAML"),
        ),
        el("div", { id: "rule-form" }),
        el("div", { id: "rule-yaml-box", hidden: true }, el("label", { for: "rule-yaml" }, "This rule as YAML"), ruleText),
        el(
          "div",
          { class: "bar" },
          el("button", { type: "button", id: "rule-save", class: "primary", onclick: save }, "Save rule"),
          el("button", { type: "button", id: "rule-delete", onclick: remove }, "Delete rule"),
        ),
        el("p", { id: "rule-note", class: "note", role: "status" }),
      ),
    ),
    el(
      "section",
      { id: "rule-preview", "aria-labelledby": "rule-preview-heading" },
      el("h3", { id: "rule-preview-heading" }, "What the sample becomes ", el("span", { id: "rule-preview-summary", class: "muted" })),
      el("p", { id: "rule-preview-note", class: "note", role: "status", "aria-live": "polite" }),
      field("Show", el("select", { id: "rule-grid-of", onchange: () => renderGrid() })),
      el("div", { id: "rule-grid-box", class: "grid-box" }),
      el("h4", {}, "Excluded items"),
      el("ul", { id: "rule-excluded" }),
      el("ul", { id: "rule-preview-warnings", class: "muted" }),
    ),
  );
  for (const radio of document.querySelectorAll("input[name=rule-mode]")) radio.addEventListener("change", () => setMode(radio.value));
  ruleText.addEventListener("input", () => schedule());
}

export async function show(project) {
  $("rules-heading").textContent = "Rules of " + project;
  if (ed.project !== project) {
    ed.project = project;
    ed.preview = null;
    $("rule-grid-box").replaceChildren();
  }
  try {
    const doc = await api("GET", projectPath(project));
    if (state.project !== project) return;
    delete doc.feed_urls;
    ed.spec = doc;
  } catch (err) {
    if (err.status !== 401) say($("rule-note"), "bad", "could not load the spec: " + errorText(err));
    return;
  }
  listRules();
  const channel = (ed.spec.exports || []).filter((e) => (e.rules || []).length).map((e) => e.name);
  $("rule-channel-note").textContent = channel.length
    ? `The exports ${channel.join(", ")} have rules of their own (run after these): they are edited in the Spec view.`
    : "";
  const rules = ed.spec.rules || [];
  pick(ed.index !== null && ed.index < rules.length ? ed.index : rules.length ? 0 : null);
}

const ruleName = (rule, i) => (rule && rule.name) || `rule ${i + 1}`;

function listRules() {
  const rules = ed.spec.rules || [];
  $("rule-list").replaceChildren(
    ...rules.map((r, i) =>
      el(
        "li",
        { dataset: { rule: ruleName(r, i) } },
        el(
          "button",
          { type: "button", class: "link", "aria-current": i === ed.index ? "true" : "false", onclick: () => pick(i) },
          ruleName(r, i),
        ),
        r.enabled === false || r.enabled === "false" ? el("span", { class: "muted" }, " (off)") : null,
      ),
    ),
  );
}

// --- the form ---------------------------------------------------------------
const isLeaf = (when) => when && typeof when === "object" && typeof when.field === "string" && typeof when.op === "string" && Object.keys(when).every((k) => ["field", "op", "value"].includes(k));

function actionKind(action) {
  if (!action || typeof action !== "object") return null;
  const keys = Object.keys(action);
  if (keys.length === 1 && keys[0] === "exclude") return "exclude";
  if ("lookup" in action) {
    const set = action.set;
    const oneTarget = set && typeof set === "object" && Object.keys(set).length === 1;
    return oneTarget && keys.every((k) => ["lookup", "match", "set"].includes(k)) ? "lookup" : null;
  }
  for (const [kind, params] of Object.entries(ACTION_PARAMS)) {
    if (!Array.isArray(params) || !(kind in action) || typeof action[kind] !== "string") continue;
    const allowed = new Set([kind, ...params.map(([key]) => key)]);
    if (keys.every((k) => allowed.has(k) && typeof action[k] !== "object")) return kind;
  }
  return null;
}

// Whether the form can hold the rule: a leaf `when` (or none) and actions of the form's kinds.
function formFits(rule) {
  const known = new Set(["name", "enabled", "when", "then"]);
  if (Object.keys(rule).some((k) => !known.has(k))) return false;
  if (rule.when !== undefined && !isLeaf(rule.when)) return false;
  return (rule.then || []).every((a) => actionKind(a) !== null);
}

// One action: its kind, the field it acts on, and an input per key the kind takes (drawn again when the
// kind changes; the values typed so far are kept by key).
function actionRow(action, n) {
  const kind = actionKind(action) || "set";
  const kindSel = el("select", { name: "kind" }, ...ACTIONS.map((k) => el("option", { value: k, selected: k === kind }, k)));
  const params = el("span", { class: "action-params" });
  const remove = el("button", { type: "button", class: "remove", onclick: () => (row.remove(), schedule()) }, `Remove action ${n}`);
  const row = el("div", { class: "form-row action-row" }, field(`Action ${n}`, kindSel), params, remove);
  const kept = { ...(action || {}) };
  const input = (key, label, hint, value) =>
    field(`Action ${n} ${label}`, el("input", { type: "text", dataset: { key }, value: value ?? "", autocomplete: "off" }), hint);
  const draw = () => {
    for (const i of params.querySelectorAll("input, select")) kept[i.dataset.key] = i.value;
    const k = kindSel.value;
    const spec = ACTION_PARAMS[k];
    const parts = [];
    if (spec === "lookup") {
      const [target, column] = Object.entries(kept.set && typeof kept.set === "object" ? kept.set : {})[0] || [kept.target || "", kept.column || ""];
      const names = (ed.spec.lookups || []).map((l) => l.name);
      const current = kept.lookup || names[0] || "";
      parts.push(
        field(`Action ${n} lookup`, el("select", { dataset: { key: "lookup" } }, ...names.map((l) => el("option", { value: l, selected: l === current }, l)))),
        input("match", "match field", "the field whose value is looked up", kept.match),
        input("target", "set field", null, kept.target ?? target),
        input("column", "to the lookup's column", null, kept.column ?? column),
      );
    } else if (spec !== null) {
      parts.push(input("field", "field", null, kept.field ?? kept[kind] ?? ""));
      for (const [key, label, hint] of spec) parts.push(input(key, label, hint, kept[key] === undefined ? "" : String(kept[key])));
    }
    params.replaceChildren(...parts);
  };
  kindSel.addEventListener("change", () => (draw(), schedule()));
  draw();
  return row;
}

function actionFromRow(row) {
  const kind = row.querySelector("[name=kind]").value;
  const v = Object.fromEntries([...row.querySelectorAll(".action-params [data-key]")].map((i) => [i.dataset.key, i.value]));
  if (kind === "exclude") return { exclude: true };
  if (kind === "lookup") return { lookup: v.lookup, match: v.match.trim(), set: { [v.target.trim()]: v.column.trim() } };
  const action = { [kind]: v.field.trim() };
  for (const [key] of ACTION_PARAMS[kind]) action[key] = v[key];
  return action;
}

function buildForm(rule) {
  const when = rule.when || {};
  const enabled = !(rule.enabled === false || rule.enabled === "false");
  const actions = el("div", { id: "rule-actions" }, ...(rule.then || []).map((a, i) => actionRow(a, i + 1)));
  const form = el(
    "form",
    { id: "rule-form-fields", onsubmit: (e) => e.preventDefault() },
    field("Rule name", el("input", { type: "text", id: "rule-name", value: rule.name || "", autocomplete: "off" })),
    el("div", { class: "field" }, el("input", { type: "checkbox", id: "rule-enabled", checked: enabled }), el("label", { for: "rule-enabled" }, " enabled")),
    el(
      "fieldset",
      {},
      el("legend", {}, "When (empty field: every item)"),
      field("When field", el("input", { type: "text", id: "rule-when-field", value: when.field || "", autocomplete: "off" })),
      field("Operator", el("select", { id: "rule-when-op" }, ...OPS.map((o) => el("option", { value: o, selected: o === (when.op || "eq") }, o)))),
      field("Compared value", el("input", { type: "text", id: "rule-when-value", value: when.value === undefined ? "" : String(when.value), autocomplete: "off" })),
    ),
    el(
      "fieldset",
      {},
      el("legend", {}, "Then"),
      actions,
      el("button", { type: "button", id: "rule-add-action", onclick: () => (actions.append(actionRow(null, actions.children.length + 1)), schedule()) }, "Add action"),
    ),
  );
  form.addEventListener("input", () => schedule());
  form.addEventListener("change", () => schedule());
  $("rule-form").replaceChildren(form);
}

function ruleFromForm() {
  const rule = {};
  const name = $("rule-name").value.trim();
  if (name) rule.name = name;
  if (!$("rule-enabled").checked) rule.enabled = false;
  const whenField = $("rule-when-field").value.trim();
  if (whenField) {
    const op = $("rule-when-op").value;
    rule.when = { field: whenField, op };
    if (!["empty", "not_empty"].includes(op)) rule.when.value = $("rule-when-value").value;
  }
  rule.then = [...document.querySelectorAll("#rule-actions .action-row")].map(actionFromRow);
  return rule;
}

function setMode(mode) {
  if (mode === ed.mode) return;
  if (mode === "yaml") {
    $("rule-yaml").value = toYaml(ruleFromForm());
  } else {
    say($("rule-note"), "muted", "the form shows the saved rule: YAML edits are kept only in YAML");
    const rule = ed.index === null ? { then: [] } : ed.spec.rules[ed.index];
    if (!formFits(rule)) {
      $("rule-mode-yaml").checked = true;
      say($("rule-note"), "muted", "this rule's shape is edited as YAML");
      return;
    }
    buildForm(rule);
  }
  ed.mode = mode;
  $("rule-form").hidden = mode !== "form";
  $("rule-yaml-box").hidden = mode !== "yaml";
  schedule();
}

function pick(index) {
  ed.index = index;
  const rule = index === null ? { name: "", then: [{ set: "", value: "" }] } : ed.spec.rules[index];
  $("rule-edit-heading").textContent = index === null ? "New rule" : "Rule " + ruleName(rule, index);
  $("rule-delete").disabled = index === null;
  say($("rule-note"), "muted", "");
  listRules();
  const fits = formFits(rule);
  ed.mode = fits ? "form" : "yaml";
  $("rule-mode-form").checked = fits;
  $("rule-mode-yaml").checked = !fits;
  $("rule-mode-form").disabled = !fits;
  if (fits) buildForm(rule);
  else $("rule-form").replaceChildren();
  $("rule-yaml").value = toYaml(rule);
  $("rule-form").hidden = !fits;
  $("rule-yaml-box").hidden = fits;
  if (!fits) say($("rule-note"), "muted", "this rule's shape is edited as YAML");
  runPreview();
}

// --- the draft -----------------------------------------------------------------
const MARK = "__firefeed_rule_being_edited__";

// The whole spec as YAML with the edited rule in place: its text as typed (YAML mode) or the form's.
function draftYaml(dropRule = false) {
  const rules = [...(ed.spec.rules || [])];
  if (dropRule) rules.splice(ed.index, 1);
  else if (ed.index === null) rules.push(MARK);
  else rules[ed.index] = MARK;
  const text = toYaml({ ...ed.spec, rules });
  if (dropRule) return text;
  const ruleText = ed.mode === "yaml" ? $("rule-yaml").value : toYaml(ruleFromForm());
  const body = ruleText.replace(/\s+$/, "").split("\n");
  const spliced = body.map((line, i) => (i === 0 ? "  - " : "    ") + line).join("\n") + "\n";
  // A function, not a text: `$&`, `$1` or `$$` in a rule are its own characters, not replacement patterns.
  return text.replace(`  - ${MARK}\n`, () => spliced);
}

const schedule = debounce(() => runPreview(), PREVIEW_MS);

async function runPreview() {
  if (!ed.spec) return;
  const mine = ++ed.seq;
  const project = ed.project;
  say($("rule-preview-note"), "muted", "previewing…");
  try {
    const path = projectPath(project, "preview") + "?items=" + PREVIEW_ITEMS;
    const preview = await api("POST", path, { yaml: draftYaml() });
    if (mine !== ed.seq || state.project !== project) return;
    ed.preview = preview;
    say($("rule-preview-note"), "ok", `preview of ${preview.items.length} item(s) updated`);
    renderPreview();
  } catch (err) {
    if (mine !== ed.seq || err.status === 401) return;
    say($("rule-preview-note"), "bad", "no preview: " + errorText(err));
  }
}

// --- the grid ------------------------------------------------------------------
// An export's column names the field it writes when its mapping is a plain field name (or when the
// export has no `fields`: every column is a field); a template or a fixed text is its own "why".
function columnSource(exportSpec, column) {
  if (!exportSpec || !exportSpec.fields) return { field: column };
  const m = exportSpec.fields[column];
  if (typeof m === "string" && !m.includes("{")) return { field: m };
  if (typeof m === "string") return { why: "template " + m };
  if (m && typeof m === "object") return { why: "fixed text" };
  return { field: column };
}

function originText(origin) {
  if (!origin) return "";
  const [kind, ...rest] = String(origin).split(":");
  const name = rest.join(":");
  if (kind === "rule") return `set by rule ${name}`;
  if (kind === "source") return `from source ${name}`;
  return String(origin);
}

const cellText = (v) => (Array.isArray(v) ? v.join(", ") : v === null || v === undefined ? "" : String(v));

// The grid's rows: [{key, cells: [{text, changed, why}]}], its columns and its excluded items.
function gridOf(choice) {
  const p = ed.preview;
  const byKey = new Map(p.items.map((i) => [i.key, i]));
  const fieldCell = (item, name) => {
    if (!item || !item.values) return null;
    const at = p.fields.indexOf(name);
    if (at === -1) return { text: "", changed: false, why: "no such field" };
    return { text: cellText(item.values[at]), changed: (item.changed || []).includes(at), why: originText((item.origin || [])[at]) };
  };
  if (choice.startsWith("export:")) {
    const name = choice.slice(7);
    const out = outputsOf(p).find((o) => o.export === name);
    const spec = (ed.spec.exports || []).find((e) => e.name === name);
    return {
      columns: ["item", ...out.columns],
      rows: out.rows.map((r) => {
        const item = byKey.get(r.key);
        return {
          key: r.key,
          cells: r.cells.map((value, i) => {
            const src = columnSource(spec, out.columns[i]);
            const base = src.field ? fieldCell(item, src.field) : null;
            return { text: cellText(value), changed: base ? base.changed : false, why: base ? base.why : src.why };
          }),
        };
      }),
      excluded: out.excluded.map((x) => ({ key: x.key, by: x.by })),
    };
  }
  const kept = p.items.filter((i) => i.excluded_by === null);
  const excluded = p.items.filter((i) => i.excluded_by !== null).map((i) => ({ key: i.key, by: i.excluded_by }));
  if (p.items.length && p.items[0].values) {
    return {
      columns: ["item", ...p.fields],
      rows: kept.map((i) => ({ key: i.key, cells: p.fields.map((f) => fieldCell(i, f)) })),
      excluded,
    };
  }
  // An answer without per-item values (an older server): the fields the rules changed, their last value.
  const changedFields = [...new Set(p.items.flatMap((i) => i.rules.flatMap((r) => r.changes.map((c) => c.field))))];
  return {
    columns: ["item", ...changedFields],
    rows: kept.map((i) => ({
      key: i.key,
      cells: changedFields.map((f) => {
        const last = i.rules.flatMap((r) => r.changes.filter((c) => c.field === f).map((c) => ({ rule: r.rule, after: c.after }))).pop();
        return last ? { text: cellText(last.after), changed: true, why: `set by rule ${last.rule}` } : { text: "", changed: false, why: "not changed by a rule" };
      }),
    })),
    excluded,
  };
}

// Each export's rows as it would write them: the answer's `outputs` (every export, in spec order).
const outputsOf = (p) => p.outputs || [];

function renderPreview() {
  const p = ed.preview;
  $("rule-preview-summary").textContent = `(${p.items.length} item(s), ${Number(p.duration_s).toFixed(2)} s)`;
  const select = $("rule-grid-of");
  const before = select.value;
  const choices = [["fields", "the fields after the rules"], ...outputsOf(p).map((o) => ["export:" + o.export, "export " + o.export])];
  select.replaceChildren(...choices.map(([value, label]) => el("option", { value }, label)));
  select.value = choices.some(([v]) => v === before) ? before : choices.length > 1 ? choices[1][0] : "fields";
  $("rule-preview-warnings").replaceChildren(
    ...(p.warnings || []).map((w) => el("li", {}, "warning: " + w)),
    ...(p.cut ? [el("li", {}, p.cut)] : []),
  );
  renderGrid();
}

let tipSeq = 0;
function renderGrid() {
  if (!ed.preview) return;
  const grid = gridOf($("rule-grid-of").value || "fields");
  const head = el("tr", {}, ...grid.columns.map((c) => el("th", { scope: "col" }, c)));
  const rows = grid.rows.map((r) =>
    el(
      "tr",
      { dataset: { item: r.key } },
      el("th", { scope: "row", class: "mono" }, r.key),
      ...r.cells.map((c) => {
        if (!c) return el("td", { class: "muted" }, "");
        const tip = "tip-" + ++tipSeq;
        const why = c.why || "";
        return el(
          "td",
          { class: "cell" + (c.changed ? " changed" : ""), tabindex: "0", title: why, "aria-describedby": tip, dataset: { why } },
          c.changed ? el("span", { class: "marker", "aria-hidden": "true" }, "✎ ") : null,
          el("span", { class: "value" }, c.text),
          c.changed ? el("span", { class: "visually-hidden" }, " (changed)") : null,
          el("span", { class: "why", role: "tooltip", id: tip }, why),
        );
      }),
    ),
  );
  $("rule-grid-box").replaceChildren(
    el("table", { id: "rule-grid", class: "grid", "aria-label": "the sample's rows after the rules" }, el("thead", {}, head), el("tbody", {}, ...rows)),
  );
  $("rule-excluded").replaceChildren(
    ...(grid.excluded.length ? grid.excluded.map((x) => el("li", { dataset: { item: x.key } }, el("span", { class: "mono" }, x.key), ` excluded by ${x.by}`)) : [el("li", { class: "muted" }, "none")]),
  );
}

// --- save ----------------------------------------------------------------------
async function putDraft(text, what) {
  const project = ed.project;
  try {
    await api("PUT", projectPath(project), { yaml: text });
    forgetSpec();
    await show(project); // the saved spec, read back: the rule list and the form are the stored ones
    say($("rule-note"), "ok", what);
    announce(what);
  } catch (err) {
    if (err.status !== 401) say($("rule-note"), "bad", "not saved: " + errorText(err));
  }
}

async function save() {
  const isNew = ed.index === null;
  const text = draftYaml(); // a new rule goes last
  if (isNew) ed.index = (ed.spec.rules || []).length;
  await putDraft(text, "rule saved");
}

// Two steps, no dialog: the first press asks, the second deletes.
async function remove() {
  if (ed.index === null) return;
  const button = $("rule-delete");
  if (button.dataset.confirm !== "yes") {
    button.dataset.confirm = "yes";
    button.textContent = "Press again to delete";
    setTimeout(() => {
      button.dataset.confirm = "";
      button.textContent = "Delete rule";
    }, 5000);
    return;
  }
  button.dataset.confirm = "";
  button.textContent = "Delete rule";
  const name = ruleName(ed.spec.rules[ed.index], ed.index);
  const text = draftYaml(true);
  ed.index = null;
  await putDraft(text, `rule ${name} deleted`);
}
