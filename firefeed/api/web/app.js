// The FireFeed page: a thin client of the JSON API under /api, in plain ES modules (no build step).
// app.js holds the token, the projects list and which view shows; each view is a module of js/.
// Every piece of data reaches the page through textContent or an attribute, never innerHTML,
// so a project, rule or error text cannot inject markup.
import { $, el, statusBadge, announce } from "./js/dom.js";
import { TOKEN_KEY, api, onUnauthorized } from "./js/api.js";
import { state } from "./js/state.js";
import { answer, isActive, loadRun, loadRuns, resetRuns, runNow, cancelRun, previewRules } from "./js/runs.js";
import * as specView from "./js/spec.js";
import * as rulesView from "./js/rules.js";
import * as valuesView from "./js/values.js";
import * as itemsView from "./js/items.js";
import * as feedsView from "./js/feeds.js";
import * as settingsView from "./js/settings.js";
import * as newView from "./js/new_project.js";

// Refresh often while something runs, rarely otherwise.
const FAST_MS = 2000;
const SLOW_MS = 15000;

// The views of a project (the tabs), then the company's own (no project needed).
const PROJECT_VIEWS = { runs: null, spec: specView, rules: rulesView, values: valuesView, items: itemsView, feeds: feedsView };
const COMPANY_VIEWS = { settings: settingsView, new: newView };

// A view may hold what must not outlive it (a token created in settings): `leave()` drops it when another
// view shows or the tab's token is forgotten.
function leaveViews(except) {
  for (const [key, view] of [...Object.entries(PROJECT_VIEWS), ...Object.entries(COMPANY_VIEWS)]) {
    if (key !== except && view && view.leave) view.leave();
  }
}

// --- token ----------------------------------------------------------------
function forgetToken(reason) {
  sessionStorage.removeItem(TOKEN_KEY);
  leaveViews(null);
  clearTimeout(state.timer);
  $("main").hidden = true;
  $("forget-token").hidden = true;
  $("company").textContent = "";
  $("login").hidden = false;
  $("login-error").textContent = reason || "";
  $("token-input").focus();
}
onUnauthorized(forgetToken);

async function start() {
  if (!sessionStorage.getItem(TOKEN_KEY)) {
    forgetToken("");
    return;
  }
  $("login").hidden = true;
  $("main").hidden = false;
  $("forget-token").hidden = false;
  await refresh();
}

// --- projects ---------------------------------------------------------------
async function loadProjects() {
  const data = await api("GET", "/api/projects");
  state.company = data.company;
  $("company").textContent = "company " + data.company;
  $("no-projects").hidden = data.projects.length > 0;
  const items = data.projects.map((p) =>
    el(
      "li",
      { class: p.project === state.project ? "selected" : "", dataset: { project: p.project } },
      el(
        "button",
        {
          type: "button",
          class: "link",
          "aria-current": p.project === state.project ? "true" : null,
          onclick: () => selectProject(p.project),
        },
        el("strong", {}, p.project),
        p.name ? el("span", { class: "muted" }, " " + p.name) : null,
      ),
      " ",
      p.latest_run ? statusBadge(p.latest_run.status) : el("span", { class: "muted" }, "no runs"),
    ),
  );
  $("projects").replaceChildren(...items);
  // The first project is selected at start, without leaving a company view the user already opened.
  if (!state.project && data.projects.length) selectProject(data.projects[0].project, false, true);
  return data.projects.some((p) => p.latest_run && isActive(p.latest_run.status));
}

function selectProject(project, reload = true, keepView = false) {
  const changed = state.project !== project;
  if (changed) {
    state.project = project;
    resetRuns();
  }
  if (keepView && state.view in COMPANY_VIEWS) return;
  if (state.view in COMPANY_VIEWS) state.view = "runs";
  showView(state.view);
  if (reload) refresh();
}

// --- views ------------------------------------------------------------------
function showView(name) {
  leaveViews(name);
  state.view = name;
  const project = state.project;
  $("view-runs").hidden = name !== "runs";
  for (const key of [...Object.keys(PROJECT_VIEWS), ...Object.keys(COMPANY_VIEWS)]) {
    if (key !== "runs") $("view-" + key).hidden = key !== name;
  }
  $("project-pane").hidden = !project;
  $("view-tabs").hidden = !project || name in COMPANY_VIEWS;
  $("project-heading").hidden = $("view-tabs").hidden;
  $("project-heading").textContent = project ? "Project " + project : "";
  for (const tab of $("view-tabs").querySelectorAll("button[data-view]")) {
    const current = tab.dataset.view === name;
    tab.setAttribute("aria-current", current ? "page" : "false");
    tab.classList.toggle("current", current);
  }
  $("open-settings").setAttribute("aria-current", name === "settings" ? "page" : "false");
  const view = PROJECT_VIEWS[name] || COMPANY_VIEWS[name];
  if (view) view.show(project);
}

// The view's own first heading takes the focus, so a keyboard or screen-reader user lands in it.
function focusView(name) {
  const heading = document.querySelector(`#view-${name} h2, #view-${name} h3`);
  if (heading) {
    heading.setAttribute("tabindex", "-1");
    heading.focus();
  }
}

async function refresh() {
  clearTimeout(state.timer);
  if (!sessionStorage.getItem(TOKEN_KEY)) return;
  let active = false;
  try {
    active = await loadProjects();
    if (state.view === "runs") {
      active = (await loadRuns()) || active;
      active = (await loadRun()) || active;
    }
    document.body.dataset.loaded = "true";
  } catch (err) {
    if (err.status === 401) return;
    if (err.status === 404) {
      state.runId = null;
    } else {
      answer("error", "could not load: " + err.message);
    }
  }
  state.timer = setTimeout(refresh, active ? FAST_MS : SLOW_MS);
}
state.refresh = refresh;

// After a project is created or its spec saved, the list shows it and it is selected.
state.projectSaved = async (project, view) => {
  state.project = null;
  await loadProjects();
  state.view = view || "spec";
  selectProject(project, false);
  announce(`project ${project} saved`);
};
state.showView = (name) => {
  showView(name);
  focusView(name);
  if (name === "runs") refresh();
};

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token-input").value.trim());
    $("token-input").value = "";
    start();
  });
  $("forget-token").addEventListener("click", () => forgetToken(""));
  $("run-now").addEventListener("click", () => runNow(false));
  $("preview-rules").addEventListener("click", previewRules);
  $("accept-drop").addEventListener("click", () => runNow(true));
  $("cancel").addEventListener("click", cancelRun);
  for (const tab of $("view-tabs").querySelectorAll("button[data-view]")) {
    tab.addEventListener("click", () => state.showView(tab.dataset.view));
  }
  $("open-settings").addEventListener("click", () => state.showView("settings"));
  $("new-project").addEventListener("click", () => state.showView("new"));
  for (const view of [...Object.values(PROJECT_VIEWS), ...Object.values(COMPANY_VIEWS)]) if (view) view.mount();
  start();
});
