"""Fine-tuning's model selection, the BERT paper's procedure, as a small driver over
:func:`bertkit.training.finetune.train_one`.

Selection (paper, section 4.1): every learning rate in ``learning_rates`` is run ``restarts`` times
with seeds ``seed, seed + 1, ...`` (each seed sets the head initialisation, dropout and data order),
each run is scored on dev by its best epoch, and the best run overall is selected. Whenever a run
reaches a new best dev score its model is written to the output folder, so at the end the folder
holds the selected model. :func:`finetune` returns (and the CLI writes as ``metrics.json``) every
run with its lr, seed and score, the mean and spread per lr and overall, and the selected run.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from bertkit.errors import ConfigError
from bertkit.tasks.base import TaskAdapter
from bertkit.tokenizer.protocol import Tokenizer
from bertkit.training import distributed as D
from bertkit.training.finetune import (
    FinetuneConfig,
    RunResult,
    TaskData,
    metric_name,
    score_key,
    train_one,
)
from bertkit.training.model_dir import record_kept, save_model_dir


@dataclass
class FinetuneResult:
    """Everything ``metrics.json`` holds: runs, their summary, the selected run's dev metrics."""

    metric: str
    runs: list[RunResult]
    selected: dict[str, Any]
    summary: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "selected": self.selected,
            "summary": self.summary,
            "runs": [asdict(r) for r in self.runs],
        }


def _spread(scores: list[float]) -> dict[str, float]:
    return {
        "mean": statistics.fmean(scores),
        "std": statistics.stdev(scores) if len(scores) > 1 else 0.0,
        "min": min(scores),
        "max": max(scores),
        "n": len(scores),
    }


def finetune(
    build_model: Callable[[], torch.nn.Module],
    adapter: TaskAdapter,
    data: TaskData,
    tokenizer: Tokenizer,
    output: str | Path,
    config: FinetuneConfig,
    *,
    log: Callable[[str], None] = print,
    device: torch.device | None = None,
    info: D.DistInfo | None = None,
    started: float | None = None,
    train_data: str | None = None,
) -> FinetuneResult:
    """Run the selection procedure (see the module doc) and leave the selected model in ``output``.

    ``build_model()`` returns a fresh model (pretrained encoder + new head) each call; it is
    called under the run's seed. Returns the result; the caller writes ``metrics.json``.
    ``started`` (``time.time()``; default now): when the job began, which ``config.minutes``
    counts from; each run's deadline is an equal share of the time then left. ``train_data``:
    what ``data``'s training examples are (:func:`~bertkit.training.model_dir.training_data`),
    named in ``output``'s unfinished-job mark.
    """
    job_end = None
    if config.minutes is not None:
        job_end = (started if started is not None else time.time()) + 60 * config.minutes
    if not data.train:
        raise ConfigError("no training examples")
    if not data.dev:
        raise ConfigError("no dev set to evaluate and select on")
    output = Path(output)
    best: dict[str, Any] = {"score": -math.inf}
    runs: list[RunResult] = []

    def keep(
        lr: float, seed: int
    ) -> Callable[[torch.nn.Module, TaskAdapter, float, dict[str, Any]], None]:
        def on_best(
            model: torch.nn.Module, tuned: TaskAdapter, score: float, record: dict[str, Any]
        ) -> None:
            if "lr" not in best or score_key(score) > score_key(best["score"]):
                save_model_dir(model, tuned, tokenizer, output, train_data)
                best.update(score=score, lr=lr, seed=seed, epoch=record["epoch"], dev=record["dev"])
                dev = f"dev {tuned.main_metric} {score:.4f}"
                record_kept(output, f"lr {lr:g} seed {seed} epoch {record['epoch']}, {dev}")

        return on_best

    planned = len(config.learning_rates) * config.restarts
    for lr in config.learning_rates:
        for r in range(config.restarts):
            seed = config.seed + r
            end_by = None
            if job_end is not None:  # the runs left share the time left
                now = time.time()
                end_by = now + (job_end - now) / (planned - len(runs))
            runs.append(
                train_one(
                    build_model,
                    adapter,
                    data,
                    config,
                    lr,
                    seed,
                    pad_id=tokenizer.pad_token_id,
                    on_best=keep(lr, seed),
                    log=log,
                    device=device,
                    info=info,
                    end_by=end_by,
                )
            )
    scores = [r.score for r in runs]
    by_lr = {
        f"{lr:g}": _spread([r.score for r in runs if r.lr == lr]) for lr in config.learning_rates
    }
    summary = {**_spread(scores), "by_lr": by_lr}
    result = FinetuneResult(metric_name(adapter), runs, best, summary)
    if info is None or info.is_main:
        log(format_summary(result))
    return result


def format_summary(result: FinetuneResult) -> str:
    """A short end-of-training table: one line per run, then the selection."""
    lines = [f"{'lr':>8} {'seed':>5} {result.metric:>9} {'epoch':>5} {'steps':>6} {'time':>8}"]
    for r in result.runs:
        lines.append(
            f"{r.lr:>8g} {r.seed:>5d} {r.score:>9.4f} {r.best_epoch:>5d} {r.steps:>6d} {r.wall_s:>7.1f}s"
        )
    s, sel = result.summary, result.selected
    lines.append(
        f"{result.metric}: mean {s['mean']:.4f} ± {s['std']:.4f} over {s['n']} run(s); "
        f"selected lr {sel.get('lr', float('nan')):g} seed {sel.get('seed')} "
        f"epoch {sel.get('epoch')}: {sel['score']:.4f}"
    )
    return "\n".join(lines)
