"""Task-specific knowledge distillation (Hinton et al. 2015; DistilBERT's task recipe): a
student fine-tuned on a task learns the gold labels and a fine-tuned teacher's outputs at once.

The loss of a training example (sequence classification, ``glue`` and ``classify``)::

    (1 - alpha) * task_loss(student, gold)
      + alpha * T**2 * KL(softmax(teacher / T) || softmax(student / T))

the task loss being the head's own (cross-entropy; MSE for regression), the KL divergence summed
over the labels and averaged over the batch's rows (``batchmean``), and ``T**2`` keeping the
soft term's gradients the size of the hard term's as T grows (Hinton et al., section 2). For
regression the soft term is ``MSE(student score, teacher score)``, and T is not used. alpha 0 is
ordinary fine-tuning (the update is the same bit for bit), alpha 1 learns the teacher alone.
Token tagging (``ner``, ``tag``) takes the same loss per labelled word, the teacher's rows
aligned with the student's by words, not word pieces: :mod:`bertkit.training.distill_tokens`.

The teacher's targets are computed once, before training (:func:`teacher_logits`): the teacher
folder (``bertkit finetune``'s, or a Hugging Face sequence classifier's) reads every training
example with its own tokenizer, windows and window pooling, giving one row of logits per
example, its columns put in the student's label order. Each training window of the student
is then taught its example's row, as it is taught its example's gold label
(:func:`bertkit.training.finetune.training_collate` looks the row up by ``example_index``). So
the teacher costs one forward pass over the training set, not one per epoch or per run of the
learning-rate x seed sweep, and gradient accumulation and DDP shares need nothing of it.

Under torchrun that pass is split, not repeated: rank r reads examples r, r + world,
r + 2 world ... and the ranks' rows are gathered (:func:`bertkit.training.distributed.all_gather_rows`:
examples x labels floats, small beside the model), so every rank holds every row. Strided rather
than contiguous shares: data files are often ordered (by source, label or length), and a
contiguous slice could give one rank all the long, many-window inputs while the others wait at
the gather; every ``world``-th example spreads any such order evenly, and puts the rows back
with one strided assignment. A tagger's pass is split by the teacher's units (sentences, or
whole documents under document context), and the ranks' word rows, of variable length, are
gathered flat with each sentence's word count beside them. A rank's teacher batches are not
the single process's, so the rows equal the single process's up to float rounding (batch
padding), not bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.errors import ConfigError
from bertkit.inference.runner import predict_rows
from bertkit.inference.task_model import TaskModel
from bertkit.tasks.base import TaskAdapter
from bertkit.tasks.classification import ClassificationAdapter
from bertkit.tasks.tagging import TaggingAdapter, token_logits
from bertkit.training.distill_tokens import (
    WordTeacher,
    agreement,
    gather_order,
    token_distill_loss,
)
from bertkit.training.distributed import DistInfo, all_gather_rows
from bertkit.training.objectives import TaskLoss

TEACHER_KEY = "teacher_logits"
"""The training batch's entry holding each row's teacher logits (B, K), a tagger's each
position's (B, T, K): the objective's, never the model's input (:attr:`DistillLoss.target_keys`)."""


Teacher = np.ndarray | WordTeacher
"""What :func:`teacher_logits` gives: rows per example, or (tagging) per word."""


def teacher_targets(teacher: Teacher, features: Sequence[Any], length: int) -> np.ndarray:
    """The :data:`TEACHER_KEY` entry of a training batch of ``features`` padded to ``length``
    tokens: each feature's example's row, or (tagging) each labelled position's word's."""
    if isinstance(teacher, WordTeacher):
        return teacher.targets(features, length)
    return teacher[[f.example_index for f in features]]


def check_distill_settings(alpha: float, temperature: float) -> None:
    """ConfigError unless 0 <= ``alpha`` <= 1 and ``temperature`` > 0 (finite)."""
    if not 0.0 <= alpha <= 1.0:
        raise ConfigError(f"distill alpha must be in [0, 1], got {alpha}")
    if not 0 < temperature < float("inf"):
        raise ConfigError(f"distill temperature must be positive, got {temperature}")


