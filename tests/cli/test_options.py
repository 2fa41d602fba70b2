"""Each option defined once (bertkit/cli/options.py): every flag the CLI builds from a dataclass
field has the field's default, its docstring as help and the registry's choices, in every
subcommand of the registry; and options.py's own functions, on hand-made dataclasses."""

from __future__ import annotations

import argparse
import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bertkit import precision as P
from bertkit.cli import main as cli_main
from bertkit.cli import options


@dataclass
class Built:
    """One flag :func:`options.add_fields` built: the command, the field and how it was asked."""

    command: str
    cls: type
    name: str
    action: argparse.Action
    help: str | None  # the caller's help override, if any
    choices: Any
    saved: bool
    prefix: str = ""


@dataclass
class Registry:
    commands: dict[str, argparse.ArgumentParser]  # ``finetune glue`` -> its parser
    flags: list[Built]


def _commands(
    parser: argparse.ArgumentParser, prefix: str = ""
) -> dict[str, argparse.ArgumentParser]:
    """Every (sub)command's parser, by its words (``finetune glue``), through the subparsers."""
    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                words = f"{prefix} {name}".strip()
                out[words] = sub
                out.update(_commands(sub, words))
    return out


@pytest.fixture(scope="module")
def registry() -> Registry:
    """The registry's parser built with :func:`options.add_fields` watched."""
    calls = []
    original = options.add_fields

    def watch(parser, cls, names, **kw):
        names = list(names)
        original(parser, cls, names, **kw)
        for name in names:
            home, leaf = options.field_home(cls, name)  # a nested field: its own class's
            flag = (kw.get("flags") or {}).get(name, "--" + leaf.replace("_", "-"))
            asked = {k: {leaf: (kw.get(k) or {}).get(name)} for k in ("help", "choices")}
            calls.append((parser._option_string_actions[flag], home, leaf, kw | asked))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(options, "add_fields", watch)
        commands = _commands(cli_main.build_parser())
    where = {id(a): words for words, p in commands.items() for a in p._actions}
    flags = [
        Built(
            where.get(id(action), "?"),
            cls,
            name,
            action,
            (kw.get("help") or {}).get(name),
            (kw.get("choices") or {}).get(name),
            kw.get("saved", False),
            kw.get("dest_prefix", ""),
        )
        for action, cls, name, kw in calls
    ]
    return Registry(commands, flags)


def _default(cls: type, name: str) -> Any:
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def mismatches(flags: list[Built]) -> list[str]:
    """What differs between each flag and its field (empty: every option is defined once)."""
    bad = []
    for b in flags:
        where = f"{b.command} {b.action.option_strings[0]} ({b.cls.__name__}.{b.name})"
        default = _default(b.cls, b.name)
        want = None if b.saved or default is dataclasses.MISSING else default
        if isinstance(want, tuple) or b.action.nargs in ("+", 2, 3):
            want = list(want or ())
        if b.action.default != want:
            bad.append(f"{where}: default {b.action.default!r}, field {want!r}")
        if b.action.required != (default is dataclasses.MISSING):
            bad.append(f"{where}: required={b.action.required}")
        doc = b.help or options.field_docs(b.cls).get(b.name, "")
        text = (b.action.help or "").replace("%%", "%")
        if not doc:
            bad.append(f"{where}: the field has no docstring")
        elif not text.startswith(doc):
            bad.append(f"{where}: help {text!r} is not the field's {doc!r}")
        if b.choices is not None and b.action.choices != list(b.choices):
            bad.append(f"{where}: choices {b.action.choices!r}, registry {list(b.choices)!r}")
    return bad


def hand_made(registry: Registry) -> list[str]:
    """Flags added by hand into a field of a dataclass the same command builds flags from, whose
    default is neither None ("as the field decides") nor the field's."""
    made = {id(b.action) for b in registry.flags}
    fields: dict[str, dict[str, tuple[type, str]]] = {}
    for b in registry.flags:
        for f in dataclasses.fields(b.cls):
            fields.setdefault(b.command, {})[b.prefix + f.name] = (b.cls, f.name)
    bad = []
    for words, sub in registry.commands.items():
        seen = set()
        for action in sub._actions:
            if action.dest in seen:  # argparse takes a dest's default from its first flag
                continue
            seen.add(action.dest)
            hit = fields.get(words, {}).get(action.dest)
            if hit and id(action) not in made and action.default not in (None, _default(*hit)):
                bad.append(
                    f"{words} {action.option_strings[0]}: default {action.default!r}, "
                    f"field {_default(*hit)!r}"
                )
    return bad


