"""The regular-expression subset shared by Python `re` and Postgres ARE, and its translation.

A pattern is checked once, at spec time, and rewritten into two equivalent
strings: one for Python (the reference evaluator), one for Postgres (`~`,
`regexp_replace`). Accepted:

- literal characters, `.` (matches any character, newline included), `^`, `$`
  (start and very end of the value), `\\A`, `\\Z`
- classes `[...]`, `[^...]` with ranges; `\\d` (ASCII digits), `\\s` (Unicode
  white space, as str.isspace), `\\w`; `\\D`, `\\S`, `\\W` outside classes
- groups `(...)`, `(?:...)`, alternation `|`
- greedy quantifiers `*`, `+`, `?`, `{n}`, `{n,}`, `{n,m}` (n <= m <= 255)
- escapes `\\n \\t \\r \\f \\v` and a backslash before any punctuation

Rejected with a spec error, because the two engines read them differently or
one lacks them: lazy and possessive quantifiers, look-around, named groups,
inline flags, back-references, `\\b` (a backspace in Postgres), `\\x`, `\\u`,
POSIX `[[:alpha:]]` classes, `{,m}`, a lone `{` or `}`.

`\\d` and `\\s` are spelled out as explicit classes for both engines, because
Python's are Unicode-wide and Postgres' are not (or differ on U+00A0, U+001C..).
Known remaining differences, documented rather than hidden:

- `\\w`: each engine's own word characters. They agree on letters, ASCII digits
  and `_` of the common scripts; they differ on about 2,300 code points
  (superscript digits such as ², fractions such as ¼, combining marks, non-ASCII
  digits).
- Which text a match covers (only `regex_replace` sees it): Python takes the
  first alternative that matches, Postgres the longest match (`a|ab` on "ab":
  Python replaces "a", Postgres "ab"); with the same start, greedy repeats and
  optional parts can also end at different places (`x*(xy)?` on "xxy").
  Patterns whose matches are unambiguous (most real ones: `[0-9]+`, `\\s+`,
  `(\\w+)-(\\w+)`) behave the same. The SQL route is what production runs.

Case-insensitive `matches` lowercases both sides (SPEC 8.9): the value with
lower(), the pattern's literal characters with the same simple mapping (a
range keeps its own characters and gains the range of its lowercased ends).

`ignore_case: true` (`matches` and `regex_replace`) is Postgres' own case-insensitive
matching (`~*`, regexp_replace's `i` flag), which the SQL route runs on the pattern
as written. Its reading on a C.UTF-8 ctype is not Python's re.IGNORECASE: a
character, alone or in a class, stands for its glibc lowercase and uppercase only
(towlower/towupper, the simple mapping): `ǅ` matches `ǆ` and `Ǆ` but not itself,
`ſ` matches `S`, `s` does not match `ſ`. A range keeps its characters and gains
the cases of each. The Python spelling writes exactly those sets out as classes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from firefeed.rules._scalars import digits_value
from firefeed.rules._text import simple_lower, simple_upper
from firefeed.textutil import WHITESPACE

#: the inside of a `{n}`, `{n,}` or `{n,m}` repeat, after its `{`
_REPEAT = re.compile(r"([0-9]+)(,([0-9]*))?\}")

MAX_REPEAT = 255  # Postgres' RE_DUP_MAX


class RegexError(ValueError):
    """A pattern outside the supported subset (the message says why)."""


@dataclass(frozen=True)
class Translated:
    py: str
    pg: str
    groups: int


def _cases(ch: str) -> list[str]:
    """What `ch` stands for in a case-insensitive Postgres pattern: its lower and upper case (allcases())."""
    return sorted({simple_lower(ch), simple_upper(ch)})


@cache
def _cased() -> tuple[str, ...]:
    """Every character that a case mapping changes, in code point order (for ranges under ignore_case)."""
    return tuple(c for c in map(chr, range(0x110000)) if simple_lower(c) != c or simple_upper(c) != c)


def _range_cases(start: str, end: str) -> list[str]:
    """The cases a case-insensitive Postgres range [start-end] gains outside itself (regc_locale.c range())."""
    extra: dict[str, None] = {}
    for c in _cased():
        if start <= c <= end:
            for cc in (simple_lower(c), simple_upper(c)):
                if not start <= cc <= end:
                    extra[cc] = None
    return list(extra)


def _lit(ch: str) -> str:
    """A literal character, escaped when it is ASCII punctuation (safe in both engines)."""
    if ch == "\n":
        return "\\n"
    if ch == "\t":
        return "\\t"
    if ch == "\r":
        return "\\r"
    if ch == "\f":
        return "\\f"
    if ch == "\v":
        return "\\v"
    if ch.isascii() and not ch.isalnum() and ch.isprintable() and ch != " ":
        return "\\" + ch
    return ch


_WS_ITEMS = "".join(_lit(c) for c in WHITESPACE)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v"}


class _Parser:
    def __init__(self, pattern: str, fold: bool, icase: bool = False) -> None:
        self.p = pattern
        self.i = 0
        self.fold = fold
        self.icase = icase
        self.py: list[str] = []
        self.pg: list[str] = []
        self.groups = 0
        self.depth = 0
        # what the last emitted token was: "atom" may take a quantifier
        self.last = "start"
        self.items: list[str] = []

    def emit(self, py: str, pg: str | None = None, kind: str = "atom") -> None:
        self.py.append(py)
        self.pg.append(py if pg is None else pg)
        self.last = kind

    def literal(self, ch: str) -> None:
        if self.icase:
            cases = _cases(ch)
            py = _lit(cases[0]) if len(cases) == 1 else "[" + "".join(map(_lit, cases)) + "]"
            self.emit(py, _lit(ch))
            return
        self.emit(_lit(simple_lower(ch) if self.fold else ch))

    def run(self) -> Translated:
        p = self.p
        while self.i < len(p):
            ch = p[self.i]
            self.i += 1
            if ch == "\\":
                self.escape()
            elif ch == "[":
                self.char_class()
            elif ch == "(":
                if p.startswith("?", self.i):
                    if not p.startswith("?:", self.i):
                        raise RegexError("only (?:...) groups are supported (no look-around, names or flags)")
                    self.i += 2
                    self.emit("(?:", kind="open")
                else:
                    self.groups += 1
                    self.emit("(", kind="open")
                self.depth += 1
            elif ch == ")":
                if self.depth == 0:
                    raise RegexError("unbalanced ')'")
                self.depth -= 1
                self.emit(")")
            elif ch == "|":
                self.emit("|", kind="alt")
            elif ch == "^":
                self.emit("^", kind="anchor")
            elif ch == "$":
                # Python's `$` also matches before a final newline; `\Z` is the very end, like Postgres' `$`.
                self.emit("\\Z", "$", kind="anchor")
            elif ch == ".":
                self.emit(".")
            elif ch in "*+?":
                self.quantifier(ch)
            elif ch == "{":
                self.brace()
            elif ch == "}":
                raise RegexError("a lone '}' (write \\} for a literal brace)")
            elif ch == "]":
                self.emit("\\]")
            else:
                self.literal(ch)
        if self.depth:
            raise RegexError("unbalanced '('")
        return Translated("(?s)" + "".join(self.py), "".join(self.pg), self.groups)

    def need_atom(self, what: str) -> None:
        if self.last != "atom":
            raise RegexError(f"'{what}' has nothing to repeat")

    def after_quantifier(self) -> None:
        if self.i < len(self.p) and self.p[self.i] in "?+":
            raise RegexError("lazy and possessive quantifiers are not supported")
        self.last = "quantified"

    def quantifier(self, ch: str) -> None:
        self.need_atom(ch)
        self.emit(ch)
        self.after_quantifier()

    def brace(self) -> None:
        # ASCII digits only (`\d` would take any script's, which Postgres does not count with)
        m = _REPEAT.match(self.p, self.i)
        if not m:
            raise RegexError("'{' must start a repeat {n}, {n,} or {n,m} (write \\{ for a literal brace)")
        self.need_atom("{")
        low = digits_value(m.group(1))
        high = digits_value(m.group(3)) if m.group(3) else None
        if low > MAX_REPEAT or (high is not None and (high > MAX_REPEAT or high < low)):
            raise RegexError(f"repeat counts must satisfy n <= m <= {MAX_REPEAT}")
        self.i = m.end()
        self.emit("{" + m.group(0))
        self.after_quantifier()

    def escape(self) -> None:
        if self.i >= len(self.p):
            raise RegexError("the pattern ends with a backslash")
        ch = self.p[self.i]
        self.i += 1
        if ch == "d":
            self.emit("[0-9]")
        elif ch == "D":
            self.emit("[^0-9]")
        elif ch == "s":
            self.emit(f"[{_WS_ITEMS}]")
        elif ch == "S":
            self.emit(f"[^{_WS_ITEMS}]")
        elif ch in "wW":
            self.emit("\\" + ch)
        elif ch == "A":
            self.emit("\\A", kind="anchor")
        elif ch == "Z":
            self.emit("\\Z", kind="anchor")
        elif ch in _SIMPLE_ESCAPES:
            self.literal(_SIMPLE_ESCAPES[ch])
        elif ch.isascii() and ch.isalnum():
            raise RegexError(f"unsupported escape \\{ch}")
        else:
            self.literal(ch)

    def class_char(self) -> str | None:
        """One character of a class (None for a \\d/\\s/\\w item, already added to self.items)."""
        p = self.p
        ch = p[self.i]
        self.i += 1
        if ch == "[":
            raise RegexError("'[' inside a class (write \\[; POSIX [:name:] classes are not supported)")
        if ch != "\\":
            return ch
        if self.i >= len(p):
            raise RegexError("the pattern ends with a backslash")
        ch = p[self.i]
        self.i += 1
        if ch == "d":
            self.items.append("0-9")
            return None
        if ch == "s":
            self.items.append(_WS_ITEMS)
            return None
        if ch == "w":
            self.items.append("\\w")
            return None
        if ch in "DSW":
            raise RegexError(f"\\{ch} is not supported inside [...]")
        if ch in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[ch]
        if ch.isascii() and ch.isalnum():
            raise RegexError(f"unsupported escape \\{ch}")
        return ch

    def char_class(self) -> None:
        p = self.p
        negated = p.startswith("^", self.i)
        if negated:
            self.i += 1
        self.items = []
        pg_only: list[str] = []  # ignore_case: what Postgres reads with its own case rules ...
        py_only: list[str] = []  # ... and the same set written out for Python
        first = True
        while True:
            if self.i >= len(p):
                raise RegexError("unterminated '['")
            if p[self.i] == "]" and not first:
                self.i += 1
                break
            first = False
            start = self.class_char()
            if start is None:
                continue
            if p.startswith("-", self.i) and self.i + 1 < len(p) and p[self.i + 1] != "]":
                self.i += 1
                end = self.class_char()
                if end is None:
                    raise RegexError("a range cannot end with a class escape")
                if ord(end) < ord(start):
                    raise RegexError(f"range {start}-{end} is out of order")
                self.items.append(f"{_lit(start)}-{_lit(end)}")
                if self.icase:
                    py_only.extend(map(_lit, _range_cases(start, end)))
                if self.fold:
                    lo, hi = simple_lower(start), simple_lower(end)
                    if (lo, hi) != (start, end) and ord(lo) <= ord(hi):
                        self.items.append(f"{_lit(lo)}-{_lit(hi)}")
            elif self.icase:
                pg_only.append(_lit(start))
                py_only.extend(map(_lit, _cases(start)))
            else:
                self.items.append(_lit(simple_lower(start) if self.fold else start))
        head = "[" + ("^" if negated else "") + "".join(self.items)
        self.emit(head + "".join(py_only) + "]", head + "".join(pg_only) + "]")


def translate(pattern: str, *, fold_case: bool = False, ignore_case: bool = False) -> Translated:
    """Check `pattern` against the common subset and spell it for both engines.

    `ignore_case`: the Postgres spelling is for `~*` (or the `i` flag), the Python one matches the same."""
    out = _Parser(pattern, fold_case, ignore_case).run()
    try:
        re.compile(out.py)
    except re.error as exc:  # pragma: no cover - the subset above should always compile
        raise RegexError(f"does not compile: {exc}") from exc
    return out
