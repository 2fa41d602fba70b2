"""load_pretrained / save_pretrained: checkpoint directories in the Hugging Face layout.

A directory holds config.json (BertConfig keys), model.safetensors (or a sharded
model.safetensors.index.json) and, for the commands, the tokenizer: vocab.txt and/or
tokenizer.json (+ tokenizer_config.json).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit import hub
from bertkit.config import BertConfig
from bertkit.errors import CheckpointError, ConfigError
from bertkit.interop.hf import LoadReport, hf_to_ours, ours_to_hf
from bertkit.io import atomic_write_bytes, atomic_write_text
from bertkit.staging import staged_folder
from bertkit.tokenizer.protocol import Tokenizer
from bertkit.tokenizer.tokenizer_json import TOKENIZER_JSON, tokenizer_json_size

log = logging.getLogger(__name__)

PICKLE_REFUSED = (
    "{path} is a pickle file, and unpickling can run arbitrary code hidden in it; bertkit loads "
    "safetensors only. Convert it (e.g. load it once in a trusted environment and save "
    "model.safetensors) or pass allow_pickle=True (--allow-pickle), which loads it with "
    "torch.load(weights_only=True)"
)


MODEL_FORMAT = 1
"""The model-folder layout (config.json's ``bertkit_format``); folders without it are format 1
(and every Hugging Face folder)."""


def _model_classes() -> dict[str, type[nn.Module]]:
    from bertkit.model import HEAD_CLASSES

    return HEAD_CLASSES


def pickle_only(directory: Path) -> Path | None:
    """The ``pytorch_model.bin`` of a folder that has no safetensors weights (what
    :func:`read_state_dict` would unpickle), else None: checked up front by a caller that loads
    later (the server, at start-up)."""
    if (directory / "model.safetensors").is_file():
        return None
    if (directory / "model.safetensors.index.json").is_file():
        return None
    path = directory / "pytorch_model.bin"
    return path if path.is_file() else None


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
"""The files :func:`read_state_dict` takes a folder's weights from, in its order."""


def weight_names(directory: Path) -> list[str] | None:
    """The (Hugging Face) tensor names of a folder's safetensors weights, read from the headers
    or the index without loading a tensor: a cheap look before a long job. None when they cannot
    be read so (pickled or missing weights, a broken file: :func:`read_state_dict` says why)."""
    from safetensors import SafetensorError, safe_open

    single = directory / "model.safetensors"
    index = directory / "model.safetensors.index.json"
    try:
        if single.is_file():
            with safe_open(str(single), "pt") as f:
                return list(f.keys())
        if index.is_file():
            return list(json.loads(index.read_text(encoding="utf-8"))["weight_map"])
    except (SafetensorError, OSError, KeyError, ValueError, TypeError):
        return None
    return None


def read_state_dict(directory: Path, allow_pickle: bool = False) -> dict[str, torch.Tensor]:
    """The raw (Hugging Face named) tensors of a checkpoint directory, on CPU."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    single = directory / "model.safetensors"
    index = directory / "model.safetensors.index.json"
    pickle_path = directory / "pytorch_model.bin"
    try:
        if single.is_file():
            return load_file(str(single))
        if index.is_file():
            shards = sorted(
                set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
            )
            state: dict[str, torch.Tensor] = {}
            for shard in shards:
                state.update(load_file(str(directory / shard)))
            return state
    except (SafetensorError, OSError, KeyError, ValueError) as e:
        raise CheckpointError(f"{directory}: cannot read safetensors weights ({e})") from e
    if pickle_path.is_file():
        if not allow_pickle:
            raise CheckpointError(PICKLE_REFUSED.format(path=pickle_path))
        try:
            state = torch.load(str(pickle_path), map_location="cpu", weights_only=True)
        except Exception as e:  # weights_only refuses anything but tensors and plain containers
            raise CheckpointError(
                f"{pickle_path}: refused by torch.load(weights_only=True): {_load_failure(e)}"
            ) from e
        if not isinstance(state, dict):
            raise CheckpointError(f"{pickle_path}: expected a dict of tensors")
        return state
    onnx = sorted(p.name for p in directory.glob("*.onnx"))
    raise CheckpointError(
        f"{directory}: no weights found (expected model.safetensors, "
        "model.safetensors.index.json, or pytorch_model.bin with allow_pickle)"
        + (
            f"; it holds {onnx[0]}, an ONNX export: `bertkit serve --backend onnx` runs it, "
            "other commands take the folder it was exported from"
            if onnx
            else ""
        )
    )


def _load_failure(e: Exception) -> str:
    """The one informative line of a torch.load error (which global was refused, if any)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))
    found = re.search(r"Unsupported global: GLOBAL (\S+)", text)
    if found:
        return f"it references {found.group(1)}, which is not a tensor (possible code execution)"
    return next((line.strip() for line in text.splitlines() if line.strip()), type(e).__name__)


