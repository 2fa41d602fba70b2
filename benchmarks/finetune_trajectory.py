"""Side-by-side training trajectory: bertkit vs transformers on MRPC or SQuAD, same head and batches.

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
    ap.add_argument("--task", choices=("mrpc", "squad"), default="mrpc")
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
    if args.task == "mrpc":
        task = glue_task("MRPC")
        root = Path(args.data) / "glue"
        adapter = ClassificationAdapter(
            "glue", "MRPC", 128, labels=list(task.labels or []), metric=task.metric
        )
        train = adapter.encode(tok, read_glue_split(root, task, "train"), True)
        dev = adapter.encode(tok, read_glue_split(root, task, "dev"), False)
        hf = transformers.BertForSequenceClassification.from_pretrained(m, num_labels=2, **drop)
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
    hp = RefHParams(lr=args.lr, warmup_ratio=0.1, weight_decay=0.01, adam_eps=1e-6)
    opt_hf = _optimizer(hf, hp)
    sched_hf = get_linear_schedule_with_warmup(opt_hf, math.ceil(0.1 * total), total)
    opt_bk = build_optimizer(bk, OptimizerConfig(lr=args.lr, weight_decay=0.01, eps=1e-6))
    peaks = [args.lr] * len(opt_bk.param_groups)
    schedule = ScheduleConfig.from_proportion(total, 0.1)
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(args.seed)).tolist()
    cpu = torch.device("cpu")
    sums = [0.0, 0.0]
    hf.train()
    bk.train()
    for step in range(args.steps):
        idx = order[(step * 32) % len(order) :][:32]
        batch = _to_torch(adapter.collate([train[i] for i in idx], 0, training=True), cpu)
        set_lr(opt_bk, peaks, step, schedule)
        for k, (model, opt) in enumerate(((bk, opt_bk), (hf, opt_hf))):
            loss = model(**{key: batch[key] for key in keys}).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            sums[k] += float(loss.detach())
        sched_hf.step()
        if (step + 1) % 20 == 0 or step + 1 == args.steps:
            n = step + 1
            print(
                f"update {n:4d}: mean training loss bertkit {sums[0] / n:.6f}, transformers {sums[1] / n:.6f}"
            )
    with torch.no_grad():
        for name, model in (("bertkit", bk), ("transformers", hf)) if dev else ():
            model.eval()
            loss_sum = correct = 0.0
            for k in range(0, len(dev), 64):
                batch = _to_torch(adapter.collate(dev[k : k + 64], 0, training=False), cpu)
                out = model(**{key: batch[key] for key in keys})
                loss_sum += float(out.loss) * len(batch["labels"])
                correct += float((out.logits.argmax(-1) == batch["labels"]).sum())
            print(f"{name}: dev loss {loss_sum / len(dev):.4f}, accuracy {correct / len(dev):.4f}")


def _squad_train(data: Path, tok: object) -> tuple[object, list]:
    from benchmarks.finetune_quality import squad_split
    from bertkit.data.tasks.squad import read_squad
    from bertkit.tasks import SquadAdapter

    adapter = SquadAdapter("squad", "squad1", 384)
    return adapter, adapter.encode(tok, read_squad(squad_split(data)[0]), True)


if __name__ == "__main__":
    main()