def test_the_registry_builds_its_field_flags(registry: Registry) -> None:
    """The watch sees the field flags of the commands known to build them (else the test below
    would check nothing), each reachable as a subcommand of ``bertkit``."""
    commands = {b.command for b in registry.flags}
    assert "?" not in commands
    assert {
        "quickstart",
        "train-vocab",
        "prepare-pretraining",
        "pretrain",
        "finetune glue",
        "finetune squad",
        "evaluate",
        "predict",
        "embed",
        "serve",
        "export onnx",
        "convert",
    } <= commands
    assert len(registry.flags) > 150


def test_every_field_flag_has_its_fields_default_help_and_choices(registry: Registry) -> None:
    assert mismatches(registry.flags) == []


def test_no_hand_made_flag_restates_a_field(registry: Registry) -> None:
    assert hand_made(registry) == []


def test_a_restated_default_or_help_is_caught() -> None:
    """Negative control: a flag whose default, help or choices drifted from its field."""

    @dataclass
    class Settings:
        epochs: int = 3
        """Passes over the data."""
        pooling: str = "mean"
        """How tokens become one vector."""

    p = argparse.ArgumentParser()
    flags = [
        Built(
            "x",
            Settings,
            "epochs",
            p.add_argument("--epochs", default=4, help="Passes over the data."),
            None,
            None,
            False,
        ),
        Built(
            "x",
            Settings,
            "pooling",
            p.add_argument("--pooling", default="mean", help="pooling", choices=["mean"]),
            None,
            ["mean", "cls"],
            False,
        ),
    ]
    assert mismatches(flags) == [
        "x --epochs (Settings.epochs): default 4, field 3",
        "x --pooling (Settings.pooling): help 'pooling' is not the field's "
        "'How tokens become one vector.'",
        "x --pooling (Settings.pooling): choices ['mean'], registry ['mean', 'cls']",
    ]
    hand = argparse.ArgumentParser()
    options.add_fields(hand, Settings, ["epochs"])
    hand.add_argument("--pool", dest="pooling", default="max")
    field_flag = Built("y", Settings, "epochs", _action(hand, "--epochs"), None, None, False)
    assert hand_made(Registry({"y": hand}, [field_flag])) == [
        "y --pool: default 'max', field 'mean'"
    ]


# ---- options.py's own functions ---------------------------------------------------------------


@dataclass
class Base:
    seed: int = 0
    """Random seed
    for everything."""


@dataclass
class Demo(Base):
    data: Path = field(default_factory=lambda: Path("in.txt"))
    """Input file."""
    rate: float | None = None
    """Learning rate, 100% of it."""
    dims: tuple[int, ...] = (8, 4)
    """Sizes to keep."""
    pair: tuple[str, str] = ("a", "b")
    """Two names."""
    fast: bool = True
    """Go fast."""
    mode: str = "mean"
    """Pooling mode."""
    undocumented: int = 1
    name: str = dataclasses.field(default="x")


def _parser(**kw) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="demo")
    options.add_fields(p, Demo, ["seed", "data", "rate", "dims", "pair", "fast", "mode"], **kw)
    return p


def _action(p: argparse.ArgumentParser, flag: str) -> argparse.Action:
    return p._option_string_actions[flag]


def test_field_docs_reads_each_fields_docstring_through_the_bases() -> None:
    assert options.field_docs(Demo) == {
        "seed": "Random seed for everything.",
        "data": "Input file.",
        "rate": "Learning rate, 100% of it.",
        "dims": "Sizes to keep.",
        "pair": "Two names.",
        "fast": "Go fast.",
        "mode": "Pooling mode.",
    }


def test_types_defaults_and_help_of_each_kind() -> None:
    p = _parser()
    a = {f: _action(p, f) for f in ("--seed", "--data", "--rate", "--dims", "--pair", "--mode")}
    assert (a["--seed"].type, a["--seed"].default, a["--seed"].metavar) == (int, 0, "SEED")
    assert (a["--data"].type, a["--data"].default) == (Path, Path("in.txt"))
    assert (a["--rate"].type, a["--rate"].default) == (float, None)  # float | None -> float
    assert (a["--dims"].type, a["--dims"].nargs, a["--dims"].default) == (int, "+", [8, 4])
    assert (a["--pair"].type, a["--pair"].nargs, a["--pair"].default) == (str, 2, ["a", "b"])
    assert a["--seed"].help == "Random seed for everything. (default 0)"
    assert a["--rate"].help == "Learning rate, 100%% of it."  # argparse's % escaped, no default
    assert a["--dims"].help == "Sizes to keep. (default 8 4)"
    args = p.parse_args(["--seed", "3", "--rate", "0.5", "--dims", "1", "2", "3", "--data", "f"])
    assert (args.seed, args.rate, args.dims, args.data) == (3, 0.5, [1, 2, 3], Path("f"))
    assert "100% of it" in p.format_help()


