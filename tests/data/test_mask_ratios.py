"""``--mask-ratios MASK SAME RANDOM``: each of the paper's Table 8 settings within binomial
tolerance over >= 10^5 masked positions, recorded in the manifest, honoured by static and
dynamic masking."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli.main import main
from bertkit.data.collate import make_collate
from bertkit.data.masking import MaskingSpec, mask_tokens
from bertkit.data.shards import PretrainingDataset

FIX = Path(__file__).resolve().parents[1] / "fixtures"
VOCAB = FIX / "pt_vocab.txt"
TABLE8 = [
    (0.8, 0.1, 0.1),
    (1.0, 0.0, 0.0),
    (0.8, 0.0, 0.2),
    (0.8, 0.2, 0.0),
    (0.0, 0.2, 0.8),
    (0.0, 0.0, 1.0),
]


@pytest.mark.parametrize("ratios", TABLE8)
def test_each_setting_within_binomial_tolerance(ratios) -> None:
    spec = MaskingSpec.from_vocab_file(VOCAB, mask_ratios=ratios, max_predictions_per_seq=20)
    V = spec.vocab_size
    rng = random.Random(sum(int(r * 10) for r in ratios))
    normal = [i for i in range(V) if i not in spec.special_ids and i != spec.mask_id]
    counts = np.zeros(3)  # [MASK], the original token, another id
    while counts.sum() < 100_000:
        ids = [2, *rng.choices(normal, k=126), 3]  # [CLS] ... [SEP]
        m = mask_tokens(ids, spec, rng)
        for p, orig in zip(m.positions, m.labels):
            out = m.input_ids[p]
            counts[0 if out == spec.mask_id else 1 if out == orig else 2] += 1
    n = counts.sum()
    p_mask, p_same, p_rand = ratios
    # a random replacement is uniform over every id, so it can hit [MASK] or the original too
    expected = np.array([p_mask + p_rand / V, p_same + p_rand / V, p_rand * (1 - 2 / V)])
    sigma = np.sqrt(n * expected * (1 - expected))
    assert np.all(np.abs(counts - n * expected) <= 5 * np.maximum(sigma, 1e-9) + 1e-9), (
        counts / n,
        expected,
    )
    for share, count in zip(expected, counts):  # a zero share never happens at all
        if share == 0:
            assert count == 0


def test_bad_ratios_are_one_line_errors(tmp_path: Path, capsys) -> None:
    for bad in (["0.5", "0.1", "0.1"], ["1.2", "-0.1", "-0.1"]):
        argv = [
            "prepare-pretraining",
            "--input",
            str(FIX / "pt_bert.txt"),
            "--vocab",
            str(VOCAB),
            "--output",
            str(tmp_path / "o"),
            "--mask-ratios",
            *bad,
        ]
        assert main(argv) == 1
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith("bertkit prepare-pretraining: error:") and "mask ratios" in err
        assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("dynamic", [False, True])
def test_ratios_are_recorded_and_used(tmp_path: Path, dynamic: bool) -> None:
    out = tmp_path / "data"
    argv = [
        "prepare-pretraining",
        "--input",
        str(FIX / "pt_wiki.txt"),
        str(FIX / "pt_bert.txt"),
        "--vocab",
        str(VOCAB),
        "--output",
        str(out),
        "--max-seq-length",
        "32",
        "--dupe-factor",
        "2",
        "--mask-ratios",
        "1",
        "0",
        "0",
        *(["--dynamic-masking"] if dynamic else []),
    ]
    assert main(argv) == 0
    assert json.loads((out / "manifest.json").read_text())["settings"]["mask_ratios"] == [
        1.0,
        0.0,
        0.0,
    ]
    ds = PretrainingDataset(out)
    batch = make_collate(ds, seed=1)([ds[i] for i in range(len(ds))])
    predicted = batch["labels"] != -100
    assert int(predicted.sum()) > 0
    mask_id = ds.masking_spec().mask_id
    assert bool((batch["input_ids"][predicted] == mask_id).all())  # every masked position is [MASK]
    assert math.isclose(float((batch["input_ids"] == mask_id).sum()), float(predicted.sum()))
