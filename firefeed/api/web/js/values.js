// Values: a field's distinct values with their counts (GET .../values), and the category-mapping
// workflow: the values a lookup action did not match in the last run become new rows of that lookup
// (rows kept in the spec), then "Run now" shows them matched.
import { $, el, field, fmtInt, say, table, announce, NUM } from "./dom.js";
import { api, projectPath, errorText, latestSucceededReport, runEnded } from "./api.js";
import { state } from "./state.js";
import { forget as forgetSpec } from "./spec.js";

let spec = null;

export function mount() {
  const fieldIn = el("input", { type: "text", id: "values-field", list: "values-fields", autocomplete: "off", required: true });
  $("view-values").append(
    el("h2", { id: "values-heading" }, "Values"),
    el(
      "form",
      { id: "values-form", class: "bar", onsubmit: (e) => (e.preventDefault(), loadValues()) },
      field("Field", fieldIn, "after the rules, in the last succeeded run"),
      el("datalist", { id: "values-fields" }),
      el("button", { type: "submit" }, "Show values"),
    ),
    el("p", { id: "values-note", class: "note", role: "status" }),
    table("values", ["value", NUM("items")], [], { id: "values-table", "aria-label": "distinct values and their item counts" }),
    el("h3", { id: "unmatched-heading" }, "Unmatched lookup values"),
    el("p", { class: "muted" }, "Values a lookup action found no row for in the last succeeded run. Enter what each maps to and add them as rows of the lookup."),
    el("div", { id: "unmatched" }),
    el("p", { id: "unmatched-note", class: "note", role: "status" }),
  );
}

export async function show(project) {
  $("values-heading").textContent = "Values of " + project;
  $("values-table").tBodies[0].replaceChildren();
  say($("values-note"), "muted", "");
  say($("unmatched-note"), "muted", "");
  try {
    const doc = await api("GET", projectPath(project));
    if (state.project !== project) return;
    spec = doc;
    const report = await latestSucceededReport(project);
    if (state.project !== project) return;
    fieldOptions(doc, report);
    renderUnmatched(project, report);
  } catch (err) {
    if (err.status !== 401) say($("unmatched-note"), "bad", "could not load: " + errorText(err));
  }
}

// The fields the spec names (the key, what rules read and write, what exports write), as suggestions.
function fieldOptions(doc) {
  const names = new Set([doc.key || "id"]);
  const walk = (v) => {
    if (Array.isArray(v)) v.forEach(walk);
    else if (v && typeof v === "object") {
      for (const k of ["field", "set", "copy", "append", "prepend", "lowercase", "uppercase", "trim", "match"]) {
        if (typeof v[k] === "string") names.add(v[k]);
      }
      if (v.set && typeof v.set === "object") Object.keys(v.set).forEach((k) => names.add(k));
      Object.values(v).forEach(walk);
    }
  };
  walk(doc.rules || []);
  for (const e of doc.exports || []) {
    for (const v of Object.values(e.fields || {})) if (typeof v === "string" && !v.includes("{")) names.add(v);
  }
  $("values-fields").replaceChildren(...[...names].sort().map((n) => el("option", { value: n })));
}

async function loadValues() {
  const project = state.project;
  const name = $("values-field").value.trim();
  if (!name) return;
  say($("values-note"), "muted", "counting…");
  try {
    const answer = await api("GET", projectPath(project, "values") + "?field=" + encodeURIComponent(name));
    if (state.project !== project) return;
    $("values-table").tBodies[0].replaceChildren(
      ...answer.values.map((v) =>
        el("tr", { dataset: { value: v.value } }, el("td", {}, v.value === "" ? "(empty)" : v.value), el("td", { class: "num" }, fmtInt(v.count))),
      ),
    );
    const text = `${fmtInt(answer.values.length)} distinct value(s) of ${answer.field} over ${fmtInt(answer.items)} item(s)`;
    say($("values-note"), "ok", text);
    announce(text);
  } catch (err) {
    if (err.status !== 401) say($("values-note"), "bad", errorText(err));
  }
}

// The columns a lookup action reads from its lookup's row: the values of its `set` mapping. An action of an
// export's own rules (`export` set) is one of that export's rules.
function actionColumns(action) {
  const rules = action.export === undefined ? spec.rules : ((spec.exports || []).find((e) => e.name === action.export) || {}).rules;
  const rule = (rules || []).find((r, i) => (r.name || `rule ${i + 1}`) === action.rule);
  const m = /^(then|else)\[(\d+)\]$/.exec(action.action || "");
  const act = rule && m ? (rule[m[1]] || [])[Number(m[2])] : null;
  return act && act.set && typeof act.set === "object" ? [...new Set(Object.values(act.set).map(String))] : [];
}

