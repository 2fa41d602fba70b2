"""Learning benchmark (not CI): pre-train a tiny BERT on Wikipedia text for a fixed wall-clock budget
and check held-out MLM accuracy >= 25% and NSP accuracy >= 80%.

    .venv/bin/python -m benchmarks.pretrain_learning --workdir /tmp/learn [--minutes 30]

Data: ``--wiki-dir`` (default ../shared/data/pretraining_text/wikipedia), WikiExtractor files;
the last file is held out (different articles), the others are training data. A WordPiece
vocabulary is trained on the first files, instances are built by the real pipeline (max length
128, dynamic masking), then a short calibration run measures seconds per step so that the main
run's step count (and so its learning-rate schedule) fits the budget. Prints the held-out curve
and writes ``WORKDIR/run/metrics.jsonl`` and ``WORKDIR/run/curves.png``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

DEFAULT_WIKI = Path(__file__).resolve().parents[2] / "shared/data/pretraining_text/wikipedia"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--wiki-dir", type=Path, default=DEFAULT_WIKI)
    ap.add_argument("--minutes", type=float, default=30.0, help="training wall-clock budget")
    ap.add_argument("--train-files", type=int, default=24)
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--learning-rate", type=float, default=2e-3)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)

    import torch

    from bertkit.cli.quickstart import auto_threads
    from bertkit.data.corpus import read_documents
    from bertkit.data.prepare import PrepareSettings, prepare_pretraining
    from bertkit.tokenizer import train_wordpiece
    from bertkit.training.loop import TrainConfig
    from bertkit.training.pretraining import PretrainOptions, pretrain

    threads = args.threads or auto_threads()
    torch.set_num_threads(threads)
    files = sorted(args.wiki_dir.glob("wiki_*"))
    held_files = files[-1:]  # the last file's articles never appear in training
    train_files = files[:-1][: args.train_files]
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    vocab = work / "vocab.txt"
    if not vocab.exists():
        sentences = (s for doc in read_documents(train_files[:4]) for s in doc)
        train_wordpiece(sentences, vocab_size=args.vocab_size, output=vocab, show_progress=False)
    print(f"vocab: {vocab} ({time.perf_counter() - t0:.0f}s)")
    common = {"max_seq_length": 128, "seed": 12345}
    for name, inputs, dupe, dynamic in (
        ("data", train_files, 1, True),
        ("heldout", held_files, 1, False),
    ):
        if not (work / name / "manifest.json").exists():
            prepare_pretraining(
                inputs,
                vocab,
                work / name,
                num_workers=2,
                overwrite=True,
                settings=PrepareSettings(dupe_factor=dupe, dynamic_masking=dynamic, **common),
            )
    n = json.loads((work / "data" / "manifest.json").read_text())["num_instances"]["train"]
    print(f"instances: {n} training ({time.perf_counter() - t0:.0f}s)")

    def options(out: Path, steps: int, evals: int = 12, log_every: int = 25) -> PretrainOptions:
        return PretrainOptions(
            data=work / "data",
            output=out,
            model_size="tiny",
            max_steps=steps,
            learning_rate=args.learning_rate,
            warmup_proportion=0.02,
            eval_data=work / "heldout",
            device="cpu",
            threads=threads,
            train=TrainConfig(
                batch_size=args.batch_size,
                log_every=log_every,
                eval_every=max(1, steps // evals) if evals else 0,
                eval_examples=2000,
                save_every=max(1, steps // 6),
                keep_last=2,
            ),
        )

    # calibration: seconds per training step (from the logged windows, so start-up and the
    # final evaluation are not counted), then size the main run to the budget
    calib = work / "calibration"
    shutil.rmtree(calib, ignore_errors=True)
    pretrain(options(calib, 40, evals=0, log_every=10), log=lambda m: None)
    windows = [json.loads(x) for x in (calib / "metrics.jsonl").read_text().splitlines()]
    per_step = sorted(r["seconds_per_step"] for r in windows if r["type"] == "train")[1]
    shutil.rmtree(work / "evalcost", ignore_errors=True)
    shutil.rmtree(work / "run", ignore_errors=True)  # the step count is new each time
    t = time.perf_counter()
    pretrain(options(work / "evalcost", 1, evals=0), log=lambda m: None)  # one step + one eval
    eval_cost = time.perf_counter() - t
    steps = max(50, int((args.minutes * 60 - 12 * eval_cost) / per_step * 0.95))
    print(f"calibration: {per_step:.3f} s/step on {threads} threads -> {steps} steps")
    t = time.perf_counter()
    result = pretrain(options(work / "run", steps), log=print)
    minutes = (time.perf_counter() - t) / 60
    evals = [json.loads(x) for x in (work / "run" / "metrics.jsonl").read_text().splitlines()]
    print("\nheld-out curve (step, MLM acc, NSP acc):")
    for r in (r for r in evals if r["type"] == "eval"):
        print(f"  {r['step']:6d}  {r['mlm_acc']:.4f}  {r['nsp_acc']:.4f}")
    e = result.final_eval or {}
    ok = e.get("mlm_acc", 0) >= 0.25 and e.get("nsp_acc", 0) >= 0.80
    print(
        f"\nfinal after {minutes:.1f} min ({result.step} steps): MLM {e.get('mlm_acc', 0):.4f} "
        f"(target 0.25), NSP {e.get('nsp_acc', 0):.4f} (target 0.80) -> {'PASS' if ok else 'FAIL'}"
    )
    print(f"curve: {work / 'run' / 'curves.png'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
