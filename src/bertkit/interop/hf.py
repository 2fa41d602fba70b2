"""Hugging Face BERT checkpoints in and out, through one declarative key table.

Our parameter names are our own; the Hugging Face names live only in ``ENCODER_KEYS`` and
``HEAD_KEYS`` below. ``{i}`` stands for the layer index. A row whose Hugging Face side is a tuple
is fused: its tensors are concatenated along dim 0 on load (query, key, value -> our qkv) and
split back on save.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch
from torch import nn

# (ours, relative to BertModel) -> Hugging Face name(s), relative to the encoder prefix ("bert." in
# head checkpoints, nothing in a bare BertModel checkpoint such as sentence-transformers').
_HF_ATTN = "encoder.layer.{i}.attention"
ENCODER_KEYS: list[tuple[str, str | tuple[str, ...]]] = [
    ("embeddings.word.weight", "embeddings.word_embeddings.weight"),
    ("embeddings.position.weight", "embeddings.position_embeddings.weight"),
    ("embeddings.segment.weight", "embeddings.token_type_embeddings.weight"),
    ("embeddings.layer_norm.weight", "embeddings.LayerNorm.weight"),
    ("embeddings.layer_norm.bias", "embeddings.LayerNorm.bias"),
    (
        "encoder.layers.{i}.attention.qkv.weight",
        tuple(f"{_HF_ATTN}.self.{p}.weight" for p in ("query", "key", "value")),
    ),
    (
        "encoder.layers.{i}.attention.qkv.bias",
        tuple(f"{_HF_ATTN}.self.{p}.bias" for p in ("query", "key", "value")),
    ),
    ("encoder.layers.{i}.attention.proj.weight", f"{_HF_ATTN}.output.dense.weight"),
    ("encoder.layers.{i}.attention.proj.bias", f"{_HF_ATTN}.output.dense.bias"),
    ("encoder.layers.{i}.attention_norm.weight", f"{_HF_ATTN}.output.LayerNorm.weight"),
    ("encoder.layers.{i}.attention_norm.bias", f"{_HF_ATTN}.output.LayerNorm.bias"),
    ("encoder.layers.{i}.feed_forward.up.weight", "encoder.layer.{i}.intermediate.dense.weight"),
    ("encoder.layers.{i}.feed_forward.up.bias", "encoder.layer.{i}.intermediate.dense.bias"),
    ("encoder.layers.{i}.feed_forward.down.weight", "encoder.layer.{i}.output.dense.weight"),
    ("encoder.layers.{i}.feed_forward.down.bias", "encoder.layer.{i}.output.dense.bias"),
    ("encoder.layers.{i}.output_norm.weight", "encoder.layer.{i}.output.LayerNorm.weight"),
    ("encoder.layers.{i}.output_norm.bias", "encoder.layer.{i}.output.LayerNorm.bias"),
    ("pooler.dense.weight", "pooler.dense.weight"),
    ("pooler.dense.bias", "pooler.dense.bias"),
]

# Head parameters (ours, relative to the head model) -> Hugging Face names (never prefixed).
HEAD_KEYS: list[tuple[str, str]] = [
    ("mlm.dense.weight", "cls.predictions.transform.dense.weight"),
    ("mlm.dense.bias", "cls.predictions.transform.dense.bias"),
    ("mlm.layer_norm.weight", "cls.predictions.transform.LayerNorm.weight"),
    ("mlm.layer_norm.bias", "cls.predictions.transform.LayerNorm.bias"),
    ("mlm.bias", "cls.predictions.bias"),
    ("nsp.weight", "cls.seq_relationship.weight"),
    ("nsp.bias", "cls.seq_relationship.bias"),
    ("classifier.weight", "classifier.weight"),
    ("classifier.bias", "classifier.bias"),
    ("qa.weight", "qa_outputs.weight"),
    ("qa.bias", "qa_outputs.bias"),
]

# Hugging Face keys that carry no weights of their own: the decoder tied to the word embeddings,
# its bias (an alias of cls.predictions.bias) and position-id buffers of older checkpoints.
TIED_OR_BUFFERS = (
    re.compile(r"^cls\.predictions\.decoder\.(weight|bias)$"),
    re.compile(r"^(bert\.)?embeddings\.(position_ids|token_type_ids)$"),
)
DECODER_BIAS_ALIAS = ("cls.predictions.bias", "cls.predictions.decoder.bias")

# Parameters a checkpoint may lack without being wrong for the model: task heads and the pooler
# are freshly initialised when fine-tuning starts from an encoder-only checkpoint.
OPTIONAL_PREFIXES = ("pooler.", "bert.pooler.", "mlm.", "nsp.", "classifier.", "qa.")


@dataclass
class LoadReport:
    """What loading a checkpoint into a model did.

    missing: our parameters the checkpoint lacks (left at their initialisation; only heads and
        the pooler may be missing, any other missing key is an error).
    unused: Hugging Face keys of BERT parts this model does not have (another head, a pooler).
    """

    loaded: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)

    def summary(self) -> str:
        parts = [f"loaded {len(self.loaded)} tensors"]
        if self.missing:
            parts.append(f"newly initialised (not in checkpoint): {', '.join(self.missing)}")
        if self.unused:
            parts.append(f"ignored (not used by this model): {', '.join(self.unused)}")
        return "; ".join(parts)


def _rows(model: nn.Module) -> list[tuple[str, tuple[str, ...], bool]]:
    """(our name, Hugging Face names relative to the encoder/head, is-encoder) for model's params."""
    num_layers = model.config.num_hidden_layers
    rows = []
    for ours, theirs in ENCODER_KEYS:
        names = theirs if isinstance(theirs, tuple) else (theirs,)
        layers = range(num_layers) if "{i}" in ours else [None]
        for i in layers:
            fmt = {"i": i} if i is not None else {}
            rows.append((ours.format(**fmt), tuple(n.format(**fmt) for n in names), True))
    rows += [(ours, (theirs,), False) for ours, theirs in HEAD_KEYS]
    return rows


