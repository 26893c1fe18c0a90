"""`firefeed doctor` on this machine, and deploy/: compose, Prometheus, Grafana, systemd and Procfile agree."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from firefeed import metrics
from tests.integration.celery_workers import FIREFEED, celery_workers, flush_broker, worker_env
from tests.services import broker_url, redis_available, redis_db, requires_shared_broker
from tests.unit.test_metrics import PROMTOOL_HINT

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
QUEUES = ("pipeline", "import", "rules", "export", "control", "sync")
DOCTOR_REDIS_URL = redis_db(11)


def doctor(database_url: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = dict(
        os.environ,
        FIREFEED_DATABASE_URL=database_url,
        FIREFEED_BROKER_URL=broker_url(DOCTOR_REDIS_URL),
        FIREFEED_FLOWER_PASSWORD="x",
        PIPELINE_CONCURRENCY="1",
        IMPORT_CONCURRENCY="2",
        RULES_CONCURRENCY="2",
        EXPORT_CONCURRENCY="2",
    )
    full.update(env)
    return subprocess.run([FIREFEED, "doctor"], env=full, cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_doctor_passes_on_this_machine_and_prints_the_budget(database_url: str, tmp_path: Path) -> None:
    done = doctor(database_url, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert re.search(
        r"PIPELINE 1 x \(IMPORT 2 \+ RULES 2 \+ EXPORT 2 \+ SYNC 1\) \+ web pool 5 = 12 of max_connections \d+", out
    )
    assert "at head" in out
    assert re.search(r"memory .*pipeline ~\d+ MB", out)
    assert "all checks passed" in out


def test_doctor_fails_naming_the_variable_when_concurrency_exceeds_max_connections(
    database_url: str, tmp_path: Path
) -> None:
    done = doctor(database_url, tmp_path, PIPELINE_CONCURRENCY="1000")
    assert done.returncode == 1
    assert "FAIL  connections" in done.stdout
    assert re.search(r"lower PIPELINE_CONCURRENCY from 1000 to \d+", done.stdout)


def test_doctor_fails_on_a_bad_concurrency_value_and_an_unreachable_database(database_url: str, tmp_path: Path) -> None:
    done = doctor(database_url, tmp_path, RULES_CONCURRENCY="abc")
    assert done.returncode == 1 and "RULES_CONCURRENCY" in done.stdout
    done = doctor("postgresql://nobody@127.0.0.1:1/none", tmp_path)
    assert done.returncode == 1
    assert "FAIL  database" in done.stdout and "FIREFEED_DATABASE_URL" in done.stdout


# -- deploy/ ------------------------------------------------------------------------------------
def documented_commands(path: Path) -> list[str]:
    """The `firefeed …` lines of the fenced block after `<!-- fleet-commands -->`, comments removed."""
    text = path.read_text(encoding="utf-8")
    assert "<!-- fleet-commands -->" in text, f"{path.name} lacks the fleet commands block (see docs/operations.md)"
    block = text.split("<!-- fleet-commands -->", 1)[1].split("```", 2)[1]
    lines = [line.split("#", 1)[0].strip() for line in block.splitlines()[1:]]
    return [" ".join(shlex.split(line)) for line in lines if line.startswith("firefeed")]


def deploy_commands() -> dict[str, set[str]]:
    procfile = {
        " ".join(shlex.split(line.split(":", 1)[1]))
        for line in (DEPLOY / "Procfile").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    systemd: set[str] = set()
    for unit in (DEPLOY / "systemd").glob("*.service"):
        for line in unit.read_text().splitlines():
            if line.startswith(("ExecStart=", "ExecStartPre=")):
                argv = shlex.split(line.split("=", 1)[1])
                argv[0] = Path(argv[0]).name
                command = " ".join(argv)
                systemd |= {command.replace("%i", q) for q in QUEUES} if "%i" in command else {command}
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    composed = {" ".join(s["command"]) for s in compose["services"].values() if s.get("command", [""])[0] == "firefeed"}
    return {"Procfile": procfile, "systemd": systemd, "compose": composed}


def test_systemd_procfile_and_compose_run_the_commands_the_docs_and_readme_show() -> None:
    docs = set(documented_commands(ROOT / "docs" / "operations.md"))
    readme = set(documented_commands(ROOT / "README.md"))
    assert readme == docs
    services = docs - {"firefeed migrate"}
    for name, commands in deploy_commands().items():
        assert commands - {"firefeed migrate"} == services, name
        assert commands <= docs, name


def test_the_compose_file_declares_every_service_with_a_healthcheck() -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services = compose["services"]
    expected = {"postgres", "redis", "api", "beat", "flower", "prometheus"} | {f"worker-{q}" for q in QUEUES}
    assert expected <= set(services)
    for name in expected:
        check = services[name].get("healthcheck")
        assert check and check["test"][0] in ("CMD", "CMD-SHELL"), name
    for name, service in services.items():
        for dep in service.get("depends_on", {}):
            assert dep in services, (name, dep)
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            assert source.startswith(".") or source in compose["volumes"], (name, volume)
    for q, offset in zip(QUEUES, range(6), strict=True):
        assert f":{9810 + offset}/metrics" in json.dumps(services[f"worker-{q}"]["healthcheck"])
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        done = subprocess.run(
            ["docker", "compose", "-f", str(DEPLOY / "docker-compose.yml"), "config", "--quiet"],
            env=dict(os.environ, FIREFEED_FLOWER_PASSWORD="x"),
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr


def test_the_prometheus_config_passes_promtool_and_scrapes_api_and_workers() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail(PROMTOOL_HINT)
    done = subprocess.run([promtool, "check", "config", str(DEPLOY / "prometheus.yml")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    targets = {t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    workers = {"worker-pipeline:9810", "worker-import:9811", "worker-rules:9812", "worker-export:9813"}
    assert {"api:8000", "worker-control:9814", *workers} <= targets


def test_the_grafana_dashboard_only_charts_metrics_that_exist(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not redis_available():
        # No Redis to read queue depths from: zeros stand in, so the collector still lists that family.
        monkeypatch.setattr(metrics, "redis_queue_depths", lambda url, queues: dict.fromkeys(queues, 0))
    dashboard = json.loads((DEPLOY / "grafana" / "firefeed-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {re.sub(r"_(bucket|count|sum)$", "", m) for e in exprs for m in re.findall(r"firefeed_\w+", e)}
    from prometheus_client import CollectorRegistry, generate_latest

    fleet = CollectorRegistry(auto_describe=False)
    fleet.register(metrics.FleetCollector(broker_url=DOCTOR_REDIS_URL, cache_s=0))
    body = metrics.render(fleet=False)[0] + generate_latest(fleet)
    known = set(re.findall(r"^# TYPE (firefeed_\w+) ", body.decode(), flags=re.M))
    known = {name for name in known if not name.endswith("_created")}  # prometheus_client's creation stamps
    assert used and used <= known, used - known
    documented = (ROOT / "docs" / "operations.md").read_text()
    assert all(name in documented for name in known), known - {n for n in known if n in documented}


@requires_shared_broker
@pytest.mark.stress  # a real worker fleet for one warning: 16 s, run by `make stress`
def test_doctor_warns_when_workers_answer_but_no_control_worker_does(database_url: str, tmp_path: Path) -> None:
    """Without a control worker, triggers by task name and beat's ticks wait in its queue: say so."""
    broker = broker_url(DOCTOR_REDIS_URL)
    flush_broker(broker)
    env = worker_env(database_url, broker, tmp_path)
    try:
        with celery_workers(env, queues=("pipeline",), log_dir=tmp_path):
            done = doctor(database_url, tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr  # a warning, not a failure
        assert re.search(r"warn\s+workers\s+1 answer \(pipeline\), none of them a control worker", done.stdout)
        assert "start `firefeed worker control`" in done.stdout
        with celery_workers(env, queues=("pipeline", "control"), log_dir=tmp_path):
            done = doctor(database_url, tmp_path)
        assert re.search(r"ok\s+workers\s+2 answer: pipeline, control", done.stdout), done.stdout
    finally:
        flush_broker(broker)
