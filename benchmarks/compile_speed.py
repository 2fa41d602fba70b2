"""torch.compile against eager on the CPU, on each fp32 path, one training update and one inference
pass, interleaved in one run.

Under ``torch.compile`` bertkit's products step aside from oneDNN's linear for ``F.linear``
(inductor lowers that op only on frozen weights: ``model/kernels.py``), so a compiled model runs
inductor's own choice whatever the ``fp32_matmul`` decision. This prints what that costs or gains
against eager on oneDNN and on BLAS.

    .venv/bin/python -m benchmarks.compile_speed --size small --batch 8 --length 128 --threads 2
"""

from __future__ import annotations

import argparse
import platform

import torch

from bertkit import hardware
from bertkit.config import BertConfig
from bertkit.model import BertForPreTraining

from .timing import interleaved_seconds


def batch(config: BertConfig, b: int, t: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, config.vocab_size, (b, t), generator=g)
    labels = torch.full((b, t), -100)
    pick = torch.rand(b, t, generator=g) < 0.15
    labels[pick] = ids[pick]
    return {
        "input_ids": ids,
        "attention_mask": torch.ones(b, t, dtype=torch.long),
        "token_type_ids": torch.zeros(b, t, dtype=torch.long),
        "labels": labels,
        "next_sentence_label": torch.zeros(b, dtype=torch.long),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="small")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=8)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    config = BertConfig.preset(a.size, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForPreTraining(config)
    x = batch(config, a.batch, a.length)
    compiled = torch.compile(model)

    def train(m, path):
        def step():
            with hardware.forced("fp32_matmul", path):
                model.zero_grad(set_to_none=True)
                m(**x).loss.backward()

        return step

    def infer(m, path):
        def step():
            with hardware.forced("fp32_matmul", path), torch.no_grad():
                m(**x)

        return step

    print(
        f"# {hardware.cpu_info().label}, torch {torch.__version__}, {a.threads} threads, "
        f"{platform.machine()}; BERT-{a.size}, batch {a.batch} x {a.length}"
    )
    print("| pass | eager oneDNN (s) | eager BLAS (s) | compiled (s) | compiled / best eager |")
    print("|---|---:|---:|---:|---:|")
    for name, make in (("train update", train), ("inference", infer)):
        fns = {
            "onednn": make(model, "onednn"),
            "blas": make(model, "blas"),
            "compiled": make(compiled, "onednn"),
        }
        t = interleaved_seconds(fns, a.repeats, warmup=2)
        best = min(t["onednn"], t["blas"])
        print(
            f"| {name} | {t['onednn']:.3f} | {t['blas']:.3f} | {t['compiled']:.3f} | "
            f"{best / t['compiled']:.2f}x faster |"
            if t["compiled"] < best
            else f"| {name} | {t['onednn']:.3f} | {t['blas']:.3f} | {t['compiled']:.3f} | "
            f"{t['compiled'] / best:.2f}x slower |"
        )


if __name__ == "__main__":
    main()
