"""One fine-tuning run with the BERT paper's recipe.

One run: AdamW (decoupled weight decay 0.01, not on biases/LayerNorm; :mod:`bertkit.training.optim`),
linear warmup over the first 10% of updates then linear decay to 0 (:mod:`bertkit.training.schedule`),
and the update step pre-training uses (:mod:`bertkit.training.update`, the head's loss as the
objective): gradient clipping at 1.0, bf16 autocast or fp16 with a loss scaler, non-finite updates
skipped. Dev is evaluated after every epoch with the task's official metric; the best epoch is kept.

The model selection over learning rates and restarts that runs :func:`train_one` many times:
:mod:`bertkit.training.selection`.

Batches are drawn at random, as the reference recipe does (the data are shuffled with an explicit
``torch.Generator``); the encoder's unpadded path already skips the padding in every dense layer.
``bucket_batches`` > 1 adds length bucketing: the shuffled data are cut into chunks of that many
batches, sorted by length inside each chunk, cut into batches, and the batch order is shuffled
again. That also trims attention's padding, but batches of similar length are less random; it
was the default until side-by-side MRPC runs against the reference recipe (docs/finetune.md).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from bertkit import precision as P
from bertkit.errors import ConfigError
from bertkit.inference.runner import predict_rows, to_torch
from bertkit.progress import progress
from bertkit.tasks.base import Scored, TaskAdapter
from bertkit.training import distributed as D
from bertkit.training import sharding as S
from bertkit.training.objectives import TaskLoss
from bertkit.training.optim import OptimizerConfig, build_optimizer
from bertkit.training.prefetch import Prefetcher, default_depth
from bertkit.training.schedule import ScheduleConfig, set_lr
from bertkit.training.update import (
    MAX_CONSECUTIVE_SKIPS,
    MicroBatch,
    UpdateStep,
    check_skips,
    skip_warning,
)


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
    """Training examples per optimizer update."""
    warmup_proportion: float = 0.1
    """Fraction of the updates with a linear learning-rate warmup (then linear decay to 0)."""
    weight_decay: float = 0.01
    """Decoupled AdamW weight decay (not on biases and LayerNorm)."""
    adam_eps: float = 1e-6
    """AdamW epsilon (google-research/bert's value)."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm."""
    dropout: float | None = 0.1
    """Dropout of the encoder and head (None keeps the checkpoint's config). Recorded here; it is
    applied by the ``build_model`` callable (the CLI passes it as a config override)."""
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

    def __post_init__(self) -> None:
        if not self.learning_rates or any(not lr > 0 for lr in self.learning_rates):
            raise ConfigError(f"learning rates must be positive, got {self.learning_rates}")
        for name in (
            "restarts",
            "epochs",
            "batch_size",
            "eval_batch_size",
            "bucket_batches",
            "max_consecutive_skips",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError(f"max_steps must be at least 1, got {self.max_steps}")
        P.check(self.precision)
        if not 0.0 <= self.warmup_proportion <= 1.0:
            raise ConfigError(f"warmup proportion must be in [0, 1], got {self.warmup_proportion}")


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


def length_bucketed_batches(
    lengths: Sequence[int], batch_size: int, generator: torch.Generator, chunk_batches: int = 50
) -> list[list[int]]:
    """Index batches of one epoch: shuffle, sort by length within chunks, shuffle the batches.

    Every index appears exactly once. With ``chunk_batches <= 1`` this is a plain random split
    into consecutive batches of one permutation (the last one may be smaller): the order torch's
    ``RandomSampler`` + ``BatchSampler`` give for the same generator, so one seed means the same
    batches as a reference loop built on them.
    """
    order = torch.randperm(len(lengths), generator=generator).tolist()
    if chunk_batches <= 1:
        return [order[k : k + batch_size] for k in range(0, len(order), batch_size)]
    chunk = batch_size * chunk_batches
    batches: list[list[int]] = []
    for start in range(0, len(order), chunk):
        part = sorted(order[start : start + chunk], key=lambda i: lengths[i], reverse=True)
        batches.extend(part[k : k + batch_size] for k in range(0, len(part), batch_size))
    perm = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in perm]


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


def _epoch_batches(
    lengths: Sequence[int], config: FinetuneConfig, gen: torch.Generator, info: D.DistInfo
) -> list[list[int]]:
    """This rank's share of each batch of one epoch (the same global batches on every rank)."""
    batches = length_bucketed_batches(lengths, config.batch_size, gen, config.bucket_batches)
    return [S.rank_share(b, info) for b in batches]


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
) -> RunResult:
    """Train one run; after each epoch score dev and call ``on_best(model, adapter, score, record)``
    (record: epoch, step, train_loss, dev metrics, the examples seen) when the run improves on its
    own best. The global RNG is forked, so callers are unaffected.

    Under torchrun (``info`` distributed) every rank draws the same global batches and trains
    on its share (:func:`bertkit.training.sharding.rank_share`), gradients averaged by DDP and
    the loss normalised over the global batch, so the update is the one process's; rank 0
    scores dev, selects and saves, and tells the others the score. A rank whose share of a
    (last, small) batch is empty runs one example with weight 0, so that DDP's collectives match.
    """
    info = info or D.DistInfo()
    device = device or torch.device(info.device)
    t0 = time.perf_counter()
    lengths = [adapter.length(f) for f in data.train]
    steps_per_epoch = math.ceil(len(data.train) / config.batch_size)
    total = steps_per_epoch * config.epochs
    if config.max_steps is not None:
        total = min(total, config.max_steps)
    schedule = ScheduleConfig.from_proportion(total, config.warmup_proportion)
    result = RunResult(lr, seed, -math.inf, 0, 0, 0.0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # head initialisation and dropout
        core = build_model().to(device)
        if info.rank > 0:  # rank 0 keeps the one-process dropout stream; the others their own
            torch.manual_seed(seed * 1_000_003 + info.rank)
        model = core
        if info.distributed:
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(core, device_ids=[device.index] if device.type == "cuda" else None)
        gen = torch.Generator().manual_seed(seed)  # data order
        opt = build_optimizer(
            core, OptimizerConfig(lr=lr, weight_decay=config.weight_decay, eps=config.adam_eps)
        )
        peaks = [lr for _ in opt.param_groups]
        update = UpdateStep(
            opt,
            TaskLoss(),
            list(core.parameters()),
            P.resolve(config.precision, device),
            device,
            config.max_grad_norm,
            info,
        )

        def prepared(idx: list[int]) -> MicroBatch:  # in the prefetching thread
            rows = idx or [0]  # an empty share: one example, weight 0
            collated = adapter.collate([data.train[i] for i in rows], pad_id, training=True)
            m = update.prepare(to_torch(collated, "cpu"))
            if not idx:
                m.counts, m.tokens = [0.0], 0.0
            return m

        step, in_a_row = 0, 0
        bar = progress(
            total=total,
            desc=f"lr {lr:g} seed {seed}",
            unit="step",
            enabled=config.show_progress if info.is_main else False,
        )
        depth = default_depth(device.type)  # batches collated ahead (0 on the CPU: in series)
        for epoch in range(1, config.epochs + 1):
            model.train()
            loss_sum, n = 0.0, 0
            seen = [0.0, 0.0, 0.0]  # examples, sum of indices, sum of squares (exactly-once check)
            batches = _epoch_batches(lengths, config, gen, info)
            ahead = Prefetcher(
                lambda k, b=batches: prepared(b[k]), depth, pin=device.type == "cuda"
            )
            try:
                for k in range(len(batches)):
                    if step >= total:
                        break
                    batch = ahead.get(k, range(k + 1, k + 1 + depth))
                    seen = [a + b for a, b in zip(seen, _seen(batches[k]), strict=True)]
                    set_lr(opt, peaks, step, schedule)
                    stats = update(model, [batch.to(device, non_blocking=True)])
                    if stats is None:  # non-finite loss or gradient: skipped, the batch consumed
                        result.skipped, in_a_row = result.skipped + 1, in_a_row + 1
                        run = f"lr {lr:g} seed {seed}: "
                        log(skip_warning(step, in_a_row, run))
                        check_skips(step, in_a_row, config.max_consecutive_skips, run)
                        continue
                    step, in_a_row = step + 1, 0
                    loss_sum, n = loss_sum + stats.loss, n + 1
                    bar.update(1)
                    bar.set_postfix(loss=f"{loss_sum / n:.4f}")
            finally:
                ahead.close()
            examples, index_sum, index_squares = D.all_reduce_sum(seen, info)
            record = {
                "epoch": epoch,
                "step": step,
                "train_loss": loss_sum / max(n, 1),
                "seen": {
                    "examples": examples,
                    "index_sum": index_sum,
                    "index_squares": index_squares,
                },
            }
            score = math.nan
            if info.is_main:
                scored = evaluate_sets(
                    core, adapter, data.dev, pad_id=pad_id, config=config, tune=True
                )
                main = next(iter(scored.values()))
                record["dev"] = {k: v.metrics for k, v in scored.items()}
                score = main.main
            score = D.broadcast_float(score, info)
            result.epochs.append(record)
            if info.is_main:
                log(
                    f"lr {lr:g} seed {seed} epoch {epoch} step {step}: train loss "
                    f"{record['train_loss']:.4f}, dev {metric_name(adapter)} {score:.4f}"
                )
            if result.best_epoch == 0 or score_key(score) > score_key(result.score):
                result.score, result.best_epoch = score, epoch
                if info.is_main:
                    on_best(core, adapter.with_tuned(main.metrics), score, record)
            D.barrier(info)  # rank 0 has saved before anyone goes on
            if step >= total:
                break
        bar.close()
    result.steps = step
    result.wall_s = time.perf_counter() - t0
    return result


def _seen(idx: list[int]) -> list[float]:
    return [float(len(idx)), float(sum(idx)), float(sum(i * i for i in idx))]


def score_key(score: float) -> float:
    """Comparison key: a NaN score (e.g. a correlation of constant predictions) ranks last."""
    return -math.inf if math.isnan(score) else score


def metric_name(adapter: TaskAdapter) -> str:
    return str(adapter.main_metric)
