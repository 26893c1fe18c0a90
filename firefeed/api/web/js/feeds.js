// Feeds: per export its feed URL (copy), last fetch, the published file (download), its findings with
// the items behind them, its deliveries, and its sync status when the server has that route; then the
// project's recent alerts (alerts.js).
import { $, el, fmtInt, fmtTime, say, table, copyText, announce, NUM } from "./dom.js";
import { api, request, projectPath, errorText, missingRoute, latestSucceededReport } from "./api.js";
import { state } from "./state.js";
import { lastFetchText, deliveriesCell } from "./runs.js";
import { alertsSection } from "./alerts.js";

export function mount() {
  $("view-feeds").append(
    el("h2", { id: "feeds-heading" }, "Feeds"),
    el("p", { id: "feeds-note", class: "note", role: "status" }),
    el("div", { id: "feeds" }),
  );
}

export async function show(project) {
  $("feeds-heading").textContent = "Feeds of " + project;
  say($("feeds-note"), "muted", "loading…");
  try {
    const [urls, report] = await Promise.all([api("GET", projectPath(project, "feed-urls")), latestSucceededReport(project)]);
    if (state.project !== project) return;
    const published = new Map(((report && report.exports) || []).map((e) => [e.name, e]));
    $("feeds").replaceChildren(
      ...urls.feed_urls.map((f) => feedBlock(project, f, published.get(f.export), report)),
      alertsSection(project),
    );
    say($("feeds-note"), "muted", report ? `as of run ${String(report.run_id).slice(0, 8)}` : "no succeeded run yet");
    for (const f of urls.feed_urls) loadSync(project, f.export);
  } catch (err) {
    if (err.status !== 401) say($("feeds-note"), "bad", "could not load: " + errorText(err));
  }
}

function feedBlock(project, feed, exp, report) {
  const full = /^https?:\/\//.test(feed.url) ? feed.url : window.location.origin + feed.url;
  const copy = el("button", { type: "button", class: "copy-url", "aria-label": `copy the feed URL of ${feed.export}` }, "Copy URL");
  copy.addEventListener("click", () => copyText(copy, full));
  const download = el("button", { type: "button", class: "download", onclick: () => downloadFile(project, feed.export, note) }, "Download the published file");
  const note = el("p", { class: "note", role: "status" });
  const diag = exp && exp.diagnostics;
  const findings = diag && diag.findings.length
    ? table(
        "feed-findings",
        ["severity", "check", "attribute", NUM("items"), ""],
        diag.findings.map((f) =>
          el(
            "tr",
            { class: "finding finding-" + f.severity, dataset: { check: f.check } },
            el("td", {}, f.severity),
            el("td", {}, f.check),
            el("td", { class: "mono" }, f.attribute),
            el("td", { class: "num" }, fmtInt(f.count)),
            el("td", {}, f.check.endsWith("_cap") ? "" : el("button", { type: "button", class: "link", onclick: () => listItems(project, feed.export, f.check, items) }, `items of ${f.check}`)),
          ),
        ),
      )
    : el("p", { class: "muted" }, diag ? "no findings" : "not checked against a channel");
  const items = el("div", { class: "finding-items" });
  const deliveries = deliveriesCell(exp && exp.deliveries);
  return el(
    "section",
    { class: "feed", dataset: { export: feed.export }, "aria-label": "feed " + feed.export },
    el("h3", {}, "Export ", el("span", { class: "mono" }, feed.export)),
    el(
      "dl",
      {},
      el("dt", {}, "Feed URL"),
      el("dd", {}, el("span", { class: "mono feed-url" }, full), " ", copy),
      el("dt", {}, "Last fetch"),
      el("dd", { class: "last-fetch" }, lastFetchText(feed.last_fetch)),
      el("dt", {}, "Published"),
      el("dd", {}, exp ? `${fmtInt(exp.rows)} row(s), ${fmtInt(exp.bytes)} bytes, run of ${fmtTime(report.finished_at)}` : "nothing yet", " ", download),
      el("dt", {}, "Deliveries"),
      el("dd", {}, ...deliveries.childNodes),
      el("dt", { class: "sync-term", hidden: true }, "Sync"),
      el("dd", { class: "sync", hidden: true }),
    ),
    note,
    el("h4", {}, "Findings"),
    findings,
    items,
  );
}

