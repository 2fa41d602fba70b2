"""The feature-based approach (BERT paper 5.3, Table 7): a frozen-encoder NER probe on CoNLL-2003.

The encoder (all-MiniLM-L6-v2: 6 layers, H=384) is frozen; ``Embedder.token_features`` gives
every word piece's hidden states of all layers (embeddings + 6 layers, windows with max context
for long inputs), and each word is represented by its first piece, as in fine-tuning. The probe
is a linear layer (softmax over the IOB2 tags; Adam, ``--epochs`` passes, batch 512), trained on
the first ``--docs`` training documents and scored on valid.txt (the paper's dev) with entity
F1 (conlleval rules). A linear probe is the weakest reader of the features (the paper used a
two-layer 768-unit BiLSTM), so the ranking of the layer choices is the point, not the level.

    flock /tmp/bertkit-cpu.lock python -m benchmarks.feature_probe --json benchmarks/results/X.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.long_inputs import DATA, minilm, report

PAPER_DEV_F1 = {  # BERT-base, Table 7 (dev F1)
    "fine-tune": 96.4,
    "embeddings": 91.0,
    "second-to-last hidden": 95.6,
    "last hidden": 94.9,
    "sum last four hidden": 95.9,
    "concat last four hidden": 96.1,
    "sum all layers": 95.5,
}
"""The paper's "weighted sum last four" is an unweighted sum here."""

CHOICES = {  # name -> (hidden_states indices of the 7 (embeddings + 6 layers), combine)
    "embeddings": ((0,), "sum"),
    "second-to-last hidden": ((-2,), "sum"),
    "last hidden": ((-1,), "sum"),
    "sum last four hidden": ((-1, -2, -3, -4), "sum"),
    "concat last four hidden": ((-4, -3, -2, -1), "concat"),
    "sum all layers": ((1, 2, 3, 4, 5, 6), "sum"),
}


def word_features(sentences: list[Any], embedder: Any) -> np.ndarray:
    """(words, layers, H) first-piece vectors of every word (sentences joined by spaces)."""
    texts = [" ".join(s.tokens) for s in sentences]
    feats, _ = embedder.token_features(texts)
    h = embedder.model.config.hidden_size
    out = []
    for s, f in zip(sentences, feats):
        starts, pos = [], 0
        for w in s.tokens:
            starts.append(pos)
            pos += len(w) + 1
        first = {}
        for k, (a, _b) in enumerate(f.offsets):
            first.setdefault(a, k)
        rows = [first.get(a) for a in starts]
        # a word with no piece (only control characters) gets zeros
        out.extend(
            f.vectors[r].reshape(-1, h) if r is not None else np.zeros((f.vectors.shape[1] // h, h))
            for r in rows
        )
    return np.stack(out).astype(np.float32)


def probe(x_train, y_train, x_dev, n_labels: int, epochs: int, seed: int) -> np.ndarray:
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train)
    mean, std = xt.mean(0), xt.std(0).clamp(min=1e-6)  # standardise each feature on train
    layer = torch.nn.Linear(xt.shape[1], n_labels)
    opt = torch.optim.Adam(layer.parameters(), lr=1e-3)
    for _ in range(epochs):
        for idx in torch.randperm(len(xt), generator=g).split(512):
            loss = torch.nn.functional.cross_entropy(layer((xt[idx] - mean) / std), yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        return layer((torch.from_numpy(x_dev) - mean) / std).argmax(-1).numpy()


def run(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.ner_document_context import first_documents
    from bertkit.data.tasks.conll import read_conll
    from bertkit.evaluation.ner import entity_scores
    from bertkit.inference import Embedder
    from bertkit.inference.embedder import LayerSpec
    from bertkit.tasks.tagging import tag_label_list

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.txt"
        path.write_text(first_documents(DATA / "conll2003/train.txt", args.docs))
        train = read_conll(path)
    dev = read_conll(DATA / "conll2003/valid.txt")[: args.dev_sentences]
    labels = tag_label_list(train)
    index = {t: i for i, t in enumerate(labels)}
    emb = Embedder.load(
        minilm(),
        precision="fp32",
        device="cpu",
        max_length=128,
        batch_size=64,
        layers=LayerSpec(tuple(range(7)), "concat"),
    )
    emb.show_progress = False
    t0 = time.perf_counter()
    f_train, f_dev = word_features(train, emb), word_features(dev, emb)
    extract_s = time.perf_counter() - t0
    y_train = np.asarray([index[t] for s in train for t in s.tags], dtype=np.int64)
    gold = [list(s.tags) for s in dev]
    rows = {}
    for name, (layers, how) in CHOICES.items():

        def pick(f: np.ndarray, layers=layers, how=how) -> np.ndarray:
            return (
                f[:, list(layers)].reshape(len(f), -1)
                if how == "concat"
                else f[:, list(layers)].sum(1)
            )

        t1 = time.perf_counter()
        pred = probe(pick(f_train), y_train, pick(f_dev), len(labels), args.epochs, args.seed)
        tags, k = [], 0
        for s in dev:
            tags.append([labels[i] for i in pred[k : k + len(s.tokens)]])
            k += len(s.tokens)
        rows[name] = {
            "dev_f1": entity_scores(gold, tags).to_dict()["f1"],
            "dims": int(pick(f_train[:1]).shape[1]),
            "probe_s": time.perf_counter() - t1,
        }
    return {
        "settings": vars(args) | {"json": None},
        "train_sentences": len(train),
        "train_words": len(y_train),
        "dev_sentences": len(dev),
        "extract_s": extract_s,
        "rows": rows,
    }


def table(r: dict[str, Any], finetune_f1: float | None) -> str:
    lines = [
        "| features (frozen MiniLM-L6, linear probe) | dims | dev F1 (ours) "
        "| paper Table 7 dev F1 (BERT-base, BiLSTM) |",
        "|---|---|---|---|",
    ]
    if finetune_f1 is not None:
        lines.append(
            "| fine-tune (sentence-level, same subset; benchmarks.ner_document_context) | - "
            f"| {finetune_f1:.4f} | {PAPER_DEV_F1['fine-tune']} |"
        )
    for name, row in r["rows"].items():
        lines.append(f"| {name} | {row['dims']} | {row['dev_f1']:.4f} | {PAPER_DEV_F1[name]} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--docs", type=int, default=150, help="training documents (from the start)")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--dev-sentences", type=int, default=None, help="only the first N (smoke runs)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument(
        "--finetune-json",
        type=Path,
        default=None,
        help="ner_document_context results: the fine-tuned row (sentence-level valid F1 mean)",
    )
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    r = run(args)
    ft = None
    if args.finetune_json and args.finetune_json.is_file():
        ft = json.loads(args.finetune_json.read_text())["sentence"]["valid_f1"]["mean"]
    r["finetune_valid_f1"] = ft
    return report(args, r, table(r, ft))


if __name__ == "__main__":
    raise SystemExit(main())
