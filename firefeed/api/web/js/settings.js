// Company settings: API tokens (create — shown once —, list, revoke), secrets (names only: set and
// delete; a value is never shown or echoed), and each project's schedule.
import { $, el, field, fmtTime, say, table, copyText, announce } from "./dom.js";
import { api, projectPath, errorText, missingRoute } from "./api.js";
import { state } from "./state.js";
import { forget as forgetSpec } from "./spec.js";

export function mount() {
  $("view-settings").append(
    el("h2", { id: "settings-heading" }, "Company settings"),
    el("section", { "aria-labelledby": "tokens-heading" },
      el("h3", { id: "tokens-heading" }, "API tokens"),
      el(
        "form",
        { id: "token-create", class: "bar", onsubmit: (e) => (e.preventDefault(), createToken()) },
        field("Expires in days", el("input", { type: "number", id: "token-days", min: "1", max: "3650", inputmode: "numeric" }), "empty: never"),
        el("button", { type: "submit" }, "Create token"),
      ),
      el("div", { id: "token-once", hidden: true }),
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
  $("token-once").hidden = true;
  $("token-once").replaceChildren();
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

async function createToken() {
  const days = $("token-days").value.trim();
  try {
    const made = await api("POST", "/api/tokens", days ? { expires_in_days: Number(days) } : {});
    const shown = el("input", { type: "text", id: "new-token", readonly: true, value: made.token, class: "mono wide" });
    const copy = el("button", { type: "button" }, "Copy token");
    copy.addEventListener("click", () => copyText(copy, made.token));
    $("token-once").replaceChildren(
      field("The new token (shown this once: copy it now)", shown),
      copy,
      el("button", { type: "button", onclick: () => ($("token-once").hidden = true, $("token-once").replaceChildren()) }, "Done, hide it"),
    );
    $("token-once").hidden = false;
    shown.focus();
    shown.select();
    say($("tokens-note"), "ok", "token created");
    announce("token created; it is shown once");
    await loadTokens();
  } catch (err) {
    if (err.status === 401) return;
    say($("tokens-note"), "bad", missingRoute(err) ? "this server creates tokens only with `firefeed token create`" : "not created: " + errorText(err));
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
    const specs = await Promise.all(list.projects.map((p) => api("GET", projectPath(p.project))));
    $("schedules-table").tBodies[0].replaceChildren(
      ...specs.map((doc) => {
        const input = el("input", { type: "text", value: doc.schedule || "", placeholder: "none", autocomplete: "off", "aria-label": `schedule of ${doc.project}` });
        return el(
          "tr",
          { dataset: { project: doc.project } },
          el("td", { class: "mono" }, doc.project),
          el("td", {}, input),
          el("td", {}, el("button", { type: "button", onclick: () => saveSchedule(doc.project, input.value.trim()) }, `Save schedule of ${doc.project}`)),
        );
      }),
    );
  } catch (err) {
    if (err.status !== 401) say($("schedules-note"), "bad", "could not list the schedules: " + errorText(err));
  }
}

async function saveSchedule(project, schedule) {
  try {
    const doc = await api("GET", projectPath(project));
    delete doc.feed_urls;
    if (schedule) doc.schedule = schedule;
    else delete doc.schedule;
    await api("PUT", projectPath(project), doc);
    forgetSpec();
    say($("schedules-note"), "ok", `schedule of ${project}: ${schedule || "none"}`);
    announce(`schedule of ${project} saved`);
  } catch (err) {
    if (err.status !== 401) say($("schedules-note"), "bad", `schedule of ${project} not saved: ` + errorText(err));
  }
}
