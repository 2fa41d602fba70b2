"""One fine-tuning run with the BERT paper's recipe, as a run of the one training loop.

One run: AdamW (decoupled weight decay 0.01, not on biases/LayerNorm; :mod:`bertkit.training.optim`),
linear warmup over the first 10% of updates then linear decay to 0 (:mod:`bertkit.training.schedule`),
and the :class:`~bertkit.training.loop.Trainer` pre-training uses, with the head's loss as its
objective (:class:`~bertkit.training.objectives.TaskLoss`): gradient clipping at 1.0, bf16 autocast
or fp16 with a loss scaler, non-finite updates skipped. Its data come in epochs
(:class:`~bertkit.training.epochs.EpochBatches`: random batches, optionally length-bucketed); after
every epoch a hook scores dev with the task's official metric, and the best epoch is kept.

The model selection over learning rates and restarts that runs :func:`train_one` many times:
:mod:`bertkit.training.selection`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from bertkit import precision as P
from bertkit.errors import ConfigError
from bertkit.inference.runner import predict_rows, to_torch
from bertkit.tasks.base import Scored, TaskAdapter
from bertkit.tasks.features import widen
from bertkit.training import distill as KD
from bertkit.training import distributed as D
from bertkit.training.deadline import save_seconds
from bertkit.training.epochs import EpochBatches
from bertkit.training.loop import Trainer
from bertkit.training.objectives import TaskLoss
from bertkit.training.optim import OptimizerConfig, build_optimizer, check_layerwise_lr_decay
from bertkit.training.schedule import ScheduleConfig
from bertkit.training.settings import TrainConfig
from bertkit.training.update import MAX_CONSECUTIVE_SKIPS, StepStats


@dataclass(frozen=True)
class FinetuneConfig:
    """Fine-tuning hyperparameters (defaults: the BERT paper's, appendix A.3)."""

    learning_rates: tuple[float, ...] = (5e-5,)
    """Peak learning rates to try; the paper searched {5e-5, 4e-5, 3e-5, 2e-5}."""
    restarts: int = 1
    """Runs per learning rate, with seeds seed, seed+1, ... (new head init and data order)."""
    epochs: int = 3
    """Passes over the training data per run; dev is scored after each."""
    batch_size: int = 32
    """Training examples per optimizer update, all ranks and micro-batches together."""
    grad_accum: int = 1
    """Micro-batches per update on each rank, run one after the other with their gradients
    summed: the same update in about 1/grad_accum of the activation memory."""
    warmup_proportion: float = 0.1
    """Fraction of the updates with a linear learning-rate warmup (then linear decay to 0)."""
    weight_decay: float = 0.01
    """Decoupled AdamW weight decay (not on biases and LayerNorm)."""
    layerwise_lr_decay: float = 1.0
    """Layer-wise learning-rate decay in (0, 1]: encoder layer i of L trains at lr * decay^(L-i),
    the embeddings at lr * decay^(L+1), the head and pooler at lr (1.0: off, one rate for all)."""
    adam_eps: float = 1e-6
    """AdamW epsilon (google-research/bert's value)."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm."""
    dropout: float | None = 0.1
    """Dropout of the encoder and head while fine-tuning: the model config's hidden and attention
    dropout (from Python, None keeps the checkpoint's; ``build_model`` applies it)."""
    seed: int = 42
    """Seed of the first run (head initialisation, dropout and data order)."""
    max_steps: int | None = None
    """Cap on optimizer updates per run (smoke runs); dev is evaluated when it is reached."""
    precision: str = P.DEFAULT
    """One of :data:`bertkit.precision.CHOICES` (autocast; master weights stay fp32)."""
    eval_batch_size: int = 64
    """Examples per forward pass when scoring dev."""
    max_consecutive_skips: int = MAX_CONSECUTIVE_SKIPS
    """Non-finite updates in a row that abort a run (each is skipped, its batch consumed)."""
    bucket_batches: int = 1
    """Batches per length-sorting chunk (1 = random batches, no length bucketing)."""
    show_progress: bool | None = None
    """Progress bars (None: on a terminal)."""
    minutes: float | None = None
    """Wall-clock budget of the whole job, from reading the data to the last save: the runs
    share the time left equally, and a run whose updates would not fit ends its learning-rate
    decay sooner (the deadline of pre-training), still scoring dev at its last update.
    None: every run trains its epochs in full."""
    distill_alpha: float = 0.5
    """With a teacher: the weight of its soft targets in the loss, the gold labels' 1 - alpha
    (0: ordinary fine-tuning, 1: the teacher alone)."""
    distill_temperature: float = 2.0
    """With a teacher: the softmax temperature T of both sides' logits, the soft term times
    T^2 (regression matches the teacher's score by MSE, without T)."""

    def __post_init__(self) -> None:
        if not self.learning_rates or any(not lr > 0 for lr in self.learning_rates):
            raise ConfigError(f"learning rates must be positive, got {self.learning_rates}")
        for name in (
            "restarts",
            "epochs",
            "batch_size",
            "grad_accum",
            "eval_batch_size",
            "bucket_batches",
            "max_consecutive_skips",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.batch_size % self.grad_accum:  # pre-training's rule (PhaseBatches)
            raise ConfigError(
                f"batch_size {self.batch_size} must be divisible by grad_accum {self.grad_accum}"
            )
        if self.minutes is not None and not self.minutes > 0:
            raise ConfigError(f"minutes must be positive, got {self.minutes}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError(f"max_steps must be at least 1, got {self.max_steps}")
        P.check(self.precision)
        check_layerwise_lr_decay(self.layerwise_lr_decay)
        if not 0.0 <= self.warmup_proportion <= 1.0:
            raise ConfigError(f"warmup proportion must be in [0, 1], got {self.warmup_proportion}")
        KD.check_distill_settings(self.distill_alpha, self.distill_temperature)


@dataclass
class RunResult:
    """One (lr, seed) run: its best dev score and per-epoch history."""

    lr: float
    seed: int
    score: float
    best_epoch: int
    steps: int
    wall_s: float
    epochs: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0
    """Updates skipped for a non-finite loss or gradient."""


@dataclass
class TaskData:
    """Encoded data: training features, and dev sets by name (the first one selects models)."""

    train: list[Any]
    dev: dict[str, tuple[list[Any], list[Any]]]
    """dev split name -> (examples, features)."""
    teacher: KD.Teacher | None = None
    """(training examples, K): a teacher's logits of each (:mod:`bertkit.training.distill`),
    looked up by the features' ``example_index`` (tagging: of each word); None: gold alone."""


def evaluate_sets(
    model: torch.nn.Module,
    adapter: TaskAdapter,
    dev: dict[str, tuple[list[Any], list[Any]]],
    *,
    pad_id: int,
    config: FinetuneConfig,
    tune: bool,
) -> dict[str, Scored]:
    """Score every dev set; ``tune`` lets the adapter fit settings (SQuAD v2.0 threshold)."""
    out = {}
    for name, (examples, feats) in dev.items():
        rows = predict_rows(
            model,
            adapter,
            feats,
            pad_id=pad_id,
            batch_size=config.eval_batch_size,
            precision=config.precision,
            show_progress=config.show_progress,
            desc=name,
        )
        out[name] = (adapter.fit_dev if tune else adapter.score)(examples, feats, rows)
    return out


def train_one(
    build_model: Callable[[], torch.nn.Module],
    adapter: TaskAdapter,
    data: TaskData,
    config: FinetuneConfig,
    lr: float,
    seed: int,
    *,
    pad_id: int,
    on_best: Callable[[torch.nn.Module, TaskAdapter, float, dict[str, Any]], None],
    log: Callable[[str], None] = print,
    device: torch.device | None = None,
    info: D.DistInfo | None = None,
    end_by: float | None = None,
) -> RunResult:
    """Train one run; after each epoch score dev and call ``on_best(model, adapter, score, record)``
    (record: epoch, step, train_loss, dev metrics, the examples seen) when the run improves on its
    own best. The global RNG is forked, so callers are unaffected. ``end_by`` (``time.time()``
    seconds): the run's deadline, its last scoring and save included (``FinetuneConfig.minutes``).

    Under torchrun (``info`` distributed) every rank draws the same global batches and trains
    on its share (:func:`bertkit.training.sharding.rank_share`), gradients averaged by DDP and
    the loss normalised over the global batch, so the update is the one process's; rank 0
    scores dev, selects and saves, and tells the others the score. A rank whose share of a
    (last, small) batch is empty runs one example with weight 0, so that DDP's collectives match.
    With ``config.grad_accum`` > 1 each rank's share is cut into that many micro-batches the same
    way, and the update is still the whole batch's (:class:`TaskLoss`).
    """
    check_accumulation(type(adapter), config, getattr(adapter, "loss", None))
    info = info or D.DistInfo()
    device = torch.device(device or info.device)
    info = dataclasses.replace(info, device=str(device))
    t0 = time.perf_counter()
    steps_per_epoch = math.ceil(len(data.train) / config.batch_size)
    total = steps_per_epoch * config.epochs
    if config.max_steps is not None:
        total = min(total, config.max_steps)
    name = f"lr {lr:g} seed {seed}"
    result = RunResult(lr, seed, -math.inf, 0, 0, 0.0)
    # manual_seed reseeds every CUDA device too: fork this one's stream as well as the CPU's
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)  # head initialisation and dropout
        core = build_model().to(device)
        if info.rank > 0:  # rank 0 keeps the one-process dropout stream; the others their own
            torch.manual_seed(seed * 1_000_003 + info.rank)
        wd, eps, layer_decay = config.weight_decay, config.adam_eps, config.layerwise_lr_decay
        optim = OptimizerConfig(lr=lr, weight_decay=wd, eps=eps, layerwise_lr_decay=layer_decay)
        opt = build_optimizer(core, optim)
        batches = EpochBatches(
            data.train,
            [adapter.length(f) for f in data.train],
            training_collate(adapter, pad_id, data.teacher),
            batch_size=config.batch_size,
            epochs=config.epochs,
            bucket_batches=config.bucket_batches,
            generator=torch.Generator().manual_seed(seed),  # data order
            info=info,
            grad_accum=config.grad_accum,
        )
        epoch_end = _EpochEnd(adapter, data, config, pad_id, result, on_best, log)
        trainer = Trainer(
            core,
            opt,
            ScheduleConfig.from_proportion(total, config.warmup_proportion),
            phases=None,  # the data come from the epochs source
            collate=None,
            config=TrainConfig(
                batch_size=config.batch_size,
                grad_accum=config.grad_accum,
                seed=seed,
                precision=config.precision,
                clip_norm=config.max_grad_norm,
                log_every=LOG_EVERY,
                save_every=total,
                max_consecutive_skips=config.max_consecutive_skips,
                show_progress=config.show_progress,
                spike_factor=math.inf,  # one batch's loss is noisy: no spike warnings
                end_by=end_by,
                reserve_updates=_scoring_updates(data, config),
                reserve_seconds=save_seconds(core),
            ),
            run_dir=None,
            info=info,
            log=log,
            objective=TaskLoss() if data.teacher is None else KD.DistillLoss.of(config),
            batches=batches,
            on_update=epoch_end,
            name=name,
        )
        trainer.fit()
    result.steps, result.skipped = trainer.step, trainer.skipped
    result.wall_s = time.perf_counter() - t0
    return result


def training_collate(
    adapter: TaskAdapter, pad_id: int, teacher: KD.Teacher | None = None
) -> Callable[[list[Any], int | None, torch.Generator], dict[str, torch.Tensor]]:
    """``collate(features, length, draws)`` of :class:`EpochBatches`: the adapter's training
    batch (``draws`` for rerank's in-batch negatives), padded on to ``length`` (the update's
    longest feature) when its loss normalises over padding, so that every micro-batch and rank
    share sees the whole batch's; with ``teacher``, each feature's example's logits too."""

    def collate(features: list[Any], length: int | None, draws: torch.Generator) -> dict:
        drawn = {"draws": draws} if getattr(adapter, "draws_negatives", False) else {}
        batch = adapter.collate(features, pad_id, training=True, **drawn)
        if adapter.loss_over_padding and length is not None:
            batch = widen(batch, length, pad_id)
        if teacher is not None:
            batch[KD.TEACHER_KEY] = KD.teacher_targets(
                teacher, features, batch["input_ids"].shape[1]
            )
        return to_torch(batch, "cpu")

    return collate


def check_accumulation(
    adapter_class: type[TaskAdapter], config: FinetuneConfig, loss: str | None = None
) -> None:
    """Refuse ``grad_accum`` > 1 for a family whose loss (``loss``: its name, for a family with
    several) couples the examples of a batch (:meth:`TaskAdapter.couples_batch`): micro-batches
    would change the loss, not only its memory (called before the data are read, and by
    :func:`train_one`)."""
    if config.grad_accum > 1 and adapter_class.couples_batch(loss):
        raise ConfigError(
            f"grad_accum {config.grad_accum} would change this task's loss: each example is "
            f"scored against the others of its batch (in-batch negatives), and a micro-batch of "
            f"{config.batch_size // config.grad_accum} has fewer than the batch of "
            f"{config.batch_size}; set mini_batch_size (--mini-batch-size) instead, which "
            f"encodes the batch that many rows at a time and keeps every negative"
        )


LOG_EVERY = 10
"""Updates per progress-bar loss (fine-tuning writes no metrics file: its record is per epoch)."""


def _scoring_updates(data: TaskData, config: FinetuneConfig) -> float:
    """Updates' worth of time to keep back before a deadline for the last dev scoring, until an
    epoch end has measured it: a forward pass costs about a third of a training step on the
    same examples, counted here as half for the padding of unbucketed dev batches."""
    dev = sum(len(feats) for _, feats in data.dev.values())
    return dev / (2 * config.batch_size)


class _EpochEnd:
    """The Trainer's ``on_update`` hook of a fine-tuning run: sums the epoch's loss, and when an
    epoch ends (or the run reaches its last update) scores dev on rank 0, keeps the epoch's record
    and calls ``on_best`` when the run improves on its own best."""

    def __init__(
        self,
        adapter: TaskAdapter,
        data: TaskData,
        config: FinetuneConfig,
        pad_id: int,
        result: RunResult,
        on_best: Callable[[torch.nn.Module, TaskAdapter, float, dict[str, Any]], None],
        log: Callable[[str], None],
    ) -> None:
        self.adapter, self.data, self.config, self.pad_id = adapter, data, config, pad_id
        self.result, self.on_best, self._log = result, on_best, log
        self.epoch, self.loss_sum, self.updates = 0, 0.0, 0

    def __call__(self, t: Trainer, stats: StepStats | None) -> None:
        if stats is not None:
            self.loss_sum, self.updates = self.loss_sum + stats.loss, self.updates + 1
        batches = t.batches
        assert isinstance(batches, EpochBatches)
        if not (batches.epoch_ended or t.step >= t.schedule.total_steps):
            return
        self.epoch += 1
        info = t.info
        examples, index_sum, index_squares = D.all_reduce_sum(batches.seen, info)
        record: dict[str, Any] = {
            "epoch": self.epoch,
            "step": t.step,
            "train_loss": self.loss_sum / max(self.updates, 1),
            "seen": {"examples": examples, "index_sum": index_sum, "index_squares": index_squares},
        }
        self.loss_sum, self.updates = 0.0, 0
        score = math.nan
        started = time.perf_counter()
        if info.is_main:
            scored = evaluate_sets(
                t.core,
                self.adapter,
                self.data.dev,
                pad_id=self.pad_id,
                config=self.config,
                tune=True,
            )
            t.core.train()  # scoring left the model in eval mode
            main = next(iter(scored.values()))
            record["dev"] = {k: v.metrics for k, v in scored.items()}
            score = main.main
        score = D.broadcast_float(score, info)
        result = self.result
        result.epochs.append(record)
        if info.is_main:
            self._log(
                f"{t.name} epoch {self.epoch} step {t.step}: train loss "
                f"{record['train_loss']:.4f}, dev {metric_name(self.adapter)} {score:.4f}"
            )
        if result.best_epoch == 0 or score_key(score) > score_key(result.score):
            result.score, result.best_epoch = score, self.epoch
            if info.is_main:
                self.on_best(t.core, self.adapter.with_tuned(main.metrics), score, record)
        D.barrier(info)  # rank 0 has saved before anyone goes on
        if t.deadline is not None:  # kept back for the last scoring and save, once measured
            t.deadline.paused(time.perf_counter() - started)


def score_key(score: float) -> float:
    """Comparison key: a NaN score (e.g. a correlation of constant predictions) ranks last."""
    return -math.inf if math.isnan(score) else score


def metric_name(adapter: TaskAdapter) -> str:
    return str(adapter.main_metric)
