"""SQuAD v1.1 dev as question -> paragraph retrieval: bertkit against sentence-transformers.

Data (built from the SQuAD file given, nothing copied into the repository): the 48 articles in
file order; articles 1-20 give the training pairs (question, its paragraph), 21-24 the dev set
(model selection), 25-48 the test set (retrieval over those articles' paragraphs only). Hard
negatives for the cross-encoder: each training question's best-ranked wrong paragraph by the
off-the-shelf bi-encoder.

Rows (test set, exact search by the folder's ``similarity_fn_name``, cosine without one;
MRR@10, NDCG@10, Recall@1/10/100):
1. the off-the-shelf model through ``bertkit evaluate`` and through sentence-transformers'
   ``InformationRetrievalEvaluator`` (same digits expected), with their wall times;
2. per seed: ``bertkit finetune embeddings`` and sentence-transformers' trainer with
   ``MultipleNegativesRankingLoss`` on the same pairs and settings (1 epoch, batch 32, lr 2e-5,
   10% warmup, weight decay 0.01, max length 256, fp32);
3. a cross-encoder (``bertkit finetune rerank`` from the same model, on the mined triples, lr 1e-4,
   1 epoch, bf16 where native: stage ``rerank-train``; at 2e-5 the 308 updates barely moved it,
   dev MRR@10 0.808 against 0.948, two candidates per query) reranking the top 50 of the first ``--rerank-queries``
   test queries, for row 1 and each system's first seed (stage ``rerank``, at
   ``--rerank-precision``).

    python benchmarks/search_quality.py --squad ../shared/data/squad_v1.1/dev-v1.1.json \\
        --model MODEL --output /tmp/search --seeds 42 43

``--similarity dot`` trains dot-product models on both sides instead (row 2 only: bertkit's
``--similarity-fn-name dot --no-normalize``; sentence-transformers' model without its Normalize
module, ``MultipleNegativesRankingLoss(scale=1, similarity_fct=dot_score)``), searched by dot
product; ``--train-pairs N`` trains on the first N training pairs.

Needs ``datasets`` and ``accelerate`` for sentence-transformers' trainer (not bertkit deps).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

KEYS = ("MRR@10", "NDCG@10", "Recall@1", "Recall@10", "Recall@100")
SETTINGS = {
    "epochs": 1,
    "batch_size": 32,
    "lr": 2e-5,
    "warmup": 0.1,
    "weight_decay": 0.01,
    "max_seq_length": 256,
}


def build_data(squad: Path, out: Path, model: str) -> None:
    """train.jsonl, triples.jsonl, dev-triples.jsonl, dev/ and test/ (BEIR) under ``out``."""
    import numpy as np

    from bertkit.data.tasks.retrieval import retrieval_pairs, squad_retrieval, write_beir
    from bertkit.data.tasks.squad import read_squad
    from bertkit.evaluation.retrieval import exact_search
    from bertkit.inference import Embedder

    examples = read_squad(squad)
    _, test = squad_retrieval(examples, 24)
    titles = list(dict.fromkeys(e.title for e in examples))[:24]
    fit, dev = squad_retrieval([e for e in examples if e.title in set(titles)], 20)
    write_beir(out / "test", test, "test")
    write_beir(out / "dev", dev, "dev")
    embedder = Embedder.load(model, precision="fp32")

    def mined(data):  # (query, positive, best-ranked wrong paragraph)
        doc_ids = list(data.corpus)
        d = embedder([data.corpus[i] for i in doc_ids])
        q_ids = data.judged()
        q = embedder([data.queries[i] for i in q_ids])
        unit = lambda v: v / np.linalg.norm(v, axis=1, keepdims=True)  # noqa: E731
        found, _ = exact_search(unit(q), unit(d), 2)
        for qid, row in zip(q_ids, found.tolist(), strict=True):
            pos = next(iter(data.qrels[qid]))
            neg = next(doc_ids[j] for j in row if doc_ids[j] != pos)
            yield {
                "query": data.queries[qid],
                "positive": data.corpus[pos],
                "negative": data.corpus[neg],
            }

    _lines(
        out / "train.jsonl",
        ({"query": p.query, "positive": p.positive} for p in retrieval_pairs(fit)),
    )
    _lines(out / "triples.jsonl", mined(fit))
    _lines(out / "dev-triples.jsonl", mined(dev))


def _lines(path: Path, rows) -> None:
    path.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
    )


def subset(src: Path, dst: Path, n: int) -> None:
    """A BEIR folder with the first ``n`` judged queries of ``src`` and its whole corpus."""
    from bertkit.data.tasks.retrieval import RetrievalSet, read_beir, write_beir

    d = read_beir(src, "test")
    keep = d.judged()[:n]
    write_beir(
        dst,
        RetrievalSet(d.corpus, {q: d.queries[q] for q in keep}, {q: d.qrels[q] for q in keep}),
        "test",
    )


def bertkit(*args: str) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "bertkit", *args], check=True)
    return time.perf_counter() - t


def bertkit_eval(model: str, data: Path, out: Path, *extra: str, precision: str = "fp32") -> dict:
    wall = bertkit(
        "evaluate",
        "--model",
        model,
        "--data",
        str(data),
        "--precision",
        precision,
        "--output",
        str(out),
        *extra,
    )
    return {**json.loads(out.read_text()), "wall_s": wall}


def st_eval(model: str, data: Path) -> dict:
    """sentence-transformers' evaluator on the test set, by the folder's own similarity."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.evaluation import InformationRetrievalEvaluator

    from bertkit.data.tasks.retrieval import read_beir

    d = read_beir(data, "test")
    rel = {q: {k for k, v in r.items() if v > 0} for q, r in d.qrels.items()}
    ev = InformationRetrievalEvaluator(
        d.queries,
        d.corpus,
        rel,
        mrr_at_k=[10],
        ndcg_at_k=[10],
        accuracy_at_k=[1, 10, 100],
        precision_recall_at_k=[1, 10, 100],
        map_at_k=[100],
        batch_size=32,
        show_progress_bar=False,
        name="t",
    )
    t = time.perf_counter()
    st = SentenceTransformer(model, device="cpu")
    r = ev(st)
    sim = st.similarity_fn_name or "cosine"
    return {
        "MRR@10": r[f"t_{sim}_mrr@10"],
        "NDCG@10": r[f"t_{sim}_ndcg@10"],
        "Recall@1": r[f"t_{sim}_recall@1"],
        "Recall@10": r[f"t_{sim}_recall@10"],
        "Recall@100": r[f"t_{sim}_recall@100"],
        "wall_s": time.perf_counter() - t,
    }


