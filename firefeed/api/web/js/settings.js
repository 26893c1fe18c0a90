// Company settings: API tokens (list, revoke; the operator creates them), secrets (names only: set and
// delete; a value is never shown or echoed), and each project's schedule.
import { $, el, field, fmtTime, say, table, announce } from "./dom.js";
import { api, projectPath, errorText } from "./api.js";
import { forget as forgetSpec } from "./spec.js";

export function mount() {
  $("view-settings").append(
    el("h2", { id: "settings-heading" }, "Company settings"),
    el("section", { "aria-labelledby": "tokens-heading" },
      el("h3", { id: "tokens-heading" }, "API tokens"),
      // No route makes a token (a token that could mint tokens would outlive its own revocation): the
      // operator creates one, and the page lists and revokes them.
      el("p", { class: "muted", id: "token-create-hint" }, "A new token is made by your operator: ", el("code", {}, "firefeed token create --company C"), ". It is shown once, when it is made; here you see and revoke them."),
      el("p", { id: "tokens-note", class: "note", role: "status" }),
      table("tokens", ["token", "state", "created", "expires", "last used", ""], [], { id: "tokens-table", "aria-labelledby": "tokens-heading" }),
    ),
    el("section", { "aria-labelledby": "secrets-heading" },
      el("h3", { id: "secrets-heading" }, "Secrets"),
      el("p", { class: "muted" }, "A spec names a secret as ${secret:NAME}; its value is sent where the spec writes it and is never shown again."),
      el(
        "form",
        { id: "secret-form", class: "bar", onsubmit: (e) => (e.preventDefault(), setSecret()) },
        field("Secret name", el("input", { type: "text", id: "secret-name", autocomplete: "off", required: true, pattern: "[A-Za-z_][A-Za-z0-9_]{0,63}" })),
        field("Secret value", el("input", { type: "password", id: "secret-value", autocomplete: "new-password", required: true })),
        el("button", { type: "submit" }, "Set secret"),
      ),
      el("p", { id: "secrets-note", class: "note", role: "status" }),
      table("secrets", ["name", "set", ""], [], { id: "secrets-table", "aria-labelledby": "secrets-heading" }),
    ),
    el("section", { "aria-labelledby": "schedules-heading" },
      el("h3", { id: "schedules-heading" }, "Schedules"),
      el("p", { class: "muted" }, "Each project's cron schedule (five fields, UTC); empty: it runs only when asked. Saved into the project's spec."),
      el("p", { id: "schedules-note", class: "note", role: "status" }),
      table("schedules", ["project", "schedule", ""], [], { id: "schedules-table", "aria-labelledby": "schedules-heading" }),
    ),
  );
}

export async function show() {
  await Promise.all([loadTokens(), loadSecrets(), loadSchedules()]);
}

// A button that asks once more before it acts (no dialog: a second press within 5 s).
function twoStep(label, again, action) {
  const button = el("button", { type: "button" }, label);
  button.addEventListener("click", () => {
    if (button.dataset.confirm === "yes") {
      button.dataset.confirm = "";
      action();
      return;
    }
    button.dataset.confirm = "yes";
    button.textContent = again;
    setTimeout(() => {
      button.dataset.confirm = "";
      button.textContent = label;
    }, 5000);
  });
  return button;
}

// --- tokens ----------------------------------------------------------------------
async function loadTokens() {
  try {
    const answer = await api("GET", "/api/tokens");
    $("token-create-hint").querySelector("code").textContent = "firefeed token create --company " + answer.company;
    $("tokens-table").tBodies[0].replaceChildren(
      ...answer.tokens.map((t) =>
        el(
          "tr",
          { dataset: { tokenId: String(t.id), state: t.state } },
          el("td", { class: "mono" }, t.prefix + "…"),
          el("td", {}, t.state),
          el("td", {}, fmtTime(t.created_at)),
          el("td", {}, t.expires_at ? fmtTime(t.expires_at) : "never"),
          el("td", {}, t.last_used_at ? fmtTime(t.last_used_at) : "never"),
          el("td", {}, t.state === "active" ? twoStep(`Revoke ${t.prefix}…`, "Press again to revoke", () => revokeToken(t)) : ""),
        ),
      ),
    );
  } catch (err) {
    if (err.status !== 401) say($("tokens-note"), "bad", "could not list the tokens: " + errorText(err));
  }
}

