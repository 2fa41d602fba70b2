"""Stage 3: a classification fine-tuning step and embedding throughput, bertkit against
transformers on the same inputs.

Fine-tuning: BERT-Base-shaped ``BertForSequenceClassification`` (random weights: the GPU
machine holds no checkpoint) against transformers' (sdpa), batch 32 x 128, the step of stage 2
(bf16 autocast, fused AdamW, dropout 0.1), alternating timed blocks; on a padded batch of
uneven lengths (16..128, as GLUE's sentences are short) and on a full-length one. MFU counts
the encoder's FLOPs on the real tokens (``benchmarks.flops.inference_flops``, x3 for training).

Embeddings: texts of mixed length (1 to 8 sentences of the built-in corpus) through a
BERT-Base-shaped model saved as a Hugging Face folder with stage 0's vocabulary: bertkit's
``Embedder`` (length-sorted batches, packed tokens, mean pooling) against sentence-transformers
on the same folder (mean pooling; it sorts by length too), or, where it is not installed,
transformers' ``AutoModel`` with mean pooling over length-sorted batches. Both tokenize inside
the timed call, in the same precision (bf16 autocast where bertkit runs bf16). The vectors must
agree (cosine > 0.99 for every text), so the speed is of the same computation.
"""

from __future__ import annotations

import itertools
import random
import statistics
import sys
import time
from typing import Any

import numpy as np
import torch

from benchmarks.flops import inference_flops
from benchmarks.gpu_check.common import (
    attempt,
    context,
    finish,
    hf_config,
    mfu,
    model_config,
    peaks,
)
from benchmarks.gpu_check.common import synchronize as sync
from benchmarks.gpu_pretrain import cycle_fn, step_fn, time_steps


def classification_batch(batch: int, seq: int, vocab: int, padded: bool) -> dict:
    """A sequence-classification batch: lengths uniform in [16, seq] (or all ``seq``)."""
    g = torch.Generator().manual_seed(1)
    low = min(16, seq)
    lengths = (
        torch.randint(low, seq + 1, (batch,), generator=g) if padded else torch.full((batch,), seq)
    )
    mask = (torch.arange(seq)[None] < lengths[:, None]).long()
    return {
        "input_ids": torch.randint(1000, vocab, (batch, seq), generator=g) * mask,
        "token_type_ids": torch.zeros(batch, seq, dtype=torch.long),
        "attention_mask": mask,
        "labels": torch.randint(0, 2, (batch,), generator=g),
    }


def finetune_rows(ctx, peak: dict) -> list[dict]:
    from transformers import BertForSequenceClassification as HFCls

    from bertkit.model import BertForSequenceClassification
    from bertkit.model.batching import layout

    s = ctx.sizes
    B, T = s.finetune_batch
    cfg = model_config(s.task_model, s.model_vocab, num_labels=2)
    torch.manual_seed(0)
    with torch.device(ctx.device):
        steps = {
            "bertkit": step_fn(BertForSequenceClassification(cfg), ctx.device),
            "hf-sdpa": step_fn(HFCls(hf_config(cfg)), ctx.device),
        }
    rows = []
    for case in ("padded", "full"):
        cpu = classification_batch(B, T, s.model_vocab, case == "padded")
        ours = {**cpu, "layout": layout(cpu["attention_mask"])}  # as the trainer collates it
        on = {"bertkit": ours, "hf-sdpa": cpu}
        fns = {
            k: cycle_fn(steps[k], [{n: v.to(ctx.device) for n, v in on[k].items()}]) for k in steps
        }
        for fn in fns.values():
            for _ in range(s.warmup):
                fn()
        samples: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(s.blocks):
            for name, fn in fns.items():
                samples[name].append(time_steps(fn, s.steps, ctx.device))
        lengths = cpu["attention_mask"].sum(1).tolist()
        flops = 3 * inference_flops(
            lengths, cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size
        )
        ref = statistics.median(samples["hf-sdpa"])
        for name, v in samples.items():
            sec = statistics.median(v)
            rows.append(
                {
                    "task": "finetune-cls",
                    "model": s.task_model,
                    "case": case,
                    "impl": name,
                    "batch": B,
                    "seq": T,
                    "step_ms": sec * 1e3,
                    "sequences_per_s": B / sec,
                    "tokens_per_s": sum(lengths) / sec,
                    "mfu_real_datasheet": mfu(flops, sec, peak["datasheet_tflops"]),
                    "mfu_real_measured": mfu(flops, sec, peak["measured_tflops"]),
                    "speedup_vs_hf_sdpa": ref / sec,
                }
            )
        ctx.write(finetune=rows)
    return rows


def mixed_texts(n: int, seed: int = 0) -> list[str]:
    """``n`` texts of 1 to 8 consecutive sentences of the built-in corpus (at most 300 words:
    every text fits one 512-token window on both sides)."""
    from benchmarks.gpu_check.data import builtin_corpus
    from bertkit.data.corpus import read_documents

    rng = random.Random(seed)
    sentences = itertools.chain.from_iterable(read_documents([builtin_corpus()]))
    texts = []
    while len(texts) < n:
        words = " ".join(itertools.islice(sentences, rng.choice([1, 1, 2, 3, 5, 8]))).split()
        if not words:
            break
        texts.append(" ".join(words[:300]))
    return texts


