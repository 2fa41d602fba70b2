"""Hard-negative mining on SQuAD v1.1 dev with ``bertkit mine``: every question -> its paragraph
(the pairs file is built from the SQuAD file given, nothing copied into the repository), the
candidates the distinct paragraphs. Reports the command's summary line and how often each
question's top mined negative is a paragraph of the question's own article (hard: same topic).

    python benchmarks/mine_squad.py --squad ../shared/data/squad_v1.1/dev-v1.1.json \\
        --model MODEL --output /tmp/mine [-- extra bertkit mine flags]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bertkit.cli.main import main
from bertkit.data.tasks.pairs_writer import write_pairs
from bertkit.data.tasks.retrieval import TrainingPair, read_pairs
from bertkit.data.tasks.squad import read_squad


def run(squad: Path, model: str, out: Path, extra: list[str]) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    examples = read_squad(squad)
    article = {e.context: e.title for e in examples}
    pairs = out / "pairs.jsonl"
    write_pairs(pairs, [TrainingPair(e.question, e.context) for e in examples])
    mined = out / "mined.jsonl"
    start = time.perf_counter()
    code = main(["mine", "--model", model, "--input", str(pairs), "--output", str(mined), *extra])
    seconds = time.perf_counter() - start
    rows = read_pairs(mined)
    same = sum(article[r.negatives[0]] == article[r.positive] for r in rows)
    return {
        "exit": code,
        "pairs": len(examples),
        "paragraphs": len(article),
        "rows": len(rows),
        "top_negative_same_article": same / max(len(rows), 1),
        "seconds_with_load": seconds,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--squad", type=Path, required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--output", type=Path, required=True)
    ap.add_argument("extra", nargs="*", help="flags passed to bertkit mine (after --)")
    a = ap.parse_args()
    print(json.dumps(run(a.squad, a.model, a.output, a.extra), indent=1))
    sys.exit(0)
