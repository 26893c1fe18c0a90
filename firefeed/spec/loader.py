"""Read a spec from YAML or JSON and validate it, turning every problem into a SpecError with a path.

YAML is read with every scalar as text (no YAML 1.1 booleans, octals or floats:
`yes`, `010`, `1.10` stay as written); JSON numbers keep the text they were
written with. Typed settings parse their text afterwards.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from firefeed.config import get_settings
from firefeed.errors import SpecError
from firefeed.spec.model import EXPORT_FORMATS, SOURCE_FORMATS, ProjectSpec
from firefeed.spec.paths import render_path
from firefeed.spec.sync import CHANNEL_OF
from firefeed.suggest import did_you_mean

# A real spec nests about ten levels (rules, conditions, actions) and holds a few thousand values.
# The caps stop a hostile one: YAML aliases share one node many times (`b: [*a, *a, ...]`, the
# "billion laughs"), and a copy of it would take memory and time exponential in its few bytes.
MAX_DEPTH = 64
MAX_VALUES = 200_000


# Where a value sits, as a linked list (parent, key) built in O(1) per node and rendered only for an error.
_Where = tuple[Any, str | int] | None


def _where_path(where: _Where) -> str:
    parts: list[str | int] = []
    while where is not None:
        where, part = where
        parts.append(part)
    return render_path(reversed(parts))


_TOO_DEEP = f"the spec nests deeper than {MAX_DEPTH} levels"
_NUL_MESSAGE = "holds a NUL character (\\0, U+0000), which a spec may not contain"


def _textify(value: Any, depth: int = 0, count: list[int] | None = None, where: _Where = None) -> Any:
    """A plain copy of the decoded document with booleans as text, refused past MAX_DEPTH or MAX_VALUES.

    A NUL character in a key or a value is refused here, naming its path (SPEC 8.24): Postgres
    cannot store one in text (a JSONB spec column crashed on it), and it has no meaning in a spec.
    """
    count = [0] if count is None else count
    count[0] += 1
    if count[0] > MAX_VALUES:
        raise SpecError("", f"the spec holds more than {MAX_VALUES} values (once YAML aliases are expanded)")
    if depth > MAX_DEPTH:
        raise SpecError(_where_path(where), _TOO_DEEP)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        if "\x00" in value:
            raise SpecError(_where_path(where), _NUL_MESSAGE)
        return value
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            key = str(k)
            if "\x00" in key:
                raise SpecError(_where_path((where, key)), "the key " + _NUL_MESSAGE)
            out[key] = _textify(v, depth + 1, count, (where, key))
        return out
    if isinstance(value, list):
        return [_textify(v, depth + 1, count, (where, i)) for i, v in enumerate(value)]
    return value


SYNC_TARGETS = tuple(CHANNEL_OF)


def _untagged(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """`loc` without a tagged union's tag (an export's `sync`, told apart by `to`): the spec has no such key."""
    return tuple(p for i, p in enumerate(loc) if not (i and loc[i - 1] == "sync" and p in SYNC_TARGETS))


def _path(loc: tuple[Any, ...]) -> str:
    return render_path(part if isinstance(part, int) else str(part) for part in _untagged(loc))


def _message(err: dict[str, Any]) -> str:
    kind = err["type"]
    loc = err["loc"]
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "is required"
    if kind == "union_tag_invalid":
        return "`to` must be one of " + ", ".join(SYNC_TARGETS)
    if kind == "union_tag_not_found":
        return "needs `to`: one of " + ", ".join(SYNC_TARGETS)
    if kind == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        if loc and loc[-1] == "format":
            choices = EXPORT_FORMATS if "exports" in loc else SOURCE_FORMATS
            return "must be one of " + ", ".join(choices)
        return "must be one of " + expected.replace("'", "")
    if kind == "string_pattern_mismatch":
        return f"{err['input']!r} must match {err['ctx']['pattern']}"
    if kind in ("string_type", "str_type"):
        return "must be text"
    if kind in ("list_type",):
        return "must be a list"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "must be a mapping"
    if kind == "bool_parsing" or kind == "bool_type":
        return "must be true or false"
    if kind == "too_short":
        return "must not be empty"
    msg = str(err.get("msg", "is invalid"))
    return msg.removeprefix("Value error, ")


def parse_spec(data: Any) -> ProjectSpec:
    """Validate an already-decoded spec document (a mapping)."""
    if not isinstance(data, dict):
        raise SpecError("", "a spec must be a mapping with company, project, sources, rules and exports")
    plain = _textify(data)
    try:
        return ProjectSpec.model_validate(plain)
    except ValidationError as err:
        # Every mistake of the document at once, each at its key, with the closest name a misspelling meant.
        problems = [SpecError(_path(tuple(e["loc"])), _message(dict(e)) + _hint(dict(e))) for e in err.errors()]
        raise SpecError.of(problems + _rule_problems(plain)) from None


def _rule_problems(plain: dict[str, Any]) -> list[SpecError]:
    """The project rules' own mistakes, found although the rest of the document failed its checks.

    The model checks the rules only once every other key is valid; checked here too, a spec with a
    misspelled key and a misspelled op says both at once.
    """
    from firefeed.rules.model import parse_rules

    lookups = plain.get("lookups")
    names = (
        [lk["name"] for lk in lookups if isinstance(lk, dict) and isinstance(lk.get("name"), str)]
        if isinstance(lookups, list)
        else []
    )
    key, group = plain.get("key", "id"), plain.get("group")
    try:
        parse_rules(
            plain.get("rules"),
            key_field=key if isinstance(key, str) else "id",
            lookups=dict.fromkeys(names, ""),
            group=group if isinstance(group, str) else None,
        )
    except SpecError as err:
        return err.problems
    except Exception:  # the document is already refused; this only adds what it can read
        return []
    return []


def _hint(err: dict[str, Any]) -> str:
    """` (did you mean 'x'?)` for an unknown key or a value that is not one of the choices."""
    loc = tuple(err["loc"])
    if err["type"] == "extra_forbidden" and loc:
        return did_you_mean(str(loc[-1]), _keys_at(loc[:-1]))
    if err["type"] == "literal_error" and isinstance(err.get("input"), str):
        choices = EXPORT_FORMATS if loc and loc[-1] == "format" and "exports" in loc else None
        if choices is None and loc and loc[-1] == "format":
            choices = SOURCE_FORMATS
        expected = str(err.get("ctx", {}).get("expected", ""))
        pool = choices or [c.strip().strip("'") for c in expected.replace(" or ", ",").split(",") if c.strip()]
        return did_you_mean(err["input"], pool)
    return ""


def _keys_at(loc: tuple[Any, ...]) -> list[str]:
    """The keys the spec model allows at `loc` (walking list items and nested models), for a suggestion."""
    model: Any = ProjectSpec
    if len(loc) >= 2 and loc[-2] == "sync" and loc[-1] in SYNC_TARGETS:
        from firefeed.spec.sync import GoogleMerchantSync, MetaCatalogSync

        return list((GoogleMerchantSync if loc[-1] == "google-merchant" else MetaCatalogSync).model_fields)
    for part in loc:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        model = _model_in(field.annotation)
        if model is None:
            return []
    return list(getattr(model, "model_fields", {}))


def _model_in(annotation: Any) -> Any:
    """The pydantic model an annotation holds (`list[X]`, `X | None`, `X`), or None."""
    if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def check_spec_size(size: int) -> None:
    """SpecError when a spec of `size` bytes is larger than FIREFEED_SPEC_MAX_BYTES.

    The one cap of every entry point (a PUT body, a processes row, a spec file), checked before the
    document is decoded, in the same words everywhere: the processes worker took a 10 MB spec the API
    refused, and every apply of one stores it again as a spec version.
    """
    cap = get_settings().spec_max_bytes
    if size > cap:
        raise SpecError("", f"the spec is larger than {cap} bytes (FIREFEED_SPEC_MAX_BYTES)")


def load_spec(text: str, *, filename: str = "<spec>", read_only: frozenset[str] = frozenset()) -> ProjectSpec:
    """Decode YAML or JSON text (JSON is tried first when it starts like JSON) and validate it.

    `read_only`: top-level keys an answer of the API adds to a spec (`feed_urls`), dropped so what a GET
    returned can be PUT back."""
    check_spec_size(len(text.encode("utf-8", "surrogatepass")))
    stripped = text.lstrip()
    try:
        if stripped.startswith("{"):
            data = json.loads(text, parse_int=str, parse_float=str)
        else:
            data = yaml.load(text, Loader=yaml.BaseLoader)
    except (yaml.YAMLError, json.JSONDecodeError) as err:
        # No key to name: `path` is the whole document (""); the file or request is named in the message.
        raise SpecError("", f"{filename}: not valid YAML or JSON: {err}") from None
    except RecursionError:
        # Both decoders recurse per nesting level; a few thousand brackets exhaust the stack.
        raise SpecError(_too_deep_at(text), _TOO_DEEP) from None
    if read_only and isinstance(data, dict):
        data = {k: v for k, v in data.items() if k not in read_only}
    return parse_spec(data)


def _too_deep_at(text: str) -> str:
    """The key path where `text` first nests deeper than MAX_DEPTH, "" if it cannot tell.

    Found with the YAML parser's events (JSON is read as YAML flow style), which
    keep their own stack instead of recursing like the decoders, so the path
    is that of `_textify`'s check for a document the decoders could read.
    """
    frames: list[list[Any]] = []  # per open collection: [is_mapping, next key or None, index, its path parts]
    try:
        for event in yaml.parse(text, Loader=yaml.BaseLoader):
            if isinstance(event, yaml.CollectionEndEvent):
                frames.pop()
                if frames and frames[-1][0]:
                    frames[-1][1] = None  # the value of the mapping's key is done
                continue
            if not isinstance(event, yaml.NodeEvent):
                continue
            parent = frames[-1] if frames else None
            if parent is not None and parent[0] and parent[1] is None:
                if not isinstance(event, yaml.ScalarEvent):
                    return ""  # a mapping or alias as a key: no path to write
                parent[1] = event.value
                continue
            parts: list[str | int] = []
            if parent is not None:
                if parent[0]:
                    parts = [*parent[3], parent[1]]
                else:
                    parent[2] += 1
                    parts = [*parent[3], parent[2]]
            if len(frames) > MAX_DEPTH:
                return render_path(parts)
            if isinstance(event, yaml.CollectionStartEvent):
                frames.append([isinstance(event, yaml.MappingStartEvent), None, -1, parts])
            elif parent is not None and parent[0]:
                parent[1] = None
    except yaml.YAMLError:
        return ""
    return ""


def load_spec_file(path: Path) -> ProjectSpec:
    """Load a spec file; relative source paths in it are later resolved against its folder."""
    try:
        check_spec_size(path.stat().st_size)
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise SpecError(str(path), f"cannot read the spec: {err.strerror}") from None
    return load_spec(text, filename=str(path))
