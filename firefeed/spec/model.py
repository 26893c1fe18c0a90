"""Typed project spec. Unknown keys and wrong types are errors that name their path."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from firefeed.alerts.spec import AlertSpec
from firefeed.rules.lists import NO_LISTS, ListFields
from firefeed.rules.model import Condition, Rule, parse_condition, parse_rules
from firefeed.rules.template import Template
from firefeed.spec.delivery import DeliveryTarget
from firefeed.spec.headers import header_problem
from firefeed.spec.sync import CHANNEL_OF, SyncSpec

SOURCE_FORMATS = ("csv", "tsv", "json", "jsonl", "xml")
EXPORT_FORMATS = ("csv", "tsv", "json", "jsonl", "google-xml")
_EXT_FORMATS = {
    ".csv": "csv",
    ".txt": "csv",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".json": "json",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".xml": "xml",
    ".rss": "xml",
    ".atom": "xml",
}
# Headers the HTTP client sets from the request itself (framing, routing, the connection): a spec that
# sets one could smuggle a second request or reach another virtual host than its URL names.
_RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
    }
)
_BOOL_TRUE = {"true", "yes", "on", "1"}
_BOOL_FALSE = {"false", "no", "off", "0"}


def parse_bool(value: Any) -> Any:
    """The usual spellings of a boolean (YAML scalars arrive as text)."""
    if isinstance(value, str):
        low = value.strip().lower()
        if low in _BOOL_TRUE:
            return True
        if low in _BOOL_FALSE:
            return False
    return value


def parse_percent(value: Any) -> float:
    """A share written as a percentage, `50%` or `50` (YAML scalars arrive as text), between 0 and 100."""
    text = str(value).strip()
    number = text.removesuffix("%").strip()
    try:
        parsed = float(number)
    except ValueError:
        raise ValueError(f"must be a percentage between 0% and 100% such as 50%, got {text!r}") from None
    if not 0 <= parsed <= 100:
        raise ValueError(f"must be a percentage between 0% and 100% such as 50%, got {text!r}")
    return parsed


def format_from_name(url: str) -> str | None:
    """The format a file name implies (`shoes.csv.gz` -> csv), or None."""
    name = url.split("?", 1)[0].split("#", 1)[0].rstrip("/").rsplit("/", 1)[-1].lower()
    for suffix in (".gz", ".gzip", ".zip"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    dot = name.rfind(".")
    return _EXT_FORMATS.get(name[dot:]) if dot != -1 else None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False)


class FeedSpec(_Strict):
    """What any fetched and parsed file takes: a source, or a lookup table (SPEC 9)."""

    name: str = Field(min_length=1, max_length=200)
    url: str = Field(min_length=1)
    format: Literal["csv", "tsv", "json", "jsonl", "xml"] | None = None
    encoding: str = "auto"
    delimiter: str = "auto"
    item_path: str = "auto"
    compression: Literal["auto", "none", "gzip", "zip"] = "auto"
    headers: dict[str, str] = Field(default_factory=dict)
    # SPEC 10 C6: an sftp://, ftp:// or ftps:// file's credentials, each a `${secret:NAME}`, and an SFTP
    # server's pinned key (a known_hosts line); firefeed/spec/remote.py says where each may appear.
    password: str | None = None
    private_key: str | None = None
    host_key: str | None = None

    @model_validator(mode="after")
    def _remote(self) -> FeedSpec:
        from firefeed.spec.remote import remote_problem

        problem = remote_problem(
            url=self.url,
            headers=self.headers,
            password=self.password,
            private_key=self.private_key,
            host_key=self.host_key,
        )
        if problem is not None:
            raise ValueError(f"{type(self).__name__.removesuffix('Spec').lower()} {self.name!r}: {problem}")
        return self

    @field_validator("delimiter")
    @classmethod
    def _delimiter(cls, v: str) -> str:
        v = {"tab": "\t", "\\t": "\t"}.get(v, v)
        if v not in ("auto", ",", ";", "|", "\t"):
            raise ValueError("must be one of auto, ',', ';', '|', tab")
        return v

    @field_validator("headers")
    @classmethod
    def _headers(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            problem = header_problem(name, value)
            if problem is not None:
                raise ValueError(problem)
            if name.strip().lower() in _RESERVED_HEADERS:
                raise ValueError(
                    f"{name!r} can't be set: Host, Content-Length, Transfer-Encoding, Connection and the other "
                    "hop-by-hop headers (Keep-Alive, Proxy-Authenticate, Proxy-Authorization, TE, Trailer, "
                    "Upgrade) come from the request itself"
                )
        return v

    @field_validator("encoding")
    @classmethod
    def _encoding(cls, v: str) -> str:
        import codecs

        if v != "auto":
            try:
                codecs.lookup(v)
            except LookupError:
                raise ValueError(f"unknown encoding {v!r}") from None
        return v

    @property
    def resolved_format(self) -> str:
        fmt = self.format or format_from_name(self.url)
        assert fmt is not None  # checked by ProjectSpec
        return fmt


def _separator(separator: str) -> str:
    if separator == "":
        raise ValueError("a list's separator must be a non-empty text")
    return separator


#: a list field's separator, checked per key so that an error names the field (`sources[0].lists.tags`)
ListSeparator = Annotated[str, AfterValidator(_separator)]


class SourceSpec(FeedSpec):
    mode: Literal["enrich", "append"] = "enrich"
    fields: list[str] | None = None
    # SPEC 9 (P15): a template over this source's own fields that fills the key field before MERGE.
    key_from: str | None = None
    # SPEC 9: list fields of this source, field -> separator (csv/tsv split on it; json/xml ignore it)
    lists: dict[str, ListSeparator] | None = None
    # #49: the shape of a platform's product export, turned into one item per product or variant
    # before the source's own fields are read (docs/presets.md).
    preset: Literal["shopify", "woocommerce"] | None = None

    @field_validator("lists")
    @classmethod
    def _lists(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        if "" in (v or {}):
            raise ValueError("a list field needs a name")  # no name to point at: the error is the mapping's
        return v

    @model_validator(mode="before")
    @classmethod
    def _preset_lists(cls, data: Any) -> Any:
        """A preset declares the list fields it makes (#49), so every later step knows them as lists."""
        from firefeed.pipeline.parse.presets import PRESET_LISTS, PRESETS

        if not isinstance(data, dict) or data.get("preset") not in PRESETS:
            return data
        lists = data.get("lists")
        if lists is not None and not isinstance(lists, dict):
            return data  # the field's own validation says what is wrong
        # The same declaration again is fine: a spec read back from its own dump holds it.
        taken = sorted(str(n) for n, sep in (lists or {}).items() if n in PRESET_LISTS and sep != PRESET_LISTS[n])
        if taken:
            raise ValueError(
                f"source {data.get('name')!r}: {taken[0]!r} is a list the preset makes itself: leave it out of lists"
            )
        return {**data, "lists": {**(lists or {}), **PRESET_LISTS}}

    @model_validator(mode="after")
    def _preset(self) -> SourceSpec:
        """A preset reads one platform's export format: anything else is a spec error naming the source."""
        if self.preset is None:
            return self
        fmt = self.format or format_from_name(self.url)
        fits = ("csv",) if self.preset == "shopify" else ("csv", "xml")
        if fmt is not None and fmt not in fits:
            what = "a Shopify product export (csv)" if self.preset == "shopify" else "a WooCommerce export (xml or csv)"
            raise ValueError(f"source {self.name!r}: preset {self.preset} reads {what}, not {fmt}")
        if fmt is None:
            raise ValueError(
                f"source {self.name!r}: preset {self.preset} needs the file's format: set format "
                f"({' or '.join(fits)}), the name {self.url!r} does not tell"
            )
        return self

    @property
    def list_fields(self) -> frozenset[str]:
        return frozenset(self.lists or ())

    @property
    def key_template(self) -> Template | None:
        """The parsed `key_from` (checked by ProjectSpec), or None."""
        from firefeed.rules.template import parse_template

        return parse_template(self.key_from, "key_from") if self.key_from is not None else None


#: rows a lookup may hold in the spec itself (`rows:`); a larger table belongs in a file (`url:`)
MAX_INLINE_LOOKUP_ROWS = 10_000
#: what a lookup with `rows:` may set besides them: the file's options have no file to apply to
_INLINE_LOOKUP_KEYS = frozenset({"name", "key", "rows"})


class LookupSpec(FeedSpec):
    """A lookup table (SPEC 9, P21): fetched and parsed like a source, never merged into the items.

    Or its rows written in the spec (`rows:`, #53): a list of mappings, each a row of column -> text, in
    the key order written. Exactly one of `url` and `rows`. The page adds rows this way (the category
    mapping workflow): each addition is a new spec version, so the table's history is the spec's.
    """

    url: str | None = Field(default=None, min_length=1)  # type: ignore[assignment]
    key: str = Field(min_length=1)
    rows: list[dict[str, str]] | None = None

    @model_validator(mode="after")
    def _remote(self) -> LookupSpec:
        """FeedSpec's check of a remote URL's credentials, for a lookup read from a URL; one with `rows:`
        takes no file option."""
        from firefeed.spec.remote import remote_problem

        if (self.url is None) == (self.rows is None):
            raise ValueError(f"lookup {self.name!r}: needs exactly one of `url` (a file) and `rows` (its rows here)")
        if self.rows is not None:
            extra = sorted(self.model_fields_set - _INLINE_LOOKUP_KEYS)
            if extra:
                raise ValueError(
                    f"lookup {self.name!r}: `{extra[0]}` is a file's option; a lookup with `rows` has none"
                )
            if len(self.rows) > MAX_INLINE_LOOKUP_ROWS:
                raise ValueError(
                    f"lookup {self.name!r}: {len(self.rows)} rows; at most {MAX_INLINE_LOOKUP_ROWS} may be written in "
                    "the spec (put a larger table in a file: `url`)"
                )
            return self
        assert self.url is not None
        problem = remote_problem(
            url=self.url,
            headers=self.headers,
            password=self.password,
            private_key=self.private_key,
            host_key=self.host_key,
        )
        if problem is not None:
            raise ValueError(f"lookup {self.name!r}: {problem}")
        return self

    @property
    def inline(self) -> bool:
        """Whether the rows are in the spec (`rows:`) rather than in a file."""
        return self.rows is not None


class FieldLiteral(_Strict):
    """SPEC 10 C1: an export column that writes `value` on every item, as those characters.

    A mapping, not a text, so it can never be read as a field name or a template: `{value: "{price}"}`
    writes `{price}`.
    """

    value: str


def _field_value(v: Any) -> Any:
    """An export's `fields` value: a text (field name or template) or `{value: TEXT}` (C1), else why not."""
    if not isinstance(v, dict):
        return v
    other = [str(k) for k in v if k != "value"]
    if other:
        raise ValueError(f"a mapping here is a fixed text {{value: TEXT}}; {other[0]!r} is not a key it takes")
    if "value" not in v:
        raise ValueError("a mapping here is a fixed text {value: TEXT}; it needs `value`")
    if not isinstance(v["value"], str):
        raise ValueError("`value` of a fixed text must be a text")
    return FieldLiteral(value=v["value"])


#: what an export's `fields` maps an output name to: a field name, a template, or a literal (C1)
FieldValue = Annotated[str | FieldLiteral, BeforeValidator(_field_value)]


class FeedAuth(_Strict):
    """HTTP basic auth on an export's feed URL (SPEC 10 C4), as Merchant Center's scheduled fetch sends it.

    The password must be a `${secret:NAME}` reference: a literal would sit in the spec for anyone who
    reads it, and the API resolves the company's secret when it checks a fetch (firefeed/feeds).
    """

    username: str = Field(min_length=1, max_length=200)
    password: str = Field(pattern=r"^\$\{secret:[A-Za-z_][A-Za-z0-9_]{0,63}\}$")

    @property
    def secret_name(self) -> str:
        return self.password[len("${secret:") : -1]


class ExportSpec(_Strict):
    name: str = Field(min_length=1, max_length=200)
    format: Literal["csv", "tsv", "json", "jsonl", "google-xml"]
    path: str = Field(min_length=1)
    fields: dict[str, FieldValue] | None = None
    where: Any = None
    gzip: bool = False
    # csv/tsv: what joins a list's elements in a cell (SPEC 9)
    list_separator: str = ","
    # google-xml: the <channel>'s <link> (SPEC 8.19); unset, the first item's link.
    channel_link: str | None = None
    # google-xml: the <channel>'s <description> (P32); unset, the same text as <title>.
    channel_description: str | None = None
    # Feed quality (#9): the channel whose rules the export is checked against (google-xml: google),
    # which findings keep the previous file published, and the largest share of items a run may drop.
    channel: Literal["google", "meta", "none"] | None = None
    fail_on: Literal["error", "warning", "none"] = "none"
    max_drop: float = 50.0
    # SPEC 10 C3: the largest share of items with an error finding the export may publish (fail_on: error
    # makes it 0%), and whether those items are written (the channel disapproves them) or left out.
    max_invalid: float = 5.0
    invalid_items: Literal["write", "exclude"] = "write"
    # SPEC 9 (P29): channel rules, run after the project's rules on this export's copy of the items
    rules: list[Any] | None = None
    # SPEC 10 C4: basic auth on the export's feed URL
    feed_auth: FeedAuth | None = None
    # SPEC 10 C7: where the published file is handed after each run that publishes it (firefeed/deliveries)
    deliver: list[DeliveryTarget] = Field(default_factory=list)
    # SPEC 10 C9: the channel API the export's items are pushed to after each publish (firefeed/sync)
    sync: SyncSpec | None = None

    _where: Condition | None = PrivateAttr(default=None)
    _rules: list[Rule] = PrivateAttr(default_factory=list)
    _lists: ListFields = PrivateAttr(default=NO_LISTS)

    @field_validator("gzip", mode="before")
    @classmethod
    def _gzip(cls, v: Any) -> Any:
        return parse_bool(v)

    @field_validator("max_drop", "max_invalid", mode="before")
    @classmethod
    def _max_drop(cls, v: Any) -> float:
        return parse_percent(v)

    @property
    def invalid_limit(self) -> float:
        """The max_invalid that applies (C3): `fail_on: error` (or warning) allows no invalid item."""
        return 0.0 if self.fail_on in ("error", "warning") else self.max_invalid

    @property
    def resolved_channel(self) -> str | None:
        """The channel the export is checked against: its `channel`, else google for google-xml, else none."""
        channel = self.channel or ("google" if self.format == "google-xml" else "none")
        return None if channel == "none" else channel

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        text = v.replace("\\", "/")
        p = PurePosixPath(text)
        if p.is_absolute() or ".." in p.parts or v.startswith("~") or re.match(r"^[A-Za-z]:", v) or "\x00" in v:
            raise ValueError("must be a relative path inside the project's export folder (no '..', no absolute path)")
        # `.`, `sub/`, `sub/.` name a folder: the run would fail on it, or write a file named `sub`.
        if not text.strip():
            raise ValueError("is blank: name a file in the project's export folder (e.g. 'feed.csv')")
        from firefeed.export.paths import path_length_problem

        too_long = path_length_problem(text)
        if too_long is not None:
            raise ValueError(too_long)
        if text.rsplit("/", 1)[-1] in ("", "."):
            raise ValueError(f"{v!r} names a folder, not a file: end it with the file's name (e.g. 'feed.csv')")
        from firefeed.storage.leftovers import leftover_run

        if leftover_run(p.name) is not None:
            raise ValueError(f"{p.name!r} has the shape of FireFeed's temporary files, which the janitor removes")
        from firefeed.storage.spares import is_spare

        if is_spare(p.name):
            raise ValueError(
                f"{p.name!r} has the shape of the copy FireFeed keeps beside a large export ('.<name>.spare'),"
                " which the export's next file is written over"
            )
        return v

    @property
    def where_condition(self) -> Condition | None:
        return self._where

    @property
    def parsed_rules(self) -> list[Rule]:
        """The export's own rules (P29: numbered and named within the export)."""
        return self._rules

    @property
    def list_fields(self) -> ListFields:
        """The list fields of the export's items: the project's, and those its own rules make lists."""
        return self._lists


def _check_no_export_path_is_a_folder_of_another(exports: list[ExportSpec]) -> None:
    """`feeds` and `feeds/google.xml` cannot both be files: the run would fail on the second one it writes."""
    from firefeed.errors import SpecError
    from firefeed.export.paths import written_path

    # What is written (with `.gz` for gzip); each path passed its own check, so none raises here.
    published = {PurePosixPath(written_path(e.path, gzip=e.gzip)): i for i, e in enumerate(exports)}
    for path, i in published.items():
        for folder in path.parents:
            if folder in published:
                j = published[folder]
                raise SpecError(
                    f"exports[{j}].path",
                    f"{exports[j].path!r} is the folder of exports[{i}].path {exports[i].path!r}: "
                    "a path must name a file",
                )


def _names_and_formats(kind: str, feeds: Sequence[FeedSpec]) -> None:
    """SpecError for a repeated name or a format the file name does not tell, of sources or lookups."""
    from firefeed.errors import SpecError

    seen: set[str] = set()
    for i, feed in enumerate(feeds):
        if feed.name in seen:
            raise SpecError(f"{kind}s[{i}].name", f"repeats the {kind} name {feed.name!r}")
        seen.add(feed.name)
        if getattr(feed, "inline", False):
            continue  # rows written in the spec: no file, no format
        if feed.format is None and format_from_name(feed.url) is None:
            raise SpecError(
                f"{kind}s[{i}].format",
                "cannot tell the format from the file name; set one of " + ", ".join(SOURCE_FORMATS),
            )


class ProjectSpec(_Strict):
    company: str = Field(pattern=r"^[a-z0-9][a-z0-9_]{0,39}$")
    project: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
    name: str | None = None
    key: str = Field(default="id", min_length=1)
    # SPEC 9 (P18): the field whose trimmed text groups variants (aggregate, group_first)
    group: str | None = Field(default=None, min_length=1)
    schedule: str | None = None
    sources: list[SourceSpec] = Field(min_length=1)
    rules: list[Any] = Field(default_factory=list)
    exports: list[ExportSpec] = Field(default_factory=list)
    lookups: list[LookupSpec] = Field(default_factory=list)
    # SPEC 10 C8: where a failed, blocked or recovered run is told (firefeed/alerts/spec.py)
    alerts: list[AlertSpec] = Field(default_factory=list)

    _rules: list[Rule] = PrivateAttr(default_factory=list)
    _lists: ListFields = PrivateAttr(default=NO_LISTS)

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, v: str | None) -> str | None:
        if v is None or v.strip() == "":
            return None
        from firefeed.spec.cron import parse_cron

        parse_cron(v)
        return v

    @model_validator(mode="after")
    def _cross_checks(self) -> ProjectSpec:
        from firefeed.errors import SpecError
        from firefeed.spec.limits import check_entry_counts, check_export_fields, check_written_fields

        check_entry_counts(self.sources, self.lookups, self.exports)
        # Each part is checked though another failed: every mistake of the document is said at once.
        problems: list[SpecError] = []

        def sources() -> None:
            _names_and_formats("source", self.sources)
            for i, s in enumerate(self.sources):
                if i == 0 and "mode" in s.model_fields_set:
                    raise SpecError(
                        "sources[0].mode", "the first source is the primary: it defines the items and takes no mode"
                    )
                if s.key_from is not None:
                    from firefeed.rules.template import parse_template
                    from firefeed.rules.value_growth import check_template_growth

                    key_path = f"sources[{i}].key_from"
                    check_template_growth(parse_template(s.key_from, key_path), {}, path=key_path)
                if i == 0 and s.fields is not None:
                    raise SpecError(
                        "sources[0].fields", "the primary source takes every field; `fields` is for later sources"
                    )

        def lookups() -> None:
            _names_and_formats("lookup", self.lookups)

        def exports() -> None:
            names: set[str] = set()
            paths: set[str] = set()
            for i, e in enumerate(self.exports):
                if e.name in names:
                    raise SpecError(f"exports[{i}].name", f"repeats the export name {e.name!r}")
                names.add(e.name)
                norm = str(PurePosixPath(e.path.replace("\\", "/")))
                if norm in paths:
                    raise SpecError(f"exports[{i}].path", f"repeats the export path {e.path!r}")
                paths.add(norm)
                if e.where is not None:
                    e._where = parse_condition(e.where, f"exports[{i}].where", group=self.group)
                if e.sync is not None and e.resolved_channel != CHANNEL_OF[e.sync.to]:
                    want = CHANNEL_OF[e.sync.to]
                    raise SpecError(
                        f"exports[{i}].sync.to",
                        f"{e.sync.to} takes the columns of the {want} channel: set channel: {want} on the export "
                        f"(its items are checked and mapped by the {want} rules)",
                    )
                if e.fail_on != "none" and e.resolved_channel is None:
                    raise SpecError(
                        f"exports[{i}].fail_on", "needs a channel whose rules it can check: set channel: google or meta"
                    )
                if e.fields is not None:
                    from firefeed.rules.template import parse_template
                    from firefeed.spec.paths import join_key

                    if not e.fields:
                        raise SpecError(f"exports[{i}].fields", "must list at least one field")
                    check_export_fields(f"exports[{i}]", e.fields)
                    for out, value in e.fields.items():
                        if isinstance(value, str) and ("{" in value or "}" in value):
                            parse_template(value, join_key(f"exports[{i}].fields", out))
                    parents = {out.split(".", 1)[0] for out in e.fields if "." in out}
                    for out in e.fields:
                        if out in parents:
                            raise SpecError(
                                join_key(f"exports[{i}].fields", out),
                                f"{out!r} is both a column and the parent of sub-attributes ({out}.…); rename one",
                            )
            _check_no_export_path_is_a_folder_of_another(self.exports)

        for check in (sources, lookups, exports):
            try:
                check()
            except SpecError as err:
                problems.append(err)
        declared: set[str] = set()
        for i, s in enumerate(self.sources):
            if self.key in s.list_fields:
                raise SpecError(f"sources[{i}].lists.{self.key}", "the key field cannot be a list")
            declared |= s.list_fields
        common: dict[str, Any] = {
            "key_field": self.key,
            "declared_lists": frozenset(declared),
            "lookups": self.lookup_tables,
            "group": self.group,
        }
        from firefeed.rules.limits import check_rule_counts

        # Before any rule is parsed: the counts bound the work of every check below.
        check_rule_counts(
            [("rules", self.rules), *((f"exports[{i}].rules", e.rules) for i, e in enumerate(self.exports))]
        )
        try:
            self._rules = parse_rules(self.rules, path="rules", **common)
        except SpecError as err:
            problems.append(err)
        if problems:
            raise SpecError.of(problems)
        written = check_written_fields(self._rules)
        self._lists = self._rules[0].lists if self._rules else ListFields(frozenset(declared), frozenset(declared))
        for i, e in enumerate(self.exports):
            # Channel rules start from the items the project's rules leave, lists included (P29).
            if e.rules is not None:
                e._rules = parse_rules(
                    e.rules, path=f"exports[{i}].rules", inherited_lists=self._lists.fields, **common
                )
                check_written_fields(e._rules, path=f"exports[{i}].rules", start=written)
            e._lists = e._rules[0].lists if e._rules else self._lists
        from firefeed.rules.limits import check_sql_size, spec_fields
        from firefeed.rules.template import parse_template
        from firefeed.rules.value_growth import check_template_growth, check_value_growth
        from firefeed.spec.paths import join_key

        check_sql_size(self._rules, spec_fields(self._rules, self.key))  # again at RULES, with the feed's columns
        grown = check_value_growth(self._rules)
        for i, e in enumerate(self.exports):
            final = check_value_growth(e._rules, path=f"exports[{i}].rules", start=grown) if e.rules else grown
            for out, value in (e.fields or {}).items():
                if isinstance(value, str) and "{" in value:
                    path = join_key(f"exports[{i}].fields", out)
                    check_template_growth(parse_template(value, path), final.bounds, path=path)
        return self

    @property
    def parsed_rules(self) -> list[Rule]:
        return self._rules

    @property
    def list_fields(self) -> ListFields:
        """The project's list fields (SPEC 9): declared by a source or made lists by a rule."""
        return self._lists

    @property
    def lookup_tables(self) -> dict[str, str]:
        """Each lookup's name -> the company-schema table its rows are staged in for the rules' joins."""
        from firefeed.schema.identifiers import lookup_table

        return {lk.name: lookup_table(self.project, lk.name) for lk in self.lookups}

    @property
    def primary(self) -> SourceSpec:
        return self.sources[0]
