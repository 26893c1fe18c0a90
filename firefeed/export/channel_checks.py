"""The channel-grade checks of SPEC 10 C2 (#49), as SQL conditions on the values an export writes.

`diagnostics.channel_checks` turns each into a flag bit, so they run in the
one scan that fills the export's run table, for new and changed items only,
like the checks before them. `variants` is the one that compares items with
each other: a separate query, as the duplicate-id finding is.

Every condition is written to be cheap for the common value: a plain string
test (strpos, LIKE, length) decides first and a regular expression or an
arithmetic runs only for the few values that test does not settle. Casts are
behind a CASE that has checked the text (Postgres does not promise the order
of AND's operands, and a failed cast would fail the export); a constant
output value is safe too, as the planner folds a CASE at its first WHEN
that is constantly true and drops the branches after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg2 import sql

from firefeed.export.channels import WARNING
from firefeed.export.select import OutputColumn, Piece, sql_text
from firefeed.pipeline._netguard import special_networks_sql

GTIN_LENGTHS = (8, 12, 13, 14)
CONDITIONS = ("new", "refurbished", "used")
GENDERS = ("female", "male", "unisex")
AGE_GROUPS = ("adult", "infant", "kids", "newborn", "toddler")
VARIANT_ATTRIBUTES = ("color", "size", "pattern", "material", "age_group", "gender")
#: Names no channel resolves on the internet (RFC 6761, RFC 6762, RFC 2606; `.internal`: ICANN 2024).
PRIVATE_SUFFIXES = ("localhost", "local", "internal", "test", "invalid", "example")
_PRICE = "^[0-9]+([.,][0-9]+)? [A-Z]{3}$"
_MAX_SAMPLES = 5


def _p(value: Any) -> Piece:
    return Piece(sql.SQL("%s"), (value,))


def _cat(*parts: Piece | str) -> Piece:
    out = sql_text("")
    for part in parts:
        out = out + (sql_text(part) if isinstance(part, str) else part)
    return out


def gtin_is_valid(text: str) -> bool:
    """The Python twin of `bad_gtin` (for tests and tools): 8, 12, 13 or 14 digits and a right GS1 check digit."""
    if len(text) not in GTIN_LENGTHS or not text.isascii() or not text.isdigit():
        return False
    total = sum(int(d) * (3 if j % 2 else 1) for j, d in enumerate(reversed(text)))
    return total % 10 == 0


def bad_gtin(v: Piece) -> Piece:
    """A non-empty GTIN that is not 8/12/13/14 digits with a valid GS1 check digit.

    The check digit's weights run from the right (1, 3, 1, 3, ...), so one sum serves every length
    (the digits left of a short GTIN read 0). The digits come from the value read as a bigint, by
    integer division: half the cost of fourteen substr() calls (0.55 against 1.2 us a value).
    """
    number = _cat(v, "::bigint")
    total = sql_text("(")
    for j in range(1, 15):
        weight = 3 if j % 2 == 0 else 1
        total = total + _cat(" + " if j > 1 else "", "mod(", number, f" / {10 ** (j - 1)}, 10) * {weight}")
    total = total + sql_text(")")
    lengths = ", ".join(str(n) for n in GTIN_LENGTHS)
    return _cat(
        "(CASE WHEN ", v, " = '' THEN false WHEN octet_length(", v, f") NOT IN ({lengths}) OR ",
        v, " !~ '^[0-9]+$' THEN true ELSE mod(", total, ", 10) <> 0 END)",
    )  # fmt: skip


def no_identifier(gtin: Piece | None, mpn: Piece | None, exists: Piece | None) -> Piece:
    """No gtin, no mpn, and `identifier_exists` not no/false (an absent column counts as empty)."""
    out = sql_text("(true")
    for v in (gtin, mpn):
        if v is not None:
            out = out + _cat(" AND ", v, " = ''")
    if exists is not None:
        out = out + _cat(" AND lower(", exists, ") NOT IN ('no', 'false')")
    return out + sql_text(")")


def bad_price_value(v: Piece) -> Piece:
    """A price whose number is 0 or negative (`-5 EUR`, `0.00 EUR`, `0,0 EUR`)."""
    return _cat("(", v, " LIKE '-%%' OR (", v, " LIKE '0%%' AND ", v, " ~ '^0+([.,]0+)? '))")


def bad_sale_price(sale: Piece, price: Piece) -> Piece:
    """A sale_price not lower than price, or in another currency (both well formed: `price_format` judges the rest)."""
    number = [_cat("replace(split_part(", x, ", ' ', 1), ',', '.')::numeric") for x in (sale, price)]
    return _cat(
        "(CASE WHEN ", sale, " = '' OR ", price, " = '' OR ", sale, " !~ ", _p(_PRICE), " OR ", price, " !~ ",
        _p(_PRICE), " THEN false ELSE right(", sale, ", 3) <> right(", price, ", 3) OR ", number[0], " >= ",
        number[1], " END)",
    )  # fmt: skip


def _ip_literal_v6(a: Piece) -> Piece:
    """Whether a bracketed host's text is an IPv6 address Postgres reads (hex groups only, one '::' at most)."""
    return _cat(
        "(", a, " ~ '^[0-9a-f]{0,4}(:[0-9a-f]{0,4}){2,7}$' AND strpos(", a, ", ':::') = 0 AND (CASE WHEN strpos(",
        a, ", '::') = 0 THEN octet_length(", a, ") - octet_length(replace(", a, ", ':', '')) = 7 AND ", a,
        " !~ '^:|:$' ELSE strpos(substr(", a, ", strpos(", a, ", '::') + 2), '::') = 0 AND ", a,
        " !~ '^:[^:]|[^:]:$' END))",
    )  # fmt: skip


