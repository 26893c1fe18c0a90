"""A spec as the page edits it: YAML text in the document's key order, and every error at its line and key.

The page shows a spec as text and lets a merchant fix it there, so an error must say where in that
text it is, not only which key (`rules[2].then[0].set`). The validation is the PUT's own (decode, the
model, the rules, the references and the server-side checks); this module only adds where each problem
sits: the path is mapped back to the node `yaml.compose` read it from, whose start mark is its line and
column. JSON is composed the same way (a JSON document is YAML flow style).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any

import yaml

from firefeed.errors import SpecError

#: the start of ` (did you mean 'x'?)` in a problem's text, up to the name's closing quote and `?`
#: (firefeed/suggest.py writes it with the name's repr): the text may go on after it (`(expected one of ...)`)
_ESCAPE = r"""\\(?:[\\'"nrt]|x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})"""  # the escapes repr() writes
_SUGGESTION = re.compile(rf""" \(did you mean ('(?:[^'\\\n]|{_ESCAPE})*'|"(?:[^"\\\n]|{_ESCAPE})*")\?""")
#: what firefeed/suggest.py adds after the `?` for a name YAML cut at ` #`
_QUOTE_ADVICE = " In YAML ' #' starts a comment: quote the name, \"{}\""
#: one part of a key path: `name`, `[3]` or `["quoted key"]` (firefeed/spec/paths.py writes them)
_PART = re.compile(r'\.?(?:\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]|([^.\[\]]+))')


def spec_yaml(document: dict[str, Any]) -> str:
    """The stored document as YAML, its keys in the order the document keeps them (SPEC 8.18).

    Every scalar is text (the loader reads YAML with no implicit types), so a value the dumper would
    read back as a number or a boolean is quoted: the text means what the document meant. For the same
    reason a key whose value is null (a JSON spec may say `"format": null`, stored as sent) is left out:
    written as `null` it would read back as the text "null" and the spec would no longer load; left out,
    it means what null meant (the key's default).
    """
    return yaml.safe_dump(
        _without_nulls(document), sort_keys=False, allow_unicode=True, default_flow_style=False, width=4096
    )


def _without_nulls(value: Any) -> Any:
    """`value` with every mapping entry whose value is None left out, at any depth."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def path_parts(path: str) -> list[str | int]:
    """A key path (`rules[2].then[0].set`, `fields["a.b"]`) split back into its keys and indexes."""
    parts: list[str | int] = []
    at = 0
    while at < len(path):
        m = _PART.match(path, at)
        if m is None or m.end() == at:
            break  # not a path this module wrote: the parts so far still locate its start
        index, quoted, bare = m.groups()
        parts.append(int(index) if index is not None else json.loads(quoted) if quoted is not None else bare)
        at = m.end()
    return parts


@dataclass(frozen=True)
class Where:
    line: int | None
    column: int | None


def compose(text: str) -> yaml.Node | None:
    """The document's node tree (None when it cannot be composed: the error itself says why)."""
    try:
        return yaml.compose(text, Loader=yaml.BaseLoader)
    except (yaml.YAMLError, RecursionError):
        return None


#: per mapping node (by id, while its tree lives), its scalar keys -> the first (key node, value node) of each
_Keys = dict[int, dict[str, tuple[yaml.Node, yaml.Node]]]


def _keys_of(node: yaml.MappingNode, seen: _Keys | None) -> dict[str, tuple[yaml.Node, yaml.Node]]:
    """The mapping's keys, read once per `seen`: many problems in one wide mapping (a hostile draft holds
    tens of thousands in 1 MB) would otherwise each read its keys from the start, quadratic in the draft."""
    keys = seen.get(id(node)) if seen is not None else None
    if keys is None:
        keys = {}
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode):
                keys.setdefault(k.value, (k, v))  # a repeated key: the first, as a scan from the start finds
        if seen is not None:
            seen[id(node)] = keys
    return keys


def locate(root: yaml.Node | None, path: str, seen: _Keys | None = None) -> Where:
    """1-based line and column of the node at `path`; of the deepest node that exists when a key is missing
    (a required key points at its mapping). A mapping key names the key itself, where a merchant reads it.

    `seen`: the mappings' keys read so far, kept by the caller across the paths of one `root`."""
    if root is None:
        return Where(None, None)
    node: yaml.Node = root
    mark = node.start_mark
    for part in path_parts(path):
        if isinstance(node, yaml.MappingNode):
            found = _keys_of(node, seen).get(str(part))
            if found is None:
                break
            mark, node = found[0].start_mark, found[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            mark = node.start_mark
        else:
            break
    return Where(mark.line + 1, mark.column + 1)


def error_list(err: SpecError, text: str) -> list[dict[str, Any]]:
    """Every problem of `err`, each with its path, line, column, message and suggestion (or null)."""
    root = compose(text) if any(p.path for p in err.problems) else None
    seen: _Keys = {}
    out = []
    for problem in err.problems:
        message, suggestion = split_suggestion(problem.detail)
        where = locate(root, problem.path, seen) if problem.path else _syntax_mark(text)
        out.append(
            {
                "path": problem.path,
                "line": where.line,
                "column": where.column,
                "message": message,
                "suggestion": suggestion,
            }
        )
    return out


def split_suggestion(detail: str) -> tuple[str, str | None]:
    """A problem's text without its ` (did you mean 'x'?)`, and that suggestion (or None).

    The suggestion ends at its own parenthesis, found from the quoted name (which may hold `)` or `?`), never
    at the text's last one: `unknown op 'eqq' (did you mean 'eq'?) (expected one of ...)` keeps its choices.
    """
    # The last one that reads whole: a name the merchant wrote, echoed before it, may hold such a text too.
    for m in reversed(list(_SUGGESTION.finditer(detail))):
        name = ast.literal_eval(m.group(1))  # a quoted text, as repr() wrote it
        for tail in ("", _QUOTE_ADVICE.format(name)):
            if detail.startswith(tail + ")", m.end()):
                end = m.end() + len(tail) + 1
                return detail[: m.start()] + detail[end:], detail[m.start() + 2 : end - 1]
    return detail, None


def _syntax_mark(text: str) -> Where:
    """Where a document that is not YAML or JSON went wrong (the parser's mark), else nowhere."""
    try:
        for _ in yaml.parse(text, Loader=yaml.BaseLoader):
            pass
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        if mark is not None:
            return Where(mark.line + 1, mark.column + 1)
    except (yaml.YAMLError, RecursionError):
        pass
    return Where(None, None)
