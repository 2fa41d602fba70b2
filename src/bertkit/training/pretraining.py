"""BERT pre-training wired together: prepared data + BertForPreTraining + the generic ``Trainer``.

``pretrain(options)`` is what ``bertkit pretrain`` and ``bertkit quickstart`` run. Calling it again
with the same options and output folder resumes from the newest valid checkpoint there; a finished
run only re-exports the final model. The final model goes to ``OUTPUT/model`` in the Hugging Face
layout (config.json, model.safetensors, vocab.txt).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.config import BertConfig
from bertkit.data.collate import make_collate
from bertkit.errors import ConfigError, InputError
from bertkit.io import atomic_write_text, make_folder
from bertkit.training.faults import NONE as NO_FAULTS
from bertkit.training.faults import Faults
from bertkit.training.loop import Phase, TrainConfig, Trainer, TrainResult
from bertkit.training.optim import OptimizerConfig
from bertkit.training.schedule import ScheduleConfig


@dataclass
class PretrainOptions:
    """Everything ``bertkit pretrain`` takes (see ``bertkit pretrain --help``)."""

    data: Path
    """prepare-pretraining output folder."""
    output: Path
    """Run folder: checkpoints, metrics.jsonl, curves.png, model/ (resumes if present)."""
    model_size: str = "tiny"
    """A size preset (config.PRESETS)."""
    config_file: Path | None = None
    """A BERT config.json instead of a preset."""
    max_steps: int = 1000
    """Optimizer updates in total."""
    learning_rate: float = 1e-4
    """Peak learning rate."""
    warmup_steps: int | None = None
    """Linear warmup updates (instead of --warmup-proportion)."""
    warmup_proportion: float = 0.01
    """Fraction of the updates with a linear warmup."""
    optimizer: str = "adamw"
    """adamw or lamb."""
    weight_decay: float = 0.01
    """Decoupled weight decay (not on biases and LayerNorm)."""
    dropout: float | None = None
    """Override hidden and attention dropout (None: the config's, 0.1)."""
    initializer_range: float | None = None
    """Std of the initial weights (config.json's initializer_range; None keeps 0.02)."""
    num_attention_heads: int | None = None
    """Attention heads per layer (config.json's num_attention_heads; None: the size's or the
    config file's); the hidden size must divide by it."""
    eval_data: Path | None = None
    """Held-out prepared data (None: the 'eval' split of --data, if any)."""
    phase2_data: Path | None = None
    """Prepared data for the last phase (e.g. max length 512)."""
    phase2_fraction: float = 0.1
    """Fraction of the updates spent on --phase2-data."""
    phase2_batch_size: int | None = None
    """Instances per update on --phase2-data (None: --batch-size)."""
    phase2_learning_rate: float | None = None
    """Phase 2 as its own schedule (NVIDIA's recipe): phase 1 decays to zero, phase 2 warms up
    again (--warmup-proportion of its updates) to this peak and decays to zero (None: one
    schedule over both phases, as google-research/bert)."""
    init_from: Path | None = None
    """Warm start: initial weights from a model folder (not a resume)."""
    objective: str = "mlm+nsp"
    """mlm+nsp (BERT), mlm (no NSP) or ltr (left-to-right LM, causal attention, no NSP)."""
    nsp_weight: float = 1.0
    """Weight of the NSP loss in the mlm+nsp update's loss (BERT: 1, MLM + NSP)."""
    dynamic_masking: bool = False
    """Draw new masks every epoch at training time (RoBERTa), also for statically masked data;
    the held-out set keeps its fixed masks."""
    random_next: str = "keep"
    """Without NSP (mlm, ltr): keep the prepared random-next pairs as plain input, or drop them
    and train on actual-next (contiguous) pairs only."""
    device: str = "auto"
    """auto, cpu, cuda or cuda:N (auto: CUDA when available; cuda:LOCAL_RANK under torchrun)."""
    threads: int | None = None
    """CPU threads per process (None: torch's)."""
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)

    def fingerprint(self) -> dict[str, Any]:
        """The settings a resume must share with the run it continues: the one list of them,
        recorded in every checkpoint and compared key by key on resume
        (``checkpoint.check_resume_settings``).

        A key belongs when changing it changes what the saved optimizer state or data position
        means: the batch sizes and the seed fix which examples the saved position has consumed
        (and in what order); ``max_steps`` fixes the schedule the optimizer state was built on;
        the model size, the heads, the objective and the NSP weight fix the model and the loss
        the moments were accumulated for. Left out: the data paths (a moved folder holds the same
        data, and a path cannot tell other data under the same name), and settings that a resume
        may change on purpose (learning rate, threads, device, evaluation).
        """
        return {
            "batch_size": self.train.batch_size,
            "phase2_batch_size": self.phase2_batch_size,
            "seed": self.train.seed,
            "max_steps": self.max_steps,
            "model_size": self.model_size,
            "num_attention_heads": self.num_attention_heads,
            "objective": self.objective,
            "nsp_weight": self.nsp_weight,
        }


