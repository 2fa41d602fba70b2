"""Writing a fine-tuned model's folder: the selected model, its tokenizer and its task, written
as one set (:func:`bertkit.staging.staged_folder`) so that a crash never leaves a half-written
file, nor a folder that loads with some files of one model and some of another."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

from bertkit.errors import BertkitError
from bertkit.io import atomic_write_text, make_folder
from bertkit.staging import staged_folder
from bertkit.tasks.base import TASK_FILE, TaskAdapter, examples_bytes
from bertkit.tokenizer.protocol import Tokenizer

METRICS_FILE = "metrics.json"
"""The fine-tuning job's record (every run, the selection) beside its selected model, written
once the selection ends (:mod:`bertkit.recipes.finetune`)."""

UNFINISHED_FILE = ".bertkit-finetune-unfinished"
"""Marks an output folder whose fine-tuning job has not finished: written by the job's first
:func:`save_model_dir`, removed (:func:`mark_finished`) once its metrics.json is written. A job
killed or failed in between leaves it, so that the same command run again replaces that job's
output without ``--overwrite`` (fine-tuning runs keep no mid-run checkpoint: a rerun starts the
selection over); a job stopped before its first save leaves the folder as it found it.

Its first line names the job (``job: glue SST-2``: :func:`job_name`), the next its training
data (:func:`training_data`: ``data: /abs/SST-2/train.tsv``, the file resolved, or ``data: 8
examples in memory, sha256 ...``), so that another job, or the same task on another
file (``a/train.jsonl`` and ``b/train.jsonl`` are both ``classify train``), is refused the folder
as a finished one is; the last says which model it keeps (``kept: lr 5e-05 seed 42 epoch 1, dev
f1 0.8122``, :func:`record_kept`). A mark without the ``job:`` line is any job's, one without the
``data:`` line its job's on any file (both written before the line existed)."""


def job_name(adapter: TaskAdapter) -> str:
    """The fine-tuning job a folder's mark names: the family and the task's name (the GLUE task,
    else the training file's stem: ``ner train``)."""
    return f"{adapter.family} {adapter.name}"


class _Mark(NamedTuple):
    """What :data:`UNFINISHED_FILE` says: the job and its training data (:func:`training_data`;
    each None in a mark older than its line) and the model it keeps ("" before the first
    :func:`record_kept`)."""

    job: str | None
    data: str | None
    kept: str


_FIELDS = ("job: ", "data: ")


def _read_mark(output: Path) -> _Mark | None:
    """``output``'s :data:`UNFINISHED_FILE`, None without one."""
    try:
        lines = (output / UNFINISHED_FILE).read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    job, data = (next((x.removeprefix(f) for x in lines if x.startswith(f)), None) for f in _FIELDS)
    kept = [x.removeprefix("kept: ") for x in lines if not x.startswith(_FIELDS)]
    return _Mark(job, data, " ".join(k.strip() for k in kept if k.strip()))


def _write_mark(output: Path, mark: _Mark) -> None:
    fields = zip(("job", "data", "kept"), mark, strict=True)
    atomic_write_text(output / UNFINISHED_FILE, "".join(f"{k}: {v}\n" for k, v in fields if v))


def training_data(source: str | Path | Sequence[Any]) -> str:
    """What a mark names as a job's training data: its file, resolved (the same file from
    another directory is the same data); for examples given in memory, their count and the
    sha256 of their canonical JSON (:func:`~bertkit.tasks.base.examples_bytes`), so that the same
    examples built again are the same data and other ones are not."""
    if isinstance(source, str | Path):
        return str(Path(source).resolve())
    digest = hashlib.sha256(examples_bytes(source)).hexdigest()
    examples = "example" if len(source) == 1 else "examples"
    return f"{len(source)} {examples} in memory, sha256 {digest}"


