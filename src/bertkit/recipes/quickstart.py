"""The quickstart recipe: raw text to a pre-trained tiny BERT on the built-in corpus, in minutes.

Read a corpus (the built-in Wikipedia sample of 1,717 articles in ``bertkit/resources``, see
ATTRIBUTION.txt; ``--corpus`` reads any file the data pipeline reads), hold out every 15th article,
train a WordPiece vocabulary, build MLM+NSP instances, pre-train a tiny BERT on the CPU, then
report held-out MLM/NSP accuracy next to what a model that ignores the input would score, show
fill-mask predictions, write ``OUTPUT/summary.json`` and end with a plain verdict.

The whole job has a wall-clock budget (``--minutes``, data preparation included): once the data is
prepared, short calibration runs measure seconds per update of each phase on this machine, and the
step count (which the learning-rate schedule needs up front) is chosen to fill the time left. The
two phases are two runs (``run-phase1/``, then ``run/`` warm-started from its model, each with its
own warmup and decay), so phase 2's count is fitted again when phase 1 ends, to the time actually
left, and each run keeps a deadline (``TrainConfig.end_by``) that ends its decay sooner when the
machine runs slower than fitted. The plan is stored in ``OUTPUT/plan.json`` so that a rerun resumes
the same runs instead of starting different ones.

The recipe's constants and options are in :mod:`bertkit.recipes.quickstart_settings`, the
calibration and step planner in :mod:`bertkit.recipes.quickstart_plan`, the targets and the
verdict in :mod:`bertkit.recipes.quickstart_verdict`; this module runs the job.
``bertkit quickstart`` is a thin layer over :func:`run_quickstart`.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bertkit import hardware
from bertkit import precision as P
from bertkit.data.corpus import CorpusOptions, read_documents
from bertkit.data.prepare import PrepareSettings, prepare_pretraining
from bertkit.data.pretraining import InstanceConfig
from bertkit.data.shards import PretrainingDataset
from bertkit.errors import ConfigError
from bertkit.evaluation.baselines import input_blind_baselines
from bertkit.inference.fill_mask import FillMasker
from bertkit.interop import load_pretrained
from bertkit.io import atomic_write_text
from bertkit.model import BertForPreTraining
from bertkit.recipes.quickstart_plan import FINAL_SECONDS, fit_phase2, plan_steps, read_plan
from bertkit.recipes.quickstart_settings import (
    CORPUS,
    HELDOUT_EVERY,
    QuickstartSettings,
    run_options,
)
from bertkit.recipes.quickstart_verdict import TARGET_MLM, TARGET_NSP, verdict
from bertkit.tokenizer import BertTokenizer, train_wordpiece
from bertkit.training.pretraining import check_options, pretrain

EXAMPLES = (
    "the river flows into the [MASK] .",
    "he was born in [MASK] and studied law .",
    "the album was [MASK] in 1995 .",
    "the [MASK] of the united states .",
    "she played the role of a [MASK] in the film .",
)


def _write_bert_format(docs: list[list[str]], path: Path) -> None:
    atomic_write_text(path, "".join("\n".join(d) + "\n\n" for d in docs))


def read_corpus(path: Path | None) -> list[list[str]]:
    """The documents of ``path`` (None: the built-in corpus) as lists of sentences."""
    if path is None:
        path = Path(str(importlib.resources.files("bertkit") / "resources" / CORPUS))
    return list(read_documents([path]))


def run_quickstart(s: QuickstartSettings, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the whole job (see the module doc); returns what ``OUTPUT/summary.json`` holds."""
    t0 = time.perf_counter()
    if not s.minutes > 0:
        raise ConfigError(f"--minutes must be a positive number, got {s.minutes:g}")
    if s.phase1_seq_length and not 0 < s.phase2_fraction <= 1:
        raise ConfigError(
            f"--phase2-fraction must be in (0, 1] with two phases, got {s.phase2_fraction:g} "
            "(one phase: --phase1-seq-length 0)"
        )
    check_options(run_options(s.output, s.output, None, 1, s, 1))  # before any data is prepared
    out: Path = s.output
    out.mkdir(parents=True, exist_ok=True)
    threads = s.threads or hardware.idle_threads()
    torch.set_num_threads(threads)
    # auto: bf16 on a GPU that has it; on a CPU only where it is native and measured faster; bf16
    # without native bf16 runs, and is recorded as, fp32 (one notice says why)
    s = dataclasses.replace(s, precision=P.resolve(s.precision, hardware.resolve_device("auto")))
    docs = read_corpus(s.corpus)
    train_docs = [d for i, d in enumerate(docs) if i % HELDOUT_EVERY != HELDOUT_EVERY - 1]
    held_docs = [d for i, d in enumerate(docs) if i % HELDOUT_EVERY == HELDOUT_EVERY - 1]
    words = sum(len(s.split()) for d in docs for s in d)
    log(
        f"[1/5] corpus: {len(docs)} articles, {sum(map(len, docs))} sentences, {words:,} words "
        f"({len(held_docs)} articles held out) ({time.perf_counter() - t0:.0f}s)"
    )
    _write_bert_format(train_docs, out / "train.txt")
    _write_bert_format(held_docs, out / "heldout.txt")

    vocab = out / "vocab.txt"
    if not vocab.exists():
        # the first ~600k words give the same frequent pieces as the whole corpus, in seconds
        budget, sample = 600_000, []
        for d in train_docs:
            sample.extend(d)
            budget -= sum(len(s.split()) for s in d)
            if budget <= 0:
                break
        train_wordpiece(sample, vocab_size=s.vocab_size, output=vocab, show_progress=False)
    log(
        f"[2/5] vocabulary: {sum(1 for _ in vocab.open(encoding='utf-8'))} WordPiece tokens "
        f"({time.perf_counter() - t0:.0f}s)"
    )

    # training instances are re-masked at every epoch; held-out masks are fixed, so every
    # evaluation scores the same predictions. Short instances are mostly one sentence, which
    # google-research/bert always pairs with a random next: balanced_next keeps NSP near 50/50
    # (held out too, so that it is scored on the distribution it was trained on).
    full = s.seq_length
    builds = [("data", "train.txt", True, full), ("heldout", "heldout.txt", False, full)]
    if s.phase1_seq_length:
        builds.insert(0, ("data-short", "train.txt", True, s.phase1_seq_length))
    for name, source, dynamic, length in builds:
        if not (out / name / "manifest.json").exists():
            settings = PrepareSettings(
                instance=InstanceConfig(max_seq_length=length, dupe_factor=1, balanced_next=True),
                corpus=CorpusOptions(format="bert"),
                seed=12345,
                dynamic_masking=dynamic,
            )
            prepare_pretraining(
                [out / source],
                vocab,
                out / name,
                num_workers=threads,
                settings=settings,
                overwrite=True,
                show_progress=False,
            )
    trained = [(out / name, length) for name, _, dynamic, length in builds if dynamic]
    phases = [folder for folder, _ in trained]
    counts = ", ".join(f"{len(PretrainingDataset(f)):,} of <= {n} tokens" for f, n in trained)
    log(f"[3/5] training instances: {counts} ({time.perf_counter() - t0:.0f}s)")

    steps = plan_steps(s, out, phases, threads, log, spent=time.perf_counter() - t0)
    on = f"on {threads} CPU thread{'s' if threads > 1 else ''} in {s.precision}"
    what = f"a tiny BERT (L=2, H=128, A={s.num_attention_heads})"
    say = lambda m: log(f"      {m}")  # noqa: E731
    heldout_dir = out / "heldout"
    deadline = t0 + s.minutes * 60 - FINAL_SECONDS
    # the runs' deadlines (end_by) are time.time() values; none under --max-steps
    calibrated = read_plan(out).get("seconds_per_update")
    timed = s.max_steps is None and calibrated is not None
    clock = lambda t: (time.time() + t - time.perf_counter()) if timed else None  # noqa: E731
    if len(phases) == 1:
        log(f"[4/5] pre-training {what} for {steps} updates of {s.batch_size} {on}")
        opts = run_options(
            out / "run", phases[0], heldout_dir, steps, s, threads, end_by=clock(deadline)
        )
        result = pretrain(opts, log=say)
        steps1 = 0
    else:
        # phase 1 (short instances) and phase 2 (its own warmup and decay, warm-started from
        # phase 1's model, as NVIDIA's recipe runs its phases) are two runs: phase 2's count is
        # fitted to the time phase 1 leaves (fit_phase2)
        planned2 = round(steps * s.phase2_fraction)
        steps1 = steps - planned2
        log(
            f"[4/5] pre-training {what} {on}: {steps1} updates of {s.batch_size} on "
            f"{s.phase1_seq_length}-token instances, then about {planned2} of "
            f"{s.phase2_batch_size or s.batch_size} on {s.seq_length}-token instances "
            f"({s.phase2_fraction:.0%} of the updates; fitted to the time left)"
        )
        # phase 1 ends its decay early enough to leave phase 2 its calibrated share
        end1 = clock(deadline - planned2 * calibrated[-1]) if timed else None
        start = None
        if steps1:
            opts = run_options(
                out / "run-phase1", phases[0], heldout_dir, steps1, s, threads, end_by=end1
            )
            steps1 = pretrain(opts, log=say).step  # fewer than planned if its deadline came
            start = out / "run-phase1" / "model"
        steps2 = fit_phase2(s, out, planned2, deadline, log)
        opts = run_options(
            out / "run", phases[1], heldout_dir, steps2, s, threads, True, start, clock(deadline)
        )
        result = pretrain(opts, log=say)
    e = result.final_eval or {}
    mlm, nsp = e.get("mlm_acc", float("nan")), e.get("nsp_acc", float("nan"))
    heldout = PretrainingDataset(heldout_dir)
    base = input_blind_baselines(heldout, opts.train.eval_examples)
    log(
        f"      held-out MLM accuracy {mlm:.1%} (most frequent token: {base['mlm_acc']:.1%}), "
        f"NSP accuracy {nsp:.1%} (majority label: {base['nsp_acc']:.1%}) "
        f"({time.perf_counter() - t0:.0f}s)"
    )

    model = load_pretrained(out / "run" / "model", BertForPreTraining)
    tokenizer = BertTokenizer.from_pretrained(out / "run" / "model")
    log("[5/5] fill-mask with the trained model (top 5):")
    masked = FillMasker(model, tokenizer, precision="fp32")(EXAMPLES, top_k=5)
    answers = [(text, [t for t, _ in found[0]]) for text, found in zip(EXAMPLES, masked)]
    for text, preds in answers:
        log(f"      {text}\n        -> {', '.join(preds)}")
    distinct = len({preds[0] for _, preds in answers})
    wall = time.perf_counter() - t0
    summary = {
        "heldout_mlm_accuracy": mlm,
        "heldout_nsp_accuracy": nsp,
        "baseline_mlm_most_frequent_token": base["mlm_acc"],
        "baseline_nsp_majority_label": base["nsp_acc"],
        "heldout_instances": min(len(heldout), opts.train.eval_examples),
        "targets": {"heldout_mlm_accuracy": TARGET_MLM, "heldout_nsp_accuracy": TARGET_NSP},
        "reached_targets": bool(mlm >= TARGET_MLM and nsp >= TARGET_NSP),
        "wall_seconds": wall,
        "model": str(out / "run" / "model"),
        "steps": steps1 + result.step,
        "phase1_steps": steps1,
        "phase2_steps": result.step,
        "batch_size": s.batch_size,
        "phase2_batch_size": s.phase2_batch_size or s.batch_size,
        "phase2_learning_rate": s.phase2_learning_rate,
        "nsp_weight": s.nsp_weight,
        "num_attention_heads": s.num_attention_heads,
        "minutes": s.minutes,
        "seed": s.seed,
        "threads": threads,
        "precision": s.precision,
        "hardware": {k: d.choice for k, d in hardware.made().items()},
        "cpu": hardware.cpu_info().label,
        "corpus": str(s.corpus) if s.corpus else f"built-in ({CORPUS})",
        "articles": {"train": len(train_docs), "heldout": len(held_docs)},
        "fill_mask": [{"prompt": t, "top5": p} for t, p in answers],
        "fill_mask_distinct_top1": distinct,
    }
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    log(
        f"done in {wall:.0f}s; model in {out / 'run' / 'model'}, curves in "
        f"{out / 'run' / 'curves.png'}"
        + (f" (phase 1: {out / 'run-phase1' / 'curves.png'})" if steps1 else "")
        + f", summary in {out / 'summary.json'}"
    )
    log(verdict(mlm, nsp, base, distinct, len(EXAMPLES)))
    return summary