def _ip_host(h: Piece) -> Piece:
    """Whether a host that spells an address (lowercase, no trailing dot) is not public.

    The fetcher's special-purpose table decides (`_netguard`); a host that ends in a number but is
    not four plain decimal numbers (`127.1`, `0x7f.1`, `2130706433`) is an address in a notation the
    fetcher refuses too, and an IPv6 literal in a form other than hex groups (`[::ffff:1.2.3.4]`) is
    counted unreachable rather than parsed.
    """
    nets = special_networks_sql()

    def within(a: Piece, key: str) -> Piece:
        return _cat(a, "::inet <<= ANY(", _p(list(nets[key])), "::inet[])")

    v6 = _cat("btrim(", h, ", '[]')")
    v6_check = _cat(
        "(CASE WHEN NOT ", _ip_literal_v6(v6), " THEN true WHEN ", within(v6, "wrappers"), " THEN ",
        within(v6, "wrapped"), " ELSE ", within(v6, "v6"), " OR NOT ", within(v6, "global"), " END)",
    )  # fmt: skip
    octet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
    quad = f"^{octet}(\\.{octet}){{3}}$"
    return _cat(
        "(CASE WHEN ", h, " LIKE '[%%' THEN ", v6_check, " WHEN ", h, " ~ ", _p(quad), " THEN ", within(h, "v4"),
        " ELSE true END)",
    )  # fmt: skip


_AUTHORITY = "^[a-z][a-z0-9+.-]*://([^/?#@]*@|(?![^/?#]*@))"
_HOST_END = "\\.?([:/?#]|$)"
_NUMERIC = "([^/?#:@]*\\.)?([0-9]+|0x[0-9a-f]*)"
#: A host a channel cannot reach by its name, or one that spells an address (judged then by `_ip_host`).
_PRIVATE_NAME = f"localhost|[^/?#:.@]*|[^/?#:@]*\\.({'|'.join(PRIVATE_SUFFIXES)})"
_SUSPECT = f"{_AUTHORITY}({_PRIVATE_NAME}|\\[[^]/?#@]*\\]|{_NUMERIC}){_HOST_END}"
_ADDRESS = f"{_AUTHORITY}(\\[|{_NUMERIC}{_HOST_END})"


def private_host_url(u: Piece) -> Piece:
    """Whether the host of one URL is one a channel cannot reach (false for a value that is no URL).

    One case-insensitive regex over the URL settles the usual link (a public name: no match);
    the host is extracted and judged as an address only for a host that spells one.
    """
    return _cat(
        "(CASE WHEN ", u, " !~* ", _p(_SUSPECT), " THEN false WHEN ", u, " !~* ", _p(_ADDRESS), " THEN true ",
        "ELSE coalesce(", _ip_host(_host(u)), ", true) END)",
    )  # fmt: skip


def _host(url: Piece) -> Piece:
    # The authority's host after any user info, lowercased, without the root's trailing dot.
    pattern = "^[A-Za-z][A-Za-z0-9+.-]*://(?:[^/?#@]*@)?(\\[[^]]*\\]|[^/?#:]*)"
    return _cat("rtrim(lower(substring(", url, " from ", _p(pattern), ")), '.')")


def _plainly_public(u: Piece) -> Piece:
    """True for the usual link: its authority a dotted name with no user info, port, address form or
    private suffix. String tests only (a regex on every link cost ~7 us, these ~1 us); a value this
    does not settle (or that is no URL) goes to `private_host_url`, which decides exactly.
    """
    a = _cat("split_part(", u, ", '/', 3)")
    out = _cat("(strpos(", a, ", '.') > 0")
    for char in ("@", ":", "?", "#", ".0x", ".0X"):
        out = out + _cat(" AND strpos(", a, f", '{char}') = 0")
    out = out + _cat(" AND ascii(right(", a, ", 1)) > 57")  # not a digit, '.' or '/': no numeric last label
    suffixes = _p(list(PRIVATE_SUFFIXES))
    return out + _cat(" AND lower(split_part(", a, ", '.', -1)) <> ALL(", suffixes, "))")


def _private_link(u: Piece) -> Piece:
    return _cat("(CASE WHEN ", _plainly_public(u), " THEN false ELSE ", private_host_url(u), " END)")


