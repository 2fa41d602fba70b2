"""Fine-tune a checkpoint on a task, the whole job: what ``bertkit finetune`` runs, and what the
fine-tuning benchmarks (``benchmarks/finetune_quality.py``, ``benchmarks/ablations.py``) run.

Join the torchrun job (or run alone), read the task, encode it, run the selection over learning
rates x restarts (:func:`bertkit.training.selection.finetune`: the selected model is left in the
output folder) and write ``metrics.json`` beside it: every run's lr, seed and dev score, mean
and spread, the selected run, the long-input counts, the precision this machine ran and the
hardware choices. Under torchrun every rank trains its share; rank 0 logs, selects and writes.
An ``output`` that already holds a model (or anything else) is refused unless ``overwrite``
(an interrupted job's is not: the same command reruns it); a previous job's metrics.json in a
reused folder goes with its model at the first save
(:func:`bertkit.training.model_dir.save_model_dir`): never beside this job's model.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from bertkit import hardware
from bertkit import precision as P
from bertkit.data.tasks.glue import glue_file
from bertkit.interop import check_length_fits, load_pretrained
from bertkit.io import atomic_write_text, check_folder_creatable, report_json
from bertkit.recipes.finetune_folder import (
    folder_dense_head,
    keep_folder_prompts,
    with_folder_settings,
)
from bertkit.tasks import FAMILIES, TaskSettings, build_task
from bertkit.tasks.base import TaskAdapter
from bertkit.tokenizer import BertTokenizer
from bertkit.training import distributed as D
from bertkit.training.distill import WordTeacher, check_distillable, teacher_logits
from bertkit.training.finetune import FinetuneConfig, TaskData, check_accumulation
from bertkit.training.model_dir import (
    METRICS_FILE,
    check_output_free,
    job_name,
    mark_finished,
    training_data,
)
from bertkit.training.selection import finetune


@dataclass(frozen=True)
class TaskExamples:
    """A task already read: its adapter, the training examples and the dev sets by name (the
    first one selects), for callers that read or subsample the data themselves."""

    adapter: TaskAdapter
    train: list[Any]
    dev: dict[str, list[Any]]


@dataclass(frozen=True)
class FinetuneJob:
    """One fine-tuning job (``bertkit finetune``'s flags): the task, the checkpoint, the output
    folder and the run options."""

    task: TaskSettings | TaskExamples
    """The task to read (the CLI's task flags), or one already read."""
    model: str | Path
    """bertkit or Hugging Face checkpoint folder."""
    output: Path
    """Folder for the selected model and metrics.json: absent, empty or an interrupted job's
    (:func:`bertkit.training.model_dir.check_output_free`), else ``overwrite``."""
    config: FinetuneConfig = field(default_factory=FinetuneConfig)
    """Run options: learning rates, restarts, epochs, batch size, seed, precision ..."""
    max_train_examples: int | None = None
    """Use only the first N training examples."""
    allow_pickle: bool = False
    """Permit pytorch_model.bin checkpoints (read with torch.load weights_only)."""
    split_special_tokens: bool | None = None
    """Treat literal [CLS]/[SEP]/... in the input as text (None: the checkpoint's
    tokenizer_config.json says, else no)."""
    device: str = "auto"
    """auto, cpu, cuda or cuda:N (see :func:`bertkit.hardware.resolve_device`)."""
    teacher: str | Path | None = None
    """A fine-tuned model of the student's kind to distil: a sequence classifier (a `bertkit
    finetune` glue/classify folder or a Hugging Face one) or a token tagger (ner/tag), with the
    student's labels in any order: its logits of the training examples (a tagger's: of each
    word), read with its own tokenizer, are soft targets beside the gold labels."""
    head_init: dict[str, torch.Tensor] | None = None
    """State of the head's ``classifier`` to start every run from instead of the seed's draw
    (classification heads; the benchmarks pair runs with a reference implementation's)."""
    overwrite: bool = False
    """Replace the model and metrics.json that ``output`` already holds (default: refuse a
    non-empty ``output`` that is not an interrupted job's)."""


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_finetune(job: FinetuneJob, log: Callable[[str], None] = _stderr) -> dict[str, Any] | None:
    """Run ``job`` alone or, under torchrun, as one rank of a DDP job; returns what
    ``OUTPUT/metrics.json`` holds (None on the ranks other than 0, which write nothing)."""
    info = D.init_from_env(job.device)  # alone, or one rank of torchrun (gloo / NCCL)
    with D.reported(info):
        return _run(job, info, log)


def _run(job: FinetuneJob, info: D.DistInfo, log: Callable[[str], None]) -> dict[str, Any] | None:
    started = time.time()  # --minutes counts from here: reading the data is part of the job
    config, device = job.config, torch.device(info.device)
    check_folder_creatable(job.output)  # not found out only when the selected model is saved
    check_output_free(job.output, job.overwrite)  # nor a finished model replaced unasked
    if isinstance(job.task, TaskSettings):
        # before the data are read
        check_accumulation(FAMILIES[job.task.family][0], config, job.task.loss)
        if job.task.family == "sparse":  # not found out after the data are read and windowed
            check_masked_lm_head(job.model)
        if job.teacher is not None:
            check_distillable(FAMILIES[job.task.family][0], job.task.family)
        adapter, train, dev = build_task(with_folder_settings(job.task, job.model))
        keep_folder_prompts(adapter, job.model)
        s = job.task
        source = s.train or glue_file(s.data_dir, adapter.name, "train")  # type: ignore[arg-type]
    else:
        adapter, train, dev = job.task.adapter, job.task.train, job.task.dev
        source = train  # examples given in memory
    train_data = training_data(source)
    # nor another job's unfinished folder (its job named once the task is read)
    check_output_free(job.output, job.overwrite, job_name(adapter), train_data)
    check_length_fits(job.model, adapter.max_seq_length)
    if job.max_train_examples is not None:
        train = train[: job.max_train_examples]
    split = job.split_special_tokens
    tokens = {} if split is None else {"split_special_tokens": split}
    tokenizer = BertTokenizer.from_pretrained(job.model, **tokens)

    def say(msg: str) -> None:
        if info.is_main:
            log(msg)

    say(
        f"{info.world_size} process(es) on {device}, precision "
        f"{P.resolve(config.precision, device)} (--precision {config.precision})"
    )
    teacher = None
    if job.teacher is not None:  # once, before any run: every run and epoch reads the same
        teacher = teacher_logits(
            job.teacher,
            adapter,
            train,
            device=device,
            precision=config.precision,
            batch_size=config.eval_batch_size,
            allow_pickle=job.allow_pickle,
            split_special_tokens=bool(split),
            show_progress=config.show_progress,
            log=say,
            info=info,  # under torchrun each rank reads 1/world of the examples
        )
    train_features = adapter.encode(tokenizer, train, training=True)
    dev_sets = {
        name: (ex, adapter.encode(tokenizer, ex, training=False)) for name, ex in dev.items()
    }
    say(
        f"{adapter.family} {adapter.name}: {len(train)} training examples ({len(train_features)} features), "
        + ", ".join(f"{k} {len(v[0])}" for k, v in dev_sets.items())
    )
    for name, (examples, _) in dev_sets.items():
        if unseen := adapter.unseen_labels(train, examples):
            say(
                f"warning: {name} holds {', '.join(unseen)}, which no training example has "
                "(the model cannot learn to predict them: each is a miss in the dev score)"
            )
    say(
        f"long inputs: train {adapter.window_counts(train, train_features).summary()}; "
        + "; ".join(f"{k} {adapter.window_counts(*v).summary()}" for k, v in dev_sets.items())
    )
    coverage = teacher.coverage(train_features) if isinstance(teacher, WordTeacher) else None
    if coverage is not None:
        say(
            f"teacher rows for {coverage['distilled']} of the {coverage['labelled']} labelled "
            f"training words ({coverage['teacher_truncated']} cut by the teacher's truncation, "
            f"{coverage['student_truncated']} of {coverage['words']} never labelled: the "
            "student's truncation)"
        )
    build_model = _model_builder(job, adapter)
    output = Path(job.output)
    result = finetune(
        build_model,
        adapter,
        TaskData(train_features, dev_sets, teacher),
        tokenizer,
        output,
        config,
        log=say,
        device=device,
        info=info,
        started=started,
        train_data=train_data,
    )
    if not info.is_main:
        return None
    metrics = {
        "task": {"family": adapter.family, "name": adapter.name},
        "model": str(job.model),
        **({"teacher": str(job.teacher)} if job.teacher is not None else {}),
        **({"teacher_words": coverage} if coverage is not None else {}),
        "train_examples": len(train),
        "windows": {
            "train": adapter.window_counts(train, train_features).to_dict(),
            **{k: adapter.window_counts(*v).to_dict() for k, v in dev_sets.items()},
        },
        "config": {**asdict(config), "learning_rates": list(config.learning_rates)},
        # what this machine ran: auto made concrete; bf16 without native support runs fp32
        "precision_run": P.resolve(config.precision, device),
        "hardware": {k: d.choice for k, d in hardware.made().items()},
        **result.to_dict(),
    }
    atomic_write_text(output / METRICS_FILE, report_json(metrics) + "\n")
    mark_finished(output)
    updates = sum(r.steps for r in result.runs)
    say(
        f"wrote the selected model and metrics.json to {output} ({len(result.runs)} run(s) "
        f"on {len(train)} training examples, {updates} updates, "
        f"{time.time() - started:.1f}s in all)"
    )
    return metrics


def _model_builder(job: FinetuneJob, adapter: TaskAdapter) -> Callable[[], torch.nn.Module]:
    """A fresh model per run: the checkpoint's encoder and a new head (the task's config
    overrides and the run's dropout), for embeddings a bi-encoder over it."""
    overrides = dict(adapter.config_overrides())
    if job.config.dropout is not None:
        overrides.update(
            hidden_dropout_prob=job.config.dropout, attention_probs_dropout_prob=job.config.dropout
        )

    def build_model() -> torch.nn.Module:
        if adapter.family == "embeddings":
            from bertkit.model.contrastive import BiEncoder

            encoder = load_pretrained(
                job.model, "BertModel", allow_pickle=job.allow_pickle, **overrides
            )
            return BiEncoder(
                encoder,
                adapter.pooling,
                head=folder_dense_head(job.model, encoder.config.hidden_size, job.allow_pickle),
                scale=adapter.scale,
                symmetric=adapter.symmetric,
                matryoshka_dims=adapter.matryoshka_dims,
                mini_batch_size=adapter.mini_batch_size,
                loss=adapter.loss,
                cosine=adapter.similarity == "cosine",
                temperature=adapter.temperatures[0],
                teacher_temperature=adapter.temperatures[1],
            )
        if adapter.family == "sparse":
            return sparse_encoder(job.model, adapter, job.allow_pickle, overrides)
        model = load_pretrained(
            job.model, adapter.head_class, allow_pickle=job.allow_pickle, **overrides
        )
        if job.head_init is not None:
            model.classifier.load_state_dict(job.head_init)
        if getattr(adapter, "group_loss", None):  # rerank's listwise losses (not saved)
            model.group_loss = adapter.group_loss
        return model

    return build_model


def sparse_encoder(
    folder: str | Path, adapter: Any, allow_pickle: bool, overrides: dict[str, Any]
) -> torch.nn.Module:
    """A :class:`~bertkit.model.splade.SpladeEncoder` over the masked-LM model in ``folder``
    (``adapter``: a :class:`~bertkit.tasks.sparse.SparseAdapter`); CheckpointError for a folder
    without masked-LM head weights (a new random head would make meaningless vectors)."""
    from bertkit.interop.pretrained import load_with_report
    from bertkit.model.pooling import SpladeSpec
    from bertkit.model.splade import SpladeEncoder

    masked_lm, report = load_with_report(
        folder, "BertForMaskedLM", allow_pickle=allow_pickle, **overrides
    )
    missing = [k for k in report.missing if k.startswith("mlm.")]
    if missing:
        raise _no_masked_lm_head(folder, missing)
    spec = SpladeSpec(adapter.pooling_strategy, adapter.activation_function)
    return SpladeEncoder(
        masked_lm,
        spec,
        query_regularizer_weight=adapter.query_regularizer_weight,
        document_regularizer_weight=adapter.document_regularizer_weight,
        mini_batch_size=adapter.mini_batch_size,
    )


def check_masked_lm_head(folder: str | Path) -> None:
    """:func:`sparse_encoder`'s CheckpointError for a folder without masked-LM head weights,
    found from the names in its safetensors headers (no tensor read), before the training data
    are read; a folder whose names cannot be read so (pickled weights) is checked when loaded."""
    from bertkit.interop.hf import DECODER_BIAS_ALIAS, HEAD_KEYS
    from bertkit.interop.pretrained import weight_names

    names = set(weight_names(Path(folder)) or ()) if Path(folder).is_dir() else set()
    if not names:
        return
    if DECODER_BIAS_ALIAS[1] in names:  # the head's bias saved under the decoder's name
        names.add(DECODER_BIAS_ALIAS[0])
    missing = [ours for ours, hf in HEAD_KEYS if ours.startswith("mlm.") and hf not in names]
    if missing:
        raise _no_masked_lm_head(folder, missing)


def _no_masked_lm_head(folder: str | Path, missing: list[str]) -> Exception:
    from bertkit.errors import CheckpointError

    return CheckpointError(
        f"{folder}: the checkpoint has no masked-LM head weights (cls.predictions.*, missing "
        f"{', '.join(missing[:3])}); finetune sparse starts from a masked-LM model "
        "(BertForMaskedLM weights, or a SparseEncoder folder)"
    )