def _dataset(folder: Path, split: str = "train", max_cached_shards: int | None = None):
    from bertkit.data.shards import PretrainingDataset

    if not (folder / "manifest.json").is_file():
        raise InputError(folder, None, "not a prepare-pretraining output (no manifest.json)")
    ds = PretrainingDataset(folder, split, max_cached_shards=max_cached_shards)
    if len(ds) == 0:
        raise InputError(
            folder, None, f"the {split!r} split holds no instances (expected prepared data)"
        )
    return ds


def build_config(opts: PretrainOptions, vocab_size: int) -> BertConfig:
    if opts.config_file is not None:
        config = BertConfig.from_json_file(opts.config_file)
        if config.vocab_size != vocab_size:
            raise ConfigError(
                f"{opts.config_file}: vocab_size {config.vocab_size} differs from the "
                f"data's vocabulary ({vocab_size} entries)"
            )
    else:
        config = BertConfig.preset(opts.model_size, vocab_size=vocab_size)
    if opts.dropout is not None:
        config.hidden_dropout_prob = config.attention_probs_dropout_prob = opts.dropout
    if opts.initializer_range is not None:
        config.initializer_range = opts.initializer_range
    heads = opts.num_attention_heads
    if heads is not None:
        if heads <= 0 or config.hidden_size % heads:
            raise ConfigError(
                f"num_attention_heads must divide hidden_size {config.hidden_size}, got {heads}"
            )
        config.num_attention_heads = heads
    return config


def _schedule(opts: PretrainOptions, steps2: int) -> ScheduleConfig:
    """One warmup-and-decay over all updates, or one per phase with --phase2-learning-rate."""
    if opts.phase2_learning_rate is None or not steps2:
        if opts.warmup_steps is not None:
            return ScheduleConfig(opts.max_steps, opts.warmup_steps)
        return ScheduleConfig.from_proportion(opts.max_steps, opts.warmup_proportion)
    steps1 = opts.max_steps - steps2
    if steps1 == 0:
        raise ConfigError(
            f"--phase2-learning-rate restarts the schedule after phase 1, but --phase2-fraction "
            f"{opts.phase2_fraction:g} leaves phase 1 no updates; lower it, or set the rate "
            "with --learning-rate"
        )
    if opts.warmup_steps is not None:
        warm1 = warm2 = min(opts.warmup_steps, steps1, steps2)
    else:
        warm1 = math.ceil(opts.warmup_proportion * steps1)
        warm2 = math.ceil(opts.warmup_proportion * steps2)
    return ScheduleConfig(
        opts.max_steps,
        warm1,
        restart_at=steps1,
        restart_warmup_steps=warm2,
        restart_peak=opts.phase2_learning_rate / opts.learning_rate,
    )


