"""Training objectives: what one update's loss is, which statistics it keeps, how it is evaluated.

The update step (:mod:`bertkit.training.update`) is generic; an objective tells it

- ``counts(batch)``: a micro-batch's counts (masked tokens, examples ...), taken from the CPU
  batch when it is collated; summed over the step's micro-batches and all-reduced into the
  step's totals (Python floats alone, a device tensor under DDP), so every rank normalises by
  the global batch;
- ``term(out, own, totals)``: this micro-batch's share of the step loss (``own``: its counts);
- ``target_keys`` (optional): entries of the collated batch that are the objective's targets,
  not the model's inputs (a distillation teacher's logits): held back from the model and passed
  to ``term`` as keywords;
- ``accumulate(stats, out, own)``: summed statistics for the log (keys in ``stat_keys``), kept
  as device tensors: nothing is read back here;
- pre-training objectives also say which model they train (``model_class``), how a collated
  batch becomes its input (``adapt``), the log figures of a window (``figures``) and the
  held-out evaluation (``eval_sums`` / ``eval_metrics`` / ``describe``).

:class:`MlmNsp` is BERT's pre-training objective, :class:`MlmOnly` and :class:`NextToken` the
paper's "No NSP" and "LTR & No NSP" ablations (:data:`OBJECTIVES`); :class:`TaskLoss` is any
fine-tuning head's loss (the head computes it; the objective weights micro-batches by examples),
:class:`bertkit.training.distill.DistillLoss` that loss with a teacher's soft targets.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
import torch

from bertkit import precision as P


class Objective(Protocol):
    stat_keys: tuple[str, ...]

    def counts(self, batch: dict[str, torch.Tensor]) -> list[float]: ...

    def term(self, out: Any, own: list[float], totals: list[float]) -> torch.Tensor: ...

    def accumulate(self, stats: dict[str, float], out: Any, own: list[float]) -> None: ...


def _share(part: float, total: float | torch.Tensor) -> float | torch.Tensor:
    """``part / max(total, 1)``; ``total`` may be a device tensor (all-reduced), left there."""
    if isinstance(total, torch.Tensor):
        return (part / total.clamp_min(1.0)).float()
    return part / max(total, 1.0)


def _masked(batch: dict[str, torch.Tensor]) -> float:
    return float((batch["labels"] != -100).sum()) if "labels" in batch else 0.0


def _examples(batch: dict[str, torch.Tensor]) -> float:
    """The examples a mean is over: one per row of float ``labels`` (a rerank group's (B, K)
    row stands for its several input rows), else one per input."""
    labels = batch.get("labels")
    return float((labels if labels is not None else batch["input_ids"]).shape[0])


class MlmNsp:
    """Masked LM + next-sentence prediction, normalised over the whole global batch: MLM
    cross-entropy summed over every masked token of the step divided by their total count, plus
    the NSP cross-entropy averaged over every example (the same step for any world size and
    accumulation, up to float summation order). A model output without both losses falls back
    to its ``loss`` weighted by examples."""

    stat_keys = (
        "mlm_loss_sum",
        "mlm_correct",
        "mlm_count",
        "nsp_loss_sum",
        "nsp_correct",
        "nsp_count",
    )
    eval_keys = ("mlm_loss", "mlm_acc", "nsp_loss", "nsp_acc", "loss")

    def __init__(self, nsp_weight: float = 1.0) -> None:
        self.nsp_weight = nsp_weight
        """The NSP term's weight in the update's loss (BERT: 1, the plain sum); the logged and
        held-out losses stay unweighted."""

    def counts(self, batch: dict[str, torch.Tensor]) -> list[float]:
        return [_masked(batch), _examples(batch)]

    def term(self, out: Any, own: list[float], totals: list[float]) -> torch.Tensor:
        total_masked, total_examples = totals
        m, n = own
        if (
            getattr(out, "mlm_loss", None) is not None
            and getattr(out, "nsp_loss", None) is not None
        ):
            nsp = out.nsp_loss * self.nsp_weight
            return out.mlm_loss * _share(m, total_masked) + nsp * _share(n, total_examples)
        return out.loss * _share(n, total_examples)

    def accumulate(self, stats: dict[str, float], out: Any, own: list[float]) -> None:
        m, n = own
        if getattr(out, "mlm_loss", None) is not None:
            stats["mlm_loss_sum"] += out.mlm_loss.detach().double() * m
            stats["mlm_correct"] += out.mlm_correct
            stats["mlm_count"] += m
        if getattr(out, "nsp_loss", None) is not None:
            stats["nsp_loss_sum"] += out.nsp_loss.detach().double() * n
            stats["nsp_correct"] += out.nsp_correct if out.nsp_correct is not None else 0.0
            stats["nsp_count"] += n

    model_class = "BertForPreTraining"

    def adapt(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The collated pre-training batch as this objective's model takes it."""
        return batch

    def figures(self, w: dict[str, float]) -> dict[str, float]:
        """Per-token / per-example figures of a window of summed statistics (the log line)."""
        out = {}
        if w.get("mlm_count"):
            out.update(
                mlm_loss=w["mlm_loss_sum"] / w["mlm_count"],
                mlm_acc=w["mlm_correct"] / w["mlm_count"],
            )
        if w.get("nsp_count"):
            out.update(
                nsp_loss=w["nsp_loss_sum"] / w["nsp_count"],
                nsp_acc=w["nsp_correct"] / w["nsp_count"],
            )
        return out

    # ---- held-out evaluation -----------------------------------------------------------------

    def eval_sums(self, out: Any, batch: dict[str, torch.Tensor]) -> list[float]:
        m, k = _masked(batch), _examples(batch)
        return [
            float(out.mlm_loss) * m,
            float(out.mlm_correct),
            m,
            float(out.nsp_loss) * k,
            float(out.nsp_correct),
            k,
        ]

    def eval_metrics(self, s: Sequence[float]) -> dict[str, float]:
        m, k = max(float(s[2]), 1.0), max(float(s[5]), 1.0)
        return {
            "mlm_loss": float(s[0]) / m,
            "mlm_acc": float(s[1]) / m,
            "nsp_loss": float(s[3]) / k,
            "nsp_acc": float(s[4]) / k,
            "loss": float(s[0]) / m + float(s[3]) / k,
        }

    def describe(self, result: dict[str, float]) -> str:
        return (
            f"MLM acc {result['mlm_acc']:.4f} loss {result['mlm_loss']:.4f} | "
            f"NSP acc {result['nsp_acc']:.4f}"
        )


