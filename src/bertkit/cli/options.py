"""Command-line flags built from their single definitions: dataclass fields and registries.

A flag's default comes from the dataclass field, its help from the field's docstring (the string
literal under the field, read from the source once), its choices from the registry that owns
them (precisions, model sizes, optimizers). Commands add only what has no dataclass home.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import itertools
import os
import textwrap
import types
import typing
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

from bertkit import precision as P

DEVICE_HELP = (
    "auto, cpu, cuda or cuda:N (default auto: CUDA when available; "
    "under torchrun every cuda form is cuda:LOCAL_RANK)"
)


@cache
def field_docs(cls: type) -> dict[str, str]:
    """``{field: first sentence of its docstring}`` for a dataclass and its bases."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body  # type: ignore[attr-defined]
        for node, nxt in itertools.pairwise(body):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _base_type(hint: Any) -> tuple[Any, bool]:
    """(the type without ``| None``, whether None is allowed)."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0], True
    return hint, False


def field_home(cls: type, name: str) -> tuple[type, str]:
    """The dataclass that defines the field ``name`` of ``cls``, and the field's name there.

    ``name`` is a field of ``cls`` or a dotted path through fields that hold a dataclass:
    ``field_home(PrepareSettings, "instance.max_seq_length") == (InstanceConfig,
    "max_seq_length")``."""
    *path, leaf = name.split(".")
    for part in path:
        cls, _optional = _base_type(typing.get_type_hints(cls)[part])
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"{name}: {part} does not hold a dataclass")
    return cls, leaf


def add_fields(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    names: Iterable[str],
    *,
    flags: dict[str, str] | None = None,
    choices: dict[str, Iterable[str]] | None = None,
    help: dict[str, str] | None = None,
    dest_prefix: str = "",
    metavars: dict[str, tuple[str, ...]] | None = None,
    saved: bool = False,
) -> None:
    """One flag per dataclass field in ``names``: ``--field-name`` (or ``flags[name]``), with the
    field's type, default and docstring; ``dest`` is ``dest_prefix + name``.

    ``bool`` fields become ``--x/--no-x``; ``tuple[T, ...]`` fields take one or more values.
    ``saved``: every default is None, meaning "as saved with the model" (evaluate, predict).
    A dotted name (``part.field``, see :func:`field_home`) is a field of a nested dataclass: its
    flag and ``dest`` are named by ``field`` alone (flat), its type, default and docstring are
    its own class's; the dicts are keyed by the name as given. Read them back with :func:`given`.
    """
    hints: dict[type, dict[str, Any]] = {}
    for name in names:
        home, leaf = field_home(cls, name)
        if home not in hints:
            hints[home] = typing.get_type_hints(home)
        f = {f.name: f for f in dataclasses.fields(home)}[leaf]
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required:
            default = None
        elif f.default is not dataclasses.MISSING:
            default = f.default
        else:
            default = f.default_factory()
        kind, _optional = _base_type(hints[home][leaf])
        kw: dict[str, Any] = {"dest": dest_prefix + leaf, "default": None if saved else default}
        if required:
            kw["required"] = True
        text = (help or {}).get(name) or field_docs(home).get(leaf, "")
        if typing.get_origin(kind) is tuple:
            parts = typing.get_args(kind)
            fixed = Ellipsis not in parts
            kw.update(type=parts[0], nargs=len(parts) if fixed else "+")
            if not saved:
                kw["default"] = list(default or ())
        elif kind is bool:
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw["type"] = Path if kind is Path else kind
        flag = (flags or {}).get(name, _flag(leaf))
        if metavars and name in metavars:
            kw["metavar"] = metavars[name]
        elif kind is not bool:
            kw["metavar"] = flag.lstrip("-").replace("-", "_").upper()
        if choices and name in choices:
            kw["choices"] = list(choices[name])
        shown = (
            " (default: as saved with the model)"
            if saved
            else ""
            if default is None or isinstance(default, bool) or default == ()
            else f" (default {_show(default)})"
        )
        kw["help"] = (text + shown).replace("%", "%%")
        parser.add_argument(flag, **kw)


def _show(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return " ".join(str(v) for v in value)
    return str(value)


def values(
    args: argparse.Namespace,
    cls: type,
    names: Iterable[str] | None = None,
    dest_prefix: str = "",
    **extra: Any,
) -> Any:
    """``cls(**fields found in args, **extra)``: the dataclass the flags of :func:`add_fields`
    fill (only ``names`` when given; the other fields keep their defaults). The names are fields
    of ``cls`` itself: flags of nested fields are read with :func:`given`."""
    kwargs: dict[str, Any] = {}
    wanted = None if names is None else set(names)
    if wanted and any("." in n for n in wanted):
        raise TypeError(f"values() fills the fields of {cls.__name__} itself; use given()")
    for f in dataclasses.fields(cls):
        if wanted is not None and f.name not in wanted:
            continue
        if hasattr(args, dest_prefix + f.name):
            value = getattr(args, dest_prefix + f.name)
            kwargs[f.name] = tuple(value) if isinstance(value, list) else value
    kwargs.update(extra)
    return cls(**kwargs)


def given(args: argparse.Namespace, names: Iterable[str], dest_prefix: str = "") -> dict[str, Any]:
    """``{flat name: value}`` of the flags :func:`add_fields` built for ``names`` (a dotted name
    by its last part, lists back to tuples): the flat record of a dataclass that reads one, such
    as ``PrepareSettings.from_record``."""
    out = {}
    for name in names:
        leaf = name.rpartition(".")[2]
        value = getattr(args, dest_prefix + leaf)
        out[leaf] = tuple(value) if isinstance(value, list) else value
    return out


def add_precision(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, inference: bool = False
) -> None:
    """``--precision``: the same choices and default for every command (bertkit.precision); the
    inference commands (``inference=True``) also offer int8."""
    choices, text = (P.INFERENCE_CHOICES, P.INFERENCE_HELP) if inference else (P.CHOICES, P.HELP)
    parser.add_argument("--precision", choices=choices, default=P.DEFAULT, help=text)


def add_device(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--device``: one default for every command (CUDA when available)."""
    parser.add_argument("--device", default="auto", help=DEVICE_HELP)


