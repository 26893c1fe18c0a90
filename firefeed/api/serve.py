"""Running the app with uvicorn: in the foreground (`firefeed api`) or in a thread (tests)."""

from __future__ import annotations

import threading
import time
from types import TracebackType

import uvicorn
from fastapi import FastAPI


def serve(app: FastAPI, host: str, port: int, *, access_log: bool = True) -> None:
    """Serve until interrupted. One process; sync endpoints run on its thread pool."""
    uvicorn.run(app, host=host, port=port, access_log=access_log, log_level="info")


class ServerThread:
    """`with ServerThread(app) as base_url:` serves `app` on 127.0.0.1 and a free port until the block ends."""

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0) -> None:
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="firefeed-api", daemon=True)
        self.host = host

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the API server did not start")
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://{self.host}:{port}"

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
