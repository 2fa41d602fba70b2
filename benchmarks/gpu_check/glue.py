"""Stage 5 (``--stage5``, a session of its own): pre-train a BERT-Base-shaped model for
``--stage5-minutes`` on a corpus given by path, then fine-tune SST-2 and MRPC from it.

The corpus (``--corpus``: files or folders, e.g. ``wikipedia-large/wiki_AB.txt.xz``; the
built-in one when none is given) is prepared like stage 0's (:func:`data.prepare_corpus`: a
30,522-piece vocabulary, 128-token instances, dynamic masking, 1% held out); a calibration run
sizes the update count to the minutes (:func:`pretrain_run.calibrate`), and
``python -m bertkit pretrain`` trains it (batch 256, peak lr 4e-4, bf16). Then
``python -m bertkit finetune glue`` runs SST-2 (1 epoch: 67k examples) and MRPC (3 epochs) from
its model, with the paper's settings otherwise (lr 5e-5 of its grid, batch 32, 128 tokens), and
the dev scores land in the JSON. Every step's wall time is recorded. Scores and logs only: the
weights stay in WORK.

One device command runs 10 minutes at most: preparation, calibration and fine-tuning take about
4 of them (``STAGE5_EXTRA_S``), so 5 minutes of pre-training is the default.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.gpu_check.common import context, finish
from benchmarks.gpu_check.data import builtin_corpus, prepare_corpus
from benchmarks.gpu_check.pretrain_run import (
    bertkit_cli,
    calibrate,
    exit_text,
    plan_steps,
    pretrain_cli,
)

LEARNING_RATE = 4e-4
"""Above BERT's 1e-4 (for a million updates): a run of minutes needs to move faster."""
FINETUNE_LR = 5e-5
FINETUNE_S = 150
"""Kept for the two fine-tuning runs (SST-2 1 epoch ~2,100 updates, MRPC 3 epochs ~350, on an
H200 at batch 32, with their start-ups and dev scoring). Unmeasured: each run is also given
``--minutes`` for the time it has, so a slower GPU shortens its schedule rather than the kill."""
START_UP_S = 15
"""A fine-tuning command's seconds before its budget starts (imports, CUDA start-up)."""
SKIP_NAMES = ("SOURCE.txt", "README", "LICENSE")


def corpus_files(paths: list[Path]) -> list[Path]:
    """The files to read: each given file, and the files inside each given folder (sorted; its
    SOURCE.txt / README / LICENSE left out); the built-in corpus when nothing is given."""
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files += [
                f for f in sorted(p.iterdir()) if f.is_file() and not f.name.startswith(SKIP_NAMES)
            ]
        else:
            files.append(p)
    return files or [builtin_corpus()]


def finetune(ctx, task: str, model: Path, epochs: int, timeout: float) -> dict[str, Any]:
    """``bertkit finetune glue`` of ``task`` from ``model``; the dev scores of its metrics.json."""
    out = ctx.work / f"finetune-{task}"
    args = [
        "finetune",
        "glue",
        "--task",
        task,
        "--data-dir",
        str(ctx.glue),
        "--model",
        str(model),
        "--output",
        str(out),
        "--overwrite",  # a rerun of the check replaces its last model
        "--epochs",
        str(epochs),
        "--batch-size",
        "32",
        "--learning-rate",
        str(FINETUNE_LR),
        "--max-seq-length",
        "128",
        "--precision",
        "bf16" if ctx.cuda else "auto",
    ]
    if ctx.sizes.glue_examples:
        args += ["--max-train-examples", str(ctx.sizes.glue_examples)]
    # the job's own budget ends its decay in time (scored and saved) before the kill at timeout;
    # the budget starts after the imports and the device's start-up
    args += ["--minutes", f"{max(timeout - START_UP_S, 1.0) / 60:.3f}"]
    got = bertkit_cli(ctx, args, timeout)
    metrics = out / "metrics.json"
    if got["exit_code"] == 0 and metrics.exists():
        m = json.loads(metrics.read_text())
        sel = m.get("selected", {})
        got.update(
            metric=m.get("metric"),
            dev_score=sel.get("score"),
            epoch=sel.get("epoch"),
            dev=sel.get("dev"),
            train_examples=m.get("train_examples"),
        )
    return got


def main(argv: list[str] | None = None) -> int:
    ctx = context(5, argv)
    s = ctx.sizes
    if ctx.glue is None or not all((ctx.glue / t).is_dir() for t in s.glue_epochs):
        ctx.write(
            status="skipped",
            reason=f"--glue must name a folder holding "
            f"{' and '.join(s.glue_epochs)} (got {ctx.glue})",
        )
        return 0
    files = corpus_files(ctx.corpus)
    size, batch = ("base", 256) if not ctx.dry_run else (s.run_size, s.run_batch)
    ctx.write(
        corpus=[str(f) for f in files],
        settings={
            "model_size": size,
            "batch": batch,
            "seq": s.lengths[0],
            "lr": LEARNING_RATE,
            "minutes": ctx.stage5_minutes,
            "finetune_lr": FINETUNE_LR,
            "epochs": s.glue_epochs,
        },
    )
    from bertkit.data.corpus import read_documents

    docs = itertools.islice(read_documents(files), s.articles)
    folder = ctx.work / "stage5-data"
    made = prepare_corpus(
        docs, folder, s.vocab, s.lengths[:1], holdout=0.01 if not ctx.dry_run else s.holdout
    )
    ctx.write(data=made)
    data = folder / f"data{s.lengths[0]}"
    if s.run_steps_cap:  # the dry run: the calibration is stage 4's, tested there
        steps = s.run_steps_cap
    else:
        cal = calibrate(ctx, data, size, batch, LEARNING_RATE)
        ctx.write(calibration=cal)
        if cal["exit_code"] != 0 or "rate_s" not in cal:
            return finish(ctx, False, f"the calibration run {exit_text(cal)}")
        steps = plan_steps(ctx, cal, ctx.stage5_minutes * 60)
    reserve = 30 if ctx.dry_run else FINETUNE_S  # what the fine-tuning runs need after it
    run = pretrain_cli(
        ctx,
        data,
        ctx.work / "run-stage5",
        size,
        batch,
        steps,
        LEARNING_RATE,
        s.evaluations,
        ctx.seconds_left() - reserve,
    )
    ctx.write(pretrain=run)
    if run["exit_code"] != 0:
        return finish(ctx, False, f"bertkit pretrain {exit_text(run)}")
    results = {}
    for k, (task, epochs) in enumerate(s.glue_epochs.items()):
        keep = 5 if k == len(s.glue_epochs) - 1 or ctx.dry_run else 45  # MRPC's ~30 s after SST-2
        model = ctx.work / "run-stage5" / "model"
        results[task] = finetune(ctx, task, model, epochs, ctx.seconds_left() - keep)
        ctx.write(finetune=results)
    failed = [t for t, r in results.items() if r["exit_code"] != 0 or r.get("dev_score") is None]
    return finish(ctx, not failed, f"fine-tuning failed: {', '.join(failed)}" if failed else "")


if __name__ == "__main__":
    sys.exit(main())