// A run's lookup actions: the project's rules', then each export's own rules' (named by their `export`).
const lookupActions = (report) => [
  ...((report && report.rules && report.rules.lookups) || []),
  ...((report && report.exports) || []).flatMap((e) => ((e.rules && e.rules.lookups) || []).map((a) => ({ ...a, export: e.name }))),
];

function renderUnmatched(project, report) {
  const actions = lookupActions(report).filter((a) => (a.unmatched_values || []).length);
  if (!actions.length) {
    $("unmatched").replaceChildren(el("p", { class: "muted" }, report ? "every lookup value matched in the last run" : "no succeeded run yet"));
    return;
  }
  $("unmatched").replaceChildren(...actions.map((a, n) => mappingForm(project, a, n)));
}

function mappingForm(project, action, n) {
  const lookup = (spec.lookups || []).find((l) => l.name === action.lookup) || {};
  const keyColumn = lookup.key || "key";
  const columns = actionColumns(action);
  const inline = Array.isArray(lookup.rows);
  const rows = action.unmatched_values.map((v, i) => {
    const inputs = columns.map((c) =>
      el("input", { type: "text", dataset: { column: c }, autocomplete: "off", "aria-label": `${c} for ${v.value}` }),
    );
    return el(
      "tr",
      { dataset: { value: v.value } },
      el("td", {}, v.value === "" ? "(empty)" : v.value),
      el("td", { class: "num" }, fmtInt(v.count)),
      ...inputs.map((input) => el("td", {}, input)),
    );
  });
  const heads = [keyColumn + " (unmatched value)", NUM("items"), ...columns];
  const note = el("p", { class: "note", role: "status" });
  const form = el(
    "form",
    { class: "mapping", dataset: { lookup: action.lookup }, onsubmit: (e) => (e.preventDefault(), addRows(project, action, keyColumn, form, note)) },
    el(
      "h4",
      {},
      "Lookup ",
      el("span", { class: "mono" }, action.lookup),
      ` — rule ${action.rule}${action.export === undefined ? "" : ` of export ${action.export}`}, ${action.action}: ${fmtInt(action.unmatched)} item(s) unmatched`,
    ),
    inline ? null : el("p", { class: "muted" }, "This lookup is read from a file: its rows are added there, not here."),
    table("mapping-table", heads, rows),
    el(
      "div",
      { class: "bar" },
      el("button", { type: "submit", class: "add-rows", disabled: !inline || !columns.length }, `Add the rows to ${action.lookup}`),
      el("button", { type: "button", class: "run-now", onclick: () => runNow(project, action.lookup) }, "Run now"),
    ),
    note,
  );
  return form;
}

async function addRows(project, action, keyColumn, form, note) {
  const rows = [...form.querySelectorAll("tbody tr")]
    .map((tr) => {
      const row = { [keyColumn]: tr.dataset.value };
      let filled = false;
      for (const input of tr.querySelectorAll("input")) {
        row[input.dataset.column] = input.value.trim();
        if (input.value.trim()) filled = true;
      }
      return filled ? row : null;
    })
    .filter(Boolean);
  if (!rows.length) {
    say(note, "bad", "enter a value for at least one row");
    return;
  }
  try {
    await api("POST", projectPath(project, "lookups", action.lookup, "rows"), { rows });
  } catch (err) {
    if (err.status === 401) return;
    say(note, "bad", err.body.error === "lookup_not_inline" ? `${action.lookup} is read from a file (url): add the rows there` : "not added: " + errorText(err));
    return;
  }
  forgetSpec();
  const text = `${rows.length} row(s) added to ${action.lookup}; run now to apply them`;
  say(note, "ok", text);
  announce(text);
}

// The run's outcome stays on the page (the forms are drawn again from its report).
async function runNow(project, lookup) {
  const note = $("unmatched-note");
  try {
    const accepted = await api("POST", projectPath(project, "pipeline", "run"));
    say(note, "muted", `run ${accepted.run_id} accepted…`);
    const report = await runEnded(accepted.run_id);
    const counts = lookupActions(report).filter((a) => a.lookup === lookup);
    const matched = counts.reduce((n, a) => n + a.matched, 0);
    const unmatched = counts.reduce((n, a) => n + a.unmatched, 0);
    const text = `run ${report.status.toLowerCase()}: ${lookup} matched ${fmtInt(matched)}, unmatched ${fmtInt(unmatched)}`;
    await show(project);
    say(note, report.status === "SUCCEEDED" ? "ok" : "bad", text);
    announce(text);
  } catch (err) {
    if (err.status === 409 && err.body.error === "pipeline_busy") say(note, "bad", `busy — run ${err.body.run_id} is active`);
    else if (err.status !== 401) say(note, "bad", "run refused: " + errorText(err));
  }
}
