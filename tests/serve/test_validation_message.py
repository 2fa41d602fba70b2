"""A 422 names the first three fields that failed and counts the rest."""

from __future__ import annotations

from pathlib import Path

from .conftest import serve

THREE = {"inputs": ["ok"], "normalize": "x", "dimensions": 0, "prompt_name": 3}


def test_a_422_names_three_fields_and_counts_the_others(tiny_mlm: Path) -> None:
    with serve(models=[str(tiny_mlm)]) as client:
        three = client.post("/embed", json=THREE).json()
        four = client.post("/embed", json={**THREE, "truncation_direction": "up"}).json()
    assert three["error_type"] == "validation"
    assert three["error"].count(": ") == 3 and "more)" not in three["error"], three
    assert four["error"].count(": ") == 3 and four["error"].endswith(" (and 1 more)"), four