def check_output_free(
    output: str | Path,
    overwrite: bool = False,
    job: str | None = None,
    train_data: str | None = None,
) -> None:
    """Refuse, before training, an ``output`` that already holds something this job would
    replace: a BertkitError naming the folder and ``--overwrite``, unless ``overwrite``.

    Free: a folder that does not exist, an empty one, or an unfinished ``job``'s on
    ``train_data`` (:func:`training_data`; :data:`UNFINISHED_FILE`: an interrupted run of the
    same job, which its rerun replaces; None: any job's, any data). A finished model folder,
    another job's unfinished one (the same task on other training data too), any other model
    (``--output`` naming the ``--model`` folder by mistake) and any other non-empty folder are
    refused; ``transformers``' ``run_glue.py`` refuses likewise ("Output directory already exists
    and is not empty. Use --overwrite_output_dir"). ``overwrite`` replaces the model's files and
    metrics.json; other files stay.
    """
    output = Path(output)
    if overwrite or not output.is_dir():
        return
    mark = _read_mark(output)
    if mark is not None:
        same_data = mark.data is None or train_data is None or mark.data == train_data
        if job is None or mark.job is None or (mark.job == job and same_data):
            return
        if mark.job == job and mark.data is not None:
            theirs, ours = f"{job!r} job's model on {mark.data}", f"this one's on {train_data}"
        else:
            theirs, ours = f"{mark.job!r} job's model", f"this {job!r} job's"
        raise BertkitError(
            f"{output}: holds an interrupted {theirs}, not {ours} "
            "(pass --overwrite to replace it, or choose another --output)"
        )
    if not any(output.iterdir()):
        return
    if (output / "config.json").is_file():
        held = "a fine-tuned model" if (output / METRICS_FILE).is_file() else "a model"
        what = f"already holds {held}"
    else:
        what = "exists and is not empty"
    raise BertkitError(
        f"{output}: {what} (pass --overwrite to replace it, or choose another --output)"
    )


def _mark_unfinished(output: Path, job: str, train_data: str | None) -> None:
    """Mark ``output`` as ``job``'s on ``train_data`` (kept as it is when it already is: its
    model is still the one it names until the save replaces it)."""
    mark = _read_mark(output)
    if mark is None or (mark.job, mark.data) != (job, train_data):
        _write_mark(make_folder(output), _Mark(job, train_data, ""))


def record_kept(output: str | Path, what: str) -> None:
    """Write into :data:`UNFINISHED_FILE` which run and epoch the folder's model is (``lr 5e-05
    seed 42 epoch 1, dev f1 0.8122``), for the line an interrupted job ends with."""
    mark = _read_mark(Path(output)) or _Mark(None, None, "")
    _write_mark(Path(output), mark._replace(kept=what))


def unfinished_note(output: str | Path) -> str | None:
    """What an interrupted fine-tuning job's ``output`` keeps, for the line the command ends
    with (``out keeps the best model so far (lr 5e-05 seed 42 epoch 1, dev f1 0.8122),
    without metrics.json; ...``); None when ``output`` is no unfinished job's folder."""
    output = Path(output)
    mark = _read_mark(output)
    if mark is None:
        return None
    what = mark.kept
    if not (output / "config.json").is_file():  # a save cut short: refused as a model
        return f"{output} holds no complete model; the same command starts the job over in it"
    held = f"the best model so far ({what})" if what else "the best model so far"
    return (
        f"{output} keeps {held}, without metrics.json; the same command starts the "
        "selection over in it (no mid-run checkpoint is kept)"
    )


def unfinished_model_note(directory: str | Path) -> str | None:
    """A warning for a command that loads ``directory`` as a model while it is an interrupted
    fine-tuning job's folder (its model: the best epoch before the stop, not the selection's);
    None for any other folder."""
    mark = _read_mark(Path(directory))
    if mark is None:
        return None
    held = f" ({mark.kept})" if mark.kept else ""
    return (
        f"{directory} is an interrupted fine-tuning job's folder ({UNFINISHED_FILE}, no "
        f"{METRICS_FILE}): its model is the best epoch seen before the stop{held}, not the "
        "selection's result"
    )


