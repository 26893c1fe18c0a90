// The spec view: the project's spec as YAML text (checked as it is typed) or as a form (the common keys,
// project_form.js), saved through PUT, and its version history (spec_versions): list, view, restore (a
// new apply of that document, as PUT does).
import { $, el, fmtInt, fmtTime, say, table, announce, NUM } from "./dom.js";
import { api, projectPath, errorText } from "./api.js";
import { state } from "./state.js";
import { yamlEditor, problemsOf } from "./editor.js";
import { projectForm } from "./project_form.js";

let editor = null;
let loaded = null; // the project whose spec the editor holds
let saved = null; // GET .../spec's answer for it: the saved text and object
let form = null; // the form, while the spec is edited as one

export function mount() {
  editor = yamlEditor({ id: "spec-yaml", label: "The spec as YAML", project: () => state.project });
  const save = el("button", { type: "button", id: "spec-save", class: "primary", onclick: saveSpec }, "Save spec");
  const reload = el("button", { type: "button", id: "spec-reload", onclick: () => load(state.project) }, "Reload the saved spec");
  $("view-spec").append(
    el("h2", { id: "spec-heading" }, "Spec"),
    el("p", { id: "spec-note", class: "note", role: "status" }),
    el(
      "fieldset",
      { class: "mode" },
      el("legend", {}, "Edit as"),
      el("label", {}, el("input", { type: "radio", name: "spec-mode", value: "text", id: "spec-mode-text", checked: true }), " YAML text"),
      el("label", {}, el("input", { type: "radio", name: "spec-mode", value: "form", id: "spec-mode-form" }), " form"),
    ),
    editor.root,
    el("div", { id: "spec-form-box", hidden: true }),
    el("div", { class: "bar" }, save, reload),
    el("h3", { id: "versions-heading" }, "Versions"),
    el("p", { class: "muted" }, "Each save is a version; restoring one applies it again as a new version."),
    table("versions", ["version", "saved", NUM("bytes"), NUM("runs"), "", "actions"], [], { id: "spec-versions", "aria-labelledby": "versions-heading" }),
    el(
      "div",
      { id: "version-view", hidden: true },
      el("h3", { id: "version-view-heading" }),
      el("pre", { id: "version-yaml", class: "yaml-view", tabindex: "0", "aria-labelledby": "version-view-heading" }),
    ),
  );
  for (const radio of document.querySelectorAll("input[name=spec-mode]")) radio.addEventListener("change", () => setMode(radio.value));
  // Said once the text differs from what is saved, and cleared when it is the same again.
  editor.textarea.addEventListener("input", () => {
    const dirty = saved && editor.text !== saved.yaml;
    if (dirty) say($("spec-note"), "muted", "unsaved changes");
    else if ($("spec-note").textContent === "unsaved changes") say($("spec-note"), "muted", "");
  });
}

function setMode(mode) {
  const asForm = mode === "form";
  editor.root.hidden = asForm;
  $("spec-form-box").hidden = !asForm;
  if (asForm) {
    // The form starts from the saved spec; what the text holds unsaved is not in it.
    if (saved && editor.text !== saved.yaml) say($("spec-note"), "muted", "the form shows the saved spec: unsaved text edits are not in it");
    form = projectForm("spec-form", saved ? saved.spec : {});
    $("spec-form-box").replaceChildren(el("p", { class: "muted" }, "Saving the form writes the spec anew: comments in its YAML text are not kept."), form.root);
  } else {
    form = null;
    $("spec-form-box").replaceChildren();
  }
}

export async function show(project) {
  if (loaded !== project) await load(project);
  else await loadVersions(project);
}

async function load(project) {
  $("spec-heading").textContent = "Spec of " + project;
  say($("spec-note"), "muted", "loading…");
  try {
    const answer = await api("GET", projectPath(project, "spec"));
    if (state.project !== project) return;
    saved = answer;
    editor.text = answer.yaml;
    loaded = project;
    $("spec-mode-text").checked = true;
    setMode("text");
    say($("spec-note"), "muted", "");
  } catch (err) {
    if (err.status !== 401) say($("spec-note"), "bad", "could not load the spec: " + errorText(err));
  }
  $("version-view").hidden = true;
  await loadVersions(project);
}

async function saveSpec() {
  const project = state.project;
  say($("spec-note"), "muted", "saving…");
  try {
    await api("PUT", projectPath(project), form ? form.read(state.company) : { yaml: editor.text });
    if (form) await load(project); // the text of what the form saved
    else saved = { ...saved, yaml: editor.text };
    say($("spec-note"), "ok", "saved");
    announce("spec saved");
    editor.showProblems([]);
    await loadVersions(project);
  } catch (err) {
    if (err.status === 401) return;
    say($("spec-note"), "bad", "not saved: " + errorText(err));
    if (err.status === 422 && !form) {
      editor.showProblems(problemsOf(err));
      editor.check(); // the line of each problem, from /validate
    }
  }
}

async function loadVersions(project) {
  const body = $("spec-versions").tBodies[0];
  let answer;
  try {
    answer = await api("GET", projectPath(project, "versions"));
  } catch (err) {
    if (err.status !== 401) say($("spec-note"), "bad", "could not list the versions: " + errorText(err));
    return;
  }
  if (state.project !== project) return;
  body.replaceChildren(
    ...answer.versions.map((v) =>
      el(
        "tr",
        { dataset: { version: String(v.version) }, class: v.current ? "selected" : "" },
        el("td", { class: "mono" }, String(v.version)),
        el("td", {}, fmtTime(v.created_at)),
        el("td", { class: "num" }, fmtInt(v.bytes)),
        el("td", { class: "num" }, fmtInt(v.runs)),
        el("td", {}, v.current ? "current" : ""),
        el(
          "td",
          {},
          el("button", { type: "button", class: "view-version", onclick: () => viewVersion(project, v.version) }, "View"),
          " ",
          v.current
            ? null
            : el("button", { type: "button", class: "restore-version", onclick: () => restore(project, v.version) }, "Restore"),
        ),
      ),
    ),
  );
}

async function viewVersion(project, version) {
  try {
    const answer = await api("GET", projectPath(project, "versions", String(version)));
    $("version-view").hidden = false;
    $("version-view-heading").textContent = `Version ${version}, saved ${fmtTime(answer.created_at)}`;
    $("version-yaml").textContent = answer.yaml;
    $("version-yaml").focus();
  } catch (err) {
    if (err.status !== 401) say($("spec-note"), "bad", "could not read the version: " + errorText(err));
  }
}

async function restore(project, version) {
  say($("spec-note"), "muted", `restoring version ${version}…`);
  try {
    await api("POST", projectPath(project, "versions", String(version), "restore"));
    loaded = null;
    await load(project);
    say($("spec-note"), "ok", `version ${version} restored: it is the project's spec again`);
    announce(`version ${version} restored`);
  } catch (err) {
    if (err.status !== 401) say($("spec-note"), "bad", `version ${version} not restored: ` + errorText(err));
  }
}

// Another view saved the spec: the editor reads it again when shown.
export function forget() {
  loaded = null;
}
