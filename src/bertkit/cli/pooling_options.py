"""``--pooling`` with ``splade`` among its choices, and the SPLADE settings, for the commands that
read a model either as a dense embedder or as a SPLADE one (embed, evaluate): one definition of
the flags and of which way a command goes (:func:`is_sparse`)."""

from __future__ import annotations

import argparse

from bertkit.cli import options

SPLADE_FLAGS = {
    "pooling_strategy": "--splade-pooling",
    "activation_function": "--splade-activation",
    "max_active_dims": "--max-active-dims",
}
"""The SpladeSpec fields the CLI sets (default: the folder's SpladePooling), and their flags."""


def add_pooling(parser: argparse.ArgumentParser | argparse._ArgumentGroup, help: str) -> None:
    """``--pooling`` (dense poolings and ``splade``; default None: as the folder says) and the
    :data:`SPLADE_FLAGS` (default None: the folder's ``SpladePooling``)."""
    from bertkit.model.pooling import (
        EMBED_POOLINGS,
        SPLADE_ACTIVATIONS,
        SPLADE_STRATEGIES,
        SpladeSpec,
    )

    parser.add_argument("--pooling", choices=EMBED_POOLINGS, default=None, help=help)
    options.add_fields(
        parser,
        SpladeSpec,
        SPLADE_FLAGS,
        flags=SPLADE_FLAGS,
        choices={"pooling_strategy": SPLADE_STRATEGIES, "activation_function": SPLADE_ACTIVATIONS},
        saved=True,
    )


def is_sparse(args: argparse.Namespace) -> bool:
    """``--pooling splade``, or no ``--pooling`` and a SparseEncoder folder; ConfigError for a
    SPLADE flag given with another pooling."""
    from bertkit.errors import ConfigError
    from bertkit.interop.sentence_folder import splade_spec
    from bertkit.model.pooling import SPLADE

    sparse = args.pooling == SPLADE or (
        args.pooling is None and splade_spec(args.model) is not None
    )
    stray = [flag for name, flag in SPLADE_FLAGS.items() if getattr(args, name) is not None]
    if stray and not sparse:
        flags = ", ".join(stray)
        raise ConfigError(f"{flags}: SPLADE settings, for --pooling splade only")
    return sparse


def splade_values(args: argparse.Namespace) -> dict:
    """The SPLADE settings given, as :meth:`SparseEmbedder.load` keywords."""
    return options.given(args, SPLADE_FLAGS)