def check_options(opts: PretrainOptions) -> None:
    """The checks on ``opts`` that need no data (pretrain runs them first; callers that do
    work before pretrain, such as the quickstart, run them before that work)."""
    from bertkit.training.objectives import OBJECTIVES

    if opts.objective not in OBJECTIVES:
        raise ConfigError(
            f"objective must be one of {', '.join(OBJECTIVES)}, got {opts.objective!r}"
        )
    if opts.random_next not in ("keep", "drop"):
        raise ConfigError(f"random_next must be keep or drop, got {opts.random_next!r}")
    if opts.random_next == "drop" and opts.objective == "mlm+nsp":
        raise ConfigError(
            "random_next drop removes the negatives NSP learns from; use it with --objective mlm or ltr"
        )
    if not (math.isfinite(opts.nsp_weight) and opts.nsp_weight > 0):
        raise ConfigError(f"nsp_weight must be a positive number, got {opts.nsp_weight}")
    if opts.nsp_weight != 1.0 and opts.objective != "mlm+nsp":
        raise ConfigError(f"nsp_weight weights the NSP loss; objective {opts.objective!r} has none")


def objective_collate(objective: Any, dataset: Any, seed: int, dynamic: bool = False) -> Callable:
    """``collate(items, epochs=None)`` of ``dataset`` (:func:`bertkit.data.collate.make_collate`)
    as ``objective``'s model takes it. The held-out set is collated with ``dynamic=False`` and
    the run's ``seed``: its stored masks, or for unmasked data epoch 0's masks of that seed, so
    every evaluation (and ``bertkit evaluate`` with the same seed) scores the same tokens."""
    base = make_collate(dataset, seed, dynamic)
    return lambda items, epochs=None: objective.adapt(base(items, epochs))


