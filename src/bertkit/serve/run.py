"""Running the app: one uvicorn process (exit status 0 after a graceful SIGTERM), or several
worker processes, each building the app from the settings passed in the environment."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import tempfile

import uvicorn

from bertkit.serve.app import SETTINGS_ENV, create_app
from bertkit.serve.metrics import MULTIPROC_ENV
from bertkit.serve.settings import ServeSettings


class GracefulServer(uvicorn.Server):
    """uvicorn's server, except that SIGTERM/SIGINT end the process with status 0 once the
    graceful shutdown (stop accepting, finish in-flight requests, stop the workers) is done;
    uvicorn itself re-raises the signal afterwards, so the exit status would be -15."""

    @contextlib.contextmanager
    def capture_signals(self):
        wanted = (signal.SIGINT, signal.SIGTERM)
        previous = {s: signal.signal(s, self.handle_exit) for s in wanted}
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)


def serve(settings: ServeSettings) -> None:
    """Serve until SIGTERM/SIGINT (see the module doc)."""
    if settings.workers == 1:
        config = uvicorn.Config(
            create_app(settings), host=settings.host, port=settings.port, log_level="info"
        )
        GracefulServer(config).run()
        return
    os.environ[SETTINGS_ENV] = json.dumps(dataclasses.asdict(settings))
    # one /metrics over every worker: each writes its values here (bertkit.serve.metrics)
    with tempfile.TemporaryDirectory(prefix="bertkit-metrics-") as values:
        os.environ[MULTIPROC_ENV] = values
        uvicorn.run(
            "bertkit.serve.app:app_from_env",
            factory=True,
            host=settings.host,
            port=settings.port,
            workers=settings.workers,
            log_level="info",
        )