def _is_head_model(model: nn.Module) -> bool:
    return hasattr(model, "bert")


def hf_names(model: nn.Module, encoder_prefix: str | None = None) -> dict[str, tuple[str, ...]]:
    """Our state-dict name -> its Hugging Face name(s), for every parameter ``model`` has.

    ``encoder_prefix`` defaults to "bert." for head models and "" for BertModel, which is what
    transformers writes for the same classes.
    """
    ours_prefix = "bert." if _is_head_model(model) else ""
    if encoder_prefix is None:
        encoder_prefix = ours_prefix
    params = dict(model.state_dict())
    table = {}
    for ours, theirs, is_encoder in _rows(model):
        name = ours_prefix + ours if is_encoder else ours
        if name in params:
            table[name] = tuple(encoder_prefix + t for t in theirs) if is_encoder else theirs
    unmapped = sorted(set(params) - set(table))
    if unmapped:  # a module added without a table row: a bug here, never a user error
        raise AssertionError(f"parameters missing from the key table: {unmapped}")
    return table


def _known_hf_key(key: str) -> bool:
    """Whether ``key`` names a part of some Hugging Face BERT model (any head, any prefix)."""
    bare = key.removeprefix("bert.")
    patterns = [
        re.escape(t).replace(r"\{i\}", r"\d+")
        for _, ts in ENCODER_KEYS
        for t in (ts if isinstance(ts, tuple) else (ts,))
    ]
    if any(re.fullmatch(p, bare) for p in patterns):
        return True
    return key in {t for _, t in HEAD_KEYS} or any(p.match(key) for p in TIED_OR_BUFFERS)


def encoder_prefix_of(keys: list[str]) -> str:
    """ "bert." when the checkpoint was saved from a head model, "" for a bare BertModel."""
    return "bert." if any(k.startswith("bert.") for k in keys) else ""


def hf_to_ours(model: nn.Module, state: dict[str, torch.Tensor]) -> tuple[dict, LoadReport]:
    """Map a Hugging Face state dict onto ``model``'s names, checking every key and shape.

    Returns (our state dict, report). Raises CheckpointError for keys that are not BERT weights,
    for missing encoder weights, and for any shape that differs from the model's.
    """
    from bertkit.errors import CheckpointError, first_few

    state = dict(state)
    if "cls.predictions.bias" not in state and DECODER_BIAS_ALIAS[1] in state:
        state["cls.predictions.bias"] = state[DECODER_BIAS_ALIAS[1]]
    prefix = encoder_prefix_of(list(state))
    expected = model.state_dict()
    report = LoadReport()
    ours_state: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    shape_errors = []
    for ours, theirs in hf_names(model, prefix).items():
        if not all(t in state for t in theirs):
            report.missing.append(ours)
            continue
        parts = [state[t] for t in theirs]
        tensor = parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
        used.update(theirs)
        if tuple(tensor.shape) != tuple(expected[ours].shape):
            shape_errors.append(
                f"{' + '.join(theirs)}: checkpoint shape {tuple(tensor.shape)}, model expects "
                f"{tuple(expected[ours].shape)} for {ours}"
            )
            continue
        ours_state[ours] = tensor
        report.loaded.append(ours)
    leftover = sorted(
        k for k in state if k not in used and not any(p.match(k) for p in TIED_OR_BUFFERS)
    )
    unknown = [k for k in leftover if not _known_hf_key(k)]
    report.unused = [k for k in leftover if _known_hf_key(k)]
    required_missing = [k for k in report.missing if not k.startswith(OPTIONAL_PREFIXES)]
    problems = []
    if shape_errors:
        problems.append(
            "shape mismatch (does config.json match the weights?): "
            + first_few(shape_errors, sep="; ")
        )
    if required_missing:
        problems.append(f"missing encoder weights: {first_few(required_missing)}")
    if unknown:
        problems.append(f"unexpected keys that are not BERT weights: {first_few(unknown)}")
    if problems:
        raise CheckpointError(" | ".join(problems))
    return ours_state, report


def ours_to_hf(model: nn.Module) -> dict[str, torch.Tensor]:
    """``model``'s weights under the names transformers uses for the same class (qkv split)."""
    state = model.state_dict()
    out: dict[str, torch.Tensor] = {}
    for ours, theirs in hf_names(model).items():
        tensor = state[ours].detach()
        pieces = tensor.chunk(len(theirs), dim=0) if len(theirs) > 1 else (tensor,)
        for name, piece in zip(theirs, pieces, strict=True):
            out[name] = piece.contiguous().clone().cpu()
    return out
