"""Score any checkpoint with a masked-LM head on prepared pre-training data: the held-out figures
pre-training logs (``bertkit evaluate --model CHECKPOINT --data PREPARED``).

The checkpoint may be a bertkit pre-training run's ``model/`` folder, a Hugging Face
BertForPreTraining or BertForMaskedLM folder (or Hub id), or a converted Google TF checkpoint.
The figures come from the loop pre-training evaluates with
(:func:`bertkit.training.objectives.evaluate_heldout`) and its objectives: masked-LM accuracy and
loss (perplexity = exp(loss)) over every masked token, and NSP accuracy and loss over every
instance when the model has an NSP head and the scored instances hold random-next pairs (MLM only
otherwise, with a note saying why).

What is scored, so that two checkpoints' numbers compare:

- the instances: the first ``eval_examples`` of the data's ``eval`` split (the ``train`` split
  when there is no held-out one), in order: what ``Trainer.evaluate`` scores;
- the masks: statically masked data (``bertkit prepare``'s default) carry theirs in the shards,
  drawn once at prepare time; unmasked (``--dynamic-masking``) data are masked with epoch 0's
  masks of ``seed`` (:func:`bertkit.training.pretraining.objective_collate`), as the held-out
  evaluation of a pre-training run with that ``--seed`` masks them. Either way every model scored
  with the same options predicts the same tokens.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bertkit import precision as P
from bertkit.errors import CheckpointError, ConfigError, InputError


@dataclass
class HeldoutScore:
    """What :func:`score_checkpoint` measured."""

    metrics: dict[str, float]
    """mlm_acc, mlm_loss, mlm_perplexity (and nsp_acc, nsp_loss when scored), loss."""
    objective: str
    """``mlm+nsp`` or ``mlm``: the objective whose figures these are."""
    split: str
    """The split of the data scored (``eval``, else ``train``)."""
    examples: int
    """Instances scored."""
    masked_tokens: int
    """Masked tokens predicted."""
    seconds: float
    """Time spent scoring (loading excluded)."""
    notes: list[str] = field(default_factory=list)
    """Why NSP was not scored, how the vocabulary was checked."""

    def to_dict(self) -> dict[str, Any]:
        """The metrics JSON of ``bertkit evaluate --output``."""
        return {
            **self.metrics,
            "objective": self.objective,
            "split": self.split,
            "examples": self.examples,
            "masked_tokens": self.masked_tokens,
            "notes": self.notes,
        }


def heldout_split(data: Path) -> str:
    """``eval`` when the prepared folder holds held-out instances, else ``train``."""
    from bertkit.data.shards import read_manifest

    counts = read_manifest(data).get("num_instances", {})
    return "eval" if counts.get("eval", 0) > 0 else "train"


def check_same_vocab(model_dir: Path, data: Path, vocab_size: int) -> str | None:
    """Refuse a model whose vocabulary is not the one ``data`` was prepared with (its token ids
    would name other tokens). Compares vocab.txt token by token; a model folder without one is
    compared by size (``vocab_size``: its config's), and the returned note says so."""
    from bertkit.data.prepare_files import load_vocab_tokens

    prepared = load_vocab_tokens(data / "vocab.txt")
    path = model_dir / "vocab.txt"
    if not path.is_file():
        if vocab_size != len(prepared):
            raise ConfigError(
                f"{model_dir}: vocab_size {vocab_size} differs from the {len(prepared)} tokens "
                f"{data} was prepared with; scoring token ids of another vocabulary is meaningless"
            )
        return f"{model_dir} has no vocab.txt: compared vocabulary sizes only ({vocab_size})"
    own = load_vocab_tokens(path)
    if own != prepared:
        i = next((k for k, (a, b) in enumerate(zip(own, prepared)) if a != b), None)
        where = (
            f"id {i} is {own[i]!r} there, {prepared[i]!r} in the data"
            if i is not None
            else f"{len(own)} tokens against {len(prepared)}"
        )
        raise ConfigError(
            f"{path} is not the vocabulary {data} was prepared with ({where}); scoring token "
            "ids of another vocabulary is meaningless: prepare the data with this vocab.txt"
        )
    return None


def load_scoring_model(
    model_dir: Path, allow_pickle: bool = False
) -> tuple[torch.nn.Module, bool, str]:
    """The checkpoint as a BertForPreTraining (it has an NSP head and pooler) or a
    BertForMaskedLM (it has none); returns (model, has NSP head, what it was saved as). A
    checkpoint without a masked-LM head, or a left-to-right one, is a one-line CheckpointError."""
    from bertkit.interop.pretrained import (
        check_vocab_fits,
        load_config,
        load_weights,
        read_state_dict,
    )
    from bertkit.model import BertForMaskedLM, BertForPreTraining

    config = load_config(model_dir)
    check_vocab_fits(model_dir, config)
    saved_as = ", ".join(config.architectures or []) or "no architectures in config.json"
    if config.is_decoder:
        raise CheckpointError(
            f"{model_dir} is a left-to-right model ({saved_as}); evaluate pre-training metrics "
            "needs a masked-LM head"
        )
    state = read_state_dict(model_dir, allow_pickle=allow_pickle)
    model = BertForPreTraining(config)
    missing = load_weights(model, state).missing
    if any(k.startswith("mlm.") for k in missing):
        raise CheckpointError(
            f"{model_dir} has no masked-LM head ({saved_as}, its weights hold none); "
            "evaluate pre-training metrics needs one"
        )
    has_nsp = not any(k.startswith(("nsp.", "bert.pooler.")) for k in missing)
    if not has_nsp:
        model = BertForMaskedLM(config)
        load_weights(model, state)
    return model.eval(), has_nsp, saved_as


def score_checkpoint(
    model_dir: str | Path,
    data: str | Path,
    *,
    eval_examples: int,
    seed: int,
    batch_size: int,
    precision: str = P.DEFAULT,
    device: str = "auto",
    allow_pickle: bool = False,
    show_progress: bool | None = None,
    log: Callable[[str], None] = lambda _m: None,
) -> HeldoutScore:
    """Masked-LM (and NSP) figures of ``model_dir`` on prepared ``data``; see the module
    docstring for what is scored. ``model_dir`` may be a Hub id (:func:`bertkit.hub.resolve`)."""
    from bertkit import hub
    from bertkit.data.shards import PretrainingDataset, is_prepared
    from bertkit.hardware import resolve_device
    from bertkit.progress import progress
    from bertkit.training.objectives import MlmNsp, MlmOnly, evaluate_heldout
    from bertkit.training.pretraining import objective_collate

    data = Path(data)
    if not is_prepared(data):
        raise InputError(data, None, "not a `bertkit prepare` output (no manifest.json)")
    for name, value in (("eval_examples", eval_examples), ("batch_size", batch_size)):
        if value < 1:
            raise ConfigError(f"{name} must be >= 1, got {value}")
    if P.check(precision, P.INFERENCE_CHOICES) == "int8":
        raise ConfigError("int8 is not offered for pre-training metrics; use fp32, bf16 or auto")
    model_dir = hub.resolve(model_dir, allow_pickle=allow_pickle)
    model, has_nsp, saved_as = load_scoring_model(model_dir, allow_pickle)
    notes = [n for n in [check_same_vocab(model_dir, data, model.config.vocab_size)] if n]

    split = heldout_split(data)
    dataset = PretrainingDataset(data, split)
    n = min(len(dataset), eval_examples)
    if n == 0:
        raise InputError(data, None, "no instances to score (expected prepared data)")
    if split != "eval":
        notes.append(f"{data} has no held-out split: scored its train split")
    pairs = bool((dataset.next_sentence_labels()[:n] == 1).any())
    if has_nsp and not pairs:
        notes.append("NSP not scored: the scored instances hold no random-next pairs")
        model = _masked_lm_only(model)
    elif not has_nsp:
        notes.append(f"NSP not scored: {model_dir} has no NSP head ({saved_as})")
    both = has_nsp and pairs
    objective: Any = MlmNsp() if both else MlmOnly()
    items = [dataset[i] for i in range(n)]
    longest = max(len(x["input_ids"]) for x in items)
    if longest > model.config.max_position_embeddings:
        raise ConfigError(
            f"{model_dir}: max_position_embeddings {model.config.max_position_embeddings} is "
            f"shorter than the {longest}-token instances of {data}; prepare the data with "
            f"--max-seq-length {model.config.max_position_embeddings} or less"
        )

    run_on = resolve_device(device)
    precision = P.resolve(precision, run_on)
    model.to(run_on)
    log(
        f"{n} {split} instances of {data} ({'MLM + NSP' if both else 'MLM only'}), "
        f"{run_on}, precision {precision}"
    )
    bar = progress(total=n, unit="instance", desc="evaluate", enabled=show_progress)
    masked = 0

    def seen(batch: dict[str, torch.Tensor]) -> None:
        nonlocal masked
        masked += int((batch["labels"] != -100).sum())
        bar.update(batch["input_ids"].shape[0])

    start = time.perf_counter()
    try:
        metrics = evaluate_heldout(
            model,
            objective,
            items,
            objective_collate(objective, dataset, seed),
            batch_size=batch_size,
            precision=precision,
            device=str(run_on),
            on_batch=seen,
        )
    finally:
        bar.close()
    seconds = time.perf_counter() - start
    metrics["mlm_perplexity"] = math.exp(min(metrics["mlm_loss"], 50.0))
    return HeldoutScore(metrics, "mlm+nsp" if both else "mlm", split, n, masked, seconds, notes)


def _masked_lm_only(model: torch.nn.Module) -> torch.nn.Module:
    """A BertForPreTraining's encoder and MLM head as a BertForMaskedLM (the NSP head and the
    pooler left out): MLM-only scoring of a model whose data hold no NSP pairs."""
    from bertkit.model import BertForMaskedLM

    mlm = BertForMaskedLM(model.config)
    own = {k: v for k, v in model.state_dict().items() if k in mlm.state_dict()}
    mlm.load_state_dict(own, strict=True)
    return mlm.eval()