def check_distillable(adapter_class: type[TaskAdapter], family: str | None = None) -> None:
    """Refuse a teacher for a family other than sequence classification and regression, and
    token tagging (:mod:`bertkit.training.distill_tokens`); ``family`` names it in the error.
    (Spans, choices and embeddings have no per-example row of label logits to match.)"""
    if not issubclass(adapter_class, (ClassificationAdapter, TaggingAdapter)):
        raise ConfigError(
            "a teacher (--teacher) distils sequence classification and regression "
            "(finetune glue, classify) and token tagging (finetune ner, tag); "
            f"{'finetune ' + family if family else 'this family'} is not supported"
        )


def distill_loss(
    student: torch.Tensor,
    teacher: torch.Tensor,
    task_loss: torch.Tensor,
    alpha: float,
    temperature: float,
) -> torch.Tensor:
    """The loss of the module docstring on a batch: ``student`` and ``teacher`` logits (B, K)
    (K = 1: regression scores), ``task_loss`` the head's mean loss on the gold labels; the soft
    term is computed in fp32 whatever the autocast."""
    s, t = student.float(), teacher.float()
    if s.shape != t.shape:
        raise ValueError(f"student logits {tuple(s.shape)} and teacher's {tuple(t.shape)} differ")
    if s.shape[-1] == 1:  # regression: match the teacher's score
        soft = F.mse_loss(s, t)
    else:
        soft = F.kl_div(
            F.log_softmax(s / temperature, dim=-1),
            F.log_softmax(t / temperature, dim=-1),
            reduction="batchmean",
            log_target=True,
        ) * (temperature * temperature)
    return (1.0 - alpha) * task_loss + alpha * soft


