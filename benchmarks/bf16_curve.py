"""bf16 vs fp32 pre-training curves: tiny BERT, masked LM on Wikipedia, same data, same seed.

    .venv/bin/python -m benchmarks.bf16_curve --out /tmp/bf16_curve [--steps 500]

Three runs of BertForMaskedLM (tiny config, MiniLM's uncased vocabulary, sequences of 128 tokens
cut from consecutive Wikipedia text, 15% masking with BERT's 80/10/10 rule, AdamW lr 1e-3 with
linear warm-up and decay):

  fp32       seed 0
  bf16       seed 0, the forward pass under torch.autocast(bfloat16) (weights and AdamW stay fp32)
  fp32-seed1 seed 1 (different initialisation and masks): the run-to-run noise to compare with

Every run sees the same token stream; runs with the same seed see identical batches and masks.
Prints the mean MLM loss over the last 100 steps of each run and the mean |fp32 - bf16| gap next
to the mean |fp32 - fp32-seed1| gap (both over 25-step moving averages), and writes
OUT/curves.png and OUT/curves.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

DEFAULT_WIKI = Path(__file__).resolve().parents[2] / "shared/data/pretraining_text/wikipedia"


def token_stream(wiki: Path, vocab_dir: Path, tokens: int) -> torch.Tensor:
    """The first ``tokens`` word pieces of the Wikipedia files (article markup dropped)."""
    from bertkit.tokenizer import BertTokenizer

    tok = BertTokenizer(vocab_dir / "vocab.txt", do_lower_case=True)
    ids: list[int] = []
    for path in sorted(wiki.glob("wiki_*")):
        with open(path, encoding="utf-8") as f:
            lines = [x for x in f if x.strip() and not x.startswith(("<doc ", "</doc>"))]
        for enc in tok.encode_batch(lines, add_special_tokens=False):
            ids.extend(enc.input_ids)
        if len(ids) >= tokens:
            break
    return torch.tensor(ids[:tokens], dtype=torch.long)


def mask_batch(x: torch.Tensor, vocab: int, mask_id: int, g: torch.Generator):
    """BERT masking: 15% of positions are labelled; of those 80% [MASK], 10% random, 10% kept."""
    labels = torch.full_like(x, -100)
    chosen = torch.rand(x.shape, generator=g) < 0.15
    labels[chosen] = x[chosen]
    r = torch.rand(x.shape, generator=g)
    x = x.clone()
    x[chosen & (r < 0.8)] = mask_id
    rand = chosen & (r >= 0.8) & (r < 0.9)
    x[rand] = torch.randint(1000, vocab, (int(rand.sum()),), generator=g)
    return x, labels


def run(stream: torch.Tensor, steps: int, batch: int, seq: int, seed: int, bf16: bool) -> list:
    from bertkit.config import BertConfig
    from bertkit.model import BertForMaskedLM
    from bertkit.training.optim import OptimizerConfig, build_optimizer

    cfg = BertConfig.preset("tiny", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(seed)
    model = BertForMaskedLM(cfg).train()
    opt = build_optimizer(model, OptimizerConfig(lr=1e-3))
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, max(0.0, (steps - s) / (steps - warm)))
    )
    g = torch.Generator().manual_seed(seed)
    rows = stream[: (stream.numel() // (seq - 2)) * (seq - 2)].view(-1, seq - 2)
    cls, sep = 101, 102
    losses = []
    for _ in range(steps):
        pick = torch.randint(0, rows.shape[0], (batch,), generator=g)
        body = rows[pick]
        x = torch.cat(
            [torch.full((batch, 1), cls), body, torch.full((batch, 1), sep)], dim=1
        )  # (B, seq)
        inp, labels = mask_batch(x, cfg.vocab_size, 103, g)
        inp[:, 0], inp[:, -1], labels[:, 0], labels[:, -1] = cls, sep, -100, -100
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(input_ids=inp, labels=labels)
        out.loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(out.loss.detach()))
    return losses


def smooth(xs: list[float], k: int = 25) -> list[float]:
    return [statistics.fmean(xs[max(0, i - k + 1) : i + 1]) for i in range(len(xs))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--wiki", type=Path, default=DEFAULT_WIKI)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seq-length", type=int, default=128)
    args = ap.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks.speed import minilm_dir
    from bertkit.io import atomic_write_text

    args.out.mkdir(parents=True, exist_ok=True)
    stream = token_stream(args.wiki, Path(minilm_dir()), 2_000_000)
    print(f"token stream: {stream.numel()} word pieces")
    curves = {}
    for name, seed, bf16 in (("fp32", 0, False), ("bf16", 0, True), ("fp32-seed1", 1, False)):
        t0 = time.perf_counter()
        curves[name] = run(stream, args.steps, args.batch_size, args.seq_length, seed, bf16)
        tail = statistics.fmean(curves[name][-100:])
        print(
            f"{name:11s} final-100-step mean MLM loss {tail:.4f} ({time.perf_counter() - t0:.0f}s)",
            flush=True,
        )
    s = {k: smooth(v) for k, v in curves.items()}
    gap_bf16 = statistics.fmean(abs(a - b) for a, b in zip(s["fp32"], s["bf16"]))
    gap_seed = statistics.fmean(abs(a - b) for a, b in zip(s["fp32"], s["fp32-seed1"]))
    print(
        f"mean |fp32 - bf16| (25-step average) {gap_bf16:.4f}; "
        f"mean |fp32 - fp32-seed1| {gap_seed:.4f} (run-to-run noise)"
    )
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, ys in s.items():
        ax.plot(range(1, len(ys) + 1), ys, label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("MLM loss (25-step moving average)")
    ax.set_title("tiny BERT pre-training: bf16 autocast vs fp32")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out / "curves.png", dpi=120)
    summary = {"gap_bf16": gap_bf16, "gap_seed": gap_seed, "curves": curves}
    atomic_write_text(args.out / "curves.json", json.dumps(summary))
    print(f"wrote {args.out / 'curves.png'} and {args.out / 'curves.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
