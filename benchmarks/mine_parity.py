"""Hard-negative mining on SQuAD v1.1 dev, bertkit against sentence-transformers'
``util.mine_hard_negatives`` on the same pairs (every question -> its paragraph) and the same
model folder: whether the n-tuple rows are the same, how far the scores differ, and each side's
wall time (embedding both sides, then the search and the selection).

bertkit reads over-long paragraphs in windows by default; sentence-transformers cuts them at the
folder's max_seq_length, so the comparison truncates (``--windows`` compares bertkit's default).
sentence-transformers normalises every vector before it mines: folders that normalise (a
Normalize module) give both the same vectors whatever similarity they declare.

    python benchmarks/mine_parity.py --squad ../shared/data/squad_v1.1/dev-v1.1.json \\
        --model FOLDER [--num-negatives 5 --relative-margin 0.05 --max-score S --windows]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bertkit.data.tasks.retrieval import TrainingPair
from bertkit.data.tasks.squad import read_squad
from bertkit.inference import Embedder
from bertkit.inference.mining import mine
from bertkit.inference.negatives import MiningConfig
from bertkit.interop.sentence_folder import similarity_of
from bertkit.tasks.windows import WindowConfig


def run(squad: Path, model: str, setting: dict, windows: bool) -> dict:
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives

    pairs = [TrainingPair(e.question, e.context) for e in read_squad(squad)]
    start = time.perf_counter()
    embedder = Embedder.load(model, precision="fp32", windows=WindowConfig(truncate=not windows))
    kw = {k: v for k, v in setting.items() if v is not None}
    mined = mine(embedder, pairs, MiningConfig(**kw), show_progress=False)
    ours = [(r.query, r.positive, *r.negatives, r.scores) for r in mined.rows("n-tuple", True)]
    ours_s = time.perf_counter() - start

    start = time.perf_counter()
    reference = SentenceTransformer(model, device="cpu")
    data = Dataset.from_dict(
        {"query": [p.query for p in pairs], "positive": [p.positive for p in pairs]}
    )
    out = mine_hard_negatives(
        data, reference, output_format="n-tuple", output_scores=True, verbose=False, **kw
    )
    theirs = [tuple(r.values()) for r in out]
    st_s = time.perf_counter() - start

    same = [a[:-1] == b[:-1] for a, b in zip(ours, theirs)]
    deviation = max(
        (abs(x - y) for a, b in zip(ours, theirs) for x, y in zip(a[-1], b[-1])), default=0.0
    )
    return {
        "model": model,
        "similarity": similarity_of(model) or "cosine",
        "setting": kw,
        "inputs": "windows" if windows else "truncated",
        "pairs": len(pairs),
        "rows": len(ours),
        "rows_sentence_transformers": len(theirs),
        "rows_equal": len(ours) == len(theirs) and all(same),
        "rows_differing": len(same) - sum(same) + abs(len(ours) - len(theirs)),
        "max_score_difference": deviation,
        "bertkit_seconds": round(ours_s, 1),
        "sentence_transformers_seconds": round(st_s, 1),
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--squad", type=Path, required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--num-negatives", type=int, default=5)
    ap.add_argument("--relative-margin", type=float, default=0.05)
    ap.add_argument("--absolute-margin", type=float)
    ap.add_argument("--max-score", type=float)
    ap.add_argument("--windows", action="store_true", help="bertkit reads long texts in windows")
    ap.add_argument("--output", type=Path, help="also write the result here (JSON)")
    a = ap.parse_args()
    names = ("num_negatives", "relative_margin", "absolute_margin", "max_score")
    result = run(a.squad, a.model, {n: getattr(a, n) for n in names}, a.windows)
    text = json.dumps(result, indent=1)
    print(text)
    if a.output is not None:
        a.output.write_text(text + "\n")