def reference_encoder(folder, device: str, batch: int, low: bool, limit: int):
    """(name, texts -> (N, D) vectors): sentence-transformers on ``folder`` when installed, else
    transformers' AutoModel with mean pooling over length-sorted batches; bf16 autocast when
    ``low``, inputs cut at ``limit`` tokens."""
    kind = torch.device(device).type
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        from transformers import AutoModel, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(folder))
        model = AutoModel.from_pretrained(str(folder), attn_implementation="sdpa").to(device).eval()

        def run(texts: list[str]) -> np.ndarray:
            order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
            out = np.zeros((len(texts), model.config.hidden_size), dtype=np.float32)
            with torch.inference_mode(), torch.autocast(kind, torch.bfloat16, enabled=low):
                for k in range(0, len(order), batch):
                    idx = order[k : k + batch]
                    enc = tok(
                        [texts[i] for i in idx],
                        padding=True,
                        truncation=True,
                        max_length=limit,
                        return_tensors="pt",
                    ).to(device)
                    hidden = model(**enc).last_hidden_state.float()
                    m = enc["attention_mask"].unsqueeze(-1).float()
                    out[idx] = ((hidden * m).sum(1) / m.sum(1)).cpu().numpy()
            return out

        return "transformers-mean-pooling (sentence-transformers not installed)", run
    st = SentenceTransformer(str(folder), device=device)
    st.max_seq_length = limit

    def encode(texts: list[str]) -> np.ndarray:
        with torch.autocast(kind, torch.bfloat16, enabled=low):
            return st.encode(
                texts, batch_size=batch, convert_to_numpy=True, show_progress_bar=False
            )

    import sentence_transformers

    return f"sentence-transformers {sentence_transformers.__version__}", encode


def embed_rows(ctx, peak: dict) -> dict[str, Any]:
    from bertkit.inference import Embedder
    from bertkit.interop import save_pretrained
    from bertkit.model import BertModel
    from bertkit.tokenizer import BertTokenizer

    s = ctx.sizes
    if not ctx.vocab.exists():
        return {"status": "skipped", "reason": f"no vocabulary at {ctx.vocab} (stage 0)"}
    tok = BertTokenizer(str(ctx.vocab))
    cfg = model_config(s.task_model, len(tok.vocab))
    folder = ctx.work / "embed-model"
    torch.manual_seed(0)
    save_pretrained(BertModel(cfg), folder, tok)
    ours = Embedder.load(
        folder,
        pooling="mean",
        normalize=False,
        device=ctx.device,
        precision="bf16",
        batch_size=s.embed_batch,
    )
    # only texts that fit one window: bertkit would read longer ones in windows, the reference
    # truncates them (the full run's 300 words fit 512 tokens; the dry run's model takes 64)
    limit = cfg.max_position_embeddings
    candidates = mixed_texts(3 * s.embed_texts)
    fits = [
        (t, len(e.input_ids))
        for t, e in zip(candidates, ours.encode(candidates), strict=True)
        if len(e.input_ids) <= limit
    ][: s.embed_texts]
    texts, lengths = [t for t, _ in fits], [n for _, n in fits]
    low = ours.precision == "bf16"
    name, theirs = reference_encoder(folder, ctx.device, s.embed_batch, low, limit)
    fns = {"bertkit": lambda: ours(texts), "reference": lambda: theirs(texts)}
    vectors = {k: fn() for k, fn in fns.items()}  # warm-up, and the vectors compared
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(max(2, s.blocks)):
        for k, fn in fns.items():
            sync(ctx.device)
            t0 = time.perf_counter()
            fn()
            sync(ctx.device)
            samples[k].append(time.perf_counter() - t0)
    a, b = vectors["bertkit"], vectors["reference"]
    cos = (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
    flops = inference_flops(lengths, cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size)
    rows = []
    for k, v in samples.items():
        sec = statistics.median(v)
        rows.append(
            {
                "task": "embed",
                "model": s.task_model,
                "impl": k if k == "bertkit" else name,
                "texts": len(texts),
                "texts_per_s": len(texts) / sec,
                "tokens_per_s": sum(lengths) / sec,
                "mfu_real_datasheet": mfu(flops, sec, peak["datasheet_tflops"]),
                "mfu_real_measured": mfu(flops, sec, peak["measured_tflops"]),
                "speedup_vs_reference": statistics.median(samples["reference"]) / sec,
            }
        )
    ok = bool(cos.min() > 0.99)
    return {
        "status": "passed" if ok else "failed",
        "reason": "" if ok else f"vectors differ: min cosine {cos.min():.4f}",
        "precision": ours.precision,
        "reference": name,
        "lengths": {
            "min": min(lengths),
            "median": statistics.median(lengths),
            "max": max(lengths),
            "tokens": sum(lengths),
        },
        "cosine_min": float(cos.min()),
        "cosine_mean": float(cos.mean()),
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    ctx = context(3, argv)
    if ctx.cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
    peak = peaks(ctx.device)
    ctx.write(peak=peak)
    rows = attempt(ctx, "finetune", lambda: finetune_rows(ctx, peak))  # a failure: recorded
    if rows is not None:
        print(
            "stage 3: fine-tuning "
            + ", ".join(f"{r['case']} {r['impl']} {r['step_ms']:.1f} ms" for r in rows),
            flush=True,
        )
    embed = attempt(ctx, "embed", lambda: embed_rows(ctx, peak))
    if embed is not None:
        print(f"stage 3: embeddings {embed.get('rows', embed.get('reason'))}", flush=True)
        ctx.write(embed=embed)
    problems = [f"{k}: {v}" for k, v in ctx.record.get("errors", {}).items()]
    if embed is not None and embed["status"] != "passed":
        problems.append(embed.get("reason", ""))
    return finish(ctx, not problems, "; ".join(problems))


if __name__ == "__main__":
    sys.exit(main())