// The file comes with the token (a plain link would not carry it), then is saved under its own name.
async function downloadFile(project, exportName, note) {
  say(note, "muted", "downloading…");
  try {
    const response = await request("GET", projectPath(project, "exports", exportName, "file"));
    if (!response.ok) {
      let body = {};
      try {
        body = await response.json();
      } catch (_) {}
      say(note, "bad", response.status === 404 ? "no published file yet" : `download refused: ${body.error || response.status}: ${body.message || ""}`);
      return;
    }
    const disposition = response.headers.get("Content-Disposition") || "";
    const m = /filename\*?=(?:UTF-8'')?"?([^";]+)"?/i.exec(disposition);
    const name = m ? decodeURIComponent(m[1]) : exportName;
    const url = URL.createObjectURL(await response.blob());
    const a = el("a", { href: url, download: name, hidden: true });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
    say(note, "ok", `downloaded ${name}`);
    announce(`downloaded ${name}`);
  } catch (err) {
    say(note, "bad", "download failed: " + errorText(err));
  }
}

async function listItems(project, exportName, check, box) {
  try {
    const page = await api("GET", projectPath(project, "exports", exportName, "findings") + "?check=" + encodeURIComponent(check));
    box.replaceChildren(
      el("h4", {}, `Items of ${check}: ${fmtInt(page.total)}`),
      table(
        "finding-items",
        ["item", "severity", "attribute", "value", "message"],
        page.items.map((i) => el("tr", { dataset: { key: i.key } }, el("td", { class: "mono" }, i.key), el("td", {}, i.severity), el("td", { class: "mono" }, i.attribute), el("td", { class: "mono" }, i.value === null ? "" : i.value), el("td", {}, i.message))),
      ),
    );
  } catch (err) {
    if (err.status !== 401) box.replaceChildren(el("p", { class: "note note-bad" }, errorText(err)));
  }
}

// #51's sync status (GET .../sync), shown on the export when the route answers; a 404 (the export has no
// sync, or the server no such route) shows nothing, so the page never depends on it.
async function loadSync(project, exportName) {
  let s;
  try {
    s = await api("GET", projectPath(project, "exports", exportName, "sync"));
  } catch (err) {
    if (err.status === 404 || missingRoute(err) || err.status === 401) return;
    s = null;
  }
  const block = [...document.querySelectorAll("#feeds section.feed")].find((b) => b.dataset.export === exportName);
  if (!block || state.project !== project) return;
  const dd = block.querySelector("dd.sync");
  block.querySelector("dt.sync-term").hidden = false;
  dd.hidden = false;
  dd.replaceChildren(...(s ? syncParts(project, exportName, s) : ["sync status unavailable"]));
}

let orphanSeq = 0; // ids of the repair checkboxes (an export's name may hold any character)

function syncParts(project, exportName, s) {
  const last = s.last_sync;
  const parts = [
    el(
      "div",
      { class: "sync-summary" },
      `to ${s.to}: ${fmtInt(s.items)} item(s) on the channel, ${fmtInt(s.pending)} pending, ${fmtInt(s.failed)} failed`,
    ),
    el(
      "div",
      {},
      s.last_sync_at
        ? `last sync ${fmtTime(s.last_sync_at)}` +
            (last ? `: ${fmtInt(last.inserted)} inserted, ${fmtInt(last.updated)} updated, ${fmtInt(last.deleted)} deleted` : "") +
            (last && last.error ? ` — ${last.error}` : "")
        : "not synced yet",
    ),
  ];
  if ((s.errors || []).length) {
    parts.push(
      table(
        "sync-errors",
        ["item", "code", "message"],
        s.errors.map((e) => el("tr", {}, el("td", { class: "mono" }, e.key), el("td", {}, e.code), el("td", {}, e.message))),
      ),
    );
  }
  if (s.channel_issues) {
    const text = typeof s.channel_issues === "string" ? s.channel_issues : JSON.stringify(s.channel_issues);
    parts.push(el("div", { class: "muted" }, "channel issues: " + (text.length > 500 ? text.slice(0, 500) + "…" : text)));
  }
  const orphans = el("input", { type: "checkbox", id: "orphans-" + ++orphanSeq });
  const note = el("span", { class: "note", role: "status" });
  const repair = el("button", { type: "button", class: "sync-repair" }, "Repair: send what differs");
  repair.addEventListener("click", async () => {
    repair.disabled = true;
    say(note, "muted", "listing the channel and sending what differs…");
    try {
      await api("POST", projectPath(project, "exports", exportName, "sync", "repair"), { delete_orphans: orphans.checked });
      say(note, "ok", "repaired");
      loadSync(project, exportName);
    } catch (err) {
      if (err.status !== 401) say(note, "bad", "repair failed: " + errorText(err));
    } finally {
      repair.disabled = false;
    }
  });
  parts.push(el("div", { class: "bar" }, repair, el("span", {}, orphans, el("label", { for: orphans.id }, " also delete items the feed no longer has")), note));
  return parts;
}
