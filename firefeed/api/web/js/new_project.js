// Create a project from the page: the spec as a form for the common keys (project_form.js), or the same
// spec as YAML text for the rest ("Edit as YAML", checked as it is typed); created through PUT.
import { $, el, say, announce } from "./dom.js";
import { api, projectPath, errorText } from "./api.js";
import { state } from "./state.js";
import { yamlEditor, problemsOf } from "./editor.js";
import { toYaml } from "./yaml.js";
import { projectForm } from "./project_form.js";

let editor = null;
let form = null;
let asYaml = false;

export function mount() {
  editor = yamlEditor({ id: "new-yaml", label: "The new project's spec as YAML", project: () => projectId() || "new" });
  form = projectForm("new-form", null);
  editor.root.hidden = true;
  $("view-new").append(
    el("h2", { id: "new-heading" }, "New project"),
    form.root,
    editor.root,
    el(
      "div",
      { class: "bar" },
      el("button", { type: "button", id: "new-create", class: "primary", onclick: create }, "Create project"),
      el("button", { type: "button", id: "new-as-yaml", onclick: toggleYaml }, "Edit as YAML"),
    ),
    el("p", { id: "new-note", class: "note", role: "status" }),
  );
}

export function show() {}

const projectId = () => (asYaml ? (/^project:\s*"?([^"\n]+)"?\s*$/m.exec(editor.text) || [])[1] : form.projectId());

function toggleYaml() {
  if (asYaml) return;
  asYaml = true;
  editor.text = toYaml(form.read(state.company));
  form.root.hidden = true;
  editor.root.hidden = false;
  $("new-as-yaml").disabled = true;
  editor.textarea.focus();
  editor.check();
}

async function create() {
  const project = projectId();
  if (!project) {
    say($("new-note"), "bad", "a project id is needed");
    if (!asYaml) form.focus();
    return;
  }
  say($("new-note"), "muted", "creating…");
  const body = asYaml ? { yaml: editor.text } : form.read(state.company);
  try {
    await api("PUT", projectPath(project), body);
    say($("new-note"), "ok", `project ${project} created`);
    announce(`project ${project} created`);
    reset();
    await state.projectSaved(project, "spec");
  } catch (err) {
    if (err.status === 401) return;
    say($("new-note"), "bad", "not created: " + errorText(err));
    if (err.status === 422 && asYaml) {
      editor.showProblems(problemsOf(err));
      editor.check();
    }
  }
}

// After a project is created, the form starts again empty.
function reset() {
  asYaml = false;
  $("view-new").replaceChildren();
  mount();
}
