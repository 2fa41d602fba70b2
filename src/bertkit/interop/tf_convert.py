"""Google's original BERT TensorFlow checkpoints -> a model folder (``bertkit convert``).

The variables of ``bert_model.ckpt`` (read by :mod:`bertkit.interop.tf_checkpoint`) are renamed to
the Hugging Face names that ``hf.py``'s key table maps to ours, by rules rather than a second
table: "/" -> ".", ``layer_N`` -> ``layer.N``, ``gamma``/``beta`` -> ``weight``/``bias``,
``kernel`` -> ``weight`` transposed (TF dense kernels are (in, out), torch's (out, in)),
``output_weights``/``output_bias`` -> ``weight``/``bias`` (NSP's (2, H) is already (out, in)),
an embedding table -> ``NAME.weight``. Optimizer slots, ``global_step`` and variables outside
``bert/`` and ``cls/`` are skipped and counted; a ``bert/`` or ``cls/`` variable the model has no
place for is an error naming it.

The GELU decision. Google's ``modeling.py`` computed exact erf GELU from the first release
(commit fe35475, 2018-10-31) until commit bee6030 (2019-02-07, "Adding TF Hub support"), which
switched it to the tanh approximation. BERT-Base/Large (cased and uncased), multilingual and
Chinese were released before that switch, and the Hub's conversions of them say "gelu", which
transformers and bertkit read as exact erf. So the written config.json keeps bert_config.json's
``hidden_act`` (transformers' own converter does the same) unless ``hidden_act`` is given: pass
"gelu_new" (the tanh form; ``gelu_pytorch_tanh`` computes it too) for checkpoints released after
the switch and presumably trained with it (whole-word masking 2019-05, the small BERTs 2020).
On the test fixture's batch the two differ by up to 6.0e-4 in the last hidden states, 3.8e-3
in MLM logits and 1.3e-4 in NSP logits (2 layers, random weights; docs/convert.md).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from bertkit.config import BertConfig
from bertkit.errors import BertkitError, CheckpointError, ConfigError, MissingFileError
from bertkit.interop.hf import hf_names
from bertkit.interop.pretrained import load_weights, write_model_files
from bertkit.interop.tf_checkpoint import TfCheckpoint
from bertkit.progress import progress
from bertkit.staging import swap_folder
from bertkit.tokenizer import BertTokenizer, Vocab

MODEL_SCOPES = ("bert/", "cls/")
# Slots of AdamWeightDecayOptimizer (adam_m, adam_v), tf.train's Adam/Momentum, LAMB variants.
OPTIMIZER_SLOT = re.compile(r"/(adam_[mv]|Adam(_\d+)?|LAMB\w*|lamb_[mv]|Momentum)$")
OPTIMIZER_GLOBALS = ("beta1_power", "beta2_power")  # tf.train.AdamOptimizer's accumulators
_LAST = {
    "gamma": "weight",
    "beta": "bias",
    "kernel": "weight",
    "output_weights": "weight",
    "output_bias": "bias",
}
_TABLES = ("word_embeddings", "position_embeddings", "token_type_embeddings")
_SPECIAL = re.compile(r"\[[^\]]+\]")  # [PAD], [unused0], ...: not evidence of a cased vocabulary


def tf_to_hf_name(name: str) -> tuple[str, bool]:
    """Google's variable name -> (the Hugging Face name, whether the tensor must be transposed).

    >>> tf_to_hf_name("bert/encoder/layer_3/attention/self/query/kernel")
    ('bert.encoder.layer.3.attention.self.query.weight', True)
    >>> tf_to_hf_name("cls/predictions/output_bias")
    ('cls.predictions.bias', False)
    >>> tf_to_hf_name("bert/embeddings/word_embeddings")
    ('bert.embeddings.word_embeddings.weight', False)
    """
    *scopes, last = name.split("/")
    parts = [re.sub(r"^layer_(\d+)$", r"layer.\1", s) for s in scopes]
    parts += [last, "weight"] if last in _TABLES else [_LAST.get(last, last)]
    return ".".join(parts), last == "kernel"


def variable_kind(name: str) -> str:
    """ "model", "optimizer", "global_step" or "other" (not part of a BERT model)."""
    if OPTIMIZER_SLOT.search(name) or name in OPTIMIZER_GLOBALS:
        return "optimizer"
    if name == "global_step":
        return name
    return "model" if name.startswith(MODEL_SCOPES) else "other"


def guess_lower_case(tokens: list[str]) -> bool:
    """Uncased when no token (bracketed specials aside) has an uppercase letter."""
    return not any(t != t.lower() for t in tokens if not _SPECIAL.fullmatch(t))


@dataclass
class TfConvertSettings:
    """How ``bertkit convert`` reads a TensorFlow checkpoint (flags of the same names)."""

    config: Path | None = None
    """bert_config.json (default: the one beside the checkpoint)."""
    vocab: Path | None = None
    """vocab.txt (default: the one beside the checkpoint)."""
    hidden_act: str | None = None
    """The written activation (default: bert_config.json's, where "gelu" means exact erf, as
    Google's code computed it until 2019-02-07; gelu_new: the tanh form of later checkpoints)."""
    do_lower_case: bool | None = None
    """Lowercase and strip accents (default: guessed from the vocabulary, uncased when no token
    has an uppercase letter)."""
    overwrite: bool = False
    """Replace an existing non-empty output folder."""


@dataclass
class TfConversion:
    """What ``convert_tf_checkpoint`` read, loaded, skipped and decided."""

    output: Path
    model_class: str
    tensors_read: int
    parameters: int
    hidden_act: str
    hidden_act_source: str
    do_lower_case: bool
    lower_case_source: str
    skipped_optimizer: int = 0
    skipped_global_step: bool = False
    skipped_other: list[str] = field(default_factory=list)
    bytes_read: int = 0
    """Bytes of the model tensors read from the checkpoint's data files."""
    seconds: float = 0.0
    """Wall time of the conversion, the folder written."""

    def summary(self) -> list[str]:
        skipped = f"skipped {self.skipped_optimizer} optimizer variables"
        if self.skipped_global_step:
            skipped += " and global_step"
        if self.skipped_other:  # e.g. run_classifier's output_weights: not a BERT part
            more = ", ..." if len(self.skipped_other) > 5 else ""
            names = ", ".join(self.skipped_other[:5]) + more
            skipped += f"; {len(self.skipped_other)} other variables: {names}"
        act = {
            "gelu": " (exact erf)",
            "gelu_new": " (tanh approximation)",
            "gelu_pytorch_tanh": " (tanh approximation)",
        }.get(self.hidden_act, "")
        return [
            f"read {self.tensors_read} model tensors into {self.model_class} "
            f"({self.parameters:,} parameters)",
            skipped,
            f"hidden_act {self.hidden_act}{act}, {self.hidden_act_source}",
            f"do_lower_case {self.do_lower_case}, {self.lower_case_source}",
            f"wrote {self.output} in {self.seconds:.1f}s ({self.bytes_read / 1e6:.1f} MB of "
            f"tensors, {self.bytes_read / 1e6 / max(self.seconds, 1e-9):.1f} MB/s)",
        ]


def convert_tf_checkpoint(
    checkpoint: str | Path,
    output: str | Path,
    settings: TfConvertSettings | None = None,
    show_progress: bool | None = None,
) -> TfConversion:
    """Write ``output``: config.json, model.safetensors and the tokenizer of a TF checkpoint.

    checkpoint: the prefix (``.../bert_model.ckpt``) or the folder holding its ``.index``.
    The model is ``BertForPreTraining`` (MLM and NSP heads kept) when the checkpoint has ``cls/``
    variables, else ``BertModel``; every parameter must come from the checkpoint. The folder is
    built beside ``output`` and renamed into place at the end, so a failure leaves nothing.
    Raises CheckpointError / ConfigError / MissingFileError naming the file at fault.
    ``show_progress``: a bar over the bytes of tensors read (None: on a terminal).
    """
    from bertkit.model import BertForPreTraining, BertModel

    start = time.perf_counter()
    settings = settings or TfConvertSettings()
    output = Path(output)
    nonempty = output.exists() and (not output.is_dir() or any(output.iterdir()))
    if nonempty and not settings.overwrite:
        raise BertkitError(f"{output}: exists and is not empty (pass --overwrite to replace)")
    ckpt = TfCheckpoint(checkpoint)
    config_path = settings.config or ckpt.prefix.parent / "bert_config.json"
    vocab_path = settings.vocab or ckpt.prefix.parent / "vocab.txt"
    try:
        config = BertConfig.from_json_file(config_path)
    except ConfigError as e:  # a bad value's message does not name the file
        if str(e).startswith(str(config_path)):
            raise
        raise ConfigError(f"{config_path}: {e}") from e
    act_source = f"from {config_path.name}"
    if settings.hidden_act is not None:
        try:
            config = replace(config, hidden_act=settings.hidden_act)
        except ConfigError as e:
            raise ConfigError(f"--hidden-act: {e}") from e
        act_source = "as given"
    if not vocab_path.is_file():
        raise MissingFileError(vocab_path, None, "vocabulary not found (pass --vocab)")

    kinds: dict[str, list[str]] = {"model": [], "optimizer": [], "global_step": [], "other": []}
    for name in ckpt.entries:
        kinds[variable_kind(name)].append(name)
    heads = any(n.startswith("cls/") for n in kinds["model"])
    model = (BertForPreTraining if heads else BertModel)(config)
    places = {n for names in hf_names(model, encoder_prefix="bert.").values() for n in names}
    renamed = {name: tf_to_hf_name(name) for name in kinds["model"]}
    unplaced = sorted(n for n, (hf, _) in renamed.items() if hf not in places)
    if unplaced:
        raise CheckpointError(
            f"{ckpt.index_path}: {len(unplaced)} variables have no place in a "
            f"{type(model).__name__} of {config_path}: {', '.join(unplaced)}"
        )
    state = {}
    size = sum(ckpt.entries[name].size for name in renamed)
    with progress(
        total=size, desc="convert", unit="B", unit_scale=True, enabled=show_progress
    ) as bar:
        for name, (hf, transpose) in renamed.items():
            array = ckpt.read(name)
            state[hf] = torch.from_numpy(array.T.copy() if transpose else array)
            bar.update(ckpt.entries[name].size)
    try:
        load_weights(model, state, strict=True)
    except CheckpointError as e:
        raise CheckpointError(f"{ckpt.index_path} with {config_path}: {e}") from e

    tokenizer = _tokenizer(vocab_path, config, settings.do_lower_case)
    guessed = settings.do_lower_case is None
    result = TfConversion(
        output=output,
        model_class=type(model).__name__,
        tensors_read=len(state),
        parameters=sum(p.numel() for p in model.parameters()),
        hidden_act=config.hidden_act,
        hidden_act_source=act_source,
        do_lower_case=tokenizer.do_lower_case,
        lower_case_source=f"guessed from {vocab_path.name}" if guessed else "as given",
        skipped_optimizer=len(kinds["optimizer"]),
        skipped_global_step=bool(kinds["global_step"]),
        skipped_other=sorted(kinds["other"]),
        bytes_read=size,
    )
    _write_folder(output, lambda staging: write_model_files(model.eval(), staging, tokenizer))
    result.seconds = time.perf_counter() - start
    return result


def _tokenizer(vocab_path: Path, config: BertConfig, do_lower_case: bool | None) -> BertTokenizer:
    """The tokenizer of ``vocab_path``, refused when it holds more tokens than the model has rows."""
    vocab = Vocab.from_file(vocab_path)
    if len(vocab) > config.vocab_size:
        raise CheckpointError(
            f"{vocab_path}: {len(vocab)} tokens, but the config's vocab_size is "
            f"{config.vocab_size}; this vocabulary does not belong to these weights"
        )
    if do_lower_case is None:
        do_lower_case = guess_lower_case(vocab.id_to_token)
    try:
        return BertTokenizer(
            vocab, do_lower_case=do_lower_case, model_max_length=config.max_position_embeddings
        )
    except ConfigError as e:
        raise ConfigError(f"{vocab_path}: {e}") from e


def _write_folder(output: Path, write) -> None:
    """``write(staging)`` into a hidden sibling of ``output``, then swap it into place."""
    staging = output.parent / f".{output.name}.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir(parents=True)
        write(staging)
        swap_folder(staging, output)
    except OSError as e:
        raise BertkitError(f"{output}: cannot write the model folder ({e.strerror or e})") from e
    finally:
        shutil.rmtree(staging, ignore_errors=True)
