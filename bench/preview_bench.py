"""`make bench-preview`: rule preview of 50 items of a 100k-item feed with 10 rules (target: under 3 s).

Issue #9's acceptance: a preview of a spec with 10 rules on a 100,000-item feed
answers in under 3 s for N=50. Measured on feeds made by
../shared/feedgen/feedgen.py (cached in --data-dir, shared with `make bench`):
  - `preview_spec` in this process (what the CLI and the API call), primary only;
  - the same with the stock feed as an enrich source (it must be read to the end
    to find the sample's keys);
  - POST /api/projects/{id}/preview through a real uvicorn server, the stored spec;
  - 50 items chosen by id (`--item`), which reads the whole primary;
  - the web page's edit-to-preview round trip (#53): POST .../preview with a draft
    that changes one rule, after a first preview of the same sources, on 50 items
    of the --edit-rows (1M) feed with the stock feed as an enrich source (target:
    under 0.5 s; the sources' sample rows are reused, preview/cache.py). The first
    preview (which reads the stock feed to its end) is shown beside it.
Each figure is the median of --repeat previews after one warm-up. Prints them
with the target and writes them as JSON to bench/out/.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _benchdb import create_database, drop_database, save_results  # noqa: E402

sys.path.insert(0, str(ROOT))

from pipeline_bench import feed_files  # noqa: E402

TARGET_S = 3.0
#: the page's edit-to-preview round trip (#53)
EDIT_TARGET_S = 0.5
#: ten of the pipeline benchmark's rules, between them every kind of condition group and most actions
RULES = (
    "out of stock",
    "brand in title",
    "description fallback",
    "colors in english",
    "identifiers",
    "tidy title",
    "vat",
    "shoes category",
    "tidy mpn",
    "exclusions",
)


def bench_spec(project: str, feed: Path, stock: Path | None) -> dict[str, Any]:
    every = yaml.load((HERE / "bench_rules.yaml").read_text(encoding="utf-8"), Loader=yaml.BaseLoader)
    rules = [r for r in every if r["name"] in RULES]
    assert len(rules) == len(RULES), "bench_rules.yaml lost a rule this benchmark uses"
    sources: list[dict[str, Any]] = [{"name": "feed", "url": feed.name}]
    if stock is not None:
        sources.append({"name": "stock", "url": stock.name, "mode": "enrich"})
    return {
        "company": "bench",
        "project": project,
        "sources": sources,
        "rules": rules,
        "exports": [{"name": "out", "format": "csv", "path": "out.csv"}],
    }


def last_ids(feed: Path, n: int) -> list[str]:
    """The ids of the feed's last `n` items: choosing them makes a preview read the whole primary."""
    import csv
    from collections import deque

    with feed.open(newline="", encoding="utf-8") as f:
        rows = csv.reader(f)
        next(rows)
        return [row[0] for row in deque(rows, maxlen=n)]


def cold(call: Callable[[], Any]) -> Callable[[], Any]:
    """`call` with the sources read anew each time: these figures are a first preview's, as before #53's cache
    of sample rows (the edit round trip below is the one that reuses them)."""
    from firefeed.preview.cache import SAMPLES

    def run() -> Any:
        SAMPLES.clear()
        return call()

    return run


