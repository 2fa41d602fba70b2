"""``bertkit serve``: an HTTP server for every head (bertkit.serve), bound to 127.0.0.1 by default.

    bertkit serve --model MODEL_DIR                       # the folder decides the task
    bertkit serve --model embed=minilm --model ner=out/ner --port 8080 --api-key SECRET

The flags are the fields of :class:`bertkit.serve.settings.ServeSettings`.
"""

from __future__ import annotations

import argparse
import dataclasses

from bertkit.cli import options

HELP = "serve models over HTTP (embeddings in TEI and OpenAI shapes, classify, NER, QA, fill-mask)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from bertkit.serve.settings import ServeSettings

    p.add_argument("--model", dest="models", action="append", required=True, metavar="[NAME=]DIR",
                   help="a model folder (repeat for several; NAME= names it for the 'model' field)")  # fmt: skip
    names = [f.name for f in dataclasses.fields(ServeSettings)
             if f.name not in ("models", "precision", "device")]  # fmt: skip
    options.add_fields(p, ServeSettings, names, choices={"pooling": ("mean", "cls", "max")})
    options.add_precision(p)
    options.add_device(p)


def _graceful_server_class():
    import contextlib
    import signal

    import uvicorn

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

    return GracefulServer


def run(args: argparse.Namespace) -> int:
    import json
    import os
    import sys

    import uvicorn

    from bertkit.serve.app import SETTINGS_ENV, create_app
    from bertkit.serve.settings import ServeSettings

    settings = options.values(args, ServeSettings)
    _GracefulServer = _graceful_server_class()
    print(f"bertkit serve: http://{settings.host}:{settings.port} (docs at /docs, page at /); "
          f"models: {', '.join(f'{n}={d}' for n, d in settings.named_models().items())}", file=sys.stderr)  # fmt: skip
    if settings.workers == 1:
        config = uvicorn.Config(create_app(settings), host=settings.host, port=settings.port,
                                log_level="info")  # fmt: skip
        _GracefulServer(config).run()
    else:
        os.environ[SETTINGS_ENV] = json.dumps(dataclasses.asdict(settings))
        uvicorn.run("bertkit.serve.app:app_from_env", factory=True, host=settings.host,
                    port=settings.port, workers=settings.workers, log_level="info")  # fmt: skip
    return 0
