"""``bertkit quickstart``: raw text to a pre-trained tiny BERT on the built-in corpus, in minutes.

A thin layer over :func:`bertkit.recipes.quickstart.run_quickstart`; the options are the fields
of :class:`~bertkit.recipes.quickstart_settings.QuickstartSettings` (the measured recipe's
defaults).
"""

from __future__ import annotations

import argparse
import dataclasses

from bertkit.cli import options

HELP = "pre-train a tiny BERT on the built-in corpus and show what it learned (under 10 minutes)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from bertkit.recipes.quickstart_settings import QuickstartSettings

    names = [f.name for f in dataclasses.fields(QuickstartSettings) if f.name != "precision"]
    options.add_fields(p, QuickstartSettings, names)
    options.add_precision(p)


def run(args: argparse.Namespace) -> int:
    from bertkit.recipes.quickstart import run_quickstart
    from bertkit.recipes.quickstart_settings import QuickstartSettings

    run_quickstart(options.values(args, QuickstartSettings))
    return 0
