"""``finetune embeddings`` from a sentence-transformers folder keeps what the folder declares, as
sentence-transformers' own ``fit`` then ``save`` keep the model's modules: its pooling (a bge
folder pools [CLS]), its Normalize module or none, its ``max_seq_length`` (MiniLM's 256, not
bertkit's 128), its named prompts besides query and document, its default prompt and a Pooling's
``include_prompt: false``. Before, the fine-tuned folder pooled by mean, normalised, cut inputs
at 128 tokens and lost the default prompt whatever the starting folder said."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli.main import main
from bertkit.interop.sentence_folder import save_sentence_transformers_files
from bertkit.interop.sentence_folder import sentence_transformers_spec as spec_of
from bertkit.interop.sentence_prompts import kept_settings
from bertkit.recipes.finetune_folder import with_folder_settings
from bertkit.tasks import TaskSettings, build_task
from bertkit.tasks.embedding import EmbeddingAdapter
from support.tiny_glue import FIXTURES
from training.finetune.test_search_finetune import RUN, _data

TEXTS = ["good movie", "the plot was very dull really"]


def _start(tiny_model: Path, tmp: Path, **saved) -> Path:
    """The tiny model as a sentence-transformers folder: CLS pooling, no Normalize, 24 tokens."""
    base = tmp / "start"
    shutil.copytree(tiny_model, base)
    save_sentence_transformers_files(base, "cls", False, 24, **saved)
    return base


def _settings(**given) -> TaskSettings:
    return TaskSettings("embeddings", **{"train": Path("t"), "dev": Path("d"), **given})


def test_unset_pooling_normalize_and_length_come_from_the_folder(
    tiny_model: Path, tmp_path: Path
) -> None:
    base = _start(tiny_model, tmp_path)
    filled = with_folder_settings(_settings(), base)
    assert (filled.pooling, filled.normalize, filled.max_seq_length) == ("cls", False, 24)
    told = with_folder_settings(_settings(pooling="max", normalize=True, max_seq_length=16), base)
    assert (told.pooling, told.normalize, told.max_seq_length) == ("max", True, 16)
    # a folder that says more tokens than its position table holds: the table's limit (128)
    save_sentence_transformers_files(base, "cls", False, 1024)
    assert with_folder_settings(_settings(), base).max_seq_length == 128
    train, _, _ = _data(tmp_path)
    plain = with_folder_settings(_settings(train=train, dev=train), tiny_model)
    adapter, _, _ = build_task(plain)  # a plain BERT folder: bertkit's defaults
    assert (adapter.pooling, adapter.normalize, adapter.max_seq_length) == ("mean", True, 128)


def test_the_default_prompt_goes_with_its_prompt() -> None:
    kept = {"query": "q: ", "classify": "c: "}
    adapter = EmbeddingAdapter(
        "embeddings", "x", 16, query_prompt="q: ", folder_prompts=kept, default_prompt_name="query"
    )
    assert (adapter.prompts, adapter.default_prompt) == (kept, "query")
    cleared = replace(adapter, query_prompt="")  # --query-prompt "": no "query" prompt saved
    assert (cleared.prompts, cleared.default_prompt) == ({"classify": "c: "}, None)
    told = replace(adapter, query_prompt="find: ")  # the flag wins over the folder's prompt
    assert told.prompts == {"classify": "c: ", "query": "find: "}


@pytest.mark.parametrize("include_prompt", [True, False])
def test_the_finetuned_folder_keeps_the_starting_folders_settings(
    tiny_model: Path, tmp_path: Path, include_prompt: bool
) -> None:
    # include_prompt false refuses a query or default prompt (bertkit pools every token)
    prompts = {"query": "very ", "document": "", "classify": "the plot "}
    default = "classify" if include_prompt else None
    if not include_prompt:
        del prompts["query"]
    saved = {"prompts": prompts, "default_prompt_name": default}
    base = _start(tiny_model, tmp_path, include_prompt=include_prompt, **saved)
    train, beir, _ = _data(tmp_path)
    out = tmp_path / "emb"
    args = ["--model", str(base), "--train", str(train), "--dev", str(beir), "--output", str(out)]
    run = [*RUN[:1], "1", *RUN[2:-2]]  # one epoch, no --max-seq-length
    assert main(["finetune", "embeddings", *args, *run]) == 0
    spec = spec_of(out)
    assert (spec.pooling, spec.normalize, spec.max_length) == ("cls", False, 24)
    kept = kept_settings(out)
    assert kept["prompts"] == {k: v for k, v in prompts.items() if v}
    assert (kept["default_prompt_name"], kept["include_prompt"]) == (default, include_prompt)

    st = pytest.importorskip("sentence_transformers")
    from bertkit.inference import Embedder

    model = st.SentenceTransformer(str(out), device="cpu")
    assert model.max_seq_length == 24 and model.default_prompt_name == default
    if include_prompt:  # encode puts the default prompt before the texts, pooled with them
        ours = Embedder.load(out, precision="fp32")(["the plot " + t for t in TEXTS])
        np.testing.assert_allclose(ours, model.encode(TEXTS), rtol=0, atol=1e-5)
    ours = Embedder.load(out, precision="fp32")(TEXTS)
    np.testing.assert_allclose(ours, model.encode(TEXTS, prompt=""), rtol=0, atol=1e-5)
    assert abs(np.linalg.norm(ours, axis=1) - 1).max() > 1e-3  # no Normalize: as the start
    pooling = json.loads((out / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode_cls_token"] and not pooling["pooling_mode_mean_tokens"]


def test_labelled_dev_pairs_select_with_the_default_prompt_evaluate_uses(
    tiny_model: Path, tmp_path: Path
) -> None:
    """``evaluate`` embeds labelled pairs as ``encode`` does, behind the default prompt: the
    selecting dev score puts it there too, so the two agree on the saved folder."""
    saved = {"prompts": {"classify": "the plot "}, "default_prompt_name": "classify"}
    base = _start(tiny_model, tmp_path, **saved)
    train, dev, out = FIXTURES / "retrieval_pairs.jsonl", FIXTURES / "sts_pairs.csv", tmp_path / "e"
    args = ["--model", str(base), "--train", str(train), "--dev", str(dev), "--output", str(out)]
    assert main(["finetune", "embeddings", *args, *RUN[:1], "1", *RUN[2:]]) == 0
    selected = json.loads((out / "metrics.json").read_text())["selected"]["dev"]["dev"]
    report = tmp_path / "evaluate.json"
    args = ["--model", str(out), "--data", str(dev), "--output", str(report), "--precision", "fp32"]
    assert main(["evaluate", *args]) == 0
    for key, value in json.loads(report.read_text())["metrics"].items():
        assert value == pytest.approx(selected[key], abs=1e-5), key


def test_a_default_prompt_the_pooling_leaves_out_is_refused(
    tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    saved = {"prompts": {"classify": "c "}, "default_prompt_name": "classify"}
    base = _start(tiny_model, tmp_path, include_prompt=False, **saved)
    train, beir, _ = _data(tmp_path)
    out = tmp_path / "emb"
    args = ["--model", str(base), "--train", str(train), "--dev", str(beir), "--output", str(out)]
    assert main(["finetune", "embeddings", *args, *RUN]) != 0
    assert "include_prompt is false" in capsys.readouterr().err
    assert not (out / "modules.json").exists()


def test_a_sparse_encoder_folder_keeps_its_length(tiny_model: Path, tmp_path: Path) -> None:
    from bertkit.interop.sentence_folder import save_sparse_encoder_files
    from bertkit.model.pooling import SpladeSpec

    base = tmp_path / "splade"
    shutil.copytree(tiny_model, base)
    save_sparse_encoder_files(base, SpladeSpec("sum", "relu"), 24)
    task = TaskSettings("sparse", train=Path("t"), dev=Path("d"))
    filled = with_folder_settings(task, base)
    assert (filled.max_seq_length, filled.pooling_strategy) == (24, "sum")
    told = with_folder_settings(replace(task, max_seq_length=16), base)
    assert told.max_seq_length == 16
