"""Training objectives: what one update's loss is, which statistics it keeps, how it is evaluated.

The update step (:mod:`bertkit.training.update`) is generic; an objective tells it

- ``counts(batches)``: this rank's totals over the step's micro-batches (all-reduced, so every
  rank normalises by the global batch);
- ``term(out, batch, totals)``: this micro-batch's share of the step loss;
- ``accumulate(stats, out, batch)``: summed statistics for the log (keys in ``stat_keys``).

:class:`MlmNsp` is BERT's pre-training objective; :class:`TaskLoss` is any fine-tuning head's loss
(the head computes it; the objective weights micro-batches by their examples).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch


class Objective(Protocol):
    stat_keys: tuple[str, ...]

    def counts(self, batches: Sequence[dict[str, torch.Tensor]]) -> list[float]: ...

    def term(
        self, out: Any, batch: dict[str, torch.Tensor], totals: list[float]
    ) -> torch.Tensor: ...

    def accumulate(
        self, stats: dict[str, float], out: Any, batch: dict[str, torch.Tensor]
    ) -> None: ...


def _masked(batch: dict[str, torch.Tensor]) -> float:
    return float((batch["labels"] != -100).sum()) if "labels" in batch else 0.0


def _examples(batch: dict[str, torch.Tensor]) -> float:
    return float(batch["input_ids"].shape[0])


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

    def counts(self, batches: Sequence[dict[str, torch.Tensor]]) -> list[float]:
        return [sum(_masked(b) for b in batches), sum(_examples(b) for b in batches)]

    def term(self, out: Any, batch: dict[str, torch.Tensor], totals: list[float]) -> torch.Tensor:
        total_masked, total_examples = totals
        m, n = _masked(batch), _examples(batch)
        if (
            getattr(out, "mlm_loss", None) is not None
            and getattr(out, "nsp_loss", None) is not None
        ):
            return out.mlm_loss * (m / max(total_masked, 1.0)) + out.nsp_loss * (n / total_examples)
        return out.loss * (n / total_examples)

    def accumulate(self, stats: dict[str, float], out: Any, batch: dict[str, torch.Tensor]) -> None:
        m, n = _masked(batch), _examples(batch)
        if getattr(out, "mlm_loss", None) is not None:
            stats["mlm_loss_sum"] += float(out.mlm_loss.detach()) * m
            stats["mlm_correct"] += float(out.mlm_correct)
            stats["mlm_count"] += m
        if getattr(out, "nsp_loss", None) is not None:
            stats["nsp_loss_sum"] += float(out.nsp_loss.detach()) * n
            stats["nsp_correct"] += float(out.nsp_correct) if out.nsp_correct is not None else 0.0
            stats["nsp_count"] += n

    # ---- held-out evaluation -----------------------------------------------------------------

    def eval_sums(self, out: Any, batch: dict[str, torch.Tensor]) -> list[float]:
        m, k = _masked(batch), _examples(batch)
        return [float(out.mlm_loss) * m, float(out.mlm_correct), m,
                float(out.nsp_loss) * k, float(out.nsp_correct), k]  # fmt: skip

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


class TaskLoss:
    """A fine-tuning head's own loss (classification, regression, tagging, spans, choices),
    weighted by each micro-batch's share of the step's examples."""

    stat_keys: tuple[str, ...] = ()

    def counts(self, batches: Sequence[dict[str, torch.Tensor]]) -> list[float]:
        return [sum(_examples(b) for b in batches)]

    def term(self, out: Any, batch: dict[str, torch.Tensor], totals: list[float]) -> torch.Tensor:
        return out.loss * (_examples(batch) / totals[0])

    def accumulate(self, stats: dict[str, float], out: Any, batch: dict[str, torch.Tensor]) -> None:
        pass