def st_train(model: str, train: Path, out: Path, seed: int, similarity: str = "cosine") -> float:
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
        losses,
        util,
    )
    from sentence_transformers.models import Normalize

    rows = [json.loads(line) for line in train.read_text(encoding="utf-8").splitlines()]
    data = Dataset.from_dict(
        {"anchor": [r["query"] for r in rows], "positive": [r["positive"] for r in rows]}
    )
    st = SentenceTransformer(model, device="cpu")
    loss_options = {}
    if similarity == "dot":  # the model less its Normalize, trained and declared by dot product
        kept = [m for m in st if not isinstance(m, Normalize)]
        st = SentenceTransformer(modules=kept, device="cpu", similarity_fn_name="dot")
        loss_options = {"scale": 1.0, "similarity_fct": util.dot_score}
    st.max_seq_length = SETTINGS["max_seq_length"]
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out / "trainer"),
        num_train_epochs=SETTINGS["epochs"],
        per_device_train_batch_size=SETTINGS["batch_size"],
        learning_rate=SETTINGS["lr"],
        warmup_ratio=SETTINGS["warmup"],
        weight_decay=SETTINGS["weight_decay"],
        seed=seed,
        save_strategy="no",
        report_to=[],
        logging_steps=50,
        use_cpu=True,
    )
    t = time.perf_counter()
    SentenceTransformerTrainer(
        model=st,
        args=args,
        train_dataset=data,
        loss=losses.MultipleNegativesRankingLoss(st, **loss_options),
    ).train()
    wall = time.perf_counter() - t
    st.save(str(out))
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--squad", type=Path, required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--output", type=Path, required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[42, 43])
    ap.add_argument("--rerank-queries", type=int, default=500)
    ap.add_argument("--rerank-top-k", type=int, default=50)
    ap.add_argument(
        "--rerank-precision", default="auto", help="of the reranking rows (both stages)"
    )
    ap.add_argument("--stages", default="data,base,finetune,rerank-train,rerank")
    ap.add_argument("--similarity", choices=("cosine", "dot"), default="cosine")
    ap.add_argument("--train-pairs", type=int, default=None, help="the first N (default: all)")
    a = ap.parse_args()
    out, stages = a.output, a.stages.split(",")
    out.mkdir(parents=True, exist_ok=True)
    results_file = out / "results.json"
    res = json.loads(results_file.read_text()) if results_file.is_file() else {}

    def save() -> None:
        results_file.write_text(json.dumps(res, indent=2) + "\n")

    if "data" in stages:
        build_data(a.squad, out, a.model)
    test = out / "test"
    if "base" in stages:
        res["base"] = {
            "bertkit": bertkit_eval(a.model, test, out / "base-bertkit.json"),
            "sentence-transformers": st_eval(a.model, test),
        }
        save()
    train = out / "train.jsonl"
    if a.train_pairs is not None:  # the first N pairs
        lines = train.read_text(encoding="utf-8").splitlines()[: a.train_pairs]
        train = out / f"train-{a.train_pairs}.jsonl"
        train.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    dot = ["--similarity-fn-name", "dot", "--no-normalize"] if a.similarity == "dot" else []
    if "finetune" in stages:
        res["finetune_settings"] = {"similarity": a.similarity, "train": train.name}
        for seed in a.seeds:
            folder = out / f"bertkit-{seed}"
            wall = bertkit(
                "finetune",
                "embeddings",
                "--model",
                a.model,
                "--train",
                str(train),
                "--dev",
                str(out / "dev"),
                "--output",
                str(folder),
                "--overwrite",  # a rerun of the stage replaces the last one's model
                "--seed",
                str(seed),
                "--epochs",
                str(SETTINGS["epochs"]),
                "--batch-size",
                str(SETTINGS["batch_size"]),
                "--learning-rate",
                str(SETTINGS["lr"]),
                "--warmup-proportion",
                str(SETTINGS["warmup"]),
                "--weight-decay",
                str(SETTINGS["weight_decay"]),
                "--max-seq-length",
                str(SETTINGS["max_seq_length"]),
                "--precision",
                "fp32",
                *dot,
            )
            res.setdefault("bertkit", {})[str(seed)] = {
                **bertkit_eval(str(folder), test, out / f"eval-bertkit-{seed}.json"),
                "train_s": wall,
            }
            save()
            st_folder = out / f"st-{seed}"
            wall = st_train(a.model, train, st_folder, seed, a.similarity)
            res.setdefault("sentence-transformers", {})[str(seed)] = {
                **st_eval(str(st_folder), test),
                "train_s": wall,
            }
            save()
    ce = out / "cross-encoder"
    if "rerank-train" in stages:
        wall = bertkit(
            "finetune",
            "rerank",
            "--model",
            a.model,
            "--train",
            str(out / "triples.jsonl"),
            "--dev",
            str(out / "dev-triples.jsonl"),
            "--output",
            str(ce),
            "--overwrite",
            "--epochs",
            "1",
            "--batch-size",
            "32",
            "--learning-rate",
            "1e-4",
            "--max-seq-length",
            "256",
        )
        res["rerank_train_s"] = wall
        save()
    if "rerank" in stages:
        sub = out / f"test-{a.rerank_queries}"
        if not sub.is_dir():
            subset(out / "test", sub, a.rerank_queries)
        rr: dict = {
            "train_s": res.get("rerank_train_s"),
            "queries": a.rerank_queries,
            "top_k": a.rerank_top_k,
            "precision": a.rerank_precision,
        }
        for name, model in (
            ("off-the-shelf", a.model),
            ("bertkit", str(out / f"bertkit-{a.seeds[0]}")),
            ("sentence-transformers", str(out / f"st-{a.seeds[0]}")),
        ):
            rr[name] = bertkit_eval(
                model,
                sub,
                out / f"rerank-{name}.json",
                "--reranker",
                str(ce),
                "--rerank-top-k",
                str(a.rerank_top_k),
                precision=a.rerank_precision,
            )
        res["rerank"] = rr
        save()
    print(table(res))


