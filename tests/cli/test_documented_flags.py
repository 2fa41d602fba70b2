"""Every `bertkit COMMAND ... --flag` that README.md and docs/*.md show as a command is a flag of
that command's parser, and a value given to a flag with choices is one of them.

Users copy these lines. Commands are read where the docs write them as commands: lines of fenced
shell blocks (```bash, ```sh, ``` ...), indented command lines, and inline code spans holding
``bertkit ``. Only the command part counts: comments after ``#`` and prose are not read, and a
``--flag`` of another program on the line (torchrun's ``--nproc-per-node``) comes before
``bertkit``, so it is not taken for one of ours.
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from bertkit.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_BLOCKS = {"", "bash", "sh", "shell", "console"}
FLAG = re.compile(r"--[a-zA-Z][\w-]*")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_.|]*$|\.\.\.")  # N, FILE, DIR..., KEY


@cache
def parsers() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """(), ("embed",), ("finetune", "glue"), ... -> that command's parser."""
    found: dict[tuple[str, ...], argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        found[path] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))

    walk(build_parser(), ())
    return found


def code_part(line: str) -> str:
    """The line up to a ``#`` that starts a shell comment (outside quotes)."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def command_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, command text) of every place ``text`` (Markdown) writes a shell command."""
    lines = text.split("\n")
    block: str | None = None
    pending, start = "", 0
    for n, line in enumerate(lines, 1):
        fence = re.match(r"\s*```(\w*)", line)
        if fence:
            block = None if block is not None else fence.group(1)
            continue
        if block is not None:
            if block not in SHELL_BLOCKS:
                continue
            code = code_part(line).rstrip()
            if code.endswith("\\"):  # a continued command
                pending, start = pending + code[:-1] + " ", start or n
                continue
            yield start or n, pending + code
            pending, start = "", 0
        elif re.match(r" {4,}(bertkit|\$B) ", line):
            yield n, code_part(line)
        else:
            for span in re.findall(r"`([^`\n]+)`", line):
                if re.search(r"(^|[\s/])bertkit ", span):
                    yield n, span


def commands(code: str) -> Iterator[list[str]]:
    """The argument lists after ``bertkit`` (``bertkit``, ``.venv/bin/bertkit``, ``$B``,
    ``-m bertkit``) in a line that may hold several commands joined by ``|``, ``&&`` or ``;``."""
    for part in re.split(r"\s(?:\|\||&&|\|)\s|;\s", code):  # not the | of mean|cls|max
        try:
            words = shlex.split(part)
        except ValueError:  # an unbalanced quote in prose-like text
            words = part.split()
        for i, word in enumerate(words):
            if word in ("bertkit", "$B") or word.endswith("/bertkit"):
                yield [w.strip("[]") for w in words[i + 1 :] if w.strip("[]")]
                break


def problems(args: list[str]) -> list[str]:
    """What in ``bertkit ARGS`` the parser would not take: unknown flags, values outside a
    flag's choices (placeholders such as N or FILE are not values; ``a|b`` offers both)."""
    table = parsers()
    path: tuple[str, ...] = ()
    rest = list(args)
    while rest and (*path, rest[0]) in table:
        path = (*path, rest.pop(0))
    options = {o: a for a in table[path]._actions for o in a.option_strings}
    found = []
    for i, word in enumerate(rest):
        m = FLAG.fullmatch(word.split("=", 1)[0])
        if not m:
            continue
        flag = m.group(0)
        command = " ".join(("bertkit", *path))
        if flag not in options:
            found.append(f"{command}: no flag {flag}")
            continue
        choices = options[flag].choices
        value = word.split("=", 1)[1] if "=" in word else (rest[i + 1 : i + 2] or [""])[0]
        literal = value and not value.startswith("-") and not PLACEHOLDER.search(value)
        # a|b|c: the alternatives a synopsis offers, each a choice
        if choices and literal and not set(value.split("|")) <= set(choices):
            found.append(f"{command}: {flag} {value} is not one of {list(choices)}")
    return found


def reported(markdown: str) -> list[str]:
    """Every problem of every command in ``markdown``."""
    return [p for _, code in command_lines(markdown) for a in commands(code) for p in problems(a)]


def documented_commands() -> list[tuple[str, list[str]]]:
    out = []
    for doc in DOCS:
        for n, code in command_lines(doc.read_text(encoding="utf-8")):
            for args in commands(code):
                out.append((f"{doc.relative_to(ROOT)}:{n}", args))
    return out


def test_every_documented_flag_is_a_flag_of_its_command() -> None:
    found = documented_commands()
    with_flags = [args for _, args in found if any(a.startswith("--") for a in args)]
    assert len(with_flags) >= 50, "the docs' commands were not found: is the extraction broken?"
    bad = [f"{where}: {p}" for where, args in found for p in problems(args)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("```bash\nbertkit embed --model M --inptu x.txt\n```", "bertkit embed: no flag --inptu"),
        ("    bertkit finetune glue --task RTE --lr 1e-4", "bertkit finetune glue: no flag --lr"),
        ("Run `bertkit serve --precision int4`.", "--precision int4 is not one of"),
        ("```sh\n$B pretrain --data d \\\n    --no-such-flag\n```", "no flag --no-such-flag"),
    ],
)
def test_a_wrong_flag_is_reported(markdown: str, expected: str) -> None:
    """The negative control: the extraction sees code blocks, indented lines, inline spans and
    continued lines, and a flag the command lacks is reported."""
    found = reported(markdown)
    assert any(expected in p for p in found), found


def test_comments_prose_and_other_programs_are_not_read() -> None:
    markdown = (
        "```bash\n"
        "torchrun --nproc-per-node 2 -m bertkit pretrain --data d --output o  # --max-restarts N\n"
        "```\n"
        "`--not-a-command-flag` alone in prose, and `python -m benchmarks.x --rows 1`.\n"
    )
    assert reported(markdown) == []
