"""``bertkit quickstart``: WikiText parsing, the built-in corpus, and the whole pipeline on a
small corpus (its summary.json and verdict)."""

from __future__ import annotations

import json

import pytest

from bertkit import hardware
from bertkit.cli.main import main
from bertkit.data.corpus import detect_format, read_documents
from bertkit.recipes.quickstart import read_corpus

WIKITEXT = (
    "\n".join(
        [  # WikiText lines begin and end with a space
            " ",
            " = Apple = ",
            " ",
            " The apple is a fruit . It grows on trees in the U.S. and Europe . ",
            " ",
            " = = History = = ",
            " ",
            " Apples were grown 4 @,@ 000 years ago @-@ or so . ",
            " ",
            " = Banana = ",
            " ",
            " The banana is yellow . Mr. Smith likes it <unk> a lot . ",
        ]
    )
    + "\n"
)


def test_read_wikitext_splits_articles_and_sentences(tmp_path):
    path = tmp_path / "w.raw"
    path.write_text(WIKITEXT)
    assert detect_format(path) == "wikitext"
    assert list(read_documents([path])) == [
        [
            "The apple is a fruit .",
            "It grows on trees in the U.S. and Europe .",
            "Apples were grown 4,000 years ago-or so .",
        ],
        ["The banana is yellow .", "Mr. Smith likes it a lot ."],
    ]


def test_compressed_corpus_reads_like_the_plain_file(tmp_path):
    import lzma

    path = tmp_path / "w.raw.xz"
    path.write_bytes(lzma.compress(WIKITEXT.encode()))
    plain = tmp_path / "w.raw"
    plain.write_text(WIKITEXT)
    assert list(read_documents([path])) == list(read_documents([plain]))
    broken = tmp_path / "broken.raw.xz"
    broken.write_bytes(lzma.compress(WIKITEXT.encode() * 50)[:-40])
    from bertkit.errors import InputError

    with pytest.raises(InputError, match=r"broken\.raw\.xz:\d+: cannot decompress"):
        list(read_documents([broken]))


def test_builtin_corpus_is_the_attributed_wikipedia_sample():
    docs = read_corpus(None)
    assert len(docs) == 1717  # ATTRIBUTION.txt: 1,717 articles, "Anarchism" first
    assert docs[0][0].startswith("Anarchism is a political philosophy")
    assert sum(len(s.split()) for d in docs for s in d) > 3_500_000


def _small_args(tmp_path) -> list[str]:
    """``bertkit quickstart``'s arguments for a 20-article WikiText corpus, into tmp/qs."""
    sentences = [
        "the cat sat on the mat .",
        "a dog ran in the park .",
        "the sun is hot today .",
        "we like to read books .",
        "birds fly over the sea .",
    ]
    articles = []
    for i in range(20):
        body = " ".join(sentences[(i + j) % 5].capitalize() for j in range(8))
        articles.append(f" = Article {i} = \n \n {body} \n \n")
    corpus = tmp_path / "small.raw"
    corpus.write_text("".join(articles))
    return [
        "--output",
        str(tmp_path / "qs"),
        "--corpus",
        str(corpus),
        "--batch-size",
        "8",
        "--vocab-size",
        "120",
        "--threads",
        "1",
    ]


def _small_quickstart(tmp_path, *extra: str) -> int:
    """``bertkit quickstart`` on a 20-article WikiText corpus, 4 updates of 8, into tmp/qs."""
    return main(["quickstart", *_small_args(tmp_path), "--max-steps", "4", *extra])


