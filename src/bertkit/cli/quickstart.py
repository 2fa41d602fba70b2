"""``bertkit quickstart``: raw text to a pre-trained tiny BERT on the built-in corpus, in minutes.

Steps: read WikiText-103 validation (shipped in ``bertkit/resources``, see ATTRIBUTION.txt), hold
out every 10th article, train a WordPiece vocabulary, build MLM+NSP instances, pre-train a tiny
BERT on the CPU, then report held-out MLM/NSP accuracy next to what a model that ignores the input
would score, and show fill-mask predictions.

The training length is a wall-clock budget (``--minutes``): a short calibration run measures
seconds per update on this machine, and the step count (which the learning-rate schedule needs up
front) is chosen to fit. The plan is stored in ``OUTPUT/plan.json`` so that a rerun resumes the
same run instead of starting a different one.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

HELP = "pre-train a tiny BERT on the built-in corpus and show what it learned (under 10 minutes)"

CORPUS = "wikitext-103-valid.raw"
_TITLE = re.compile(r"^ ?= ([^=].*) = ?$")  # " = Title = "; sections are "= = Section = ="
_DETOK = ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."), ("<unk>", ""))
EXAMPLES = (
    "the river flows into the [MASK] .",
    "he was born in [MASK] and studied law .",
    "the album was [MASK] in 1995 .",
    "the [MASK] of the united states .",
    "she played the role of a [MASK] in the film .",
)
# Tuned for learning speed per CPU-second in side-by-side runs on this machine (tiny BERT on the
# Wikipedia text, see benchmarks/pretrain_learning.py and docs/pretraining-learning.md). Trained
# on 128-token instances from the start, a tiny BERT stays at the unigram plateau for >10k updates
# (its predictions at [MASK] were the most frequent token's accuracy, 5.1%, after 30 minutes),
# because near-uniform attention over 128 positions carries almost no signal about neighbours.
# The paper's short-then-long phases fix it: the first 70% of updates on 32-token instances teach
# the attention to use nearby words, then 128-token instances (held-out MLM 16% -> 25% within the
# first 1,800 updates of phase 2). Peak lr 1e-3 (2e-3 collapsed heads onto one token), no dropout
# (11.3% vs 10.2% held-out MLM accuracy after 500 updates), batches of 16 (at equal tokens seen,
# 16 beat 32: 12.4% vs 11.3% after 16k sequences; 8 was no better).
LEARNING_RATE = 1e-3
PHASE1_SEQ_LENGTH = 32
PHASE2_FRACTION = 0.3
WARMUP = 0.05
CALIBRATION_STEPS = 24


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--output",
        type=Path,
        default=Path("bertkit-quickstart"),
        help="working folder (default: ./bertkit-quickstart); rerunning resumes",
    )
    p.add_argument(
        "--minutes",
        type=float,
        default=6.5,
        help="pre-training wall-clock budget; the step count is fitted to it (default: 6.5)",
    )
    p.add_argument(
        "--max-steps", type=int, default=None, help="fixed number of updates instead of --minutes"
    )
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-length", type=int, default=128, help="max tokens per instance")
    p.add_argument(
        "--phase1-seq-length",
        type=int,
        default=PHASE1_SEQ_LENGTH,
        help="first phase's instance length (0: a single phase at --seq-length)",
    )
    p.add_argument(
        "--phase2-fraction",
        type=float,
        default=PHASE2_FRACTION,
        help="fraction of the updates at --seq-length (default 0.3)",
    )
    # The built-in corpus has ~250k words: a 2000-piece vocabulary sees each piece far more often
    # than 8000 (held-out MLM accuracy 12.9% vs 11.1% after 920 updates of 16).
    p.add_argument("--vocab-size", type=int, default=2000)
    p.add_argument("--learning-rate", type=float, default=LEARNING_RATE)
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads (default: 2, or 1 when other work keeps the cores busy)",
    )
    p.add_argument(
        "--corpus",
        type=Path,
        default=None,
        help="a WikiText-format file instead of the built-in one",
    )


def read_wikitext(path: Path) -> Iterator[list[str]]:
    """Articles of a WikiText file as lists of sentences.

    Top-level headings (`` = Title = ``) separate articles; section headings are dropped; each
    paragraph line is de-tokenized (``@-@`` joiners, ``<unk>`` removed) and split into sentences
    with the data pipeline's splitter.
    """
    from bertkit.data.corpus import split_sentences
    from bertkit.io import read_text_lines

    doc: list[str] = []
    for _, line in read_text_lines(path):
        if _TITLE.match(line):
            if doc:
                yield doc
            doc = []
            continue
        text = line.strip()
        if not text or text.startswith("="):
            continue
        for a, b in _DETOK:
            text = text.replace(a, b)
        doc.extend(s for s in split_sentences(" ".join(text.split())) if s)
    if doc:
        yield doc


def auto_threads(cores: int = 2) -> int:
    """``cores`` threads on an idle machine, 1 when the load average says the cores are busy:
    oversubscribed OpenMP threads made a tiny-BERT step ~5x slower than one thread here."""
    import os

    try:
        load = os.getloadavg()[0]
    except OSError:
        return cores
    return cores if load < 0.5 * cores else 1


def _write_bert_format(docs: list[list[str]], path: Path) -> None:
    from bertkit.io import atomic_write_text

    atomic_write_text(path, "".join("\n".join(d) + "\n\n" for d in docs))


def fill_mask(
    model, tokenizer, sentences: tuple[str, ...], k: int = 5
) -> list[tuple[str, list[str]]]:
    """Top-k predictions for the first [MASK] of each sentence."""
    import torch

    results = []
    model.eval()
    with torch.no_grad():
        for text in sentences:
            enc = tokenizer.encode(text)
            ids = torch.tensor([enc.input_ids])
            out = model(
                ids,
                attention_mask=torch.ones_like(ids),
                token_type_ids=torch.tensor([enc.token_type_ids]),
            )
            pos = enc.input_ids.index(tokenizer.mask_token_id)
            top = out.prediction_logits[0, pos].topk(k).indices.tolist()
            results.append((text, tokenizer.convert_ids_to_tokens(top)))
    return results


def input_blind_baselines(dataset, n: int) -> dict[str, float]:
    """What a model that ignores its input scores on the first ``n`` examples: MLM accuracy of
    always predicting the most frequent masked token, NSP accuracy of always the majority label.

    Needs static masks (the held-out data is prepared that way).
    """
    from collections import Counter

    labels: Counter[int] = Counter()
    nsp = [0, 0]
    for i in range(min(n, len(dataset))):
        x = dataset[i]
        labels.update(int(t) for t in x["masked_labels"])
        nsp[x["next_sentence_label"]] += 1
    total = max(1, sum(labels.values()))
    return {
        "mlm_acc": labels.most_common(1)[0][1] / total if labels else 0.0,
        "nsp_acc": max(nsp) / max(1, sum(nsp)),
    }


def _options(out: Path, data: list[Path], heldout: Path | None, steps: int, args, threads: int):
    """Pre-training options over ``data``: one folder per phase (short instances first)."""
    from bertkit.training.loop import TrainConfig
    from bertkit.training.pretraining import PretrainOptions

    return PretrainOptions(
        data=data[0],
        phase2_data=data[1] if len(data) > 1 else None,
        phase2_fraction=args.phase2_fraction,
        output=out,
        model_size="tiny",
        max_steps=steps,
        learning_rate=args.learning_rate,
        warmup_proportion=WARMUP,
        dropout=0.0,
        eval_data=heldout,
        device="cpu",
        threads=threads,
        train=TrainConfig(
            batch_size=args.batch_size,
            seed=0,
            log_every=min(50, max(1, steps // 4)),
            eval_every=max(1, steps // 4),
            eval_examples=1000,
            save_every=max(1, steps // 4),
            keep_last=2,
            peak_flops=1e11,  # nominal: skips the start-up matmul benchmark, MFU is not shown
            show_progress=None,
        ),
    )


def plan_steps(args, out: Path, data: list[Path], threads: int, log) -> int:
    """The run's update count: --max-steps, the stored plan (a rerun resumes), or fitted to
    --minutes from short calibration runs' seconds per update on each phase's data."""
    from bertkit.io import atomic_write_text
    from bertkit.training.pretraining import pretrain

    plan_file = out / "plan.json"
    if args.max_steps is not None:
        steps = args.max_steps
    elif plan_file.exists():
        steps = int(json.loads(plan_file.read_text(encoding="utf-8"))["max_steps"])
    else:
        per_phase = []
        for folder in data:
            calib = out / "calibration"
            shutil.rmtree(calib, ignore_errors=True)
            opts = _options(calib, [folder], None, CALIBRATION_STEPS, args, threads)
            opts.train.log_every = CALIBRATION_STEPS // 3
            opts.train.show_progress = False
            pretrain(opts, log=lambda _m: None)
            windows = [json.loads(x) for x in (calib / "metrics.jsonl").read_text().splitlines()]
            rates = [r["seconds_per_step"] for r in windows if r.get("type") == "train"]
            per_phase.append(sorted(rates)[len(rates) // 2])  # median window: robust to start-up
            shutil.rmtree(calib, ignore_errors=True)
        weights = [1.0] if len(data) == 1 else [1 - args.phase2_fraction, args.phase2_fraction]
        per_step = sum(w * r for w, r in zip(weights, per_phase, strict=True))
        # ~8% of the budget goes to the held-out evaluations and checkpoints
        steps = max(50, int(args.minutes * 60 * 0.92 / per_step))
        log(
            f"      calibration: {per_step:.3f} s/update -> {steps} updates in {args.minutes:g} min"
        )
    atomic_write_text(plan_file, json.dumps({"max_steps": steps}) + "\n")
    return steps


def run(args: argparse.Namespace) -> int:
    import importlib.resources

    import torch

    from bertkit.data.prepare import PrepareSettings, prepare_pretraining
    from bertkit.data.shards import PretrainingDataset
    from bertkit.interop import load_pretrained
    from bertkit.model import BertForPreTraining
    from bertkit.tokenizer import BertTokenizer, train_wordpiece
    from bertkit.training.pretraining import pretrain

    t0 = time.perf_counter()
    out: Path = args.output
    out.mkdir(parents=True, exist_ok=True)
    threads = args.threads or auto_threads()
    torch.set_num_threads(threads)
    corpus = args.corpus or Path(str(importlib.resources.files("bertkit") / "resources" / CORPUS))
    docs = list(read_wikitext(corpus))
    train_docs = [d for i, d in enumerate(docs) if i % 10 != 9]
    held_docs = [d for i, d in enumerate(docs) if i % 10 == 9]
    print(
        f"[1/5] corpus: {len(docs)} articles, {sum(map(len, docs))} sentences "
        f"({len(held_docs)} articles held out)"
    )
    _write_bert_format(train_docs, out / "train.txt")
    _write_bert_format(held_docs, out / "heldout.txt")

    vocab = out / "vocab.txt"
    if not vocab.exists():
        train_wordpiece(
            (s for d in train_docs for s in d),
            vocab_size=args.vocab_size,
            output=vocab,
            show_progress=False,
        )
    print(
        f"[2/5] vocabulary: {sum(1 for _ in vocab.open(encoding='utf-8'))} WordPiece tokens "
        f"({time.perf_counter() - t0:.0f}s)"
    )

    # training instances are re-masked at every epoch; held-out masks are fixed, so every
    # evaluation scores the same predictions
    full = args.seq_length
    builds = [("data", "train.txt", True, full), ("heldout", "heldout.txt", False, full)]
    if args.phase1_seq_length:
        builds.insert(0, ("data-short", "train.txt", True, args.phase1_seq_length))
    for name, source, dynamic, length in builds:
        if not (out / name / "manifest.json").exists():
            settings = PrepareSettings(
                max_seq_length=length,
                format="bert",
                seed=12345,
                dupe_factor=1,
                dynamic_masking=dynamic,
            )
            prepare_pretraining(
                [out / source],
                vocab,
                out / name,
                num_workers=1,
                settings=settings,
                overwrite=True,
                show_progress=False,
            )
    trained = [(out / name, length) for name, _, dynamic, length in builds if dynamic]
    phases = [folder for folder, _ in trained]
    counts = ", ".join(f"{len(PretrainingDataset(f))} of <= {n} tokens" for f, n in trained)
    print(f"[3/5] training instances: {counts} ({time.perf_counter() - t0:.0f}s)")

    steps = plan_steps(args, out, phases, threads, print)
    print(
        f"[4/5] pre-training a tiny BERT (L=2, H=128) for {steps} updates of {args.batch_size} "
        f"on {threads} CPU thread{'s' if threads > 1 else ''}"
        + (
            f" ({1 - args.phase2_fraction:.0%} on {args.phase1_seq_length}-token instances first)"
            if len(phases) > 1
            else ""
        )
    )
    opts = _options(out / "run", phases, out / "heldout", steps, args, threads)
    result = pretrain(opts, log=lambda m: print(f"      {m}"))
    e = result.final_eval or {}
    base = input_blind_baselines(PretrainingDataset(out / "heldout"), opts.train.eval_examples)
    print(
        f"      held-out MLM accuracy {e.get('mlm_acc', float('nan')):.1%} (most frequent "
        f"token: {base['mlm_acc']:.1%}), NSP accuracy {e.get('nsp_acc', float('nan')):.1%} "
        f"(majority label: {base['nsp_acc']:.1%}) ({time.perf_counter() - t0:.0f}s)"
    )

    model = load_pretrained(out / "run" / "model", BertForPreTraining)
    tokenizer = BertTokenizer.from_pretrained(out / "run" / "model")
    print("[5/5] fill-mask with the trained model (top 5):")
    for text, preds in fill_mask(model, tokenizer, EXAMPLES):
        print(f"      {text}\n        -> {', '.join(preds)}")
    print(
        f"done in {time.perf_counter() - t0:.0f}s; model in {out / 'run' / 'model'}, curves in "
        f"{out / 'run' / 'curves.png'}"
    )
    return 0
