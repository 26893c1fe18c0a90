"""The catalog variant of `make bench` (SPEC section 9): the 1M-item workload with lists, groups and a lookup.

Made from the plain benchmark feed (so the two runs read the same items), cached
beside it in the data directory:
  - an `images` column holding a 5-element comma list (declared in the source's `lists`);
  - `item_group_id` set so every 4 consecutive items are the variants of one group;
  - a 2,000-row lookup table from the shop's category text to a Google category id and a label
    (every category of the feed, then made-up ones), joined by a `lookup` action;
  - an `aggregate` (the group's lowest price on every variant);
  - channel rules on the one export (keep three images, label the group).
The plain run and this one have the same sources' sizes to within the image column, the same
20 rules and one csv export; the ratio of their wall times is the variant's cost.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
IMAGES = 5
GROUP = 4
LOOKUP_ROWS = 2000


def catalog_files(data_dir: Path, feed: Path) -> tuple[Path, Path]:
    """(catalog feed, lookup table) derived from `feed`, written once."""
    out = data_dir / f"catalog_{feed.stem}.csv"
    lookup = data_dir / f"catalog_{feed.stem}_categories.csv"
    if out.exists() and lookup.exists():
        return out, lookup
    print(f"deriving {out} and {lookup} …", flush=True)
    csv.field_size_limit(sys.maxsize)
    categories: dict[str, None] = {}
    tmp = out.with_suffix(".tmp")
    with feed.open(newline="", encoding="utf-8") as src, tmp.open("w", newline="", encoding="utf-8") as dst:
        reader = csv.reader(src)
        header = next(reader)
        at_id, at_group, at_cat = (
            header.index("id"),
            header.index("item_group_id"),
            header.index("google_product_category"),
        )
        writer = csv.writer(dst)
        writer.writerow([*header, "images"])
        for n, row in enumerate(reader):
            item = row[at_id]
            row[at_group] = f"G{n // GROUP}"
            if row[at_cat]:
                categories.setdefault(row[at_cat], None)
            images = ",".join(f"https://cdn.example.com/img/{item}_{i}.jpg" for i in range(IMAGES))
            writer.writerow([*row, images])
    tmp.replace(out)
    names = list(categories)[:LOOKUP_ROWS]
    names += [f"Made-up category {i}" for i in range(LOOKUP_ROWS - len(names))]
    with lookup.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["shop_category", "gpc", "label"])
        for i, name in enumerate(names):
            writer.writerow([name, str(1000 + i), f"cat-{i % 50}"])
    return out, lookup


def write_catalog_spec(path: Path, project: str, feed: Path, stock: Path, lookup: Path) -> Path:
    """The plain benchmark's spec with section 9's features on top."""
    text = (HERE / "bench_rules.yaml").read_text(encoding="utf-8")
    rules: list[dict[str, Any]] = yaml.load(text, Loader=yaml.BaseLoader)
    rules = [
        *rules,
        {
            "name": "google category",
            "then": [
                {
                    "lookup": "categories",
                    "match": "google_product_category",
                    "set": {"google_product_category": "gpc", "custom_label_0": "label"},
                }
            ],
        },
        {"name": "group price", "then": [{"aggregate": "group_min_price", "op": "min", "of": "price"}]},
    ]
    spec = {
        "company": "bench",
        "project": project,
        "group": "item_group_id",
        "sources": [
            {"name": "feed", "url": feed.name, "lists": {"images": ","}},
            {"name": "stock", "url": stock.name, "mode": "enrich"},
        ],
        "lookups": [{"name": "categories", "url": lookup.name, "key": "shop_category"}],
        "rules": rules,
        "exports": [
            {
                "name": "out",
                "format": "csv",
                "path": "out.csv",
                "rules": [
                    {"name": "three images", "then": [{"take": "images", "count": "3"}]},
                    {"name": "group label", "then": [{"set": "custom_label_1", "value": "{item_group_id}"}]},
                ],
            }
        ],
    }
    path.write_text(yaml.safe_dump(spec, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path
