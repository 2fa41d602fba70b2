"""Side-by-side training trajectory: bertkit vs transformers on MRPC, SQuAD or a regression task,
same head and batches.

Both models start from all-MiniLM-L6-v2 with the same classifier weights (bertkit's copied from
transformers' draw), see the same batches in the same order, and step with their own optimizer
set-up (bertkit: ``build_optimizer`` + ``set_lr``; transformers: AdamW groups +
``get_linear_schedule_with_warmup``, as ``hf_finetune_ref``). Prints the mean training loss every
20 updates, then each model's dev loss and accuracy. With ``--dropout 0`` the two must follow the
same trajectory; with dropout they differ only in their masks.

    python -m benchmarks.finetune_trajectory --steps 115 --dropout 0.1
    python -m benchmarks.finetune_trajectory --task squad --steps 12 --dropout 0 --lr 5e-5

``--task squad`` trains on the windows of the first 24 articles of dev-v1.1.json (384 tokens, the
quality benchmark's split) and prints the training losses only.

``--task regression`` trains a one-output regression head (MSE) on MRPC pairs with float targets in
[0, 5] (``benchmarks.regression_task``: 2.5 * label + 2.5 * word Jaccard) and reports dev MSE and
Pearson/Spearman, for bertkit also through its own evaluation path (``predict_rows`` + the
adapter's ``score``, as ``finetune`` evaluates):

    python -m benchmarks.finetune_trajectory --task regression --steps 345 --dropout 0
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared/data"))
    ap.add_argument("--steps", type=int, default=115, help="updates (115 = one MRPC epoch at 32)")
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--task", choices=("mrpc", "squad", "regression"), default="mrpc")
    ap.add_argument("--print-every", type=int, default=20)
    ap.add_argument("--bk-eps", type=float, default=1e-6, help="bertkit's AdamW eps")
    ap.add_argument("--hf-eps", type=float, default=1e-6, help="transformers' AdamW eps")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)

    import transformers
    from transformers import get_linear_schedule_with_warmup

    from benchmarks.finetune_quality import model_dir
    from benchmarks.hf_finetune_ref import RefHParams, _optimizer
    from bertkit.data.tasks.glue import glue_task, read_glue_split
    from bertkit.inference import to_torch as _to_torch
    from bertkit.interop import load_pretrained
    from bertkit.tasks import ClassificationAdapter
    from bertkit.tokenizer import BertTokenizer
    from bertkit.training.optim import OptimizerConfig, build_optimizer
    from bertkit.training.schedule import ScheduleConfig, set_lr

    m = model_dir()
    tok = BertTokenizer.from_pretrained(m)
    drop = {"hidden_dropout_prob": args.dropout, "attention_probs_dropout_prob": args.dropout}
    transformers.set_seed(args.seed)
    dev_examples: list = []
    if args.task in ("mrpc", "regression"):
        task = glue_task("MRPC")
        root = Path(args.data) / "glue"
        if args.task == "mrpc":
            adapter = ClassificationAdapter(
                "glue", "MRPC", 128, labels=list(task.labels or []), metric=task.metric
            )
            train_examples = read_glue_split(root, task, "train")
            dev_examples = read_glue_split(root, task, "dev")
        else:
            from benchmarks.regression_task import regression_examples

            adapter = ClassificationAdapter(
                "classify", "mrpc-regression", 128, labels=[], metric="pearson_spearman"
            )
            train_examples = regression_examples(args.data, "train")
            dev_examples = regression_examples(args.data, "dev")
        train = adapter.encode(tok, train_examples, True)
        dev = adapter.encode(tok, dev_examples, False)
        num_labels = 1 if adapter.regression else 2
        hf = transformers.BertForSequenceClassification.from_pretrained(
            m, num_labels=num_labels, **drop
        )
        bk = load_pretrained(m, adapter.head_class, **adapter.config_overrides(), **drop)
        bk.classifier.load_state_dict(hf.classifier.state_dict())
        keys: tuple[str, ...] = ("input_ids", "token_type_ids", "attention_mask", "labels")
        total = math.ceil(len(train) / 32) * 3  # the schedule of a 3-epoch run
    else:
        adapter, train = _squad_train(Path(args.data), tok)
        dev = []
        hf = transformers.BertForQuestionAnswering.from_pretrained(m, **drop)
        bk = load_pretrained(m, adapter.head_class, **drop)
        bk.qa.load_state_dict(hf.qa_outputs.state_dict())
        keys = ("input_ids", "token_type_ids", "attention_mask", "start_positions", "end_positions")
        total = math.ceil(len(train) / 32)  # the schedule of the 1-epoch benchmark run
    hp = RefHParams(lr=args.lr, warmup_ratio=0.1, weight_decay=0.01, adam_eps=args.hf_eps)
    opt_hf = _optimizer(hf, hp)
    sched_hf = get_linear_schedule_with_warmup(opt_hf, math.ceil(0.1 * total), total)
    opt_bk = build_optimizer(bk, OptimizerConfig(lr=args.lr, weight_decay=0.01, eps=args.bk_eps))
    peaks = [args.lr] * len(opt_bk.param_groups)
    schedule = ScheduleConfig.from_proportion(total, 0.1)
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(args.seed)).tolist()
    cpu = torch.device("cpu")
    sums = [0.0, 0.0]
    max_diff = 0.0
    hf.train()
    bk.train()
    for step in range(args.steps):
        idx = order[(step * 32) % len(order) :][:32]
        batch = _to_torch(adapter.collate([train[i] for i in idx], 0, training=True), cpu)
        set_lr(opt_bk, peaks, step, schedule)
        losses = [0.0, 0.0]
        for k, (model, opt) in enumerate(((bk, opt_bk), (hf, opt_hf))):
            loss = model(**{key: batch[key] for key in keys}).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses[k] = float(loss.detach())
            sums[k] += losses[k]
        sched_hf.step()
        max_diff = max(max_diff, abs(losses[0] - losses[1]))
        if (step + 1) % args.print_every == 0 or step + 1 == args.steps:
            n = step + 1
            print(
                f"update {n:4d}: mean training loss bertkit {sums[0] / n:.6f}, transformers {sums[1] / n:.6f}; "
                f"this step {losses[0]:.6f} / {losses[1]:.6f}; max |step diff| so far {max_diff:.2e}",
                flush=True,
            )
    print(
        "bertkit AdamW step scale sqrt(v^)/(sqrt(v^)+eps), parameter-weighted mean: "
        + ", ".join(f"eps {e:g}: {_eps_scale(opt_bk, e):.4f}" for e in (1e-6, 1e-8))
    )
    with torch.no_grad():
        for name, model in (("bertkit", bk), ("transformers", hf)) if dev else ():
            model.eval()
            loss_sum = correct = 0.0
            preds = []
            for k in range(0, len(dev), 64):
                batch = _to_torch(adapter.collate(dev[k : k + 64], 0, training=False), cpu)
                out = model(**{key: batch[key] for key in keys})
                loss_sum += float(out.loss) * len(batch["labels"])
                correct += float((out.logits.argmax(-1) == batch["labels"]).sum())
                preds.append(out.logits[:, 0])
            if not adapter.regression:
                print(
                    f"{name}: dev loss {loss_sum / len(dev):.4f}, accuracy {correct / len(dev):.4f}"
                )
                continue
            from bertkit.evaluation.classification import glue_metrics

            gold = [float(e.label) for e in dev_examples]
            r = glue_metrics("pearson_spearman", gold, torch.cat(preds).numpy())
            print(
                f"{name}: dev MSE {loss_sum / len(dev):.4f}, "
                f"pearson {100 * r['pearson']:.2f}, spearman {100 * r['spearman']:.2f}"
            )
            if model is bk:  # the library's own evaluation path (length-sorted batches)
                from bertkit.inference import predict_rows

                s = adapter.score(dev_examples, dev, predict_rows(bk, adapter, dev))
                print(
                    f"{name} (predict_rows + adapter.score): "
                    f"pearson {100 * s.metrics['pearson']:.2f}, spearman {100 * s.metrics['spearman']:.2f}"
                )


def _eps_scale(opt: torch.optim.Optimizer, eps: float) -> float:
    """Mean over parameters of sqrt(v^) / (sqrt(v^) + eps): how much eps shrinks Adam's steps."""
    total = count = 0.0
    for group in opt.param_groups:
        for p in group["params"]:
            st = opt.state.get(p)
            if not st:
                continue
            t = float(st["step"])
            root = (st["exp_avg_sq"] / (1 - group["betas"][1] ** t)).sqrt()
            total += float((root / (root + eps)).sum())
            count += root.numel()
    return total / max(count, 1.0)


def _squad_train(data: Path, tok: object) -> tuple[object, list]:
    from benchmarks.finetune_quality import squad_split
    from bertkit.data.tasks.squad import read_squad
    from bertkit.tasks import SquadAdapter

    adapter = SquadAdapter("squad", "squad1", 384)
    return adapter, adapter.encode(tok, read_squad(squad_split(data)[0]), True)


if __name__ == "__main__":
    main()
