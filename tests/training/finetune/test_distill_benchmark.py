"""benchmarks/distill_glue.py's statistics: the paired table and the agreement fraction (no training)."""

from __future__ import annotations

import pytest
from benchmarks.distill_glue import agreement, summary_table


def test_the_table_pairs_each_seed_and_uses_the_sample_std() -> None:
    # Differences +1, 0, +3 points: mean +1.33, sample std sqrt(7/3) = 1.53 (1.25 if divided by n).
    table = summary_table("accuracy", [1, 2, 3], [0.77, 0.78, 0.76], [0.78, 0.78, 0.79])
    rows = table.splitlines()
    assert rows[2:5] == [
        "| 1 | 77.00 | 78.00 | +1.00 |",
        "| 2 | 78.00 | 78.00 | +0.00 |",
        "| 3 | 76.00 | 79.00 | +3.00 |",
    ]
    assert rows[5] == "| mean ± std (n=3) | 77.00 ± 1.00 | 78.33 ± 0.58 | +1.33 ± 1.53 |"


def test_a_missing_score_is_refused() -> None:
    with pytest.raises(ValueError, match="one plain and one distilled score per seed"):
        summary_table("accuracy", [1, 2], [0.7, 0.8], [0.7])


def test_agreement_counts_equal_labels_and_refuses_other_lengths() -> None:
    assert agreement(["1", "0", "1", "1"], ["1", "1", "1", "0"]) == 0.5
    with pytest.raises(ValueError, match="3 and 2 labels"):
        agreement(["1", "0", "1"], ["1", "0"])
