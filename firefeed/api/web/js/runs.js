// The runs view: the selected project's runs, a run's step timeline, its sources, rules, lookups,
// exports and feed quality, "Run now" / cancel, and the stored rules' preview (#9).
import { $, el, fill, fmtInt, fmtSec, fmtTime, shortId, statusBadge, copyText } from "./dom.js";
import { api, projectPath } from "./api.js";
import { state } from "./state.js";

const ACTIVE = new Set(["PENDING", "RUNNING"]);
const STEPS = ["FETCH", "PARSE", "MERGE", "RULES", "EXPORT"];

export const isActive = (status) => ACTIVE.has(status);

// SPEC 10 C5: an export's feed URL (absolute when FIREFEED_PUBLIC_URL is set, else on this host) with a copy button.
export function feedUrlCell(url) {
  if (!url) return el("td", {}, "-");
  const full = /^https?:\/\//.test(url) ? url : window.location.origin + url;
  const button = el("button", { type: "button", class: "copy-url", title: "copy the feed URL" }, "copy");
  button.addEventListener("click", () => copyText(button, full));
  return el("td", {}, el("span", { class: "mono feed-url" }, full), " ", button);
}

export function lastFetchText(last) {
  if (!last) return "never";
  return `${fmtTime(last.at)}, ${last.status}, ${last.user_agent || "no user agent"}`;
}

// SPEC 10 C7: each delivery target of an export, its status, and why it failed.
export function deliveriesCell(deliveries) {
  if (!deliveries || !deliveries.length) return el("td", {}, "-");
  return el(
    "td",
    {},
    ...deliveries.map((d) =>
      el(
        "div",
        { class: d.status === "failed" ? "delivery-failed" : "", title: d.error || `${d.attempts} attempt(s)` },
        el("span", { class: "mono" }, d.target),
        `: ${d.status}`,
        d.status === "delivered" ? ` (${fmtInt(d.bytes)} bytes)` : "",
        d.error ? `: ${d.error}` : "",
      ),
    ),
  );
}


export async function loadRuns() {
  if (!state.project) return false;
  const data = await api("GET", projectPath(state.project, "pipeline", "runs"));
  $("project-title").textContent = state.project;
  fill(
    $("runs").tBodies[0],
    data.runs.map((r) =>
      el(
        "tr",
        { class: r.run_id === state.runId ? "selected" : "", dataset: { runId: r.run_id } },
        el("td", {}, el("button", { type: "button", class: "link mono", onclick: () => selectRun(r.run_id) }, shortId(r.run_id))),
        el("td", {}, statusBadge(r.status)),
        el("td", {}, r.trigger),
        el("td", {}, fmtTime(r.requested_at)),
        el("td", { class: "num" }, fmtSec(r.duration_s)),
      ),
    ),
  );
  if (!state.runId && data.runs.length) state.runId = data.runs[0].run_id;
  return data.runs.some((r) => ACTIVE.has(r.status));
}

const REUSED_STEPS = new Set(["MERGE", "RULES", "EXPORT"]);

