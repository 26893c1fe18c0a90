// Alerts: the project's recent alerts from the outbox (GET .../alerts, SPEC 10 C8): event, when, the host
// it goes to, status, attempts and what the last attempt got. The API never sends an alert URL's path,
// its secret or its signature; every value is rendered as text.
import { el, fmtInt, fmtTime, say, table, shortId, statusBadge, NUM } from "./dom.js";
import { api, projectPath, errorText, missingRoute } from "./api.js";
import { state } from "./state.js";

const SHOWN = 20;

// The section the Feeds view shows under its exports; it fills itself when the answer comes.
export function alertsSection(project) {
  const note = el("p", { class: "note", role: "status" });
  const box = el("div", { class: "alerts-list" });
  const section = el("section", { id: "project-alerts", "aria-label": "alerts" }, el("h3", {}, "Alerts"), note, box);
  load(project, note, box, section);
  return section;
}

async function load(project, note, box, section) {
  say(note, "muted", "loading…");
  let answer;
  try {
    answer = await api("GET", projectPath(project, "alerts") + "?limit=" + SHOWN);
  } catch (err) {
    if (err.status === 401) return;
    if (missingRoute(err)) {
      section.hidden = true; // an API without the route: the page shows nothing rather than an error
      return;
    }
    say(note, "bad", "could not load the alerts: " + errorText(err));
    return;
  }
  if (state.project !== project) return;
  if (!answer.alerts.length) {
    say(note, "muted", "no alerts yet (a project's spec lists them under alerts:)");
    box.replaceChildren();
    return;
  }
  say(note, "muted", `the latest ${fmtInt(answer.alerts.length)}, newest first`);
  box.replaceChildren(
    table(
      "alerts",
      ["event", "when", "target host", "status", NUM("attempts"), "last attempt", "run"],
      answer.alerts.map((a) =>
        el(
          "tr",
          { class: "alert alert-" + a.status, dataset: { event: a.event } },
          el("td", {}, a.event, a.export ? el("span", { class: "muted" }, " export ", el("span", { class: "mono" }, a.export)) : ""),
          el("td", {}, fmtTime(a.created_at)),
          el("td", { class: "mono" }, a.target_host),
          el("td", {}, statusBadge(a.status), a.status === "pending" && a.next_attempt_at ? ` again ${fmtTime(a.next_attempt_at)}` : ""),
          el("td", { class: "num" }, fmtInt(a.attempts)),
          el("td", {}, lastText(a.last)),
          el("td", { class: "mono" }, shortId(a.run_id)),
        ),
      ),
    ),
  );
}

function lastText(last) {
  if (!last) return "-";
  const answered = last.status_code === null || last.status_code === undefined ? "no answer" : `answered ${last.status_code}`;
  return last.error ? `${answered}: ${last.error}` : answered;
}