class MlmOnly(MlmNsp):
    """Masked LM without next-sentence prediction (the paper's "No NSP"): a BertForMaskedLM
    (no pooler, no NSP head), the NSP labels of the prepared pairs dropped. What happens to the
    random-next pairs is the pre-training option ``random_next`` (keep them as plain text pairs,
    or drop them so every instance is contiguous text)."""

    stat_keys = ("mlm_loss_sum", "mlm_correct", "mlm_count")
    eval_keys = ("mlm_loss", "mlm_acc", "loss")
    model_class = "BertForMaskedLM"

    def adapt(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: v for k, v in batch.items() if k != "next_sentence_label"}

    def term(self, out: Any, own: list[float], totals: list[float]) -> torch.Tensor:
        return out.loss * _share(own[0], totals[0])

    def accumulate(self, stats: dict[str, float], out: Any, own: list[float]) -> None:
        m = own[0]
        stats["mlm_loss_sum"] += out.loss.detach().double() * m
        stats["mlm_correct"] += out.mlm_correct
        stats["mlm_count"] += m

    def eval_sums(self, out: Any, batch: dict[str, torch.Tensor]) -> list[float]:
        m = _masked(batch)
        return [float(out.loss) * m, float(out.mlm_correct), m]

    def eval_metrics(self, s: Sequence[float]) -> dict[str, float]:
        m = max(float(s[2]), 1.0)
        return {"mlm_loss": float(s[0]) / m, "mlm_acc": float(s[1]) / m, "loss": float(s[0]) / m}

    def describe(self, result: dict[str, float]) -> str:
        return f"MLM acc {result['mlm_acc']:.4f} loss {result['mlm_loss']:.4f}"


