"""``bertkit prepare-pretraining`` end to end on the small fixture corpora and vocabulary."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest

from bertkit.cli.main import main
from bertkit.data.collate import make_collate
from bertkit.data.shards import PretrainingDataset
from bertkit.tokenizer import BertTokenizer

FIX = Path(__file__).resolve().parents[1] / "fixtures"
VOCAB = FIX / "pt_vocab.txt"


def _prepare(tmp_path: Path, out: str, *extra: str, inputs=("pt_wiki.txt", "pt_bert.txt")) -> int:
    args = ["prepare-pretraining", "--input", *[str(FIX / i) for i in inputs]]
    args += ["--vocab", str(VOCAB), "--output", str(tmp_path / out), "--max-seq-length", "32"]
    return main([*args, "--dupe-factor", "3", "--seed", "7", *extra])


def test_end_to_end(tmp_path: Path, capsys) -> None:
    rc = _prepare(tmp_path, "out", "--num-workers", "1", "--shard-size", "40")
    assert rc == 0
    out = capsys.readouterr().out
    assert "instances/s" in out and "train: 12 docs" in out
    folder = tmp_path / "out"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["settings"]["max_seq_length"] == 32 and manifest["settings"]["dupe_factor"] == 3
    assert [i["format"] for i in manifest["inputs"]] == ["wikiextractor", "bert"]
    shards = manifest["splits"]["train"]["shards"]
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [s["file"] for s in shards] + ["manifest.json", "vocab.txt"]
    )
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left

    ds = PretrainingDataset(folder, verify="eager")
    assert len(ds) == manifest["num_instances"]["train"] == sum(s["num_instances"] for s in shards)
    tok = BertTokenizer(str(VOCAB))
    text_tokens = set()
    for name in ("pt_wiki.txt", "pt_bert.txt"):
        text_tokens |= set(tok.encode_ids((FIX / name).read_text()))
    n_random = 0
    for i in range(len(ds)):
        x = ds[i]
        ids = x["input_ids"].copy()
        ids[x["masked_positions"]] = x["masked_labels"]
        assert len(ids) <= 32 and ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
        assert set(ids.tolist()) - {tok.cls_token_id, tok.sep_token_id} <= text_tokens
        n_random += x["next_sentence_label"]
    assert 0.3 < n_random / len(ds) < 0.75
    batch = make_collate(ds)([ds[i] for i in range(4)])
    assert batch["input_ids"].shape[0] == 4


def test_output_does_not_depend_on_worker_count(tmp_path: Path) -> None:
    assert _prepare(tmp_path, "one", "--num-workers", "1") == 0
    assert _prepare(tmp_path, "two", "--num-workers", "2") == 0
    m1 = json.loads((tmp_path / "one" / "manifest.json").read_text())
    m2 = json.loads((tmp_path / "two" / "manifest.json").read_text())
    assert m1["splits"] == m2["splits"]  # same shards, same sha256
    assert _prepare(tmp_path, "seed8", "--seed", "8") == 0
    m3 = json.loads((tmp_path / "seed8" / "manifest.json").read_text())
    assert (
        m3["splits"]["train"]["shards"][0]["sha256"] != m1["splits"]["train"]["shards"][0]["sha256"]
    )


def test_formats_holdout_dynamic_and_whole_word(tmp_path: Path, capsys) -> None:
    rc = _prepare(
        tmp_path,
        "out",
        "--holdout-fraction",
        "0.3",
        "--dynamic-masking",
        "--whole-word-mask",
        "--text-field",
        "body",
        inputs=("pt_docs.jsonl", "pt_paragraphs.txt"),
    )
    assert rc == 0
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [i["format"] for i in m["inputs"]] == ["jsonl", "paragraphs"]
    tr, ev = m["splits"]["train"], m["splits"]["eval"]
    assert tr["documents"] + ev["documents"] == 12 and ev["documents"] > 0
    assert "note:" not in capsys.readouterr().err  # documents were held out: nothing to say
    assert tr["masked"] == 0 and m["settings"]["dynamic_masking"]
    ds = PretrainingDataset(tmp_path / "out", "eval")
    assert len(ds) == ev["instances"] > 0
    spec = ds.masking_spec()
    assert spec.whole_word_mask
    batch = make_collate(ds, seed=1)([ds[i] for i in range(len(ds))])
    assert batch["labels"].ne(-100).any()


def test_bad_input_gives_one_line_and_leaves_nothing(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "Fine text."}\n{"text": oops}\n')
    args = [
        "prepare-pretraining",
        "--input",
        str(FIX / "pt_bert.txt"),
        str(bad),
        "--vocab",
        str(VOCAB),
    ]
    args += ["--output", str(tmp_path / "out"), "--max-seq-length", "32", "--num-workers", "2"]
    assert main(args) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{bad}:2: expected a JSON object" in err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]  # no output, no staging

    bad.write_bytes(b"Good line.\n\nBad \xff line.\n")
    assert main(args) == 1
    assert f"{bad}:3: invalid UTF-8" in capsys.readouterr().err
    assert main([*args, "--encoding-errors", "replace"]) == 0


def test_existing_output_needs_overwrite(tmp_path: Path, capsys) -> None:
    assert _prepare(tmp_path, "out") == 0
    before = (tmp_path / "out" / "manifest.json").read_text()
    assert _prepare(tmp_path, "out", "--seed", "9") == 1
    assert "--overwrite" in capsys.readouterr().err
    assert (tmp_path / "out" / "manifest.json").read_text() == before
    assert _prepare(tmp_path, "out", "--seed", "9", "--overwrite") == 0
    assert (tmp_path / "out" / "manifest.json").read_text() != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"--vocab": "missing.txt"}, "vocabulary not found"),
        ({"--max-seq-length": "4"}, "error: --max-seq-length must be >= 5"),
        ({"--holdout-fraction": "1.5"}, "holdout fraction"),
        ({"--masked-lm-prob": "1.5"}, "error: --masked-lm-prob must be in (0, 1)"),
        ({"--dupe-factor": "0"}, "error: --dupe-factor must be >= 1, got 0\n"),
        ({"--short-seq-prob": "-1"}, "error: --short-seq-prob must be in [0, 1]"),
    ],
)
def test_bad_options(tmp_path: Path, capsys, change: dict, needle: str) -> None:
    opts = {"--vocab": str(VOCAB), "--output": str(tmp_path / "o"), "--max-seq-length": "32"}
    opts.update({k: (str(tmp_path / v) if k == "--vocab" else v) for k, v in change.items()})
    args = ["prepare-pretraining", "--input", str(FIX / "pt_bert.txt")]
    for k, v in opts.items():
        args += [k, v]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_unwritable_output(tmp_path: Path, capsys) -> None:
    # A path below a regular file cannot be created, whatever the user's permissions.
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert _prepare(blocker, "out") == 1
    err = capsys.readouterr().err
    assert "cannot create the output" in err and str(blocker / "out") in err


def test_full_disk_leaves_nothing_behind(tmp_path: Path, capsys, monkeypatch) -> None:
    import errno

    from bertkit.data import shards
    from bertkit.io import atomic_write

    def full_disk(path, data):  # the write starts, then the disk fills up
        with atomic_write(path, "wb") as f:
            f.write(data[:100])
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(shards, "atomic_write_bytes", full_disk)
    assert _prepare(tmp_path, "out", "--num-workers", "1") == 1
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1 and "No space left on device" in err and "train-00000-0000.npz" in err
    )
    assert list(tmp_path.iterdir()) == []


def test_missing_input_file(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "nope.txt"
    rc = _prepare(tmp_path, "out", inputs=("pt_bert.txt", str(missing)))
    assert rc == 1
    err = capsys.readouterr().err
    assert f"{missing}: file not found" in err and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_an_empty_corpus_is_a_one_line_error_and_writes_nothing(tmp_path: Path, capsys) -> None:
    (tmp_path / "empty.txt").write_text("\n\n   \n", encoding="utf-8")
    argv = [
        "prepare-pretraining",
        "--input",
        str(tmp_path / "empty.txt"),
        "--vocab",
        str(VOCAB),
        "--output",
        str(tmp_path / "out"),
        "--num-workers",
        "1",
    ]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(  # the file named as every InputError names it (no "<input>: ")
        f"bertkit prepare-pretraining: error: {tmp_path / 'empty.txt'}: no training instances "
        "(0 documents read"
    ), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.txt"]  # no output, no staging


def test_pretrain_on_prepared_data_without_instances_is_a_one_line_error(
    tmp_path: Path, capsys
) -> None:
    assert _prepare(tmp_path, "data", "--num-workers", "1") == 0
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    manifest["splits"]["train"]["shards"] = []  # as a folder with an empty split would be
    (tmp_path / "data" / "manifest.json").write_text(json.dumps(manifest))
    argv = [
        "pretrain",
        "--data",
        str(tmp_path / "data"),
        "--output",
        str(tmp_path / "run"),
        "--max-steps",
        "2",
        "--device",
        "cpu",
    ]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "the 'train' split holds no instances" in err and err.startswith(
        "bertkit pretrain: error: "
    )
    assert not (tmp_path / "run").exists()


def test_pretrain_without_held_out_documents_trains_and_says_why(tmp_path: Path, capsys) -> None:
    """A small corpus with the README's --holdout-fraction 0.01 can hold out no document: the
    empty 'eval' split means no held-out evaluation (--eval-data's "if any"), not an error."""
    assert _prepare(tmp_path, "data", "--num-workers", "1", "--holdout-fraction", "0.001") == 0
    assert capsys.readouterr().err.endswith(  # said at once, not first at pretraining
        "note: --holdout-fraction 0.001 held out none of the 12 documents: pretrain will run no "
        "held-out evaluation (raise the fraction, or give pretrain --eval-data)\n"
    )
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert manifest["splits"]["eval"]["instances"] == 0  # the split is there, and empty
    argv = ["pretrain", "--data", str(tmp_path / "data"), "--output", str(tmp_path / "run")]
    assert main([*argv, "--max-steps", "2", "--batch-size", "4", "--device", "cpu"]) == 0
    captured = capsys.readouterr()
    assert "no held-out evaluation: the 'eval' split of" in captured.err
    assert "held-out" not in captured.out and (tmp_path / "run" / "model").is_dir()


@pytest.mark.parametrize("kind", ["a FIFO", "a character device"])
def test_a_fifo_or_a_device_is_not_a_regular_file(tmp_path: Path, capsys, kind: str) -> None:
    """prepare-pretraining hashes, counts and splits each corpus file before reading it: a named
    pipe or a device cannot be, and says so (it was "file not found")."""
    from support.fifo import fed_fifo

    with contextlib.ExitStack() as stack:
        if kind == "a FIFO":  # fed, so that a command opening it by mistake cannot hang
            path = stack.enter_context(fed_fifo(tmp_path / "corpus.fifo", b"a b.\n"))
        else:
            path = Path(os.devnull)
        assert _prepare(tmp_path, "out", inputs=("pt_bert.txt", str(path))) == 1
    err = capsys.readouterr().err
    assert err == (
        f"bertkit prepare-pretraining: error: {path}: is {kind}, not a regular file; expected "
        "a regular file, which this command may read more than once\n"
    )
    assert [p.name for p in tmp_path.iterdir() if p.name != "corpus.fifo"] == []


def test_a_failed_swap_puts_the_previous_output_back(tmp_path: Path, capsys, monkeypatch) -> None:
    import errno

    assert _prepare(tmp_path, "out") == 0
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    real = os.replace

    def replace(src, dst) -> None:  # the finished folder cannot be renamed into place
        if Path(src).name.startswith(".out.partial-"):
            raise OSError(errno.EIO, "Input/output error")
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    assert _prepare(tmp_path, "out", "--seed", "9", "--overwrite") == 1
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Input/output error" in err and str(tmp_path / "out") in err
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