def pretrain(
    opts: PretrainOptions, log: Callable[[str], None] | None = None, faults: Faults = NO_FAULTS
) -> TrainResult:
    """Run (or resume) pre-training; see the module docstring. ``faults``: tests only."""
    import torch

    from bertkit.model import HEAD_CLASSES
    from bertkit.training import distributed as D
    from bertkit.training.metrics import layout_flops
    from bertkit.training.objectives import OBJECTIVES, MlmNsp
    from bertkit.training.optim import build_optimizer

    log = log or (lambda m: print(m, file=sys.stderr))
    if opts.threads:
        torch.set_num_threads(opts.threads)
    check_options(opts)
    objective = (
        MlmNsp(opts.nsp_weight) if opts.objective == "mlm+nsp" else OBJECTIVES[opts.objective]()
    )
    model_class = HEAD_CLASSES[objective.model_class]
    info = D.init_from_env(opts.device, timeout=opts.train.collective_timeout)
    quiet = (lambda _m: None) if not info.is_main else log
    with D.reported(info):
        cached = 2 * opts.train.shard_window  # the shard-local order reads at most this many
        train_ds = _dataset(opts.data, max_cached_shards=cached)
        phase2_ds = (
            _dataset(opts.phase2_data, max_cached_shards=cached) if opts.phase2_data else None
        )
        if opts.random_next == "drop":
            from bertkit.data.shards import ActualNextView

            train_ds = ActualNextView(train_ds)
            phase2_ds = ActualNextView(phase2_ds) if phase2_ds is not None else None
        eval_ds = None
        if opts.eval_data is not None:
            from bertkit.data.shards import read_manifest

            splits = read_manifest(opts.eval_data).get("splits", {})
            eval_ds = _dataset(opts.eval_data, "eval" if "eval" in splits else "train")
        elif "eval" in train_ds.manifest.get("splits", {}):
            from bertkit.data.shards import PretrainingDataset

            # A small corpus with a small --holdout-fraction can leave no document held out: that
            # is "no eval split", as --eval-data's help says, not an error after a good prepare.
            held_out = PretrainingDataset(opts.data, "eval")
            if len(held_out):
                eval_ds = held_out
            else:
                quiet(
                    f"no held-out evaluation: the 'eval' split of {opts.data} is empty (its "
                    "--holdout-fraction held out no document); --eval-data names other data"
                )
        vocab_size = int(train_ds.manifest["vocab"]["size"])
        config = build_config(opts, vocab_size)
        config.is_decoder = opts.objective == "ltr"
        if opts.init_from is None:
            torch.manual_seed(opts.train.seed)  # the same initial weights on every rank
            model = model_class(config)
        else:
            from bertkit.interop import load_pretrained

            model = load_pretrained(opts.init_from, model_class, is_decoder=config.is_decoder)
            if model.config.vocab_size != vocab_size:
                raise ConfigError(
                    f"{opts.init_from}: vocab_size {model.config.vocab_size} differs "
                    f"from the data's vocabulary ({vocab_size})"
                )
            config = model.config
            if opts.num_attention_heads not in (None, config.num_attention_heads):
                raise ConfigError(
                    f"{opts.init_from} has {config.num_attention_heads} attention heads, "
                    f"--num-attention-heads says {opts.num_attention_heads}"
                )
        model.to(info.device).train()
        steps2 = round(opts.max_steps * opts.phase2_fraction) if phase2_ds is not None else 0

        def shards(ds: Any) -> tuple[tuple[int, int], ...] | None:
            ranges = getattr(ds, "shard_ranges", None)  # a filtered view keeps the global order
            return tuple((r.start, r.stop) for r in ranges()) if callable(ranges) else None

        phases = [Phase(train_ds, opts.max_steps - steps2, "phase 1", shards=shards(train_ds))]
        if steps2:
            phases.append(
                Phase(
                    phase2_ds,
                    steps2,
                    "phase 2",
                    shards=shards(phase2_ds),
                    batch_size=opts.phase2_batch_size,
                )
            )
        phases = [p for p in phases if p.steps > 0]
        schedule = _schedule(opts, steps2)
        optimizer = build_optimizer(
            model, OptimizerConfig(opts.optimizer, opts.learning_rate, opts.weight_decay)
        )

        for i, p in enumerate(phases):
            p.collate = objective_collate(
                objective, p.dataset, opts.train.seed + i, opts.dynamic_masking
            )
        eval_collate = (
            objective_collate(objective, eval_ds, opts.train.seed) if eval_ds is not None else None
        )

        trainer = Trainer(
            model,
            optimizer,
            schedule,
            phases,
            phases[0].collate,
            opts.train,
            opts.output,
            info=info,
            eval_dataset=eval_ds,
            eval_collate=eval_collate,
            flops_fn=lambda laid: layout_flops(config, laid),  # at collation, on the CPU
            settings=opts.fingerprint(),
            log=quiet,
            faults=faults,
            objective=objective,
        )
        quiet(
            f"{info.world_size} process(es) on {info.device}, precision {trainer.precision} "
            f"(--precision {opts.train.precision})"
        )
        if opts.init_from is not None:
            quiet(
                f"warm start: weights from {opts.init_from} (optimizer, schedule and data order "
                "start fresh; ignored when resuming from a checkpoint)"
            )
        if info.is_main:
            make_folder(opts.output)
            atomic_write_text(opts.output / "model_config.json", config.to_json_string())
        result = trainer.fit()
        if info.is_main:
            export_model(model, opts.output / "model", opts.data)
            quiet(f"final model: {opts.output / 'model'}")
        D.barrier(info)
        return result


def export_model(model: Any, directory: Path, data_dir: Path) -> None:
    """Save the model in the Hugging Face layout with the data's vocabulary (and casing): the
    tokenizer's files (vocab.txt, tokenizer.json, tokenizer_config.json) come from its
    ``save_pretrained``, like every folder bertkit writes."""
    from bertkit.data.prepare_settings import PrepareSettings
    from bertkit.interop import save_pretrained
    from bertkit.tokenizer import BertTokenizer

    model = model.cpu() if hasattr(model, "cpu") else model
    manifest = json.loads((data_dir / "manifest.json").read_text(encoding="utf-8"))
    lower = PrepareSettings.from_record(manifest.get("settings", {})).do_lower_case
    tokenizer = BertTokenizer(
        data_dir / "vocab.txt",
        do_lower_case=lower,
        model_max_length=model.config.max_position_embeddings,
    )
    save_pretrained(model, directory, tokenizer)
