"""Write the bytecode of the packages requirements.lock installs (the ones FireFeed's processes import).

Why: where PYTHONDONTWRITEBYTECODE is set, nothing caches bytecode at import time, and each
worker, CLI and fleet process compiled its ~600 modules again (2.9 s of a worker's 6.3 s start).
Only the runtime packages: the development ones (pytest, hypothesis, mypy...) load in one test
process, and compiling them too cost the install 13 s more. Usage: python tools/compile_runtime.py
"""

from __future__ import annotations

import compileall
import functools
import importlib.metadata as md
import sys
from concurrent.futures import ProcessPoolExecutor

from check_lock import ROOT, pins

#: development packages a runtime one imports when they are installed (httpx's command line: rich, and
#: pygments through it; ~100 modules compiled again by every process of the development venv)
_IMPORTED_WHEN_PRESENT = ("rich", "pygments")


def _sources() -> list[str]:
    out = []
    for name in [*pins(ROOT / "requirements.lock"), *_IMPORTED_WHEN_PRESENT]:
        try:
            files = md.distribution(name).files or []
        except md.PackageNotFoundError:  # a marker left it out on this platform
            continue
        out += [str(f.locate()) for f in files if f.suffix == ".py"]
    return out


def main() -> int:
    sources = _sources()
    with ProcessPoolExecutor() as pool:
        list(pool.map(functools.partial(compileall.compile_file, quiet=2), sources, chunksize=64))
    print(f"bytecode of {len(sources)} runtime modules written", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
