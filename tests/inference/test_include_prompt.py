"""A ``Pooling`` module with ``include_prompt: false``: sentence-transformers leaves [CLS] and a
prompt's tokens out of the pooling (INSTRUCTOR-style models). bertkit puts a prompt before the
text and pooled it with the text, so such a folder's prompted vectors differed from
sentence-transformers' without a word. Now every place that puts a prompt before texts refuses
it for such a folder by name; without a prompt the folder is read as before."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli.main import main
from bertkit.data.tasks.retrieval import TrainingPair
from bertkit.errors import CheckpointError
from bertkit.inference import Embedder
from bertkit.inference.mining import MineOptions, mine
from bertkit.inference.negatives import MiningConfig
from bertkit.interop.sentence_folder import router_of
from bertkit.interop.sentence_prompts import check_prompt, task_prompt
from bertkit.recipes.finetune_folder import with_folder_settings
from bertkit.tasks import TaskSettings

st = pytest.importorskip("sentence_transformers")

TEXTS = ["hello world", "the film was good", "a cat sat", "dog"]
PROMPTS = {"query": "the cat ", "document": ""}


def _pooling_config(folder: Path) -> Path:
    (path,) = [p for p in folder.glob("*Pooling*/config.json")]
    return path


@pytest.fixture(scope="module")
def excluding_folder(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model, mean pooling that leaves prompts out, and a non-empty query prompt."""
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    out = tmp_path_factory.mktemp("noprompt") / "m"
    t = Transformer(str(tiny_model))
    pooling = Pooling(t.get_embedding_dimension(), "mean", include_prompt=False)
    st.SentenceTransformer(modules=[t, pooling], device="cpu", prompts=PROMPTS).save(str(out))
    assert json.loads(_pooling_config(out).read_text())["include_prompt"] is False
    return out


def test_unprompted_vectors_equal_and_a_prompt_is_refused(excluding_folder: Path) -> None:
    theirs = st.SentenceTransformer(str(excluding_folder), device="cpu")
    embedder = Embedder.load(excluding_folder, precision="fp32")
    np.testing.assert_allclose(embedder(TEXTS), theirs.encode(TEXTS), rtol=0, atol=1e-5)
    # what bertkit computed for encode_query before: the prompt pooled with the text
    pooled_with_prompt = embedder([PROMPTS["query"] + t for t in TEXTS])
    assert np.abs(pooled_with_prompt - theirs.encode_query(TEXTS)).max() > 1e-3
    with pytest.raises(CheckpointError, match="include_prompt is false"):
        task_prompt(excluding_folder, "query")
    assert task_prompt(excluding_folder, "document") == ""  # an empty prompt changes nothing
    assert task_prompt(excluding_folder, None) == ""
    assert check_prompt(None, "x ") == "x "


def test_embed_refuses_the_query_prompt(excluding_folder: Path, tmp_path: Path, capsys) -> None:
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    args = ["embed", "--model", str(excluding_folder), "--input", str(tmp_path / "in.txt")]
    assert main([*args, "--task", "query", "--output", str(tmp_path / "q.npy")]) != 0
    assert "include_prompt is false" in capsys.readouterr().err
    assert not (tmp_path / "q.npy").exists()
    assert main([*args, "--task", "document", "--output", str(tmp_path / "d.npy")]) == 0
    want = st.SentenceTransformer(str(excluding_folder), device="cpu").encode_document(TEXTS)
    np.testing.assert_allclose(np.load(tmp_path / "d.npy"), want, rtol=0, atol=1e-5)


def test_mining_and_finetune_refuse_an_explicit_prompt(excluding_folder: Path) -> None:
    embedder = Embedder.load(excluding_folder, precision="fp32")
    pairs = [TrainingPair("hello world", "a cat sat"), TrainingPair("dog", "the film was good")]
    with pytest.raises(CheckpointError, match="include_prompt"):
        mine(embedder, pairs, MiningConfig(), MineOptions(corpus_prompt="passage: "))
    one = MiningConfig(num_negatives=1)
    assert len(mine(embedder, pairs, one, MineOptions(query_prompt="")).rows()) == 2
    task = TaskSettings("embeddings", train=Path("t"), dev=Path("d"), document_prompt="")
    with pytest.raises(CheckpointError, match="include_prompt"):
        with_folder_settings(task, excluding_folder)  # the folder's own query prompt
    with pytest.raises(CheckpointError, match="include_prompt"):
        with_folder_settings(
            replace(task, query_prompt="", document_prompt="d: "), excluding_folder
        )
    done = with_folder_settings(replace(task, query_prompt=""), excluding_folder)
    assert (done.query_prompt, done.document_prompt) == ("", "")


def test_a_router_route_that_leaves_prompts_out_is_refused(tmp_path: Path) -> None:
    from support.tiny_router import saved_dense_router

    folder, _ = saved_dense_router(tmp_path)
    assert router_of(folder) is not None
    configs = [p for p in folder.rglob("config.json") if "pooling_mode" in p.read_text()]
    assert configs
    for config in configs:
        config.write_text(json.dumps({**json.loads(config.read_text()), "include_prompt": False}))
    with pytest.raises(CheckpointError, match="include_prompt false"):
        router_of(folder)


@pytest.mark.parametrize("include", [True, False])
def test_a_saved_folder_keeps_the_prompts(tiny_model: Path, tmp_path: Path, include: bool) -> None:
    """``Embedder.save`` wrote no prompts, no default prompt and no include_prompt: the saved
    folder's ``encode`` / ``encode_query`` in sentence-transformers lost the prompt."""
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    t = Transformer(str(tiny_model))
    pooling = Pooling(t.get_embedding_dimension(), "mean", include_prompt=include)
    model = st.SentenceTransformer(
        modules=[t, pooling], device="cpu", prompts=PROMPTS, default_prompt_name="query"
    )
    model.save(str(tmp_path / "src"))
    Embedder.load(tmp_path / "src", precision="fp32").save(tmp_path / "out")
    theirs = st.SentenceTransformer(str(tmp_path / "src"), device="cpu")
    saved = st.SentenceTransformer(str(tmp_path / "out"), device="cpu")
    assert (saved.prompts["query"], saved.default_prompt_name) == (PROMPTS["query"], "query")
    assert saved[1].include_prompt is include
    for encode in ("encode", "encode_query", "encode_document"):
        want = getattr(theirs, encode)(TEXTS)
        np.testing.assert_allclose(getattr(saved, encode)(TEXTS), want, rtol=0, atol=1e-5)
    assert np.abs(theirs.encode(TEXTS) - theirs.encode(TEXTS, prompt="")).max() > 1e-3
