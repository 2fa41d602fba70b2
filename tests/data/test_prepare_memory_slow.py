"""Bounded memory: 5x more input keeps the peak RSS of prepare-pretraining within 10% (slow).

Runs scripts/prepare_memory.py's measurement on a synthetic WikiExtractor corpus written to
tmp_path (no shared data needed): 5 vs 25 files of ~1 MB.
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"


def _load_script():
    spec = importlib.util.spec_from_file_location(
        "prepare_memory", ROOT / "scripts" / "prepare_memory.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write_corpus(folder: Path, n_files: int, seed: int = 0) -> list[Path]:
    words = [w for w in (FIX / "pt_vocab.txt").read_text().split() if w.isalpha() and w.islower()]
    rng = random.Random(seed)
    files = []
    for f in range(n_files):
        parts = []
        for d in range(150):
            paras = []
            for _ in range(12):
                sents = [
                    " ".join(rng.choices(words, k=rng.randint(6, 25))).capitalize() + "."
                    for _ in range(6)
                ]
                paras.append(" ".join(sents))
            parts.append(f'<doc id="{f}-{d}" title="T">\nT\n' + "\n".join(paras) + "\n</doc>\n")
        path = folder / f"wiki_{f:02d}"
        path.write_text("".join(parts))
        files.append(path)
    return files


@pytest.mark.slow
def test_peak_rss_does_not_grow_with_the_corpus(tmp_path: Path) -> None:
    # One input file of 5 MB vs one of 25 MB: a single worker then streams everything, so only
    # the chunk and shard bounds keep its memory flat.
    script = _load_script()
    files = _write_corpus(tmp_path, 25)
    assert 0.7e6 < files[0].stat().st_size < 1.5e6
    small_in = script.concatenate(files[:5], tmp_path / "c5.txt")
    large_in = script.concatenate(files, tmp_path / "c25.txt")
    vocab = FIX / "pt_vocab.txt"

    def growth(*extra: str) -> float:
        opts = ["--dupe-factor", "3", *extra]
        small = script.measure([small_in], vocab, tmp_path / f"o5{len(extra)}", 1, opts)
        large = script.measure([large_in], vocab, tmp_path / f"o25{len(extra)}", 1, opts)
        assert large["instances"] > 4.5 * small["instances"]
        return large["peak_tree_rss_mb"] / small["peak_tree_rss_mb"] - 1

    assert growth() <= 0.10
    # Negative control: without the bounds (whole file in one chunk, one shard) memory grows.
    unbounded = (
        "--buffer-docs",
        "10000000",
        "--buffer-tokens",
        "10000000000",
        "--shard-size",
        "100000000",
    )
    assert growth(*unbounded) > 0.10
