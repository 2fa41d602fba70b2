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
    from bertkit.model.pooling import POOLINGS
    from bertkit.serve.settings import BACKENDS, ServeSettings

    p.add_argument(
        "--model",
        dest="models",
        action="append",
        required=True,
        metavar="[NAME=]DIR",
        help="a model folder (repeat for several; NAME= names it for the 'model' field)",
    )
    names = [
        f.name
        for f in dataclasses.fields(ServeSettings)
        if f.name not in ("models", "precision", "device")
    ]
    options.add_fields(p, ServeSettings, names, choices={"pooling": POOLINGS, "backend": BACKENDS})
    options.add_precision(p, inference=True)
    options.add_device(p)


def run(args: argparse.Namespace) -> int:
    import sys

    from bertkit.serve.run import serve
    from bertkit.serve.settings import ServeSettings

    settings = options.values(args, ServeSettings)
    print(
        f"bertkit serve: http://{settings.host}:{settings.port} (docs at /docs, page at /); "
        f"models: {', '.join(f'{n}={d}' for n, d in settings.named_models().items())}",
        file=sys.stderr,
    )
    serve(settings)
    return 0
