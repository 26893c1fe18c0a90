// Company settings: API tokens (create, list, revoke), secrets (names only: set and delete; a value is never
// shown or echoed), and each project's schedule.
import { $, el, field, fmtTime, say, table, announce, copyText } from "./dom.js";
import { api, projectPath, errorText, token as tabToken } from "./api.js";
import { forget as forgetSpec } from "./spec.js";

export function mount() {
  $("view-settings").append(
    el("h2", { id: "settings-heading" }, "Company settings"),
    el("section", { "aria-labelledby": "tokens-heading" },
      el("h3", { id: "tokens-heading" }, "API tokens"),
      // A token made here is a child of this tab's token (POST /api/tokens): it never expires after it and is
      // revoked with it, so one revoke cuts off everything a leaked token minted. Roots are the operator's.
      el("p", { class: "muted", id: "token-create-hint" }, "A token made here is created by this tab's token: it never expires after it, and revoking that one revokes it too. The operator's tokens are made with ", el("code", {}, "firefeed token create --company C"), " (created by no other token)."),
      el(
        "form",
        { id: "token-form", class: "bar", onsubmit: (e) => (e.preventDefault(), createToken()) },
        field("Token name", el("input", { type: "text", id: "token-name", autocomplete: "off", maxlength: "100" }), "optional"),
        field("Expires in days", el("input", { type: "number", id: "token-days", min: "1", max: "36500", step: "1", inputmode: "numeric" }), "optional; empty: when this tab's token does"),
        el("button", { type: "submit" }, "Create token"),
      ),
      // The new token lives in this field only, until the view is left (leave()): never in storage or the URL.
      el(
        "div",
        { id: "token-created", hidden: true },
        el(
          "div",
          { class: "bar" },
          field("New token", el("input", { type: "text", id: "token-new", readonly: true, autocomplete: "off", spellcheck: "false", class: "mono", size: "60" })),
          el("button", { type: "button", id: "token-copy", onclick: () => copyText($("token-copy"), $("token-new").value) }, "Copy token"),
        ),
        el("p", { class: "note note-bad", id: "token-once" }, "Shown once: copy it now. It is not kept anywhere and cannot be shown again."),
      ),
      el("p", { id: "tokens-note", class: "note", role: "status" }),
      table("tokens", ["token", "name", "created by", "state", "created", "expires", "last used", ""], [], { id: "tokens-table", "aria-labelledby": "tokens-heading" }),
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

// Called when another view shows or the tab's token is forgotten: a token created here is gone with it.
export function leave() {
  $("token-new").value = "";
  $("token-created").hidden = true;
  $("token-copy").textContent = "Copy token";
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
          el("td", { class: "mono" }, `#${t.id} ${t.prefix}…`, (tabToken() || "").startsWith(t.prefix) ? el("span", { class: "muted" }, " (this tab)") : null),
          el("td", {}, t.name || ""),
          el("td", {}, t.parent_id === null || t.parent_id === undefined ? "operator" : `created by #${t.parent_id}`),
          el("td", {}, t.state),
          el("td", {}, fmtTime(t.created_at)),
          el("td", {}, t.expires_at ? fmtTime(t.expires_at) : "never"),
          el("td", {}, t.last_used_at ? fmtTime(t.last_used_at) : "never"),
          el("td", {}, t.state === "active" ? twoStep(`Revoke ${t.prefix}…`, "Press again to revoke it and the tokens it created", () => revokeToken(t)) : ""),
        ),
      ),
    );
  } catch (err) {
    if (err.status !== 401) say($("tokens-note"), "bad", "could not list the tokens: " + errorText(err));
  }
}

async function createToken() {
  leave();
  const name = $("token-name").value.trim();
  const days = $("token-days").value.trim();
  try {
    const made = await api("POST", "/api/tokens", { name: name || null, expires_in_days: days ? Number(days) : null });
    $("token-new").value = made.token;
    $("token-created").hidden = false;
    $("token-new").focus();
    $("token-new").select();
    $("token-name").value = "";
    $("token-days").value = "";
    const until = made.expires_at ? "expires " + fmtTime(made.expires_at) : "never expires";
    say($("tokens-note"), "ok", `token #${made.id} (${made.prefix}…) created, ${until}; revoking #${made.parent_id} revokes it too`);
    announce(`token ${made.prefix} created: it is shown once`);
    await loadTokens();
  } catch (err) {
    // 409 company_limit, 422 with the field at fault: the API's message says which.
    if (err.status !== 401) say($("tokens-note"), "bad", "not created: " + errorText(err));
  }
}

async function revokeToken(t) {
  try {
    await api("DELETE", "/api/tokens/" + encodeURIComponent(t.id));
    say($("tokens-note"), "ok", `token ${t.prefix}… revoked, with the tokens it created`);
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
