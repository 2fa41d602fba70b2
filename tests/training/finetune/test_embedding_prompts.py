"""``finetune embeddings`` with prompts (sentence-transformers' ``prompts``): the query and
document prefixes reach training, the dev search and the saved folder, so the score that
selects the model is the one ``bertkit evaluate`` (which prompts as ``encode_query`` /
``encode_document`` do) gives the saved folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bertkit.cli.main import main
from bertkit.data.tasks.retrieval import TrainingPair
from bertkit.recipes.finetune_folder import with_folder_settings
from bertkit.tasks import TaskSettings
from bertkit.tasks.embedding import EmbeddingAdapter, RetrievalText
from bertkit.tokenizer import BertTokenizer
from training.finetune.test_search_finetune import RUN, _data, _evaluate

PROMPTS = {"query": "very ", "document": "the plot "}


def _prompted(tiny_model: Path, tmp: Path) -> Path:
    base = tmp / "prompted_base"
    shutil.copytree(tiny_model, base)
    (base / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": PROMPTS, "default_prompt_name": None}), encoding="utf-8"
    )
    return base


def test_prompts_reach_training_rows_and_dev_texts(tiny_model: Path) -> None:
    tok = BertTokenizer.from_pretrained(tiny_model)
    adapter = EmbeddingAdapter(
        "embeddings", "x", 16, query_prompt="very ", document_prompt="the plot "
    )
    (group,) = adapter.encode(tok, [TrainingPair("good", "was fine", ("was bad",))], True)
    ids = [list(r.input_ids) for r in group.rows]
    assert ids == [
        tok(t)["input_ids"] for t in ("very good", "the plot was fine", "the plot was bad")
    ]
    dev = [RetrievalText("q1", "good", {"d1": 1}), RetrievalText("d1", "was fine", None)]
    rows = adapter.encode(tok, dev, False)
    assert [list(r.input_ids) for r in rows] == [
        tok(t)["input_ids"] for t in ("very good", "the plot was fine")
    ]
    assert adapter.prompts == PROMPTS
    assert EmbeddingAdapter("embeddings", "x", 16, query_prompt="q: ").prompts == {"query": "q: "}


def test_unset_prompts_come_from_the_model_folder_and_flags_override(
    tiny_model: Path, tmp_path: Path
) -> None:
    base = _prompted(tiny_model, tmp_path)
    task = TaskSettings("embeddings", train=Path("t"), dev=Path("d"))
    filled = with_folder_settings(task, base)
    assert (filled.query_prompt, filled.document_prompt) == ("very ", "the plot ")
    cleared = with_folder_settings(
        TaskSettings("embeddings", train=Path("t"), dev=Path("d"), query_prompt=""), base
    )
    assert (cleared.query_prompt, cleared.document_prompt) == ("", "the plot ")
    plain = with_folder_settings(task, tiny_model)  # no sentence-transformers config: none
    assert (plain.query_prompt, plain.document_prompt) == ("", "")


def test_a_prompted_model_is_selected_as_evaluate_scores_its_saved_folder(
    tiny_model: Path, tmp_path: Path
) -> None:
    train, beir, _ = _data(tmp_path)
    base, out = _prompted(tiny_model, tmp_path), tmp_path / "emb"
    args = ["--model", str(base), "--train", str(train), "--dev", str(beir), "--output", str(out)]
    run = [*RUN[:1], "1", *RUN[2:]]  # one epoch
    assert main(["finetune", "embeddings", *args, *run]) == 0
    saved = json.loads((out / "config_sentence_transformers.json").read_text())
    assert saved["prompts"] == PROMPTS and saved["default_prompt_name"] is None
    selected = json.loads((out / "metrics.json").read_text())["selected"]["dev"]["dev"]
    after = _evaluate(out, beir, tmp_path / "after.json")["retrieval"]
    for metric in ("MRR@10", "NDCG@10", "Recall@10"):
        assert after[metric] == pytest.approx(selected[metric], abs=1e-6), metric

    st = pytest.importorskip("sentence_transformers")
    model = st.SentenceTransformer(str(out), device="cpu")
    assert model.prompts["query"] == "very " and model.prompts["document"] == "the plot "
