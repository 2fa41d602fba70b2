"""Knowledge distillation for token tagging (``finetune ner``, ``tag``): the teacher's targets
aligned at the word level, so that a teacher with another tokenizer serves.

A teacher and a student with different vocabularies cut the same sentence into different word
pieces: position i of one is not position i of the other. Words are what both share. The
teacher gives each word of each training sentence one row of logits, read where its own
prediction would read the word (:meth:`bertkit.tasks.tagging.TaggingAdapter.word_logits`: the
word's first piece, in the window where that piece has the most context; the teacher's own
windows, truncation and document context). The student is taught that row at its own first
piece of the same word, in every training window that labels the word. Example, a teacher that
splits "Hamburg" in three and a student that keeps it whole::

    teacher  [CLS] ham ##bu ##rg visited [SEP]   rows: word 0 <- "ham", word 1 <- "visited"
    student  [CLS] hamburg visit ##ed [SEP]      targets at "hamburg" (word 0), "visit" (word 1)

The loss of a batch, over its labelled words (the first pieces the cross-entropy is a mean over)::

    (1 - alpha) * CE(student, gold)
      + alpha * T**2 * sum_words KL(softmax(teacher / T) || softmax(student / T)) / labelled words

A word the teacher never read (cut by its ``--truncate``) has no row: it adds nothing to the KL
sum but still counts among the labelled words, so that the term is the same under any split of
the batch into micro-batches and ranks (each micro-batch's share is weighted by its labelled
words, :meth:`bertkit.training.objectives.TaskLoss.weighted`). A word the student truncates has
no label, hence neither term. Both are counted (:meth:`WordTeacher.coverage`, in metrics.json).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.tasks.features import IGNORE_INDEX
from bertkit.tasks.tagging import TaggingAdapter


@dataclass(frozen=True)
class WordTeacher:
    """A teacher's logits of every word of the training sentences, found by the student's
    features (:attr:`bertkit.training.finetune.TaskData.teacher` for a tagging task)."""

    rows: np.ndarray
    """(words, K) float32, the sentences' words one after the other, columns in the student's
    label order; a NaN row for a word the teacher did not read."""
    unit_starts: np.ndarray
    """(units,) int64: the row of the first word of each of the student's units (a sentence, or
    a document with ``document_context``), the features' ``example_index``."""

    @classmethod
    def of(cls, per_sentence: Sequence[np.ndarray], units: list[list[int]], k: int) -> WordTeacher:
        """From one (words, K) array per sentence and the student's units of those sentences."""
        sizes = [len(a) for a in per_sentence]
        starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        rows = np.concatenate([np.zeros((0, k), np.float32), *per_sentence]).astype(np.float32)
        return cls(rows, starts[[u[0] for u in units]])

    def targets(self, features: Sequence[Any], length: int) -> np.ndarray:
        """(B, length, K) float32 batch entry: the teacher's row of each labelled position's
        word (the first pieces with a label), NaN everywhere else."""
        out = np.full((len(features), length, self.rows.shape[1]), np.nan, np.float32)
        for i, f in enumerate(features):
            start = self.unit_starts[f.example_index]
            for pos, (label, w) in enumerate(zip(f.labels, f.word_ids)):
                if label != IGNORE_INDEX:
                    out[i, pos] = self.rows[start + w]
        return out

    def coverage(self, features: Sequence[Any]) -> dict[str, int]:
        """Words of the training set: in all, those the student labels in some window, those
        of them with a teacher row (the KL term's), and the ones cut by truncation on each
        side (``student_truncated``: never labelled; ``teacher_truncated``: labelled, no row)."""
        seen = {
            int(self.unit_starts[f.example_index]) + w
            for f in features
            for label, w in zip(f.labels, f.word_ids)
            if label != IGNORE_INDEX
        }
        read = ~np.isnan(self.rows).any(axis=1)
        taught = sum(bool(read[r]) for r in seen)
        return {
            "words": len(self.rows),
            "labelled": len(seen),
            "distilled": taught,
            "student_truncated": len(self.rows) - len(seen),
            "teacher_truncated": len(seen) - taught,
        }


def gather_order(units: list[list[int]], rank: int, world: int) -> list[int]:
    """The sentences rank ``rank`` of ``world`` reads: every ``world``-th of the teacher's
    ``units`` (whole documents under document context, so none is split across ranks),
    their sentences in order. Example: units [[0, 1], [2], [3, 4]], world 2: rank 0 reads
    [0, 1, 3, 4], rank 1 reads [2]."""
    return [i for u in units[rank::world] for i in u]


def token_distill_loss(
    student: torch.Tensor,
    teacher: torch.Tensor,
    task_loss: torch.Tensor,
    alpha: float,
    temperature: float,
    labelled: float,
) -> torch.Tensor:
    """The module docstring's loss on a batch: ``student`` logits (B, T, K), ``teacher``
    (B, T, K) targets with NaN where a position has none (:meth:`WordTeacher.targets`),
    ``task_loss`` the head's mean cross-entropy over the ``labelled`` positions; the soft term
    in fp32 whatever the autocast."""
    s, t = student.float(), teacher.float()
    if s.shape != t.shape:
        raise ValueError(f"student logits {tuple(s.shape)} and teacher's {tuple(t.shape)} differ")
    has = ~torch.isnan(t).any(-1)  # (B, T)
    t = torch.where(has.unsqueeze(-1), t, torch.zeros_like(t))
    kl = F.kl_div(
        F.log_softmax(s / temperature, dim=-1),
        F.log_softmax(t / temperature, dim=-1),
        reduction="none",
        log_target=True,
    ).sum(-1)  # (B, T)
    soft = torch.where(has, kl, torch.zeros_like(kl)).sum() / max(labelled, 1.0)
    return (1.0 - alpha) * task_loss + alpha * soft * (temperature * temperature)


def agreement(teacher: WordTeacher, examples: Sequence[Any], labels: list[str]) -> float:
    """The share of the words the teacher read whose argmax is the gold tag."""
    gold = np.asarray([labels.index(t) for e in examples for t in e.tags], dtype=np.int64)
    read = ~np.isnan(teacher.rows).any(axis=1)
    if not read.any():
        return float("nan")
    return float(np.mean(teacher.rows[read].argmax(-1) == gold[read]))


def is_tagging(adapter: Any) -> bool:
    """Whether ``adapter`` distils word by word (this module) rather than example by example."""
    return isinstance(adapter, TaggingAdapter)