def table(res: dict) -> str:
    head = f"{'model':<44}" + "".join(f"{k:>11}" for k in KEYS)
    lines = [head]

    def row(name: str, m: dict) -> None:
        lines.append(f"{name:<44}" + "".join(f"{m[k]:>11.4f}" for k in KEYS))

    if "base" in res:
        row("off-the-shelf, bertkit evaluate", res["base"]["bertkit"]["retrieval"])
        row("off-the-shelf, sentence-transformers", res["base"]["sentence-transformers"])
    for system in ("bertkit", "sentence-transformers"):
        runs = res.get(system, {})
        for seed, r in runs.items():
            row(f"fine-tuned by {system}, seed {seed}", r.get("retrieval", r))
        if len(runs) > 1:
            vals = [r.get("retrieval", r)["MRR@10"] for r in runs.values()]
            lines.append(
                f"  {system} MRR@10 mean {statistics.fmean(vals):.4f}, "
                f"spread {max(vals) - min(vals):.4f} over {len(vals)} seeds"
            )
    if "rerank" in res:
        rr = res["rerank"]
        for name in ("off-the-shelf", "bertkit", "sentence-transformers"):
            if name in rr:
                row(
                    f"{name}, first {rr['queries']} queries ({rr.get('precision', 'fp32')})",
                    rr[name]["retrieval"],
                )
                row(f"  + cross-encoder top {rr['top_k']}", rr[name]["reranked"])
    return "\n".join(lines)


if __name__ == "__main__":
    main()