class NextToken:
    """The paper's left-to-right LM ("LTR & No NSP"): causal attention, every position predicts
    the next token, no NSP. The prepared instances are used with their masks undone (the
    original tokens), so any prepared data serves; labels are the tokens themselves."""

    stat_keys = ("lm_loss_sum", "lm_correct", "lm_count")
    eval_keys = ("lm_loss", "lm_acc", "perplexity", "loss")
    model_class = "BertLMHeadModel"

    def adapt(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        ids = batch["input_ids"]
        if "labels" in batch:  # put the original token back wherever one was masked
            ids = torch.where(batch["labels"] != -100, batch["labels"], ids)
        out = {k: v for k, v in batch.items() if k not in ("next_sentence_label", "labels")}
        out["input_ids"] = ids
        mask = batch.get("attention_mask")
        out["labels"] = ids if mask is None else ids.masked_fill(mask == 0, -100)
        return out

    @staticmethod
    def _predicted(batch: dict[str, torch.Tensor]) -> float:
        return float((batch["labels"][:, 1:] != -100).sum())

    def counts(self, batch: dict[str, torch.Tensor]) -> list[float]:
        return [self._predicted(batch)]

    def term(self, out: Any, own: list[float], totals: list[float]) -> torch.Tensor:
        return out.loss * _share(own[0], totals[0])

    def accumulate(self, stats: dict[str, float], out: Any, own: list[float]) -> None:
        m = own[0]
        stats["lm_loss_sum"] += out.loss.detach().double() * m
        stats["lm_correct"] += out.lm_correct
        stats["lm_count"] += m

    def figures(self, w: dict[str, float]) -> dict[str, float]:
        if not w.get("lm_count"):
            return {}
        return {
            "lm_loss": w["lm_loss_sum"] / w["lm_count"],
            "lm_acc": w["lm_correct"] / w["lm_count"],
        }

    def eval_sums(self, out: Any, batch: dict[str, torch.Tensor]) -> list[float]:
        m = self._predicted(batch)
        return [float(out.loss) * m, float(out.lm_correct), m]

    def eval_metrics(self, s: Sequence[float]) -> dict[str, float]:
        m = max(float(s[2]), 1.0)
        loss = float(s[0]) / m
        return {
            "lm_loss": loss,
            "lm_acc": float(s[1]) / m,
            "perplexity": math.exp(min(loss, 50.0)),
            "loss": loss,
        }

    def describe(self, result: dict[str, float]) -> str:
        return (
            f"next-token acc {result['lm_acc']:.4f} loss {result['lm_loss']:.4f} "
            f"(perplexity {result['perplexity']:.1f})"
        )


OBJECTIVES = {"mlm+nsp": MlmNsp, "mlm": MlmOnly, "ltr": NextToken}
"""``bertkit pretrain --objective``: the paper's default and its Table 5 ablations."""


class TaskLoss:
    """A fine-tuning head's own loss (classification, regression, tagging, spans, choices),
    weighted by each micro-batch's share of what the head's loss is a mean over, so that the
    update over any split into micro-batches and ranks is the whole batch's.

    The heads' losses are means (:mod:`bertkit.model.task_heads`): integer ``labels`` give a
    cross-entropy over the labels that are not -100 (tagging: the labelled word pieces, which
    differ from batch to batch; classification and multiple choice: the examples); float labels
    (regression, multi-label, rerank: its groups) and span positions (SQuAD: the features keep
    both inside their window, so none is ignored) give a mean over the examples.
    """

    stat_keys: tuple[str, ...] = ()

    def counts(self, batch: dict[str, torch.Tensor]) -> list[float]:
        labels = batch.get("labels")
        if labels is not None and not labels.is_floating_point():
            return [_masked(batch)]
        return [_examples(batch)]

    def term(self, out: Any, own: list[float], totals: list[float]) -> torch.Tensor:
        return self.weighted(out.loss, own, totals)

    @staticmethod
    def weighted(loss: torch.Tensor, own: list[float], totals: list[float]) -> torch.Tensor:
        """A micro-batch's mean ``loss`` weighted by its share of the update's count."""
        if own[0] == 0:  # nothing to average (a loss of NaN): a term of 0 that keeps the graph
            return loss.nan_to_num(0.0) * 0.0
        return loss * _share(own[0], totals[0])

    def accumulate(self, stats: dict[str, float], out: Any, own: list[float]) -> None:
        pass

    def figures(self, w: dict[str, float]) -> dict[str, float]:
        """Nothing beyond the window's loss (dev is scored by the task's metric per epoch)."""
        return {}


@torch.no_grad()
def evaluate_heldout(
    model: torch.nn.Module,
    objective: Any,
    examples: Sequence[Any],
    collate: Callable[[list[Any], list[int]], dict[str, torch.Tensor]],
    *,
    batch_size: int,
    precision: str,
    device: str,
    on_batch: Callable[[dict[str, torch.Tensor]], None] | None = None,
) -> dict[str, float]:
    """A pre-training objective's held-out figures on ``examples`` (``eval_sums`` summed over
    batches, then ``eval_metrics``). Examples are taken in order with epoch-0 masks, so every
    evaluation scores the same predictions and the curve shows only the model changing; the
    model's training mode is restored. ``on_batch(batch)`` sees each collated batch once it is
    scored (progress, counts)."""
    was_training = model.training
    model.eval()
    sums: np.ndarray | None = None
    for start in range(0, len(examples), batch_size):
        items = list(examples[start : start + batch_size])
        # always epoch 0: dynamic masking gives the same masks at every evaluation
        b = {k: v.to(device) for k, v in collate(items, [0] * len(items)).items()}
        with P.autocast(precision, device):
            out = model(**b)
        part = np.asarray(objective.eval_sums(out, b))
        sums = part if sums is None else sums + part
        if on_batch is not None:
            on_batch(b)
    model.train(was_training)
    return objective.eval_metrics(sums if sums is not None else np.zeros(6))
