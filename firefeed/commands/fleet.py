"""`firefeed fleet`: the whole fleet on one machine, in the foreground, until Ctrl-C.

The API, one worker per queue (as `firefeed worker QUEUE`), beat and Flower, each a
child process whose output is printed with its name in front. With no database
configured the fleet starts the embedded Postgres once and owns it (every child
gets its URL, so none starts a server of its own); with no broker configured it
puts one on that database (`_dbbroker`), so a bare laptop runs the same fleet as a
cluster does. Migrations run once, here, before any child starts.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import sys
from typing import Any

from firefeed.commands._procs import Child, Fleet, child_env
from firefeed.tasks.queues import ALL_QUEUES

SWEEP_EVERY_S = 60.0


def _port_free(host: str, port: int) -> bool:
    """Whether the API and Flower can listen on `port`: bound as they bind it, with SO_REUSEADDR.

    Without it, the connections of a fleet just stopped (in TIME_WAIT for a minute, nothing
    listening) made the port look taken, though uvicorn and Flower would have bound it.
    """
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def fleet_children(
    args: argparse.Namespace, env: dict[str, str], flower_env: dict[str, str], python: str = sys.executable
) -> list[Child]:
    """The fleet's processes, in start order: the API, a worker per queue, beat, Flower."""
    cli = [python, "-m", "firefeed.cli"]
    children = [Child("api", [*cli, "api", "--host", args.host, "--port", str(args.port)], env)]
    children += [Child(q, [*cli, "worker", q, "--loglevel", args.loglevel], env) for q in ALL_QUEUES]
    children.append(Child("beat", [*cli, "beat", "--loglevel", args.loglevel], env))
    flower = [*cli, "flower", "--port", str(args.flower_port), "--address", args.host]
    children.append(Child("flower", flower, {**env, **flower_env}))
    return children


def cmd_fleet(args: argparse.Namespace) -> int:
    from firefeed.cli import ensure_migrated
    from firefeed.commands._dbbroker import BROKER_SCHEMA, broker_url_on, prepare, sweep
    from firefeed.commands.ops import _mask
    from firefeed.config import get_settings

    settings = get_settings()
    args.flower_port = args.flower_port or settings.flower_port
    taken = [p for p in (args.port, args.flower_port) if not _port_free(args.host, p)]
    if taken:
        print(
            f"firefeed: port {', '.join(map(str, taken))} on {args.host} is taken: "
            "choose others with --port (the API) and --flower-port",
            file=sys.stderr,
        )
        return 2

    overrides: dict[str, str] = {}
    # Unset: this starts the embedded Postgres, owned by this process and stopped when it exits, last.
    database_url = settings.sqlalchemy_url
    if settings.database_url is None:
        overrides["FIREFEED_DATABASE_URL"] = database_url
    ensure_migrated()
    embedded_broker = settings.broker_url is None
    if embedded_broker:
        broker_url = broker_url_on(database_url)
        prepare(database_url, broker_url)
        sweep(database_url)
        overrides["FIREFEED_BROKER_URL"] = broker_url
    flower_env: dict[str, str] = {}
    password = settings.flower_password
    if password is None:
        password = secrets.token_urlsafe(12)
        flower_env["FIREFEED_FLOWER_PASSWORD"] = password

    env = child_env(os.environ, **overrides)
    fleet = Fleet(fleet_children(args, env, flower_env), grace_s=args.grace)
    where = "embedded Postgres" if settings.database_url is None else "FIREFEED_DATABASE_URL"
    fleet.say(f"database  {_mask(database_url)} ({where})")
    if embedded_broker:
        fleet.say(f"broker    embedded, on that database (schema {BROKER_SCHEMA}); FIREFEED_BROKER_URL is unset")
    else:
        fleet.say(f"broker    {_mask(settings.broker_url or '')}")
    fleet.say(f"api       http://{args.host}:{args.port}/  (API docs /docs)")
    login = f"user {settings.flower_user}, password "
    if flower_env:
        login += f"{password} (generated for this fleet; set FIREFEED_FLOWER_PASSWORD to choose one)"
    else:
        login += "FIREFEED_FLOWER_PASSWORD"
    fleet.say(f"flower    http://{args.host}:{args.flower_port}/  {login}")
    if embedded_broker:
        fleet.say("flower    the embedded broker carries no worker events: set FIREFEED_BROKER_URL for a live one")

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, fleet.request_stop)
    code = 1
    try:
        fleet.start()
        fleet.say("running: Ctrl-C stops every process")
        code = fleet.supervise((lambda: sweep(database_url)) if embedded_broker else None, SWEEP_EVERY_S)
    finally:
        if fleet.running():
            fleet.stop()
        if settings.database_url is None:
            fleet.say("the embedded Postgres stops as this command exits (unless another FireFeed process uses it)")
        fleet.say("stopped")
    return code


def register(sub: Any) -> None:
    p = sub.add_parser(
        "fleet",
        help="the whole fleet on this machine (API, a worker per queue, beat, Flower) until Ctrl-C; "
        "with no broker configured it uses one on the database",
    )
    p.add_argument("--host", default="127.0.0.1", help="address of the API and Flower (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="the API's port (default 8000)")
    p.add_argument("--flower-port", type=int, default=None, help="Flower's port (default FIREFEED_FLOWER_PORT, 5555)")
    p.add_argument("--loglevel", default="INFO", help="the workers' and beat's log level (default INFO)")
    p.add_argument(
        "--grace", type=float, default=10.0, help="seconds a process may take to stop before it is killed (default 10)"
    )
    p.set_defaults(func=cmd_fleet)
