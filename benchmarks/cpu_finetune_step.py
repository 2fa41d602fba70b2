"""MiniLM fine-tuning steps on the CPU with BERT's dropout (0.1), one line per case: a
classification step of 32 x 128 tokens (lengths 64..128) and a span step of 8 x 384, in fp32 and
bf16 autocast, forward + backward, best of 4.

It times whichever bertkit ``PYTHONPATH`` puts first, so two versions compare side by side in one
shell loop (what docs/performance.md reports for the CPU dropout):

    git worktree add /tmp/base 82b59df
    for r in 1 2; do for t in base new; do src=$PWD/src; [ $t = base ] && src=/tmp/base/src
      PYTHONPATH=$src:$PWD .venv/bin/python -m benchmarks.cpu_finetune_step --label $t; done; done
"""

from __future__ import annotations

import argparse
import logging
import time

import torch


def cases() -> dict[str, tuple[str, dict]]:
    g = torch.Generator().manual_seed(0)

    def batch(b: int, t: int, ragged: bool) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.randint(1000, 20000, (b, t), generator=g)
        lengths = torch.randint(t // 2, t + 1, (b,), generator=g) if ragged else torch.full((b,), t)
        return ids, (torch.arange(t)[None] < lengths[:, None]).long()

    cls_ids, cls_mask = batch(32, 128, True)
    span_ids, span_mask = batch(8, 384, False)
    return {
        "classification 32x128": (
            "BertForSequenceClassification",
            {
                "input_ids": cls_ids,
                "attention_mask": cls_mask,
                "labels": torch.randint(0, 2, (32,), generator=g),
            },
        ),
        "span 8x384": (
            "BertForQuestionAnswering",
            {
                "input_ids": span_ids,
                "attention_mask": span_mask,
                "start_positions": torch.full((8,), 20),
                "end_positions": torch.full((8,), 30),
            },
        ),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--label", default="bertkit", help="the first column of each line")
    p.add_argument("--reps", type=int, default=4)
    a = p.parse_args(argv)
    logging.disable(logging.WARNING)
    from benchmarks.tokenizer import minilm_dir
    from bertkit.interop import load_pretrained

    for case, (head, inputs) in cases().items():
        extra = {"num_labels": 2} if head == "BertForSequenceClassification" else {}
        model = load_pretrained(minilm_dir(), head, **extra).train()
        for precision in ("fp32", "bf16"):

            def step(model=model, inputs=inputs, bf16=precision == "bf16") -> None:
                model.zero_grad(set_to_none=True)
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    out = model(**inputs)
                out.loss.backward()

            step()
            best = float("inf")
            for _ in range(a.reps):
                start = time.perf_counter()
                step()
                best = min(best, time.perf_counter() - start)
            print(f"{a.label}\t{case}\t{precision}\t{best * 1e3:.0f} ms", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