class DistillLoss(TaskLoss):
    """:class:`TaskLoss` (the head's loss, micro-batches weighted by their examples) with the
    teacher's soft targets mixed in (:func:`distill_loss`): the soft term is a mean over the
    same examples, so the weighting keeps the whole batch's update under any split into
    micro-batches and ranks."""

    target_keys = (TEACHER_KEY,)

    def __init__(self, alpha: float, temperature: float) -> None:
        self.alpha, self.temperature = alpha, temperature

    @classmethod
    def of(cls, config: Any) -> DistillLoss:
        """The loss of a :class:`~bertkit.training.finetune.FinetuneConfig`'s ``distill_*``."""
        return cls(config.distill_alpha, config.distill_temperature)

    def term(
        self,
        out: Any,
        own: list[float],
        totals: list[float],
        teacher_logits: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if teacher_logits is None:
            raise ValueError(f"a distillation batch carries {TEACHER_KEY}")
        if teacher_logits.dim() == 3:  # (B, T, K): a tagger's words, over own[0] labelled
            loss = token_distill_loss(
                out.logits, teacher_logits, out.loss, self.alpha, self.temperature, own[0]
            )
        else:
            loss = distill_loss(out.logits, teacher_logits, out.loss, self.alpha, self.temperature)
        return self.weighted(loss, own, totals)


def align_labels(teacher: TaskAdapter, student: TaskAdapter, where: str | Path) -> list[int]:
    """The teacher's output column of each of the student's labels (by name, so that a
    teacher with the same labels in another order serves); ConfigError naming both label
    lists when they differ, or when one regresses and the other classifies."""
    t_reg, s_reg = getattr(teacher, "regression", False), getattr(student, "regression", False)
    if t_reg or s_reg:
        if t_reg and s_reg:
            return [0]
        kinds = {True: "regression", False: "classification"}
        raise ConfigError(
            f"teacher {where} is a {kinds[t_reg]} model; the student's task is {kinds[s_reg]}"
        )
    assert isinstance(teacher, ClassificationAdapter | TaggingAdapter)
    assert isinstance(student, ClassificationAdapter | TaggingAdapter)
    if sorted(teacher.labels) != sorted(student.labels):
        raise ConfigError(
            f"teacher {where} has labels {teacher.labels}; the student's task has "
            f"{student.labels} (the same names are needed, in any order)"
        )
    return [teacher.labels.index(name) for name in student.labels]


def teacher_logits(
    teacher: str | Path,
    student: TaskAdapter,
    examples: Sequence[Any],
    *,
    device: str | torch.device,
    precision: str,
    batch_size: int,
    allow_pickle: bool = False,
    split_special_tokens: bool = False,
    show_progress: bool | None = None,
    log: Callable[[str], None] = print,
    info: DistInfo | None = None,
) -> Teacher:
    """(len(examples), K) float32: the ``teacher`` folder's logits of every example, read with
    the teacher's own tokenizer, windows and window pooling, columns in ``student``'s label
    order (:func:`align_labels`). A tagging student gets a :class:`WordTeacher` instead: the
    teacher's logits of every word (:mod:`bertkit.training.distill_tokens`). Logs how often
    the teacher agrees with the gold labels.

    Under a process group (``info``, collective: every rank calls it with the same examples)
    each rank reads every ``world``-th example (a tagger: every ``world``-th of its sentences
    or documents) and every rank returns all the rows; progress is shown on rank 0 only, and
    ``log`` is called on every rank."""
    check_distillable(type(student))
    tokens = isinstance(student, TaggingAdapter)
    model = TaskModel.load(
        teacher,
        device=str(device),
        precision=precision,
        batch_size=batch_size,
        allow_pickle=allow_pickle,
        split_special_tokens=split_special_tokens,
    )
    taught = model.adapter
    if not isinstance(taught, TaggingAdapter if tokens else ClassificationAdapter):
        needed = "token tagger (finetune ner or tag)" if tokens else "sequence classifier"
        needed += "" if tokens else " (finetune glue or classify)"
        raise ConfigError(f"teacher {teacher} is a {taught.family} model; a {needed} is needed")
    columns = align_labels(taught, student, teacher)
    info = info or DistInfo()  # alone: one share, all the examples
    world = info.world_size
    units = taught.units(examples) if tokens else [[i] for i in range(len(examples))]
    order = gather_order(units, info.rank, world)  # strided: see the module docstring
    share = [examples[i] for i in order]
    own = np.zeros((0, len(columns)), dtype=np.float32)
    sizes = np.zeros(0, dtype=np.int64)  # a tagger's words per sentence of the share
    if share:
        prepared = model.prepare(share)
        rows = predict_rows(
            model.model,
            taught,
            prepared.features,
            pad_id=model.tokenizer.pad_token_id or 0,
            batch_size=batch_size,
            precision=model.precision,
            show_progress=show_progress if info.is_main else False,
            desc="teacher",
            outputs=token_logits if tokens else None,
        )
        if tokens:
            words = taught.word_logits(share, prepared.features, rows)
            sizes = np.asarray([len(w) for w in words], dtype=np.int64)
            own = np.concatenate(words)[:, columns]
        else:
            own = taught.example_logits(prepared.features, rows, len(share))[:, columns]
    parts = all_gather_rows(torch.from_numpy(np.asarray(own, dtype=np.float32)), info)
    if tokens:  # rows of variable length: the words per sentence say where each one's begin
        counts = all_gather_rows(torch.from_numpy(sizes), info)
        per_sentence: list[np.ndarray] = [np.zeros(0)] * len(examples)
        for rank, (part, n) in enumerate(zip(parts, counts)):
            cuts = np.cumsum(n.numpy())[:-1]
            for i, w in zip(gather_order(units, rank, world), np.split(part.numpy(), cuts)):
                per_sentence[i] = w
        assert isinstance(student, TaggingAdapter)
        words_of = WordTeacher.of(per_sentence, student.units(examples), len(columns))
        log(
            f"teacher {teacher}: logits of the {len(words_of.rows)} words of {len(examples)} "
            f"training sentences; its argmax is the gold tag on "
            f"{agreement(words_of, examples, student.labels):.4f} of the words it read"
        )
        return words_of
    logits = np.empty((len(examples), len(columns)), dtype=np.float32)
    for rank, part in enumerate(parts):  # rank r read examples r, r + world, r + 2 world ...
        logits[rank::world] = part.numpy()
    assert isinstance(student, ClassificationAdapter)
    gold = [e.label for e in examples]
    if not student.regression and all(g is not None for g in gold):
        agree = float(np.mean(logits.argmax(-1) == np.asarray(gold)))
        log(
            f"teacher {teacher}: logits of {len(examples)} training examples; its argmax is the "
            f"gold label on {agree:.4f} of them"
        )
    return np.ascontiguousarray(logits, dtype=np.float32)
