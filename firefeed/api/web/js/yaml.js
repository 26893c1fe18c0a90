// A small YAML writer for what the page builds (a spec from the form, a rule as text): block mappings
// and lists, texts plain when YAML reads them back as the same text, else JSON-quoted (JSON's quoted
// strings are YAML's double-quoted ones). Parsing stays with the server (POST /validate, PUT).

const PLAIN = /^[A-Za-z0-9_./(][^:#\n\r\t"'{}[\],&*!|>%`@]*$/;
const RESERVED = /^(true|false|yes|no|on|off|null|y|n|~|-?\d[\d_.eE+-]*)$/i;

// What YAML reads as a line break or may not hold unescaped (DEL, C1 controls, NEL, the line and paragraph
// separators, the BOM), which JSON.stringify leaves as they are.
const UNPRINTABLE = /[\u007f-\u009f\u2028\u2029\ufeff]/;
const UNPRINTABLE_ALL = new RegExp(UNPRINTABLE.source, "g");
const escapeChar = (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0");

function scalar(value) {
  if (value === null || value === undefined) return "null";
  if (typeof value === "boolean" || typeof value === "number") return String(value);
  const text = String(value);
  const plain = PLAIN.test(text) && !RESERVED.test(text) && text === text.trim() && !text.includes(" #");
  if (plain && !UNPRINTABLE.test(text)) return text;
  return JSON.stringify(text).replace(UNPRINTABLE_ALL, escapeChar);
}

const isMap = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const empty = (v) => (Array.isArray(v) ? v.length === 0 : isMap(v) && Object.keys(v).length === 0);

function lines(value, indent) {
  const pad = " ".repeat(indent);
  if (Array.isArray(value)) {
    return value.flatMap((item) => {
      if ((isMap(item) || Array.isArray(item)) && !empty(item)) {
        const inner = lines(item, indent + 2);
        return [pad + "- " + inner[0].slice(indent + 2), ...inner.slice(1)];
      }
      return [pad + "- " + (empty(item) ? (Array.isArray(item) ? "[]" : "{}") : scalar(item))];
    });
  }
  return Object.entries(value).flatMap(([key, v]) => {
    if (v === undefined) return [];
    const head = pad + scalar(key) + ":";
    if ((isMap(v) || Array.isArray(v)) && !empty(v)) {
      // A list under a key sits at the key's indent + 2, as most hand-written specs do.
      return [head, ...lines(v, indent + 2)];
    }
    return [head + " " + (empty(v) ? (Array.isArray(v) ? "[]" : "{}") : scalar(v))];
  });
}

// A key whose value is null is left out: YAML's null reads back as the text "null" (the loader has no
// implicit types), and a spec stored from JSON may hold `"format": null`; left out, it means its default.
const withoutNulls = (v) =>
  Array.isArray(v)
    ? v.map(withoutNulls)
    : isMap(v)
      ? Object.fromEntries(Object.entries(v).filter(([, x]) => x !== null && x !== undefined).map(([k, x]) => [k, withoutNulls(x)]))
      : v;

export function toYaml(value) {
  value = withoutNulls(value);
  if (!isMap(value) && !Array.isArray(value)) return scalar(value) + "\n";
  if (empty(value)) return (Array.isArray(value) ? "[]" : "{}") + "\n";
  return lines(value, 0).join("\n") + "\n";
}

// The offset in `text` of 1-based line and column (the API's error positions).
export function offsetOf(text, line, column) {
  let offset = 0;
  for (let n = 1; n < line; n++) {
    const next = text.indexOf("\n", offset);
    if (next === -1) return text.length;
    offset = next + 1;
  }
  return Math.min(offset + Math.max((column || 1) - 1, 0), text.length);
}

// The 1-based line of an offset.
export const lineAt = (text, offset) => text.slice(0, offset).split("\n").length;
