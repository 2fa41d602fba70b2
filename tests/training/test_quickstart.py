"""``bertkit quickstart``: WikiText parsing, and the whole pipeline on a small corpus."""

from __future__ import annotations

import json

from bertkit.cli.main import main
from bertkit.cli.quickstart import read_wikitext

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
    assert list(read_wikitext(path)) == [
        [
            "The apple is a fruit .",
            "It grows on trees in the U.S. and Europe .",
            "Apples were grown 4,000 years ago-or so .",
        ],
        ["The banana is yellow .", "Mr. Smith likes it a lot ."],
    ]


def test_quickstart_end_to_end_small(tmp_path, capsys):
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
    out = tmp_path / "qs"
    rc = main(
        [
            "quickstart",
            "--output",
            str(out),
            "--corpus",
            str(corpus),
            "--max-steps",
            "4",
            "--batch-size",
            "8",
            "--vocab-size",
            "120",
            "--threads",
            "1",
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "held-out MLM accuracy" in printed and "fill-mask" in printed
    assert printed.count("->") == 5
    assert (out / "run" / "model" / "config.json").exists()
    evals = [
        json.loads(x)
        for x in (out / "run" / "metrics.jsonl").read_text().splitlines()
        if '"eval"' in x
    ]
    assert evals and evals[-1]["step"] == 4
    # short-then-long phases: 32-token instances first, then the 128-token ones
    lengths = {
        name: json.loads((out / name / "manifest.json").read_text())["settings"]["max_seq_length"]
        for name in ("data-short", "data", "heldout")
    }
    assert lengths == {"data-short": 32, "data": 128, "heldout": 128}
    assert "(70% on 32-token instances first)" in printed
