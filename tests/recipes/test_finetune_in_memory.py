"""A fine-tuning job given its examples in memory (``TaskExamples``, the library's way to pass
data read or subsampled by the caller) has no training file: its unfinished-job mark names the
examples by count and content, so an interrupted job is rerun into its folder by the same
examples, and other examples under the same job name are refused it as a finished model is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import bertkit.recipes.finetune as recipe
from bertkit.errors import BertkitError
from bertkit.recipes.finetune import FinetuneJob, TaskExamples, run_finetune
from bertkit.tasks import ClassificationAdapter
from bertkit.training.finetune import FinetuneConfig
from bertkit.training.model_dir import METRICS_FILE, UNFINISHED_FILE, training_data
from support.tiny_glue import write_sentiment


def test_an_interrupted_in_memory_job_is_free_to_the_same_examples_only(
    tiny_model: Path, tmp_path: Path, monkeypatch
) -> None:
    data = write_sentiment(tmp_path / "glue")
    adapter = ClassificationAdapter.for_glue("SST-2", 32)
    train, dev = adapter.read(data, "train"), adapter.read(data, "dev")
    out = tmp_path / "out"
    fast = FinetuneConfig(learning_rates=(1e-3,), epochs=1, batch_size=4, max_steps=2, seed=3)

    def job(examples: list) -> FinetuneJob:
        return FinetuneJob(TaskExamples(adapter, examples, {"dev": dev}), tiny_model, out, fast)

    def interrupted(path, text) -> None:  # metrics.json, after the first save
        raise KeyboardInterrupt

    monkeypatch.setattr(recipe, "atomic_write_text", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_finetune(job(train), log=lambda _: None)
    monkeypatch.undo()
    ours = training_data(train)
    assert re.fullmatch(r"48 examples in memory, sha256 [0-9a-f]{64}", ours)
    assert (out / UNFINISHED_FILE).read_text().splitlines()[:2] == [
        "job: glue SST-2",
        f"data: {ours}",
    ]

    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    fewer = training_data(train[1:])
    with pytest.raises(BertkitError) as refused:
        run_finetune(job(train[1:]), log=lambda _: None)
    assert str(refused.value) == (
        f"{out}: holds an interrupted 'glue SST-2' job's model on {ours}, not this one's on "
        f"{fewer} (pass --overwrite to replace it, or choose another --output)"
    )
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before

    # the same examples read again (other objects, equal content) take the folder back
    again = adapter.read(data, "train")
    assert run_finetune(job(again), log=lambda _: None) is not None
    assert (out / METRICS_FILE).is_file() and not (out / UNFINISHED_FILE).exists()
