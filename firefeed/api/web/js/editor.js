// A YAML text editor: a textarea with line numbers, checked on the fly by POST /validate (the API's own
// checks), its problems listed at their line and key; choosing one puts the caret there.
import { el, debounce, say } from "./dom.js";
import { api, projectPath, errorText } from "./api.js";
import { offsetOf } from "./yaml.js";

const VALIDATE_MS = 400;

// project(): the project id the text is checked for (the URL of /validate); onChecked(ok) after each check.
export function yamlEditor({ id, label, project, rows = 24, onChecked }) {
  const textarea = el("textarea", {
    id,
    class: "yaml-text",
    rows: String(rows),
    spellcheck: "false",
    autocomplete: "off",
    autocapitalize: "off",
    wrap: "off",
    "aria-describedby": id + "-keys " + id + "-status",
  });
  // Tab indents here, so how to leave the box from the keyboard is said beside it (WCAG 2.1.2).
  const keys = el("span", { id: id + "-keys", class: "muted hint" }, "Tab indents; press Escape, then Tab, to leave the text box.");
  const gutter = el("pre", { class: "gutter", "aria-hidden": "true" });
  const status = el("p", { id: id + "-status", class: "note", role: "status" });
  const problems = el("ul", { class: "problems", "aria-label": "problems in the spec" });
  const root = el(
    "div",
    { class: "yaml-editor" },
    el("label", { for: id }, label),
    keys,
    el("div", { class: "editor-box" }, gutter, textarea),
    status,
    problems,
  );
  let seq = 0;
  let marked = new Set();

  function numbers() {
    const count = textarea.value.split("\n").length;
    const out = [];
    for (let n = 1; n <= count; n++) out.push(marked.has(n) ? `${n} ✕` : String(n));
    gutter.textContent = out.join("\n");
    gutter.scrollTop = textarea.scrollTop;
  }

  function goTo(line, column) {
    const at = offsetOf(textarea.value, line, column);
    textarea.focus();
    textarea.setSelectionRange(at, at);
    // Scroll the line into view: a line is about as tall as the gutter's line height.
    const lineHeight = parseFloat(getComputedStyle(textarea).lineHeight) || 18;
    textarea.scrollTop = Math.max(0, (line - 3) * lineHeight);
    numbers();
  }

  // errors: [{path, line, column, message, suggestion}] (line may be null: the error names its key only).
  function showProblems(errors) {
    marked = new Set(errors.filter((e) => e.line).map((e) => e.line));
    problems.replaceChildren(
      ...errors.map((e) => {
        const where = (e.line ? `line ${e.line}` + (e.column ? `:${e.column}` : "") + ", " : "") + (e.path || "the document");
        const text = [`${where}: ${e.message}`, e.suggestion ? ` — ${e.suggestion}` : ""].join("");
        const item = el("li", { class: "problem", dataset: { path: e.path || "", line: e.line ? String(e.line) : "" } });
        if (e.line) {
          item.append(el("button", { type: "button", class: "link problem-link", onclick: () => goTo(e.line, e.column) }, text));
        } else {
          item.append(text);
        }
        return item;
      }),
    );
    numbers();
  }

  async function check() {
    const mine = ++seq;
    const text = textarea.value;
    if (!text.trim()) {
      showProblems([]);
      say(status, "muted", "");
      return;
    }
    say(status, "muted", "checking…");
    try {
      const answer = await api("POST", projectPath(project(), "validate"), { yaml: text });
      if (mine !== seq) return;
      if (answer.ok) {
        showProblems([]);
        say(status, "ok", "no problems found");
      } else {
        showProblems(answer.errors || []);
        say(status, "bad", `${answer.errors.length} problem(s)`);
      }
      if (onChecked) onChecked(answer.ok);
    } catch (err) {
      if (mine !== seq) return;
      if (err.status === 422 || err.status === 413) {
        // The whole document is refused (too large, not YAML): one problem with its key.
        showProblems([{ path: err.body.path || "", line: null, message: err.message, suggestion: null }]);
        say(status, "bad", errorText(err));
      } else if (err.status !== 401) {
        say(status, "bad", "could not check: " + errorText(err));
      }
    }
  }
  const later = debounce(check, VALIDATE_MS);

  textarea.addEventListener("input", () => {
    numbers();
    later();
  });
  textarea.addEventListener("scroll", () => (gutter.scrollTop = textarea.scrollTop));
  // Tab inserts two spaces (YAML indents with spaces); Escape then Tab leaves the box, as WCAG 2.1.2 asks.
  let escaped = false;
  textarea.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      escaped = true;
      return;
    }
    if (event.key === "Tab" && !event.shiftKey && !escaped) {
      event.preventDefault();
      const { selectionStart: a, selectionEnd: b } = textarea;
      textarea.setRangeText("  ", a, b, "end");
      numbers();
      later();
    }
    escaped = false;
  });

  return {
    root,
    textarea,
    status,
    get text() {
      return textarea.value;
    },
    set text(value) {
      textarea.value = value;
      marked = new Set();
      problems.replaceChildren();
      say(status, "muted", "");
      numbers();
    },
    check,
    showProblems,
    goTo,
  };
}

// A PUT's 422 as problems: the first at `path`, then every other the API listed.
export function problemsOf(err) {
  const b = err.body || {};
  const all = b.problems && b.problems.length ? b.problems : [{ path: b.path || "", message: err.message }];
  return all.map((p) => ({ path: p.path, line: p.line || null, column: p.column || null, message: p.message, suggestion: p.suggestion || null }));
}