def test_an_empty_tuple_default_shows_no_default() -> None:
    """``bertkit embed --help`` printed "--layers ... (none given: the last layer). (default )"."""

    @dataclass
    class Layers:
        layers: tuple[int, ...] = ()
        """Hidden layers (none given: the last)."""

    p = argparse.ArgumentParser(prog="demo")
    options.add_fields(p, Layers, ["layers"])
    assert _action(p, "--layers").help == "Hidden layers (none given: the last)."
    assert _action(p, "--layers").default == [] and p.parse_args([]).layers == []


def test_bools_are_yes_no_pairs() -> None:
    p = _parser()
    assert isinstance(_action(p, "--fast"), argparse.BooleanOptionalAction)
    assert _action(p, "--no-fast") is _action(p, "--fast")
    assert _action(p, "--fast").help == "Go fast."  # a bool shows no default
    assert p.parse_args([]).fast is True
    assert p.parse_args(["--no-fast"]).fast is False


def test_choices_flags_dest_prefix_metavars_and_help_override() -> None:
    p = _parser(
        choices={"mode": ("mean", "cls")},
        flags={"rate": "--learning-rate"},
        dest_prefix="run_",
        metavars={"pair": ("A", "B")},
        help={"mode": "How to pool."},
    )
    assert _action(p, "--mode").choices == ["mean", "cls"]
    assert _action(p, "--mode").help == "How to pool. (default mean)"
    assert _action(p, "--pair").metavar == ("A", "B")
    assert _action(p, "--learning-rate").metavar == "LEARNING_RATE"
    assert "--rate" not in p._option_string_actions
    args = p.parse_args(["--learning-rate", "2", "--mode", "cls"])
    assert (args.run_rate, args.run_mode, args.run_seed) == (2.0, "cls", 0)
    with pytest.raises(SystemExit):
        p.parse_args(["--mode", "max"])


def test_saved_means_every_default_is_none() -> None:
    p = _parser(saved=True)
    assert _action(p, "--seed").default is None
    assert (
        _action(p, "--seed").help
        == "Random seed for everything. (default: as saved with the model)"
    )
    assert p.parse_args([]).dims is None


def test_a_field_without_default_is_required() -> None:
    @dataclass
    class Needs:
        path: Path
        """Where."""

    p = argparse.ArgumentParser()
    options.add_fields(p, Needs, ["path"])
    assert (_action(p, "--path").required, _action(p, "--path").default) == (True, None)
    assert _action(p, "--path").help == "Where."


def test_values_fills_the_dataclass_from_the_flags() -> None:
    p = _parser(dest_prefix="d_")
    args = p.parse_args(["--dims", "5", "--no-fast"])
    got = options.values(args, Demo, dest_prefix="d_", name="y")
    assert got == Demo(seed=0, data=Path("in.txt"), dims=(5,), fast=False, name="y")
    assert isinstance(got.dims, tuple)  # argparse's list back to the field's tuple
    only = options.values(args, Demo, ["fast"], dest_prefix="d_")
    assert only == Demo(fast=False)


def test_precision_device_and_split_special_tokens() -> None:
    p = argparse.ArgumentParser()
    options.add_precision(p)
    assert (_action(p, "--precision").choices, _action(p, "--precision").default) == (
        P.CHOICES,
        P.DEFAULT,
    )
    q = argparse.ArgumentParser()
    options.add_precision(q, inference=True)
    assert _action(q, "--precision").choices == P.INFERENCE_CHOICES
    assert set(P.INFERENCE_CHOICES) - set(P.CHOICES) == {"int8"}
    options.add_device(q)
    options.add_split_special_tokens(q, default=True)
    assert q.parse_args([]).device == "auto"
    assert q.parse_args([]).split_special_tokens is True
    assert q.parse_args(["--no-split-special-tokens"]).split_special_tokens is False


def test_window_flags_come_from_window_config() -> None:
    from bertkit.tasks.windows import POOLINGS, WindowConfig

    p = argparse.ArgumentParser()
    options.add_windows(p, length="--max-seq-length")
    assert [_action(p, f"--{n.replace('_', '-')}").default for n in options.WINDOW_FIELDS] == [
        getattr(WindowConfig(), n) for n in options.WINDOW_FIELDS
    ]
    assert _action(p, "--window-pooling").choices == list(POOLINGS)
    assert options.window_values(p.parse_args(["--doc-stride", "7"]))["doc_stride"] == 7
    assert options.window_values(argparse.Namespace()) == dict.fromkeys(options.WINDOW_FIELDS)


