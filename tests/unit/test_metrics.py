"""The metrics module: Prometheus naming, promtool's lint, and multiprocess files that stay bounded."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from firefeed import metrics
from firefeed.commands.ops import budget_fix, memory_estimate_mb

PROMTOOL_HINT = (
    "promtool is missing: install Debian's `prometheus` package (apt-get install -y prometheus; only the "
    "promtool binary is used, the server need not run)"
)


def promtool_check(exposition: bytes | str) -> None:
    """Fail (never skip) unless `promtool check metrics` accepts the exposition text."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail(PROMTOOL_HINT)
    data = exposition.encode() if isinstance(exposition, str) else exposition
    done = subprocess.run([promtool, "check", "metrics"], input=data, capture_output=True, timeout=60)
    assert done.returncode == 0, (done.stdout + done.stderr).decode()


def firefeed_families(text: str) -> dict[str, str]:
    """{metric family name: type} of the firefeed_* families in an exposition."""
    return dict(re.findall(r"^# TYPE (firefeed_\w+) (\w+)$", text, flags=re.M))


def test_every_process_metric_follows_the_naming_conventions() -> None:
    body, content_type = metrics.render(fleet=False)
    assert content_type.startswith("text/plain")
    families = firefeed_families(body.decode())
    assert len(families) >= 12
    for name, typ in families.items():
        assert name.startswith("firefeed_")
        if typ == "counter":
            assert name.endswith("_total"), name
        if typ == "histogram":
            assert name.endswith("_seconds"), name
        if typ == "gauge":
            assert not name.endswith("_total"), name


def test_the_process_metrics_pass_promtool() -> None:
    promtool_check(metrics.render(fleet=False)[0])


def test_a_worker_port_is_the_base_plus_its_queues_offset() -> None:
    assert [metrics.worker_port(9810, [q]) for q in ("pipeline", "import", "rules", "export")] == [
        9810,
        9811,
        9812,
        9813,
    ]
    assert metrics.worker_port(9810, ["import", "rules"]) == 9810
    # The control worker also takes Celery's default queue; it keeps its own port beside the pipeline worker's.
    assert metrics.worker_port(9810, ["control", "celery"]) == 9814


def test_the_budget_fix_names_pipeline_concurrency_when_lowering_it_is_enough() -> None:
    assert budget_fix(pipeline=50, per_run=6, web_pool=5, usable=97).startswith(
        "lower PIPELINE_CONCURRENCY from 50 to 15"
    )
    assert "IMPORT_CONCURRENCY" in budget_fix(pipeline=1, per_run=200, web_pool=5, usable=97)


def test_the_memory_estimate_grows_with_the_pool() -> None:
    assert memory_estimate_mb(4, 2000) > memory_estimate_mb(1, 2000) > 0


# A prefork pool in miniature: children count into multiprocess files and exit, as with max_tasks_per_child.
_POOL_SCRIPT = textwrap.dedent(
    """
    import multiprocessing, os, sys
    from pathlib import Path
    from firefeed import metrics

    path = Path(sys.argv[1])
    path.mkdir(parents=True, exist_ok=True)
    metrics.enable_multiprocess(path)

    def child(n):
        metrics.run_started("api")
        metrics.step_finished("PARSE", "SUCCEEDED", None, None, rows_in=0, rows_out=n)

    ctx = multiprocessing.get_context("fork")
    for round_ in range(3):
        procs = [ctx.Process(target=child, args=(10,)) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
            metrics.mark_process_dead(p.pid)
        files_before = len(list(path.glob("*.db")))
        body, _ = metrics.render(fleet=False)
        files_after = len(list(path.glob("*.db")))
        print(round_, files_before, files_after, flush=True)
    sys.stdout.write(body.decode())
    """
)


def test_multiprocess_files_of_exited_children_are_folded_and_counts_survive(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _POOL_SCRIPT, str(tmp_path / "mp")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    rounds = [tuple(int(x) for x in line.split()) for line in lines[:3]]
    # Each round leaves 4 children x 2 files; after the scrape only the archives (and the parent's) remain.
    for _, before, after in rounds:
        assert before > after
        assert after <= 4
    text = "\n".join(lines[3:]) + "\n"
    values = {(n, tuple(sorted(lbl.items()))): v for n, lbl, v in metrics.iter_samples(text)}
    assert values[("firefeed_runs_started_total", (("trigger", "api"),))] == 12
    assert values[("firefeed_step_rows_total", (("direction", "out"), ("step", "PARSE")))] == 120
    promtool_check(text)
