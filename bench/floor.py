"""The all-in-Postgres floor: COPY in, one join, CREATE TABLE AS with the rules as CASE expressions, COPY out.

Hand-written SQL for roughly the same 20 rules as bench_rules.yaml, with none of
FireFeed's bookkeeping: the fastest this machine can do the job through
Postgres. FireFeed is measured against it in the same benchmark run.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Any

import psycopg2

NUM = r"substring({c} from '-?[0-9]+(?:[.,][0-9]+)?')"


def _num(col: str) -> str:
    return f"replace({NUM.format(c=col)}, ',', '.')::numeric"


PASS1 = f"""
CREATE UNLOGGED TABLE floor_p1 AS SELECT
  id,
  CASE WHEN brand <> '' AND strpos(lower(title), lower(brand)) = 0 THEN brand || ' ' || title ELSE title END AS title,
  replace(CASE WHEN description = '' THEN title ELSE description END, E'\\n', ' ') AS description,
  link, image_link,
  CASE WHEN {_num("quantity")} <= 0 THEN 'out_of_stock' ELSE availability END AS availability,
  price, sale_price, brand, gtin, mpn, condition, google_product_category, product_type,
  CASE color WHEN 'Grün' THEN 'Green' WHEN 'Bleu Marine' THEN 'Navy' WHEN 'Crème' THEN 'Cream'
             WHEN 'Anthracite' THEN 'Dark Grey' ELSE color END AS color,
  size, gender, age_group, item_group_id,
  CASE WHEN shipping_weight = '' THEN '1.00 kg' ELSE shipping_weight END AS shipping_weight,
  quantity,
  CASE WHEN sale_price <> '' THEN 'sale' ELSE '' END AS custom_label_0,
  CASE WHEN gtin = '' AND mpn = '' THEN 'no' ELSE 'yes' END AS identifier_exists
FROM floor_merged
"""

PASS2 = f"""
CREATE UNLOGGED TABLE floor_p2 AS SELECT
  id, left(btrim(title), 150) AS title, description,
  CASE WHEN strpos(link, 'utm_source=') = 0 THEN link || '?utm_source=firefeed' ELSE link END AS link,
  image_link, availability,
  round({_num("price")} * 1.22, 2)::text || ' EUR' AS price,
  CASE WHEN sale_price = '' THEN '' ELSE round({_num("sale_price")} * 1.22, 2)::text || ' EUR' END AS sale_price,
  brand, gtin, regexp_replace(mpn, '^([A-Z]+)-([0-9]+)-', '\\1\\2/') AS mpn, upper(condition) AS condition,
  CASE WHEN product_type ~ 'Shoes' THEN '187' ELSE google_product_category END AS google_product_category,
  product_type, color, size, lower(gender) AS gender, age_group, item_group_id, shipping_weight, quantity,
  custom_label_0, identifier_exists,
  CASE WHEN {_num("price")} < 20 THEN 'budget' WHEN {_num("price")} >= 100 THEN 'premium' ELSE 'mid' END
    AS custom_label_1,
  CASE WHEN {_num("quantity")} < 5 THEN 'low_stock' ELSE 'stocked' END AS custom_label_2,
  CASE WHEN char_length(gtin) < 8 THEN 'no_gtin' ELSE '' END AS custom_label_3,
  CASE WHEN lower(age_group) IN ('kids', 'toddler', 'infant', 'newborn') THEN 'kids' ELSE '' END AS custom_label_4
FROM floor_p1
WHERE NOT (strpos(lower(title), 'outlet') > 0 OR lower(condition) = 'used' OR coalesce({_num("price")} < 1, false)
           OR brand = '' OR char_length(description) > 4900)
"""


def _header(path: Path) -> list[str]:
    with path.open(newline="", encoding="utf-8") as f:
        return next(csv.reader(f))


def run_floor(dsn: str, feed: Path, stock: Path, out: Path) -> dict[str, Any]:
    """Time each stage of the floor; returns seconds per stage and the total."""
    times: dict[str, float] = {}
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("SET jit = off")
    for t in ("floor_feed", "floor_stock", "floor_merged", "floor_p1", "floor_p2"):
        cur.execute(f"DROP TABLE IF EXISTS {t}")
    fcols, scols = _header(feed), _header(stock)
    cur.execute("CREATE UNLOGGED TABLE floor_feed (" + ", ".join(f'"{c}" text' for c in fcols) + ")")
    cur.execute("CREATE UNLOGGED TABLE floor_stock (" + ", ".join(f'"{c}" text' for c in scols) + ")")
    t0 = time.perf_counter()
    for table, path, cols in (("floor_feed", feed, fcols), ("floor_stock", stock, scols)):
        collist = ", ".join(f'"{c}"' for c in cols)
        with path.open("rb") as f:
            cur.copy_expert(
                f"COPY {table} FROM STDIN WITH (FORMAT csv, HEADER true, FORCE_NOT_NULL ({collist}))", f, size=1 << 20
            )
    times["copy_in"] = time.perf_counter() - t0
    t = time.perf_counter()
    exprs = [
        f'CASE WHEN s."{c}" <> \'\' THEN s."{c}" ELSE f."{c}" END AS "{c}"' if c in scols and c != "id" else f'f."{c}"'
        for c in fcols
    ]
    cur.execute(
        "CREATE UNLOGGED TABLE floor_merged AS SELECT "
        + ", ".join(exprs)
        + " FROM floor_feed f LEFT JOIN floor_stock s ON s.id = f.id"
    )
    times["merge"] = time.perf_counter() - t
    t = time.perf_counter()
    cur.execute(PASS1)
    cur.execute(PASS2)
    times["rules"] = time.perf_counter() - t
    t = time.perf_counter()
    with out.open("wb") as f:
        cur.copy_expert("COPY floor_p2 TO STDOUT WITH (FORMAT csv, HEADER true)", f, size=1 << 20)
    times["copy_out"] = time.perf_counter() - t
    times["total"] = time.perf_counter() - t0
    cur.execute("SELECT count(*) FROM floor_p2")
    rows = cur.fetchone()[0]
    for tname in ("floor_feed", "floor_stock", "floor_merged", "floor_p1", "floor_p2"):
        cur.execute(f"DROP TABLE IF EXISTS {tname}")
    conn.close()
    return {"seconds": times, "rows_out": rows}