function renderTimeline(report) {
  const steps = report.steps.filter((s) => s.started_at);
  if (!report.started_at && !steps.length) {
    $("timeline").replaceChildren(el("p", { class: "muted" }, `${report.status.toLowerCase()}: no step has started`));
    return;
  }
  const starts = steps.map((s) => Date.parse(s.started_at));
  const t0 = report.started_at ? Date.parse(report.started_at) : Math.min(...starts);
  const ends = steps.map((s) => (s.finished_at ? Date.parse(s.finished_at) : Date.now()));
  const t1 = Math.max(report.finished_at ? Date.parse(report.finished_at) : Date.now(), ...ends, t0 + 1);
  const span = t1 - t0;
  const rows = [];
  const axis = el("div", { class: "axis" });
  for (const f of [0, 0.25, 0.5, 0.75, 1]) {
    const tick = el("span", { class: "tick" }, ((span * f) / 1000).toFixed(2) + " s");
    tick.style.left = f * 100 + "%";
    axis.append(tick);
  }
  rows.push(el("div", { class: "timeline-row axis-row" }, el("span", { class: "label" }, ""), axis));
  // SPEC 11 I2: an unchanged refresh reuses MERGE..EXPORT of an earlier run; the bars say so in words too.
  const inc = report.incremental;
  const reused = inc && inc.mode === "unchanged" && inc.reused_from ? String(inc.reused_from).slice(0, 8) : null;
  if (inc && inc.mode) {
    rows.unshift(el("p", { class: "refresh-mode", dataset: { mode: String(inc.mode) } }, `refresh: ${inc.mode}` + (inc.reason ? ` — ${inc.reason}` : "")));
  }
  for (const name of STEPS) {
    const step = report.steps.find((s) => s.step === name);
    const track = el("div", { class: "track" });
    if (step && step.started_at) {
      const a = Date.parse(step.started_at) - t0;
      const b = (step.finished_at ? Date.parse(step.finished_at) : Date.now()) - t0;
      const isReused = reused !== null && REUSED_STEPS.has(name) && step.status === "SUCCEEDED";
      const text = isReused
        ? `reused from run ${reused} · ${fmtInt(step.rows_in)} → ${fmtInt(step.rows_out)}`
        : `${fmtSec(step.duration_s)} s · ${fmtInt(step.rows_in)} → ${fmtInt(step.rows_out)}`;
      const bar = el(
        "div",
        {
          class: "bar-fill status-" + (isReused ? "reused" : step.status.toLowerCase()),
          title: `${name} ${step.status} ${fmtSec(step.duration_s)} s, rows in ${fmtInt(step.rows_in)}, out ${fmtInt(step.rows_out)}` + (isReused ? `, reused from run ${reused}` : ""),
        },
        text,
      );
      bar.style.left = (a / span) * 100 + "%";
      bar.style.width = Math.max(((b - a) / span) * 100, 0.5) + "%";
      track.append(bar);
    }
    if (report.error && report.error.step === name) {
      track.append(el("span", { class: "step-error", title: report.error.message || "" }, "✕ " + (report.error.type || "error")));
    }
    rows.push(
      el("div", { class: "timeline-row", dataset: { step: name } }, el("span", { class: "label" }, name), track),
    );
  }
  $("timeline").replaceChildren(...rows);
}

function renderReport(report) {
  $("run-pane").hidden = false;
  $("run-id").textContent = report.run_id;
  $("run-status").replaceChildren(statusBadge(report.status));
  $("cancel").disabled = !ACTIVE.has(report.status);
  $("run-meta").textContent =
    `${report.company}/${report.project} · trigger ${report.trigger} · started ${fmtTime(report.started_at)}` +
    ` · finished ${fmtTime(report.finished_at)} · ${fmtSec(report.duration_s)} s` +
    (report.cancel_requested ? " · cancel requested" : "");
  const err = report.error;
  $("error-box").hidden = !err;
  $("error-box").textContent = err ? `error in ${err.step || "run"}: ${err.type}: ${err.message}` : "";
  renderTimeline(report);
  fill(
    $("steps").tBodies[0],
    report.steps.map((s) =>
      el(
        "tr",
        { dataset: { step: s.step } },
        el("td", {}, s.step),
        el("td", {}, statusBadge(s.status)),
        el("td", { class: "num" }, fmtSec(s.duration_s)),
        el("td", { class: "num" }, fmtInt(s.rows_in)),
        el("td", { class: "num" }, fmtInt(s.rows_out)),
      ),
    ),
  );
  fill(
    $("sources").tBodies[0],
    (report.sources || []).map((s) => {
      const sk = s.skipped || {};
      return el(
        "tr",
        {},
        el("td", {}, s.name),
        el("td", { class: "num" }, fmtInt(s.bytes)),
        el("td", { class: "num" }, fmtInt(s.rows)),
        el("td", {}, s.not_modified ? "yes" : "no"),
        el("td", {}, `empty key ${fmtInt(sk.empty_key)}, duplicate ${fmtInt(sk.duplicate_key)}, malformed ${fmtInt(sk.malformed)}`),
      );
    }),
  );
  const rules = report.rules || {};
  $("rules-summary").textContent = `${fmtInt(rules.passes)} pass(es), ${fmtInt(rules.excluded)} excluded`;
  fill(
    $("rules").tBodies[0],
    Object.entries(rules.matched || {}).map(([name, n]) =>
      el("tr", {}, el("td", {}, name), el("td", { class: "num" }, fmtInt(n))),
    ),
  );
  fill(
    $("exports").tBodies[0],
    (report.exports || []).map((e) =>
      el(
        "tr",
        {},
        el("td", {}, e.name),
        el("td", { class: "num" }, fmtInt(e.rows)),
        el("td", { class: "num" }, fmtInt(e.bytes)),
        el("td", { class: "mono" }, e.path),
        el("td", { class: "mono", title: e.sha256 || "" }, shortId(e.sha256)),
        feedUrlCell(e.url),
        el("td", {}, lastFetchText(e.last_fetch)),
        deliveriesCell(e.deliveries),
      ),
    ),
  );
  renderLookups(rules.lookups || []);
  renderQuality(report.exports || [], report.project);
  $("accept-drop").hidden = !(err && err.type === "DropGuardError");
  $("warnings").replaceChildren(...(report.warnings || []).map((w) => el("li", {}, "warning: " + w)));
}

