"""Errors in the words of the command line: a config check names its dataclass field
(``masked_lm_prob must be in (0, 1)``), where the user typed a flag (``--masked-lm-prob``).

The command's parser knows which flag fills which field (argparse's ``dest``), so the one line
``bertkit CMD: error: ...`` names the flag instead. Only a snake_case word that opens the message
or one of its ``; ``-joined clauses is read as a field name (a config check's ``FIELD must ...``):
``format`` or ``output`` are also plain words, and a word further in may be a key of a file the
message is about (``config.json: vocab_size 30522 ...`` stays as written)."""

from __future__ import annotations

import argparse
import re

_FIELD = re.compile(r"(^|; )([a-z][a-z0-9]*(?:_[a-z0-9]+)+)(?= )")


def command_flags(parser: argparse.ArgumentParser, command: str) -> dict[str, str]:
    """``{dest: its first long flag}`` of subcommand ``command`` of the top-level ``parser``
    and of its own subcommands (``finetune glue``, ``finetune ner``, ...), the first kept."""
    out: dict[str, str] = {}
    stack = [_subcommand(parser, command)]
    while stack:
        p = stack.pop(0)
        if p is None:
            continue
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())
                continue
            long = [o for o in action.option_strings if o.startswith("--")]
            if long:
                out.setdefault(action.dest, long[0])
    return out


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get(name)
    return None


def in_flags(message: str, flags: dict[str, str]) -> str:
    """``message`` with the field name opening each clause replaced by the flag that fills it.

    >>> in_flags("masked_lm_prob must be in (0, 1); max_seq_length must be >= 5",
    ...          {"masked_lm_prob": "--masked-lm-prob", "max_seq_length": "--max-seq-length"})
    '--masked-lm-prob must be in (0, 1); --max-seq-length must be >= 5'
    >>> in_flags("config.json: vocab_size 9 is not 12", {"vocab_size": "--vocab-size"})
    'config.json: vocab_size 9 is not 12'
    """
    return _FIELD.sub(lambda m: m.group(1) + flags.get(m.group(2), m.group(2)), message)
