"""Shard files, manifest checks, the dataset, and the (static and dynamic masking) collators."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.data.collate import collate_pretraining, make_collate
from bertkit.data.masking import MaskingSpec
from bertkit.data.pretraining import InstanceConfig, create_instances
from bertkit.data.shards import PretrainingDataset, ShardWriter, load_shard, write_manifest
from bertkit.errors import InputError

PAD, CLS, SEP, MASK = 0, 2, 3, 4
VOCAB = (
    ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    + [f"w{i}" for i in range(60)]
    + [f"##p{i}" for i in range(35)]
)


def _instances(dynamic: bool, n_docs: int = 12, seed: int = 0):
    rng = random.Random(seed)
    docs = [
        [[rng.randint(5, 99) for _ in range(rng.randint(3, 12))] for _ in range(10)]
        for _ in range(n_docs)
    ]
    spec = None if dynamic else MaskingSpec.from_tokens(VOCAB)
    config = InstanceConfig(max_seq_length=32, dupe_factor=2)
    return list(create_instances(docs, config, CLS, SEP, spec, random.Random(seed)))


def _write(folder: Path, instances, dynamic: bool, shard_size: int = 50) -> list:
    w = ShardWriter(folder, "train-00000", shard_size, len(VOCAB))
    for inst in instances:
        w.add(inst)
    shards = w.close()
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    write_manifest(
        folder,
        {
            "settings": {
                "dynamic_masking": dynamic,
                "masked_lm_prob": 0.15,
                "max_predictions_per_seq": 20,
                "whole_word_mask": False,
            },
            "vocab": {"size": len(VOCAB), "pad_token_id": PAD},
            "splits": {"train": {"shards": [s.to_dict() for s in shards]}},
        },
    )
    return shards


def test_round_trip_through_shards(tmp_path: Path) -> None:
    insts = _instances(dynamic=False)
    shards = _write(tmp_path, insts, dynamic=False)
    assert len(shards) == -(-len(insts) // 50) and shards[0].num_instances == 50
    ds = PretrainingDataset(tmp_path, verify="eager")
    assert len(ds) == len(insts)
    for i in [0, 49, 50, len(insts) - 1, -1]:
        x, ref = ds[i], insts[i]
        assert x["input_ids"].tolist() == ref.input_ids.tolist()
        assert x["token_type_ids"].tolist() == ref.token_type_ids.tolist()
        assert x["masked_positions"].tolist() == ref.masked_positions.tolist()
        assert x["masked_labels"].tolist() == ref.masked_labels.tolist()
        assert x["next_sentence_label"] == ref.next_sentence_label
        assert x["index"] == i % len(insts)
    with pytest.raises(IndexError):
        ds[len(insts)]
    assert [len(r) for r in ds.shard_ranges()] == [s.num_instances for s in shards]


def test_shards_hold_no_pickle(tmp_path: Path) -> None:
    _write(tmp_path, _instances(dynamic=False), dynamic=False)
    with np.load(tmp_path / "train-00000-0000.npz", allow_pickle=False) as z:
        assert all(z[k].dtype.kind in "iu" for k in z.files)


@pytest.mark.parametrize("verify", ["lazy", "eager"])
def test_manifest_sha256_detects_a_corrupted_shard(tmp_path: Path, verify: str) -> None:
    shards = _write(tmp_path, _instances(dynamic=False), dynamic=False)
    path = tmp_path / shards[1].file
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit inside the array data
    path.write_bytes(bytes(data))
    if verify == "eager":
        with pytest.raises(InputError, match="sha256 does not match"):
            PretrainingDataset(tmp_path, verify="eager")
        return
    ds = PretrainingDataset(tmp_path)  # lazy: shard 0 still reads fine
    assert ds[0]["index"] == 0
    with pytest.raises(InputError, match="sha256 does not match") as e:
        ds[shards[0].num_instances]
    assert e.value.path == str(path)
    # without verification the flipped bit would go unnoticed (negative control)
    PretrainingDataset(tmp_path, verify="none")[shards[0].num_instances]


def test_truncated_shard_and_missing_manifest(tmp_path: Path) -> None:
    shards = _write(tmp_path, _instances(dynamic=False), dynamic=False)
    path = tmp_path / shards[0].file
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(InputError):
        load_shard(path)  # unreadable even without a hash
    (tmp_path / "manifest.json").unlink()
    with pytest.raises(InputError, match=r"manifest\.json: not found"):
        PretrainingDataset(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(InputError, match="expected a manifest"):
        PretrainingDataset(tmp_path)


def test_static_collate_pads_and_builds_labels(tmp_path: Path) -> None:
    _write(tmp_path, _instances(dynamic=False), dynamic=False)
    ds = PretrainingDataset(tmp_path)
    items = [ds[i] for i in range(8)]
    batch = make_collate(ds)(items)
    t = max(len(x["input_ids"]) for x in items)
    assert set(batch) == {
        "input_ids",
        "token_type_ids",
        "attention_mask",
        "labels",
        "next_sentence_label",
    }
    assert all(v.dtype == torch.int64 for v in batch.values())
    assert batch["input_ids"].shape == (8, t) and batch["next_sentence_label"].shape == (8,)
    for r, x in enumerate(items):
        n = len(x["input_ids"])
        assert batch["input_ids"][r, :n].tolist() == x["input_ids"].tolist()
        assert (
            batch["input_ids"][r, n:].eq(PAD).all() and batch["token_type_ids"][r, n:].eq(0).all()
        )
        assert batch["attention_mask"][r].tolist() == [1] * n + [0] * (t - n)
        labels = batch["labels"][r]
        pos = x["masked_positions"].tolist()
        assert labels[pos].tolist() == x["masked_labels"].tolist()
        assert labels.ne(-100).sum().item() == len(pos)
        assert batch["next_sentence_label"][r].item() == x["next_sentence_label"]


def test_dynamic_masking_changes_per_epoch_but_is_reproducible(tmp_path: Path) -> None:
    insts = _instances(dynamic=True)
    assert all(len(i.masked_positions) == 0 for i in insts)
    _write(tmp_path, insts, dynamic=True)
    ds = PretrainingDataset(tmp_path)
    assert ds.dynamic_masking
    items = [ds[i] for i in range(16)]
    collate = make_collate(ds, seed=3)
    e0 = collate(items)
    e0_again = make_collate(ds, seed=3)(items, [0] * len(items))
    e1 = collate(items, [1] * len(items))
    assert torch.equal(e0["labels"], e0_again["labels"]) and torch.equal(
        e0["input_ids"], e0_again["input_ids"]
    )
    assert not torch.equal(e0["labels"], e1["labels"])
    # the masks of an item do not depend on which batch it is in
    alone = make_collate(ds, seed=3)([items[5]])
    n = len(items[5]["input_ids"])
    assert torch.equal(alone["labels"][0], e0["labels"][5, :n])
    # unmasked tokens are the stored ids; labels are the original ids
    for r, x in enumerate(items):
        n = len(x["input_ids"])
        lab = e0["labels"][r, :n]
        keep = lab.eq(-100)
        assert torch.equal(e0["input_ids"][r, :n][keep], torch.from_numpy(x["input_ids"])[keep])
        assert torch.equal(lab[~keep], torch.from_numpy(x["input_ids"])[~keep])
        assert (~keep).sum().item() == min(20, max(1, round(n * 0.15)))


def test_collate_rejects_empty_batch() -> None:
    with pytest.raises(ValueError):
        collate_pretraining([])


def test_dynamic_masking_at_training_time_remasks_static_data(tmp_path: Path) -> None:
    """``bertkit pretrain --dynamic-masking`` on statically masked data: the stored masks are
    undone and new ones drawn per epoch; without it the stored masks are used as they are."""
    from bertkit.cli.main import main
    from bertkit.data.collate import unmasked

    fix = Path(__file__).resolve().parents[1] / "fixtures"
    out = tmp_path / "static"
    argv = [
        "prepare-pretraining",
        "--input",
        str(fix / "pt_wiki.txt"),
        "--vocab",
        str(fix / "pt_vocab.txt"),
        "--output",
        str(out),
        "--max-seq-length",
        "32",
        "--dupe-factor",
        "1",
    ]
    assert main(argv) == 0
    ds = PretrainingDataset(out)
    assert not ds.dynamic_masking
    items = [ds[i] for i in range(len(ds))]
    stored = make_collate(ds, seed=1)(items)
    assert torch.equal(
        make_collate(ds, seed=1)(items, [1] * len(items))["labels"], stored["labels"]
    )
    remask = make_collate(ds, seed=1, dynamic=True)
    e0, e1 = remask(items, [0] * len(items)), remask(items, [1] * len(items))
    assert not torch.equal(e0["labels"], e1["labels"]) and not torch.equal(
        e0["labels"], stored["labels"]
    )
    for r, item in enumerate(items):  # every label is the original token at that position
        original = torch.from_numpy(unmasked(item)["input_ids"])
        n = len(original)
        picked = e1["labels"][r, :n] != -100
        assert torch.equal(e1["labels"][r, :n][picked], original[picked])
        kept = ~picked
        assert torch.equal(e1["input_ids"][r, :n][kept], original[kept])
