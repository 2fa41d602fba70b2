"""A sentence-pair regression task with float targets in [0, 5], built from GLUE MRPC.

For each MRPC pair (train: 3,668, dev: 408) the target is

    score = round(2.5 * quality + 2.5 * jaccard(words(sentence1), words(sentence2)), 2)

``quality`` is MRPC's 0/1 paraphrase label and ``words`` the set of lower-cased ``[a-z0-9]+`` runs,
so the score is in [0, 5] (STS-B's range) and mixes a semantic part (paraphrase or not) with a
measurable surface part (word overlap). On train it has mean 2.98, standard deviation 1.40 and 304
distinct values (ties, as in STS-B's gold scores). The data stay in the shared folder: the examples
are built in memory, or ``--out DIR`` writes ``train.tsv``/``dev.tsv`` (columns sentence1,
sentence2, score) for ``bertkit finetune --family classify --regression``:

    python -m benchmarks.regression_task --out /tmp/mrpc-reg
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

_WORD = re.compile(r"[a-z0-9]+")


def overlap_score(text_a: str, text_b: str, quality: int) -> float:
    """2.5 * quality + 2.5 * Jaccard of the two word sets, rounded to 2 decimals."""
    a, b = set(_WORD.findall(text_a.lower())), set(_WORD.findall(text_b.lower()))
    jaccard = len(a & b) / len(a | b) if a | b else 0.0
    return round(2.5 * quality + 2.5 * jaccard, 2)


def regression_examples(data: str | Path, split: str) -> list[Any]:
    """MRPC ``split`` ("train" or "dev") of ``data``/glue as ClassificationExamples with float labels."""
    from dataclasses import replace

    from bertkit.data.tasks.glue import glue_task, read_glue_split

    task = glue_task("MRPC")
    rows = read_glue_split(Path(data) / "glue", task, split)
    return [replace(e, label=overlap_score(e.text_a, e.text_b, int(e.label))) for e in rows]


def write_tsv(examples: list[Any], path: Path) -> None:
    """GLUE-style TSV: no quoting (MRPC's sentences hold no tabs or newlines)."""
    lines = ["sentence1\tsentence2\tscore"]
    lines += [f"{e.text_a}\t{e.text_b}\t{e.label:.2f}" for e in examples]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared/data"))
    ap.add_argument("--out", required=True, help="folder for train.tsv and dev.tsv (not the repo)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev"):
        examples = regression_examples(args.data, split)
        write_tsv(examples, out / f"{split}.tsv")
        print(f"{out / f'{split}.tsv'}: {len(examples)} pairs")


if __name__ == "__main__":
    main()