def load_config(directory: Path, **overrides: Any) -> BertConfig:
    """config.json with ``overrides`` applied (num_labels without id2label drops the old labels)."""
    path = directory / "config.json"
    if not path.is_file():
        # a run folder (pretrain's run1/ holds run1/model): name the model folder inside it
        inner = sorted(p.parent for p in directory.glob("*/config.json"))
        hint = f"; did you mean {inner[0]}?" if inner else " (is this a model directory?)"
        raise CheckpointError(f"{directory}: no config.json{hint}")
    try:  # utf-8-sig: a byte-order mark (a config edited on Windows) is dropped
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from e
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: cannot read a JSON config ({e})") from e
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    model_type = data.get("model_type", "bert")
    if model_type != "bert":
        raise CheckpointError(
            f"{path}: model_type {model_type!r} is not a BERT model (expected model_type 'bert')"
        )
    found = data.get("bertkit_format", MODEL_FORMAT)
    if not isinstance(found, int) or found > MODEL_FORMAT:
        raise CheckpointError(
            f"{path}: bertkit_format {found!r} is newer than this bertkit reads ({MODEL_FORMAT}); "
            "upgrade bertkit to load it"
        )
    if "num_labels" in overrides and "id2label" not in overrides:
        data.pop("id2label", None)
        data.pop("label2id", None)
    try:  # the file's own values first: a wrong type or range names the file it came from
        BertConfig.from_dict(data)
    except ConfigError as e:
        raise CheckpointError(f"{path}: {e}") from e
    data.update(overrides)
    return BertConfig.from_dict(data)


def check_length_fits(directory: str | Path, length: int, flag: str = "--max-seq-length") -> None:
    """Refuse inputs longer than the checkpoint's position table, as a one-line error naming the
    flag (otherwise an index error deep inside the embeddings)."""
    config = load_config(Path(directory))
    if length > config.max_position_embeddings:
        raise ConfigError(
            f"{flag} {length} is longer than the model's limit of {config.max_position_embeddings} "
            f"positions ({Path(directory) / 'config.json'}: max_position_embeddings)"
        )
    if length < 3:
        raise ConfigError(f"{flag} {length} leaves no room for a token beside [CLS] and [SEP]")


def check_vocab_fits(directory: Path, config: BertConfig) -> None:
    """Refuse a vocab.txt (or, without one, a tokenizer.json) holding more tokens than the
    embedding table has rows.

    Its ids would index past the table (an IndexError deep inside the model otherwise). A smaller
    vocabulary is allowed: checkpoints often pad vocab_size to a multiple of 8 or 64.
    """
    path = directory / "vocab.txt"
    if path.is_file():
        with open(path, "rb") as f:
            n = sum(1 for _ in f)
    elif (directory / TOKENIZER_JSON).is_file():
        path = directory / TOKENIZER_JSON
        n = tokenizer_json_size(path)
    else:
        return
    if n > config.vocab_size:
        raise CheckpointError(
            f"{path}: {n} tokens, but {directory / 'config.json'} has vocab_size "
            f"{config.vocab_size}; this vocabulary does not belong to these weights"
        )


