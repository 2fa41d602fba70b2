"""``bertkit finetune glue --teacher``: fine-tune a teacher on the tiny sentiment task, then
distil it into a student through the CLI.

The check that cannot pass by chance: the student's training labels are the teacher's task's
labels *flipped*, so the gold labels and the teacher pull opposite ways. With ``--distill-alpha
1`` (the teacher alone) the student must predict dev as the teacher does; with alpha 0 and the
same budget, seeds and data it must predict the opposite. A teacher whose logits did not reach
the loss, or reached it for the wrong examples (a lookup by batch position rather than by
example), fails the first; a teacher that always won fails the second."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertkit.cli.main import main
from bertkit.data.tasks.conll import read_conll
from support.cli_runs import finetune, predict
from support.tiny_glue import write_sentiment

TEACH = ["--max-steps", "180", "--epochs", "3", "--learning-rate", "3e-3", "--dropout", "0"]
STUDENT = [
    "--max-steps",
    "60",
    "--epochs",
    "1",
    "--learning-rate",
    "3e-3",
    "--dropout",
    "0",
    "--seed",
    "5",
    "--distill-temperature",
    "1",
]
"""The student: one epoch of 60 updates (240 examples, batches of 4), so that the run's last
update is the one selected whatever dev says (the student's dev labels are flipped too)."""


def _flipped(data: Path, out: Path) -> Path:
    """The SST-2 folder ``data`` with every label flipped."""
    (out / "SST-2").mkdir(parents=True)
    for split in ("train", "dev"):
        lines = (data / "SST-2" / f"{split}.tsv").read_text(encoding="utf-8").splitlines()
        rows = [lines[0]] + [f"{t}\t{1 - int(y)}" for t, y in (r.split("\t") for r in lines[1:])]
        (out / "SST-2" / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return out


def _labels(model: Path, data: Path, out: Path) -> list[str]:
    return [p["label"] for p in predict(model, data / "SST-2" / "dev.tsv", out)]


def test_a_distilled_student_follows_its_teacher(tiny_model: Path, tmp_path: Path) -> None:
    data = write_sentiment(tmp_path / "glue", n_train=240, n_dev=32)
    glue = ["--task", "SST-2", "--data-dir", str(data)]
    teacher = tmp_path / "teacher"
    m = finetune("glue", tiny_model, teacher, *glue, *TEACH)
    assert m["selected"]["score"] >= 0.9  # a teacher worth following
    flipped = _flipped(data, tmp_path / "flipped")
    student = ["--task", "SST-2", "--data-dir", str(flipped), "--teacher", str(teacher)]
    soft = finetune(
        "glue", tiny_model, tmp_path / "soft", *student, *STUDENT, "--distill-alpha", "1"
    )
    hard = finetune(
        "glue", tiny_model, tmp_path / "hard", *student, *STUDENT, "--distill-alpha", "0"
    )
    assert soft["teacher"] == str(teacher) and soft["config"]["distill_alpha"] == 1.0
    assert hard["config"]["distill_alpha"] == 0.0
    said = _labels(teacher, data, tmp_path / "t.jsonl")
    agree = [
        sum(a == b for a, b in zip(said, _labels(tmp_path / s, data, tmp_path / f"{s}.jsonl")))
        / len(said)
        for s in ("soft", "hard")
    ]
    assert agree[0] >= 0.9 and agree[1] <= 0.1, agree


def test_teacher_refusals(tiny_model: Path, tmp_path: Path, capsys) -> None:
    data = write_sentiment(tmp_path / "glue", n_train=8, n_dev=4)
    teacher = tmp_path / "teacher"
    finetune("glue", tiny_model, teacher, "--task", "SST-2", "--data-dir", str(data))
    rte = tmp_path / "rte"
    (rte / "RTE").mkdir(parents=True)
    rows = "index\tsentence1\tsentence2\tlabel\n0\tgood film\tthe plot\tentailment\n"
    rows += "1\tbad film\tthe plot\tnot_entailment\n"
    for split in ("train", "dev"):
        (rte / "RTE" / f"{split}.tsv").write_text(rows, encoding="utf-8")
    argv = [
        "finetune",
        "glue",
        "--task",
        "RTE",
        "--data-dir",
        str(rte),
        "--model",
        str(tiny_model),
        "--output",
        str(tmp_path / "s"),
        "--teacher",
        str(teacher),
    ]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (
        f"bertkit finetune: error: teacher {teacher} has labels ['0', '1']; the student's task has "
        "['entailment', 'not_entailment'] (the same names are needed, in any order)"
    )
    assert not (tmp_path / "s" / "metrics.json").exists()
    with pytest.raises(SystemExit):  # span QA has no --teacher
        main(
            [
                "finetune",
                "squad",
                "--train",
                "a",
                "--dev",
                "b",
                "--model",
                "m",
                "--output",
                "o",
                "--teacher",
                str(teacher),
            ]
        )
    assert json.loads((teacher / "metrics.json").read_text())["task"]["name"] == "SST-2"


# ---- finetune ner --teacher --------------------------------------------------------------------

SWAP = {"PER": "LOC", "LOC": "PER"}


def _char_model(out: Path) -> Path:
    """A tiny random BERT whose vocabulary is single characters: it cuts every word of the
    CoNLL fixture into letters, where the student's whole-word vocabulary keeps it whole."""
    import string

    from support.tiny_glue import build_tiny_model

    chars = sorted(set(string.ascii_lowercase + string.digits + ".,-"))
    return build_tiny_model(out, chars + ["##" + c for c in chars])


def _conll(out: Path, repeat: int, swap: bool) -> Path:
    """The CoNLL fixture ``repeat`` times, PER and LOC swapped with ``swap``."""
    from support.tiny_glue import FIXTURES

    lines = (FIXTURES / "task_conll.txt").read_text(encoding="utf-8").splitlines()
    if swap:
        lines = [
            " ".join([*c[:-1], c[-1][:2] + SWAP.get(c[-1][2:], c[-1][2:])]) if c else ""
            for c in (line.split() for line in lines)
        ]
    out.write_text(("\n".join(lines) + "\n\n") * repeat, encoding="utf-8")
    return out


def test_a_distilled_tagger_follows_its_teacher_across_tokenizers(
    tiny_model: Path, tmp_path: Path
) -> None:
    """The ner twin of the test above: a teacher reading letters, a student reading whole
    words, the student's PER and LOC swapped; alpha 1 must tag as the teacher, alpha 0 as the
    swapped gold."""
    conll = _conll(tmp_path / "conll.txt", 1, swap=False)
    teacher = tmp_path / "teacher"
    m = finetune(
        "ner", _char_model(tmp_path / "chars"), teacher, "--train", str(conll),
        "--dev", str(conll), "--max-steps", "80", "--epochs", "80", "--learning-rate", "3e-3",
        "--dropout", "0",
    )  # fmt: skip
    assert m["selected"]["dev"]["dev"]["f1"] >= 0.9  # a teacher worth following
    swapped = _conll(tmp_path / "swapped.txt", 60, swap=True)  # 3 sentences x 60: 45 updates
    student = ["--train", str(swapped), "--dev", str(conll), "--teacher", str(teacher)]
    student += [*STUDENT, "--distill-temperature", "1"]
    soft = finetune("ner", tiny_model, tmp_path / "soft", *student, "--distill-alpha", "1")
    finetune("ner", tiny_model, tmp_path / "hard", *student, "--distill-alpha", "0")
    words = sum(len(s.tokens) for s in read_conll(conll))
    assert soft["teacher_words"] == {
        "words": 60 * words,
        "labelled": 60 * words,
        "distilled": 60 * words,
        "student_truncated": 0,
        "teacher_truncated": 0,
    }
    gold = [t for p in predict(teacher, conll, tmp_path / "t.jsonl") for t in p["tags"]]
    moved = [i for i, t in enumerate(gold) if t[2:] in SWAP]  # where the two teachings differ
    assert len(moved) >= 5
    for name, want in (("soft", gold), ("hard", [t[:2] + SWAP.get(t[2:], "") for t in gold])):
        said = [
            t
            for p in predict(tmp_path / name, conll, tmp_path / f"{name}.jsonl")
            for t in p["tags"]
        ]
        agree = sum(said[i] == want[i] for i in moved) / len(moved)
        assert agree >= 0.8, (name, agree)