// Feed quality (#9): per export, the diff against the last published file and the channel findings.
function diffText(d) {
  const against = d.baseline ? `against ${fmtInt(d.previous)} published` : "nothing published before";
  let text =
    `${against}: ${fmtInt(d.added)} added, ${fmtInt(d.removed)} removed, ` +
    `${fmtInt(d.changed)} changed, ${fmtInt(d.unchanged)} unchanged`;
  if (d.drop && d.drop.status !== "ok") text += ` · drop ${d.drop.share}% > max_drop ${d.drop.max_drop}%: ${d.drop.status}`;
  return text;
}

// Per lookup action (SPEC 9): matched and unmatched items, and the most frequent unmatched values.
function renderLookups(actions) {
  $("lookups-box").hidden = actions.length === 0;
  fill(
    $("lookups").tBodies[0],
    actions.map((a) =>
      el(
        "tr",
        {},
        el("td", {}, a.lookup),
        el("td", {}, a.rule),
        el("td", { class: "mono" }, a.action),
        el("td", { class: "num" }, fmtInt(a.matched)),
        el("td", { class: "num" }, fmtInt(a.unmatched)),
        el("td", {}, (a.unmatched_values || []).map((v) => `${v.value === "" ? "(empty)" : v.value} (${fmtInt(v.count)})`).join(", ")),
      ),
    ),
  );
}

// The items behind a finding (#49): the findings route of the export, filtered by the finding's check.
// A capped-values finding (`<attribute>_cap`) counts dropped list elements, not items to list.
export function findingsPath(project, exportName, check) {
  return (
    "/api/projects/" + encodeURIComponent(project) + "/exports/" + encodeURIComponent(exportName) +
    "/findings?check=" + encodeURIComponent(check)
  );
}

// The finding's item count is the link, so the table reads as before and the number leads to the items.
function findingCount(project, exportName, f) {
  if (f.check.endsWith("_cap")) return fmtInt(f.count);
  const path = findingsPath(project, exportName, f.check);
  return el(
    "a",
    {
      class: "finding-items-link",
      href: path,
      onclick: (event) => {
        event.preventDefault();
        loadFindingItems({ path, title: `${exportName} · ${f.check}` }, 0);
      },
    },
    fmtInt(f.count),
  );
}

// The page asks with the token (a plain link would not carry it) and shows the list below the findings.
export async function loadFindingItems(target, offset) {
  state.findings = target;
  try {
    const page = await api("GET", target.path + "&offset=" + offset);
    if (state.findings !== target) return;
    renderFindingItems(target, page, offset > 0);
  } catch (err) {
    if (err.status !== 401) answer("error", `could not list the items: ${err.body.error || err.status}: ${err.message}`);
  }
}

