"""The ``bertkit`` command: one registry mapping subcommands to thin modules over library code.

Each command module defines ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``.
Modules import heavy libraries (torch) inside ``run`` so ``bertkit --help`` stays fast.
Errors derived from BertkitError print as one line (no traceback) unless ``--debug`` is given.
A reader of stdout that stops early (``bertkit tokenize ... | head``) ends the command quietly
with status 141, as a Unix tool killed by SIGPIPE.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import select
import sys

# subcommand -> module under bertkit.cli
COMMANDS: dict[str, str] = {
    "quickstart": "bertkit.cli.quickstart",
    "train-vocab": "bertkit.cli.vocab",
    "tokenize": "bertkit.cli.tokenize",
    "prepare-pretraining": "bertkit.cli.prepare",
    "pretrain": "bertkit.cli.pretrain",
    "finetune": "bertkit.cli.finetune",
    "evaluate": "bertkit.cli.evaluate",
    "predict": "bertkit.cli.predict",
    "embed": "bertkit.cli.embed",
    "mine": "bertkit.cli.mine",
    "search": "bertkit.cli.search",
    "fill-mask": "bertkit.cli.fill_mask",
    "serve": "bertkit.cli.serve",
    "export": "bertkit.cli.export",
    "convert": "bertkit.cli.convert",
    "env": "bertkit.cli.env",
}


class CommandParser(argparse.ArgumentParser):
    """A subcommand's parser (``bertkit embed``, ``bertkit finetune glue``): an argument it does
    not know is its own error, ``bertkit embed: error: unrecognized arguments: ...`` under its
    usage (exit status 2), as git reports it. argparse runs a subcommand's parser with
    ``parse_known_args`` and hands what is left to the top-level parser, which would report it
    as ``bertkit: error: ...`` with the top-level usage. Nested subcommands get this class too
    (``add_subparsers`` uses the parent's class), so the innermost command reports."""

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bertkit", description="BERT, from raw text to a usable encoder."
    )
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    for name, module_name in COMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name == module_name:  # command not built yet
                continue
            raise
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        p.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help="show full tracebacks"
        )
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    from bertkit import errors
    from bertkit.errors import BertkitError

    errors.program = f"bertkit {args.command}"
    _show_hardware_log(args.command)
    try:
        from bertkit.cli.options import resolve_model

        resolve_model(args)
        _warn_unfinished(args)
        return int(args._run(args) or 0)
    except BertkitError as e:
        if args.debug:
            raise
        from bertkit.cli.error_flags import command_flags, in_flags

        message = in_flags(str(e), command_flags(parser, args.command))
        print(f"bertkit {args.command}: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"bertkit {args.command}: interrupted{_kept(args)}", file=sys.stderr)
        return 130
    except BrokenPipeError:
        if not _stdout_closed():  # another pipe broke (a worker's): a real error
            raise
        return 141  # 128 + SIGPIPE, what a shell reports for `yes | head`


def _warn_unfinished(args: argparse.Namespace) -> None:
    """One line on stderr when ``--model`` (or ``--teacher``) is an interrupted fine-tuning
    job's folder: it loads, but it is not what the job would have selected."""
    for name in ("model", "teacher"):
        folder = getattr(args, name, None)
        if not isinstance(folder, (str, os.PathLike)) or not os.path.isdir(folder):
            continue
        from bertkit.training.model_dir import unfinished_model_note

        note = unfinished_model_note(folder)
        if note:
            print(f"bertkit {args.command}: warning: {note}", file=sys.stderr)


def _kept(args: argparse.Namespace) -> str:
    """``: DIR keeps ...`` when the command was writing an output folder it can go on with: a
    sharded output (``lines 1-N``), a fine-tuning job's (its best model so far) or a
    pre-training run's (its newest checkpoint)."""
    output = getattr(args, "output", None)
    if not isinstance(output, (str, os.PathLike)) or not os.path.isdir(output):
        return ""
    if args.command == "finetune":
        from bertkit.training.model_dir import unfinished_note as kept_note
    elif args.command == "pretrain":
        from bertkit.training.resume import kept_note
    else:
        from bertkit.inference.sharded import kept_note

    note = kept_note(output)
    return f": {note}" if note else ""


def _stdout_closed() -> bool:
    """After a BrokenPipeError: whether it was stdout's reader that went away (the pipe's write
    end then polls as an error). If so, stdout is pointed at /dev/null, so the interpreter's final
    flush of what is still buffered does not raise (and print a traceback) a second time."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
    except (AttributeError, OSError, ValueError):  # no real stdout, or no poll() here
        return False
    poller.register(fd, select.POLLOUT)
    if not any(events & select.POLLERR for _, events in poller.poll(0)):
        return False
    os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
    return True


def entry() -> None:
    """The ``bertkit`` program (console script and ``python -m bertkit``): :func:`main`, then
    exit; a torchrun rank exits without the interpreter's finalization
    (:func:`bertkit.training.distributed.exit_process`)."""
    code = main()
    if "bertkit.training.distributed" in sys.modules:  # only a command that may have joined
        from bertkit.training.distributed import exit_process

        exit_process(code)
    sys.exit(code)


def _show_hardware_log(command: str) -> None:
    """Kernel decisions and precision notices (logger ``bertkit.hardware``) go to stderr, one
    line each, as ``bertkit COMMAND: ...``."""
    logger = logging.getLogger("bertkit.hardware")
    handler = next((h for h in logger.handlers if isinstance(h, _StderrHandler)), None)
    if handler is None:
        handler = _StderrHandler()
        logger.addHandler(handler)
    handler.setFormatter(logging.Formatter(f"bertkit {command}: %(message)s"))
    logger.setLevel(logging.INFO)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time of each message."""

    @property  # type: ignore[override]
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


if __name__ == "__main__":
    sys.exit(main())