def median_of(repeat: int, call: Callable[[], Any]) -> tuple[float, list[float], Any]:
    call()  # warm-up: imports, connections, the OS file cache
    times, last = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        last = call()
        times.append(time.perf_counter() - t)
    return statistics.median(times), times, last


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--items", type=int, default=50)
    ap.add_argument("--edit-rows", type=int, default=1_000_000, help="the edit round trip's feed (0: skip it)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--data-dir", type=Path, default=Path("/tmp/firefeed-bench"))
    ap.add_argument(
        "--admin-dsn",
        default=os.environ.get("FIREFEED_BENCH_ADMIN_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    args = ap.parse_args()

    feed, stock = feed_files(args.data_dir, args.rows)
    db = f"firefeed_preview_bench_{os.getpid()}"
    admin, dsn = create_database(args.admin_dsn, db)
    os.environ["FIREFEED_DATABASE_URL"] = dsn
    os.environ["FIREFEED_DATA_DIR"] = str(args.data_dir / "var")
    # a draft sent over the API reads local files only under this root (the edit round trip's feeds)
    os.environ["FIREFEED_LOCAL_SOURCES_ROOT"] = str(api_sources(args.data_dir))
    results: dict[str, Any] = {"rows": args.rows, "items": args.items, "rules": len(RULES), "target_s": TARGET_S}
    try:
        import httpx

        from firefeed.api.app import create_app
        from firefeed.api.serve import ServerThread
        from firefeed.db.engine import dispose_engines
        from firefeed.db.migrate import upgrade
        from firefeed.preview import preview_spec
        from firefeed.runs.service import RunStore
        from firefeed.runs.tokens import TokenStore
        from firefeed.spec.loader import parse_spec

        upgrade()
        primary_only = parse_spec(bench_spec("preview_bench", feed, None))
        with_stock = parse_spec(bench_spec("preview_bench", feed, stock))
        ids = last_ids(feed, args.items)

        folder = feed.parent
        cases: list[tuple[str, Callable[[], Any]]] = [
            ("primary only", lambda: preview_spec(primary_only, spec_dir=folder, items=args.items)),
            ("with the stock source", lambda: preview_spec(with_stock, spec_dir=folder, items=args.items)),
            (f"{len(ids)} ids, last in the feed", lambda: preview_spec(primary_only, spec_dir=folder, ids=ids)),
        ]
        RunStore().apply_spec(primary_only, spec_dir=folder)
        token = TokenStore().create("bench")
        with ServerThread(create_app()) as url, httpx.Client(base_url=url, timeout=60) as http:

            def over_http() -> Any:
                r = http.post(
                    f"/api/projects/preview_bench/preview?items={args.items}",
                    headers={"Authorization": f"Bearer {token}"},
                )
                r.raise_for_status()
                return r.json()

            cases.append(("POST .../preview (stored spec)", over_http))
            print(f"preview of {args.items} items, {len(RULES)} rules, {args.rows:,}-item feed", flush=True)
            for name, call in cases:
                median, times, last = median_of(args.repeat, cold(call))
                items = last["items"] if isinstance(last, dict) else last.items
                results[name] = {"median_s": median, "runs_s": times, "items": len(items)}
                verdict = "ok" if median < TARGET_S else "OVER"
                print(
                    f"  {name:<32}{median:7.3f} s median of {args.repeat}  ({len(items)} items)"
                    f"  target < {TARGET_S:.0f} s: {verdict}",
                    flush=True,
                )
            if args.edit_rows:
                results["edit round trip"] = edit_round_trip(http, token, args.data_dir, args.edit_rows, args)
        dispose_engines()
        save_results("preview", results)
    finally:
        drop_database(admin, db)


def api_sources(data_dir: Path) -> Path:
    return data_dir.resolve() / "api-sources"


def edit_round_trip(http: Any, token: str, data_dir: Path, rows: int, args: argparse.Namespace) -> dict[str, Any]:
    """The page's loop: a first preview of a draft, then drafts that each change one rule, timed over HTTP."""
    import json

    big, big_stock = feed_files(data_dir, rows)
    # A draft sent over the API reads local files only under the company's folder of the local sources
    # root the API was started with: the feeds are linked there (hard links: no copy).
    folder = api_sources(data_dir) / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    for f in (big, big_stock):
        if not (folder / f.name).exists():
            os.link(f, folder / f.name)
    spec = bench_spec("preview_edit", folder / big.name, folder / big_stock.name)
    for src in spec["sources"]:
        src["url"] = str(folder / src["url"])
    auth = {"Authorization": f"Bearer {token}"}

    def post(doc: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        t = time.perf_counter()
        r = http.post(f"/api/projects/preview_edit/preview?items={args.items}", headers=auth, content=json.dumps(doc))
        elapsed = time.perf_counter() - t
        r.raise_for_status()
        return elapsed, r.json()

    first_s, _ = post(spec)
    times = []
    for n in range(args.repeat):
        draft = json.loads(json.dumps(spec))
        vat = next(r for r in draft["rules"] if r["name"] == "vat")
        vat["then"][0]["value"] = f"1.{20 + n}"  # the edit: one rule's value
        elapsed, answer = post(draft)
        assert len(answer["items"]) == args.items, answer.get("cut")
        times.append(elapsed)
    median = statistics.median(times)
    verdict = "ok" if median < EDIT_TARGET_S else "OVER"
    print(f"edit-to-preview round trip, {args.items} items of a {rows:,}-item feed + stock (enrich), over HTTP:")
    print(f"  first preview (reads the stock feed to its end) {first_s:7.3f} s")
    print(
        f"  {'a draft changing one rule':<32}{median:7.3f} s median of {args.repeat}"
        f"  target < {EDIT_TARGET_S} s: {verdict}",
        flush=True,
    )
    return {"rows": rows, "first_s": first_s, "median_s": median, "runs_s": times, "target_s": EDIT_TARGET_S}


if __name__ == "__main__":
    main()
