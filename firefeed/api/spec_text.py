"""A spec as the page edits it: YAML text in the document's key order, and every error at its line and key.

The page shows a spec as text and lets a merchant fix it there, so an error must say where in that
text it is, not only which key (`rules[2].then[0].set`). The validation is the PUT's own (decode, the
model, the rules, the references and the server-side checks); this module only adds where each problem
sits: the path is mapped back to the node `yaml.compose` read it from, whose start mark is its line and
column. JSON is composed the same way (a JSON document is YAML flow style).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import yaml

from firefeed.errors import SpecError

#: ` (did you mean 'x'?...)` at the end of a problem's text (firefeed/suggest.py writes it)
_SUGGESTION = re.compile(r" \((did you mean .*\?.*)\)$", re.DOTALL)
#: one part of a key path: `name`, `[3]` or `["quoted key"]` (firefeed/spec/paths.py writes them)
_PART = re.compile(r'\.?(?:\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]|([^.\[\]]+))')


def spec_yaml(document: dict[str, Any]) -> str:
    """The stored document as YAML, its keys in the order the document keeps them (SPEC 8.18).

    Every scalar is text (the loader reads YAML with no implicit types), so a value the dumper would
    read back as a number or a boolean is quoted: the text means what the document meant.
    """
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, default_flow_style=False, width=4096)


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


def locate(root: yaml.Node | None, path: str) -> Where:
    """1-based line and column of the node at `path`; of the deepest node that exists when a key is missing
    (a required key points at its mapping). A mapping key names the key itself, where a merchant reads it."""
    if root is None:
        return Where(None, None)
    node: yaml.Node = root
    mark = node.start_mark
    for part in path_parts(path):
        if isinstance(node, yaml.MappingNode):
            key = str(part)
            found = next(((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key), None)
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
    out = []
    for problem in err.problems:
        message, suggestion = problem.detail, None
        m = _SUGGESTION.search(message)
        if m is not None:
            message, suggestion = message[: m.start()], m.group(1)
        where = locate(root, problem.path) if problem.path else _syntax_mark(text)
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