def test_doc_stride_help_names_each_commands_own_length_flag(registry: Registry) -> None:
    """The default stride is a third of the window length: ``--doc-stride``'s help names what
    sets that length in each command (embed's flag is ``--max-length``), never a flag the command
    does not have."""
    helps = {}
    for words, sub in registry.commands.items():
        action = sub._option_string_actions.get("--doc-stride")
        if action is not None:
            named = set(re.findall(r"--[a-z][a-z-]*", action.help))
            assert named <= set(sub._option_string_actions), (words, action.help)
            helps[words] = action.help
    assert "a third of --max-length," in helps["embed"]
    assert "a third of --max-seq-length," in helps["finetune glue"]
    assert "a third of the model's max_seq_length," in helps["predict"]
    assert {"embed", "evaluate", "predict", "finetune ner", "finetune squad"} <= set(helps)


def test_is_folder_output(tmp_path: Path) -> None:
    assert options.is_folder_output("out/")
    assert options.is_folder_output(tmp_path)
    assert options.is_folder_output(tmp_path / "shards")
    assert not options.is_folder_output(tmp_path / "vectors.npy")


@dataclass(frozen=True)
class Inner:
    depth: int = 2
    """How deep."""
    tags: tuple[str, ...] = ("a",)
    """Tags to keep."""


@dataclass(frozen=True)
class Outer:
    inner: Inner = field(default_factory=Inner)
    """The inner part."""
    spare: Inner | None = None
    """Another, maybe."""
    width: int = 5
    """How wide."""


def test_dotted_names_are_flat_flags_of_nested_fields() -> None:
    assert options.field_home(Outer, "inner.depth") == (Inner, "depth")
    assert options.field_home(Outer, "spare.tags") == (Inner, "tags")  # through ``| None``
    assert options.field_home(Outer, "width") == (Outer, "width")
    with pytest.raises(TypeError, match="width does not hold a dataclass"):
        options.field_home(Outer, "width.depth")
    p = argparse.ArgumentParser()
    names = ["inner.depth", "width", "inner.tags"]
    options.add_fields(p, Outer, names, choices={"inner.depth": (1, 2, 3)}, help={"width": "Wide."})
    assert [a.dest for a in p._actions[1:]] == ["depth", "width", "tags"]  # in the order given
    assert (_action(p, "--depth").help, _action(p, "--depth").choices) == (
        "How deep. (default 2)",
        [1, 2, 3],
    )
    assert (_action(p, "--tags").default, _action(p, "--width").help) == (
        ["a"],
        "Wide. (default 5)",
    )
    args = p.parse_args(["--depth", "3", "--tags", "x", "y"])
    assert options.given(args, names) == {"depth": 3, "width": 5, "tags": ("x", "y")}
    with pytest.raises(TypeError, match=r"fills the fields of Outer itself; use given\(\)"):
        options.values(args, Outer, names)


def test_prepare_pretraining_flags_come_from_the_settings_parts(registry: Registry) -> None:
    homes = {
        b.action.option_strings[0]: b.cls.__name__
        for b in registry.flags
        if b.command == "prepare-pretraining"
    }
    assert (homes["--max-seq-length"], homes["--mask-ratios"], homes["--format"]) == (
        "InstanceConfig",
        "MaskingSettings",
        "CorpusOptions",
    )
    assert homes["--seed"] == "PrepareSettings" and len(homes) == 18


def test_train_vocab_flags_come_from_wordpiece_settings(registry: Registry) -> None:
    """Every train-vocab option with a default is a field (help its docstring, ``--help`` shows
    the default once); the defaults are the ones the command always had, and the library's."""
    import inspect

    from bertkit.tokenizer.trainer import WordPieceSettings, train_wordpiece

    homes = {
        b.action.option_strings[0]: b.cls.__name__
        for b in registry.flags
        if b.command == "train-vocab"
    }
    assert homes == {
        "--vocab-size": "WordPieceSettings",
        "--min-frequency": "WordPieceSettings",
        "--limit-alphabet": "WordPieceSettings",
        "--max-words": "WordPieceSettings",
        "--encoding-errors": "CorpusOptions",
    }
    command = registry.commands["train-vocab"]
    for flag, shown in [("--vocab-size", 30522), ("--max-words", 1_000_000)]:
        assert command._option_string_actions[flag].help.endswith(f"(default {shown})")
    args = vars(command.parse_args(["--input", "a.txt", "--output", "v.txt"]))
    assert {k: args[k] for k in ("vocab_size", "min_frequency", "limit_alphabet", "max_words")} == {
        "vocab_size": 30522,
        "min_frequency": 2,
        "limit_alphabet": 1000,
        "max_words": 1_000_000,
    }
    assert (args["encoding_errors"], args["cased"]) == ("strict", False)
    library = inspect.signature(train_wordpiece).parameters
    settings = dataclasses.asdict(WordPieceSettings())
    assert {name: library[name].default for name in settings} == settings