function renderFindingItems(target, page, more) {
  $("finding-items").hidden = false;
  $("finding-items-title").textContent = target.title;
  const origin = page.source === "blocked" ? "of the run blocked before publishing" : "of the published file";
  $("finding-items-summary").textContent = page.reason
    ? page.reason
    : `${fmtInt(page.total)} item(s) ${origin}` + (page.run_id ? ` (run ${shortId(page.run_id)})` : "");
  const rows = page.items.map((i) =>
    el(
      "tr",
      { class: "finding finding-" + i.severity, dataset: { key: i.key } },
      el("td", { class: "mono" }, i.key),
      el("td", {}, i.severity),
      el("td", {}, i.check),
      el("td", { class: "mono" }, i.attribute),
      el("td", { class: "mono" }, i.value === null ? "" : i.value),
      el("td", {}, i.message),
    ),
  );
  const body = $("finding-items-table").tBodies[0];
  if (more) body.append(...rows);
  else fill(body, rows);
  const next = $("finding-items-more");
  next.hidden = page.next_offset === null;
  next.onclick = () => loadFindingItems(target, page.next_offset);
}

function renderQuality(exports, project) {
  const blocks = exports
    .filter((e) => e.diff || e.diagnostics)
    .map((e) => {
      const diag = e.diagnostics;
      const parts = [el("h3", {}, "Quality of ", el("span", { class: "mono" }, e.name))];
      if (e.diff) parts.push(el("p", { class: "diff", dataset: { export: e.name } }, diffText(e.diff)));
      if (diag) {
        parts.push(
          el("p", { class: "muted" }, `${diag.channel}: ${fmtInt(diag.errors)} error(s), ${fmtInt(diag.warnings)} warning(s)`),
        );
        if (diag.findings.length) {
          const rows = diag.findings.map((f) =>
            el(
              "tr",
              { class: "finding finding-" + f.severity },
              el("td", {}, f.severity),
              el("td", {}, f.check),
              el("td", { class: "mono" }, f.attribute),
              el("td", { class: "num" }, findingCount(project, e.name, f)),
              el("td", { class: "mono" }, (f.samples || []).join(", ")),
            ),
          );
          parts.push(
            el(
              "table",
              { class: "findings", dataset: { export: e.name } },
              el(
                "thead",
                {},
                el("tr", {}, ...["severity", "check", "attribute", "items", "sample ids"].map((h) => el("th", { class: h === "items" ? "num" : null }, h))),
              ),
              el("tbody", {}, ...rows),
            ),
          );
        }
      }
      return el("div", { class: "quality-block" }, ...parts);
    });
  $("quality").replaceChildren(...blocks);
}

export async function loadRun() {
  if (!state.runId) {
    $("run-pane").hidden = true;
    return false;
  }
  const report = await api("GET", "/api/runs/" + encodeURIComponent(state.runId));
  renderReport(report);
  return ACTIVE.has(report.status);
}

// --- actions ----------------------------------------------------------------
export function answer(kind, text) {
  const item = el("li", { class: "answer answer-" + kind }, `${new Date().toLocaleTimeString()} ${text}`);
  $("answers").prepend(item);
  while ($("answers").children.length > 5) $("answers").lastChild.remove();
}

export async function runNow(acceptDrop) {
  const project = state.project;
  try {
    const request = acceptDrop === true ? { accept_drop: true } : undefined;
    const body = await api("POST", projectPath(project, "pipeline", "run"), request);
    answer("accepted", `accepted — run ${body.run_id} (${project})`);
    state.runId = body.run_id;
  } catch (err) {
    if (err.status === 409 && err.body.error === "pipeline_busy") {
      answer("busy", `busy — run ${err.body.run_id} is active`);
      if (err.body.run_id) state.runId = err.body.run_id;
    } else if (err.status !== 401) {
      answer("error", `refused: ${err.body.error || err.status}: ${err.message}`);
    }
  }
  await state.refresh();
}

export async function cancelRun() {
  const runId = state.runId;
  try {
    const body = await api("POST", "/api/runs/" + encodeURIComponent(runId) + "/cancel");
    answer("cancelled", `cancel — run ${body.run_id} is ${body.status}`);
  } catch (err) {
    if (err.status !== 401) answer("error", `cancel refused: ${err.body.error || err.status}: ${err.message}`);
  }
  await state.refresh();
}