def mark_finished(output: str | Path) -> None:
    """Remove :data:`UNFINISHED_FILE`: the job's model and metrics.json are written."""
    (Path(output) / UNFINISHED_FILE).unlink(missing_ok=True)


def save_model_dir(
    model: torch.nn.Module,
    adapter: TaskAdapter,
    tokenizer: Tokenizer,
    output: Path,
    train_data: str | None = None,
) -> None:
    """Write model, vocabulary and ``bertkit_task.json`` into ``output``.

    A bi-encoder is written as a sentence-transformers folder instead (the encoder with its
    pooler, the pooling and normalisation files, and ``bertkit_embedding.json`` naming the
    Matryoshka sizes it was trained for), with no ``bertkit_task.json``; a SPLADE encoder as a
    ``SparseEncoder`` folder (the masked-LM model, ``MLMTransformer`` -> ``SpladePooling``).

    Everything is first written to a hidden work folder, then each file is renamed into
    ``output``, config.json last; the old config.json is removed before the first rename, so a
    crash part-way leaves a folder that is refused (no config.json), never one that loads a mix
    of the previous model and this one. A failure before the renames changes nothing.

    ``output`` is marked unfinished (:data:`UNFINISHED_FILE`: the adapter's job on
    ``train_data``, :func:`training_data`) before any file of it changes.

    :data:`METRICS_FILE` goes with the old config.json: it describes the previous job's model, and
    this job writes its own only when its selection ends, so a job that stops in between (a
    crash, a full disk, a kill) leaves its model without one, never beside the last job's.
    """
    from bertkit.interop.pretrained import write_model_files
    from bertkit.interop.sentence_folder import (
        EMBEDDING_INFO,
        POOLING_DIR,
        SENTENCE_LAYOUT,
        SPLADE_DIR,
        save_embedding_info,
        save_sentence_transformers_files,
        save_sparse_encoder_files,
    )
    from bertkit.model.contrastive import BiEncoder
    from bertkit.model.pooling import SpladeSpec
    from bertkit.model.splade import SpladeEncoder

    # a sentence-transformers folder has no task file, and a task's folder no sentence-
    # transformers files: what the other layout saved here before goes with the old config,
    # and so does the old job's metrics.json (a dense folder's pooling files, a sparse one's)
    if isinstance(model, SpladeEncoder):
        drop = [TASK_FILE, EMBEDDING_INFO, f"{POOLING_DIR}/config.json"]
    elif isinstance(model, BiEncoder):
        drop = [TASK_FILE, f"{SPLADE_DIR}/config.json"]
    else:
        drop = list(SENTENCE_LAYOUT)
    # before the first file changes: a kill leaves the mark
    _mark_unfinished(Path(output), job_name(adapter), train_data)
    with staged_folder(output, last="config.json", drop=[*drop, METRICS_FILE]) as tmp:
        if isinstance(model, SpladeEncoder):
            s: Any = adapter  # a SparseAdapter
            with model.whole_encoder() as masked_lm:
                write_model_files(masked_lm, tmp, tokenizer)
            spec = SpladeSpec(s.pooling_strategy, s.activation_function)
            save_sparse_encoder_files(
                tmp,
                spec,
                s.max_seq_length,
                prompts=s.prompts,
                default_prompt_name=s.default_prompt,
            )
        elif isinstance(model, BiEncoder):
            a: Any = adapter  # an EmbeddingAdapter (tasks may not be imported for the type here)
            with model.whole_encoder() as encoder:
                write_model_files(encoder, tmp, tokenizer)
            save_sentence_transformers_files(
                tmp,
                a.pooling,
                a.normalize,
                a.max_seq_length,
                similarity=a.declared_similarity,
                prompts=a.prompts,
                default_prompt_name=a.default_prompt,
                include_prompt=a.include_prompt,
                dense=model.head,
            )
            save_embedding_info(tmp, a.matryoshka_dims)
        else:
            write_model_files(model, tmp, tokenizer)
            adapter.save(tmp)