def loading_values(args: argparse.Namespace) -> dict[str, Any]:
    """The loading keywords of ``Embedder.load`` / ``TaskModel.load`` from the flags of
    :func:`add_device`, :func:`add_precision`, :func:`add_batch_size`, :func:`add_allow_pickle`
    and :func:`add_split_special_tokens`, for a command that loads one or more models."""
    return {
        "device": args.device,
        "precision": args.precision,
        "batch_size": args.batch_size,
        "allow_pickle": args.allow_pickle,
        "split_special_tokens": args.split_special_tokens,
    }


def add_split_special_tokens(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, default: bool = False
) -> None:
    """``--split-special-tokens``: literal [CLS], [SEP], [MASK] ... in the input are text, not
    special tokens (untrusted input cannot inject one)."""
    parser.add_argument(
        "--split-special-tokens",
        action=argparse.BooleanOptionalAction,
        default=default,
        help="treat literal [CLS]/[SEP]/[MASK]/[PAD]/[UNK] in the input as text "
        f"(default: {'yes' if default else 'no, as transformers'})",
    )


def add_batch_size(parser: argparse.ArgumentParser | argparse._ArgumentGroup, cls: type) -> None:
    """``--batch-size`` of the inference commands, its default the ``batch_size`` field of
    ``cls``, the class the command loads (``Embedder``, ``FillMasker``, ``TaskModel``)."""
    (default,) = (f.default for f in dataclasses.fields(cls) if f.name == "batch_size")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=default,
        help=f"inputs per forward pass, batched by length (default {default})",
    )