// Rule preview (#9): what the stored rules do to the first items, computed without touching the project.
const PREVIEW_ITEMS = 20;

export async function previewRules() {
  const project = state.project;
  $("preview-rules").disabled = true;
  $("preview").hidden = false;
  $("preview-summary").textContent = "running…";
  try {
    const path = projectPath(project, "preview") + "?items=" + PREVIEW_ITEMS;
    const preview = await api("POST", path);
    if (state.project === project) renderPreview(preview);
  } catch (err) {
    $("preview").hidden = true;
    if (err.status !== 401) answer("error", `preview refused: ${err.body.error || err.status}: ${err.message}`);
  } finally {
    $("preview-rules").disabled = false;
  }
}

const PREVIEW_RULE_HEADS = ["rule", "in", "matched", "not matched", "changed", "excluded"];
const PREVIEW_ITEM_HEADS = ["item", "rule", "field", "before", "after"];

function previewRuleRows(rules) {
  return rules.map((r) => {
    const counts = r.enabled
      ? [r.items_in, r.matched, r.not_matched, r.changed, r.excluded].map((n) => el("td", { class: "num" }, fmtInt(n)))
      : [el("td", { class: "muted", colspan: "5" }, "disabled")];
    return el("tr", { dataset: { rule: r.rule } }, el("td", {}, r.rule), ...counts);
  });
}

function previewItemRows(items) {
  const rows = [];
  for (const item of items) {
    const lines = item.rules.flatMap((r) =>
      r.changes.map((c) => [el("td", {}, r.rule), el("td", { class: "mono" }, c.field), el("td", {}, c.before), el("td", {}, c.after)]),
    );
    if (item.excluded_by !== null) lines.push([el("td", { class: "excluded", colspan: "4" }, "excluded by " + item.excluded_by)]);
    if (!lines.length) lines.push([el("td", { class: "muted", colspan: "4" }, "unchanged")]);
    lines.forEach((cells, i) =>
      rows.push(el("tr", { dataset: { item: item.key } }, el("td", { class: "mono" }, i === 0 ? item.key : ""), ...cells)),
    );
  }
  return rows;
}

function previewTable(cls, heads, rows) {
  return el(
    "table",
    { class: cls },
    el("thead", {}, el("tr", {}, ...heads.map((h) => el("th", {}, h)))),
    el("tbody", {}, ...rows),
  );
}

// SPEC 9: an export's own rules run after the project's, on that export's copy of the items.
function previewExport(exp) {
  return el(
    "section",
    { class: "preview-export", dataset: { export: exp.name } },
    el("h4", {}, "Export ", el("span", { class: "mono" }, exp.name), ": its own rules, after the project's"),
    previewTable("preview-export-rules", PREVIEW_RULE_HEADS, previewRuleRows(exp.rules)),
    previewTable("preview-export-items", PREVIEW_ITEM_HEADS, previewItemRows(exp.items)),
  );
}

function renderPreview(preview) {
  $("preview-summary").textContent = `${fmtInt(preview.items.length)} item(s), ${fmtSec(preview.duration_s)} s`;
  $("preview-warnings").replaceChildren(
    ...(preview.warnings || []).map((w) => el("li", {}, "warning: " + w)),
    ...(preview.cut ? [el("li", {}, preview.cut)] : []),
  );
  fill($("preview-rules-table").tBodies[0], previewRuleRows(preview.rules));
  fill($("preview-items").tBodies[0], previewItemRows(preview.items));
  // Exports without rules of their own are the rule editor's grid (rules.js), not this change log.
  $("preview-exports").replaceChildren(...(preview.exports || []).filter((e) => (e.rules || []).length).map(previewExport));
}

// A new project is selected: nothing of the last one's runs view stays.
export function resetRuns() {
  state.runId = null;
  $("answers").replaceChildren();
  $("preview").hidden = true;
  $("finding-items").hidden = true;
  state.findings = null;
}