async function revokeToken(t) {
  try {
    await api("DELETE", "/api/tokens/" + encodeURIComponent(t.id));
    say($("tokens-note"), "ok", `token ${t.prefix}… revoked`);
    announce(`token ${t.prefix} revoked`);
    await loadTokens();
  } catch (err) {
    if (err.status !== 401) say($("tokens-note"), "bad", "not revoked: " + errorText(err));
  }
}

// --- secrets -----------------------------------------------------------------------
async function loadSecrets() {
  try {
    const answer = await api("GET", "/api/secrets");
    $("secrets-table").tBodies[0].replaceChildren(
      ...answer.secrets.map((s) =>
        el(
          "tr",
          { dataset: { secret: s.name } },
          el("td", { class: "mono" }, s.name),
          el("td", {}, fmtTime(s.updated_at)),
          el("td", {}, twoStep(`Delete ${s.name}`, "Press again to delete", () => deleteSecret(s.name))),
        ),
      ),
    );
  } catch (err) {
    if (err.status !== 401) say($("secrets-note"), "bad", "could not list the secrets: " + errorText(err));
  }
}

async function setSecret() {
  const name = $("secret-name").value.trim();
  const value = $("secret-value").value;
  // The value leaves the field at once: it is never kept on the page or repeated in a message.
  $("secret-value").value = "";
  try {
    const saved = await api("PUT", "/api/secrets/" + encodeURIComponent(name), { value });
    say($("secrets-note"), "ok", `secret ${saved.name} ${saved.created ? "created" : "replaced"}; a spec names it ${saved.reference}`);
    announce(`secret ${saved.name} saved`);
    $("secret-name").value = "";
    await loadSecrets();
  } catch (err) {
    // The API's message names what is wrong and never the value.
    if (err.status !== 401) say($("secrets-note"), "bad", "not set: " + errorText(err));
  }
}

async function deleteSecret(name) {
  try {
    await api("DELETE", "/api/secrets/" + encodeURIComponent(name));
    say($("secrets-note"), "ok", `secret ${name} deleted`);
    await loadSecrets();
  } catch (err) {
    if (err.status !== 401) say($("secrets-note"), "bad", "not deleted: " + errorText(err));
  }
}

// --- schedules ------------------------------------------------------------------------
async function loadSchedules() {
  try {
    const list = await api("GET", "/api/projects");
    $("schedules-table").tBodies[0].replaceChildren(
      ...list.projects.map((p) => {
        const input = el("input", { type: "text", value: p.schedule || "", placeholder: "none", autocomplete: "off", "aria-label": `schedule of ${p.project}` });
        return el(
          "tr",
          { dataset: { project: p.project } },
          el("td", { class: "mono" }, p.project),
          el("td", {}, input),
          el("td", {}, el("button", { type: "button", onclick: () => saveSchedule(p.project, input.value.trim()) }, `Save schedule of ${p.project}`)),
        );
      }),
    );
  } catch (err) {
    if (err.status !== 401) say($("schedules-note"), "bad", "could not list the schedules: " + errorText(err));
  }
}

// The schedule is the spec's top-level `schedule:` line: changed in the spec's own text, so the rest of the
// document (its key order, its comments) stays as its author wrote it.
export function withSchedule(text, schedule) {
  const line = schedule ? "schedule: " + JSON.stringify(schedule) : null;
  if (/^schedule:.*$/m.test(text)) return text.replace(/^schedule:.*(\n|$)/m, (_, end) => (line ? line + end : ""));
  if (!line) return text;
  const after = /^(project|name):.*$/m.exec(text);
  if (!after) return line + "\n" + text;
  const end = after.index + after[0].length;
  return text.slice(0, end) + "\n" + line + text.slice(end);
}

async function saveSchedule(project, schedule) {
  try {
    const current = await api("GET", projectPath(project, "spec"));
    await api("PUT", projectPath(project), { yaml: withSchedule(current.yaml, schedule) });
    forgetSpec();
    say($("schedules-note"), "ok", `schedule of ${project}: ${schedule || "none"}`);
    announce(`schedule of ${project} saved`);
  } catch (err) {
    if (err.status !== 401) say($("schedules-note"), "bad", `schedule of ${project} not saved: ` + errorText(err));
  }
}