def private_url(v: Piece, *, listed: bool = False) -> Piece:
    """A link whose host a channel cannot reach; `listed`: the value is URLs joined with ',' (a list column)."""
    if not listed:
        return _cat("(", v, " <> '' AND ", _private_link(v), ")")
    u = sql_text("btrim(u)")
    return _cat(
        "(", v, " <> '' AND EXISTS (SELECT 1 FROM unnest(string_to_array(", v, ", ',')) u WHERE ",
        _private_link(u), "))",
    )  # fmt: skip


def has_html(v: Piece) -> Piece:
    """A tag (`<b>`, `</p>`, `<!-- -->`) or an entity (`&amp;`, `&#39;`, `&#x27;`); strpos spares the regex."""
    return _cat(
        "((strpos(", v, ", '<') > 0 AND ", v, " ~ '<[A-Za-z/!][^<>]*>') OR (strpos(", v, ", '&') > 0 AND ", v,
        " ~ '&([A-Za-z][A-Za-z0-9]*|#[0-9]+|#[xX][0-9A-Fa-f]+);'))",
    )  # fmt: skip


def bad_value(v: Piece, allowed: Sequence[str]) -> Piece:
    """A non-empty value outside `allowed` (lowercase), in any case."""
    return _cat("(", v, " <> '' AND lower(", v, ") <> ALL(", _p(sorted(allowed)), "))")


#: the flag bit of an item whose group holds an earlier item with its variant values (the checks take bits 0-60)
VARIANT_BIT = 1 << 61


def mark_variants(
    cur: Any, table: sql.Composable, baseline: sql.Composable | None, *, touched: bool, removed: bool
) -> None:
    """Set `VARIANT_BIT` on exactly the items of `table` an earlier item of their group repeats (`v` equal).

    `baseline`: the published table whose bits and `v` the unchanged rows carried over (`quality`):
    only the groups an added, changed or removed item belongs to are judged again, so a refresh
    that changed little reads the narrow run table once and the baseline only when items were
    `removed`, and not at all when no item was added, changed or removed (`touched` false).
    None: every group is judged (one hash aggregate of `v`, then the repeats).
    """
    bit = sql.Literal(VARIANT_BIT)
    if baseline is None:
        cur.execute(
            sql.SQL(
                "WITH twice AS (SELECT v, min(o) AS first FROM {t} WHERE v IS NOT NULL GROUP BY v "
                "HAVING count(*) > 1) "
                "UPDATE {t} r SET f = r.f | {bit} FROM twice w WHERE r.v = w.v AND r.o > w.first"
            ).format(t=table, bit=bit)
        )
        return
    if not touched:
        return  # every row and bit is the published one's
    from firefeed.export.diff import UNCHANGED

    # the groups an added or changed item is in now, and those a changed item left (`w`, its published hash)
    touched = sql.SQL(
        "SELECT v FROM {t} WHERE d <> {u} AND v IS NOT NULL UNION SELECT w FROM {t} WHERE w IS NOT NULL"
    ).format(t=table, u=sql.Literal(UNCHANGED))
    if removed:
        touched = touched + sql.SQL(
            " UNION SELECT p.v FROM {b} p WHERE p.v IS NOT NULL AND NOT EXISTS "
            "(SELECT 1 FROM {t} s WHERE s.kh = p.kh AND s.k = p.k)"
        ).format(b=baseline, t=table)
    cur.execute(
        sql.SQL(
            "WITH touched AS (" + "{touched}" + "), "
            "ranked AS (SELECT r.ctid AS at, row_number() OVER (PARTITION BY r.v ORDER BY r.o) > 1 AS later "
            "FROM {t} r WHERE r.v IN (SELECT v FROM touched)) "
            "UPDATE {t} r SET f = CASE WHEN x.later THEN r.f | {bit} ELSE r.f & ~{bit} END "
            "FROM ranked x WHERE r.ctid = x.at AND ((r.f & {bit}) <> 0) <> x.later"
        ).format(touched=touched, t=table, bit=bit)
    )


def variants(columns: Sequence[OutputColumn], count: int, samples: Sequence[Any] | None) -> dict[str, Any] | None:
    """The `variants` finding: items of one item_group_id with the same values of every variant attribute present.

    Its count and samples are those of the bits `mark_variants` set, read in the findings' one scan
    (`diagnostics.findings_sql`): an item counts when an earlier item of its group (export order) has its values.
    """
    names = {c.name for c in columns}
    if "item_group_id" not in names or not count:
        return None
    present = ", ".join(a for a in VARIANT_ATTRIBUTES if a in names) or "none"
    return {
        "severity": WARNING,
        "check": "variants",
        "attribute": "item_group_id",
        "count": int(count),
        "samples": [str(s) for s in (samples or [])[:_MAX_SAMPLES]],
        "message": f"item_group_id: the same variant attributes ({present}) as an earlier item of its group",
    }