def test_quickstart_end_to_end_small(tmp_path, capsys):
    out = tmp_path / "qs"
    rc = _small_quickstart(tmp_path)
    assert rc == 0
    printed = capsys.readouterr().out
    assert "held-out MLM accuracy" in printed and "fill-mask" in printed
    assert printed.count("->") == 5
    assert (out / "run" / "model" / "config.json").exists()

    def evals(run: str) -> list[dict]:
        rows = (out / run / "metrics.jsonl").read_text().splitlines()
        return [json.loads(x) for x in rows if '"eval"' in x]

    # short-then-long phases as two runs: 3 updates on 32-token instances, then phase 2's 1
    # (15% of 4, rounded) warm-started from phase 1's model
    assert evals("run-phase1")[-1]["step"] == 3 and evals("run")[-1]["step"] == 1
    assert f"warm start: weights from {out / 'run-phase1' / 'model'}" in printed
    config = json.loads((out / "run" / "model" / "config.json").read_text())
    assert (config["num_hidden_layers"], config["hidden_size"], config["num_attention_heads"]) == (
        2,
        128,
        4,
    )
    lengths = {
        name: json.loads((out / name / "manifest.json").read_text())["settings"]["max_seq_length"]
        for name in ("data-short", "data", "heldout")
    }
    assert lengths == {"data-short": 32, "data": 128, "heldout": 128}
    assert "3 updates of 8 on 32-token instances, then about 1 of 8 on 128-token" in printed
    summary = json.loads((out / "summary.json").read_text())
    for key in (
        "heldout_mlm_accuracy",
        "heldout_nsp_accuracy",
        "baseline_mlm_most_frequent_token",
        "baseline_nsp_majority_label",
        "wall_seconds",
    ):
        assert summary[key] >= 0.0 and (key == "wall_seconds" or summary[key] <= 1.0)
    assert summary["model"] == str(out / "run" / "model") and summary["steps"] == 4
    assert (summary["phase1_steps"], summary["phase2_steps"]) == (3, 1)
    assert (summary["batch_size"], summary["phase2_batch_size"]) == (8, 8)
    assert len(summary["fill_mask"]) == 5 and summary["fill_mask_distinct_top1"] >= 1
    assert summary["reached_targets"] is False  # 4 updates learn nothing
    last = printed.strip().splitlines()[-1]
    assert last.startswith("verdict: the model learned less than the quickstart aims for")


@pytest.mark.parametrize("path, runs", [("fp32", "fp32"), ("emulated", "bf16")])
def test_quickstart_records_the_precision_it_ran(tmp_path, capsys, path, runs):
    # --precision bf16 without native bf16 trains in fp32 (one notice), and summary.json and the
    # pre-training line say so; forced to emulated it trains in bf16
    with hardware.forced("bf16", path):
        assert _small_quickstart(tmp_path, "--precision", "bf16") == 0
    summary = json.loads((tmp_path / "qs" / "summary.json").read_text())
    assert summary["precision"] == runs
    assert f"on 1 CPU thread in {runs}:" in capsys.readouterr().out


def test_phase2_updates_follow_the_machines_drift():
    from bertkit.recipes.quickstart_plan import phase2_updates

    assert phase2_updates(100.0, [0.1, 0.4], None) == 250
    assert phase2_updates(100.0, [0.1, 0.4], 0.125) == 200  # phase 1 ran 25% slower than measured
    assert phase2_updates(100.0, [0.1, 0.4], 0.05) == 500
    assert phase2_updates(0.0, [0.1, 0.4], 0.1) == 1


@pytest.mark.parametrize("timed", [True, False])
def test_quickstart_runs_keep_the_jobs_deadline(tmp_path, monkeypatch, timed):
    # with --minutes both runs get a deadline (phase 1's leaves phase 2 its calibrated share);
    # with --max-steps none: the count asked for is the count run
    import time

    import bertkit.recipes.quickstart as qs
    import bertkit.recipes.quickstart_plan as plan_module

    seen, real = [], qs.pretrain

    def recording(opts, log):
        if opts.eval_data is not None:  # not a calibration run
            seen.append((opts.output.name, opts.train.end_by, time.time()))
        return real(opts, log=log)

    monkeypatch.setattr(qs, "pretrain", recording)
    t0 = time.time()
    extra = ["--minutes", "0.2"] if timed else []
    if timed:
        monkeypatch.setattr(plan_module, "CALIBRATION_STEPS", 8)
        rc = main(["quickstart", *_small_args(tmp_path), *extra])
    else:
        rc = _small_quickstart(tmp_path)
    assert rc == 0
    assert [name for name, _, _ in seen] == ["run-phase1", "run"]
    plan = json.loads((tmp_path / "qs" / "plan.json").read_text())
    if not timed:
        assert [end for _, end, _ in seen] == [None, None] and "phase2_steps" not in plan
        return
    (_, end1, _), (_, end2, _) = seen
    deadline = t0 + 0.2 * 60 - plan_module.FINAL_SECONDS
    assert deadline - 1 < end2 < deadline + 1
    assert end1 < end2 and plan["phase2_steps"] >= 1 and len(plan["seconds_per_update"]) == 2