def load_weights(
    model: nn.Module, state: dict[str, torch.Tensor], strict: bool = False
) -> LoadReport:
    """Copy Hugging Face named tensors into ``model`` (dtype converted), returning the report.

    strict=True also refuses missing head weights and unused checkpoint keys.
    """
    ours, report = hf_to_ours(model, state)
    if strict and (report.missing or report.unused):
        raise CheckpointError(f"strict load: {report.summary()}")
    model.load_state_dict(ours, strict=False)
    return report


def load_pretrained(
    directory: str | Path,
    model_class: type[nn.Module] | str | None = None,
    *,
    allow_pickle: bool = False,
    strict: bool = False,
    **config_overrides: Any,
) -> nn.Module:
    """Load a bertkit or Hugging Face BERT checkpoint directory (or a Hub id:
    :func:`bertkit.hub.resolve`), in eval mode, on CPU.

    model_class: one of the bertkit model classes (or its name); None picks the class named by
        config.json ``architectures`` (falling back to BertModel).
    allow_pickle: permit pytorch_model.bin, read with torch.load(weights_only=True).
    config_overrides: BertConfig fields to change, e.g. num_labels=3 for a new classifier.
    Missing head/pooler weights are initialised and logged; see ``hf.hf_to_ours`` for errors.
    """
    model, report = load_with_report(
        directory, model_class, allow_pickle=allow_pickle, strict=strict, **config_overrides
    )
    if report.missing or report.unused:
        log.warning("%s -> %s: %s", directory, type(model).__name__, report.summary())
    return model


def load_with_report(
    directory: str | Path,
    model_class: type[nn.Module] | str | None = None,
    *,
    allow_pickle: bool = False,
    strict: bool = False,
    **config_overrides: Any,
) -> tuple[nn.Module, LoadReport]:
    """``load_pretrained`` that returns the LoadReport instead of logging it."""
    directory = hub.resolve(directory, allow_pickle=allow_pickle)
    config = load_config(directory, **config_overrides)
    check_vocab_fits(directory, config)
    classes = _model_classes()
    if model_class is None:
        names = config.architectures or []
        model_class = next((classes[n] for n in names if n in classes), classes["BertModel"])
    elif isinstance(model_class, str):
        if model_class not in classes:
            raise CheckpointError(
                f"unknown model class {model_class!r}; choose from {sorted(classes)}"
            )
        model_class = classes[model_class]
    state = read_state_dict(directory, allow_pickle=allow_pickle)
    model = model_class(config)
    try:
        report = load_weights(model, state, strict=strict)
    except CheckpointError as e:  # name the checkpoint: the table's message names only tensors
        raise CheckpointError(f"{directory}: {e}") from e
    return model.eval(), report


def save_pretrained(
    model: nn.Module, directory: str | Path, tokenizer: Tokenizer | None = None
) -> None:
    """Write config.json, model.safetensors (Hugging Face names) and the tokenizer's vocabulary.

    transformers' AutoModel / the BertFor... class of the same name loads the result with no
    missing or unexpected keys. The files are written as one set
    (:func:`bertkit.staging.staged_folder`): a write that fails leaves ``directory`` as it was,
    and a crash between the renames leaves it without config.json, never new weights beside an
    old config.json.
    """
    with staged_folder(directory, last="config.json") as work:
        write_model_files(model, work, tokenizer)


def write_model_files(
    model: nn.Module, directory: Path, tokenizer: Tokenizer | None = None
) -> None:
    """:func:`save_pretrained`'s files, written straight into ``directory``: for a caller that
    stages a larger set itself (a fine-tuned or sentence-transformers folder, a converted one)."""
    from safetensors.torch import save

    config = model.config.to_dict()
    config["architectures"] = [type(model).__name__]
    config["bertkit_format"] = MODEL_FORMAT
    tensors = save(ours_to_hf(model), metadata={"format": "pt"})
    atomic_write_bytes(directory / "model.safetensors", tensors)
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)
    atomic_write_text(
        directory / "config.json", json.dumps(config, indent=2, sort_keys=True) + "\n"
    )