def add_encoding_errors(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--encoding-errors`` of the commands that read text lines (train-vocab, tokenize, embed):
    the corpus reading field :attr:`~bertkit.data.corpus.CorpusOptions.encoding_errors`, with
    the choices of :data:`bertkit.io.ENCODING_ERRORS`."""
    from bertkit.data.corpus import CorpusOptions
    from bertkit.io import ENCODING_ERRORS

    add_fields(
        parser, CorpusOptions, ("encoding_errors",), choices={"encoding_errors": ENCODING_ERRORS}
    )


def add_cased(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--cased`` of the commands that build their own tokenizer from a vocabulary (train-vocab,
    tokenize, prepare-pretraining): ``do_lower_case = not args.cased``."""
    parser.add_argument(
        "--cased", action="store_true", help="keep case and accents (default: uncased)"
    )


def add_model(parser: argparse.ArgumentParser | argparse._ArgumentGroup, help: str) -> None:
    """``--model`` (a folder or a Hugging Face Hub id) and ``--revision``, for every command that
    loads one model; :func:`resolve_model` turns them into the folder before the command runs."""
    parser.add_argument(
        "--model",
        required=True,
        metavar="FOLDER|HUB_ID",
        help=f"{help}, or a Hub id (ORG/NAME) fetched into the Hugging Face "
        "cache (HF_HUB_OFFLINE=1: the cache only)",
    )
    parser.add_argument(
        "--revision", default=None, help="the Hub id's branch, tag or commit (default: main)"
    )


def resolve_model(args: argparse.Namespace) -> None:
    """``args.model`` becomes a local folder (:func:`bertkit.hub.resolve`) where the command took
    :func:`add_model`'s flags."""
    if not hasattr(args, "revision") or not hasattr(args, "model"):
        return
    from bertkit import hub

    args.model = hub.resolve(
        args.model, args.revision, allow_pickle=getattr(args, "allow_pickle", False)
    )


def add_overwrite(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--overwrite``: convert, prepare-pretraining and finetune refuse a non-empty --output."""
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace what an existing, non-empty --output holds (default: refuse it)",
    )


def add_allow_pickle(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--allow-pickle",
        action="store_true",
        help="permit pytorch_model.bin checkpoints (read with torch.load weights_only)",
    )


WINDOW_FIELDS = ("truncate", "doc_stride", "window_pooling")
"""The long-input flags, fields of :class:`bertkit.tasks.windows.WindowConfig`."""


WINDOW_LENGTH = "the window length"
"""How :class:`~bertkit.tasks.windows.WindowConfig`'s docstrings name the window length, which
:func:`add_windows` replaces by what sets it in each command."""


def add_max_length(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--max-length`` of the commands that embed (embed, mine): the window an embedding model
    reads, the ``length`` :func:`add_windows` names."""
    parser.add_argument(
        "--max-length",
        type=int,
        default=None,
        help="tokens per window (default: the folder's max_seq_length, else the model's limit)",
    )


def add_windows(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, length: str, saved: bool = False
) -> None:
    """``--truncate``, ``--doc-stride``, ``--window-pooling`` (``saved``: defaults as saved with
    the model, for evaluate and predict). ``length``: what sets the window length in this command
    (its flag, such as ``--max-seq-length`` or embed's ``--max-length``), named in the help where
    the field's docstring says "the window length"."""
    from bertkit.tasks.windows import POOLINGS, WindowConfig

    docs = field_docs(WindowConfig)
    add_fields(
        parser,
        WindowConfig,
        WINDOW_FIELDS,
        choices={"window_pooling": POOLINGS},
        help={n: docs[n].replace(WINDOW_LENGTH, length) for n in WINDOW_FIELDS},
        saved=saved,
    )


def window_values(args: argparse.Namespace) -> dict[str, Any]:
    """The long-input flags given (None: not given)."""
    return {name: getattr(args, name, None) for name in WINDOW_FIELDS}


def is_folder_output(output: str | Path) -> bool:
    """Whether ``--output`` names a folder of shards (``embed``, ``predict``): a path ending in a
    separator, an existing folder, or a name with no suffix."""
    text, path = str(output), Path(output)
    return text.endswith(("/", os.sep)) or path.is_dir() or not path.suffix


def add_streaming(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--shard-size`` and ``--sort-window`` of a folder output
    (:class:`bertkit.inference.sharded.StreamConfig`)."""
    from bertkit.inference.sharded import StreamConfig

    add_fields(parser, StreamConfig, ("shard_size", "sort_window"))


def streaming_values(args: argparse.Namespace):
    from bertkit.inference.sharded import StreamConfig

    return values(args, StreamConfig, ("shard_size", "sort_window"))


def resume_precision(args: argparse.Namespace) -> None:
    """``--precision auto`` continuing a folder output means the precision it was started with:
    auto's choice rests on a timed bf16 probe, which can flip between runs on a busy machine, and
    a resume must not be refused (or mix precisions) for that."""
    from bertkit.inference.sharded import MANIFEST, read_manifest

    if args.precision in (None, P.DEFAULT) and (Path(args.output) / MANIFEST).is_file():
        started = read_manifest(args.output).get("settings", {})
        args.precision = started.get("precision", args.precision)
