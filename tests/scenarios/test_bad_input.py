"""Bad input through the CLI: each case ends in ONE line ``bertkit CMD: error: FILE[:LINE]: what
was expected``, no traceback (``--debug`` re-raises instead), and nothing half-written.

Cases: malformed GLUE, CoNLL, SQuAD, SWAG and corpus files; invalid UTF-8; a vocabulary that does
not match the checkpoint; a config that does not match the weights; a missing file; an
unwritable output folder; a full disk (ENOSPC injected into the writes in-process).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from bertkit.cli.main import main
from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.interop import save_pretrained
from bertkit.model import BertForMaskedLM
from bertkit.tokenizer import BertTokenizer
from training.helpers import prepare_tiny_corpus

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SWAG_HEAD = (
    ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n"
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """A tiny masked-LM checkpoint with the fixture vocabulary."""
    d = tmp_path_factory.mktemp("model")
    tok = BertTokenizer(FIXTURES / "tok_vocab.txt")
    config = BertConfig(
        vocab_size=len(tok),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    save_pretrained(BertForMaskedLM(config), d, tok)
    return d


def fails_with_one_line(capsys, argv: list[str], *needles: str) -> str:
    """Run ``bertkit argv``: exit 1, a single error line holding ``needles``, no traceback; with
    --debug the exception propagates (the traceback is shown)."""
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err, err
    last = err.splitlines()[-1]
    assert last.startswith(f"bertkit {argv[0]}: error: "), err
    assert err.count(": error: ") == 1, err
    for needle in needles:
        assert needle in last, err
    with pytest.raises(BertkitError):
        main(["--debug", *argv])
    capsys.readouterr()
    return last


def no_files(folder: Path) -> bool:
    """Nothing written (or only empty folders) under ``folder``."""
    return not folder.exists() or not [p for p in folder.rglob("*") if p.is_file()]


def _finetune(family: str, model: Path, out: Path, *data: str) -> list[str]:
    return [
        "finetune",
        family,
        *data,
        "--model",
        str(model),
        "--output",
        str(out),
        "--epochs",
        "1",
        "--batch-size",
        "2",
    ]


# ---- malformed task files -------------------------------------------------------------------


def test_malformed_glue(tmp_path, capsys, model_dir):
    task = tmp_path / "glue" / "SST-2"
    shutil.copytree(FIXTURES / "task_glue" / "SST-2", task)
    (task / "train.tsv").write_text("sentence\tlabel\ngood film\t1\nno label column here\n")
    out = tmp_path / "out"
    argv = _finetune(
        "glue", model_dir, out, "--task", "SST-2", "--data-dir", str(tmp_path / "glue")
    )
    fails_with_one_line(capsys, argv, f"{task / 'train.tsv'}:3:")
    assert no_files(out)


def test_malformed_conll(tmp_path, capsys, model_dir):
    bad = tmp_path / "train.txt"
    bad.write_text("EU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\nGerman\n")
    argv = _finetune(
        "ner",
        model_dir,
        tmp_path / "out",
        "--train",
        str(bad),
        "--dev",
        str(FIXTURES / "task_conll.txt"),
    )
    fails_with_one_line(capsys, argv, f"{bad}:4:")
    assert no_files(tmp_path / "out")


def test_malformed_squad(tmp_path, capsys, model_dir):
    data = json.loads((FIXTURES / "task_squad_v1.json").read_text())
    del data["data"][0]["paragraphs"][0]["qas"][0]["question"]
    bad = tmp_path / "train.json"
    bad.write_text(json.dumps(data, indent=1))
    argv = _finetune(
        "squad",
        model_dir,
        tmp_path / "out",
        "--train",
        str(bad),
        "--dev",
        str(FIXTURES / "task_squad_v1.json"),
    )
    last = fails_with_one_line(capsys, argv, str(bad), "question")
    assert f"{bad}:" in last
    assert no_files(tmp_path / "out")


def test_truncated_squad_json(tmp_path, capsys, model_dir):
    bad = tmp_path / "train.json"
    bad.write_text((FIXTURES / "task_squad_v1.json").read_text()[:300])
    argv = _finetune(
        "squad",
        model_dir,
        tmp_path / "out",
        "--train",
        str(bad),
        "--dev",
        str(FIXTURES / "task_squad_v1.json"),
    )
    fails_with_one_line(capsys, argv, f"{bad}:")


def test_malformed_swag(tmp_path, capsys, model_dir):
    bad = tmp_path / "train.csv"
    bad.write_text(SWAG_HEAD + "0,v,1,A man. He,A man.,He,gold,a,b,c,d,7\n")
    argv = _finetune(
        "swag",
        model_dir,
        tmp_path / "out",
        "--train",
        str(bad),
        "--dev",
        str(FIXTURES / "task_swag.csv"),
    )
    fails_with_one_line(capsys, argv, f"{bad}:2:", "label")
    assert no_files(tmp_path / "out")


# ---- corpus files ----------------------------------------------------------------------------


def _prepare(inp: Path, out: Path, *extra: str) -> list[str]:
    return [
        "prepare-pretraining",
        "--input",
        str(inp),
        "--vocab",
        str(FIXTURES / "pt_vocab.txt"),
        "--output",
        str(out),
        "--max-seq-length",
        "32",
        "--num-workers",
        "1",
        *extra,
    ]


def test_malformed_jsonl_corpus(tmp_path, capsys):
    bad = tmp_path / "docs.jsonl"
    bad.write_text('{"text": "one doc."}\n{"text": "two\n')
    fails_with_one_line(capsys, _prepare(bad, tmp_path / "out"), f"{bad}:2:")
    assert no_files(tmp_path / "out")


def test_malformed_wikiextractor_corpus(tmp_path, capsys):
    bad = tmp_path / "wiki_00"
    bad.write_text('<doc id="1" title="A">\nA\n\nText here.\n<doc id="2" title="B">\nB\n')
    fails_with_one_line(
        capsys, _prepare(bad, tmp_path / "out", "--format", "wikiextractor"), f"{bad}:5:"
    )
    assert no_files(tmp_path / "out")


@pytest.mark.parametrize("command", ["prepare-pretraining", "train-vocab", "tokenize", "embed"])
def test_invalid_utf8(tmp_path, capsys, model_dir, command):
    bad = tmp_path / "corpus.txt"
    bad.write_bytes("first line\nsecond caf\u00e9\n".encode() + b"third \xff\xfe line\n")
    out = tmp_path / "out"
    argv = {
        "prepare-pretraining": _prepare(bad, out),
        "train-vocab": [
            "train-vocab",
            "--input",
            str(bad),
            "--vocab-size",
            "50",
            "--output",
            str(out / "vocab.txt"),
        ],
        "tokenize": [
            "tokenize",
            "--vocab",
            str(FIXTURES / "tok_vocab.txt"),
            "--input",
            str(bad),
            "--output",
            str(out / "tokens.jsonl"),
        ],
        "embed": [
            "embed",
            "--model",
            str(model_dir),
            "--input",
            str(bad),
            "--output",
            str(out / "v.npy"),
        ],
    }[command]
    fails_with_one_line(capsys, argv, f"{bad}:3:", "UTF-8")
    assert no_files(out)


def test_invalid_utf8_in_glue(tmp_path, capsys, model_dir):
    task = tmp_path / "glue" / "SST-2"
    shutil.copytree(FIXTURES / "task_glue" / "SST-2", task)
    (task / "dev.tsv").write_bytes(b"sentence\tlabel\nfine\t1\nbad \xc3( byte\t0\n")
    argv = _finetune(
        "glue", model_dir, tmp_path / "out", "--task", "SST-2", "--data-dir", str(tmp_path / "glue")
    )
    fails_with_one_line(capsys, argv, f"{task / 'dev.tsv'}:3:", "UTF-8")


# ---- checkpoints that do not fit together ----------------------------------------------------


def _copy(model_dir: Path, tmp_path: Path) -> Path:
    d = tmp_path / "model"
    shutil.copytree(model_dir, d)
    return d


@pytest.mark.parametrize("command", ["embed", "fill-mask"])
def test_vocab_larger_than_checkpoint(tmp_path, capsys, model_dir, command):
    d = _copy(model_dir, tmp_path)
    vocab = d / "vocab.txt"
    vocab.write_text(vocab.read_text() + "".join(f"extra{i}\n" for i in range(20)))
    text = tmp_path / "in.txt"
    text.write_text("extra3 extra19 [MASK]\n")
    argv = {
        "embed": [
            "embed",
            "--model",
            str(d),
            "--input",
            str(text),
            "--output",
            str(tmp_path / "out" / "v.npy"),
        ],
        "fill-mask": ["fill-mask", "--model", str(d), "--input", str(text)],
    }[command]
    fails_with_one_line(capsys, argv, str(vocab), "vocab_size")
    assert no_files(tmp_path / "out")


def test_pretrain_config_vocab_differs_from_data(tmp_path, capsys):
    data = prepare_tiny_corpus(tmp_path / "corpus", docs=6, holdout=0.0)
    config = tmp_path / "config.json"
    config.write_text(BertConfig.preset("tiny", vocab_size=1000).to_json_string())
    argv = [
        "pretrain",
        "--data",
        str(data),
        "--output",
        str(tmp_path / "run"),
        "--config",
        str(config),
        "--max-steps",
        "1",
        "--no-progress",
    ]
    fails_with_one_line(capsys, argv, str(config), "vocab_size")


def test_config_does_not_match_weights(tmp_path, capsys, model_dir):
    d = _copy(model_dir, tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    cfg["hidden_size"], cfg["intermediate_size"] = 32, 64
    (d / "config.json").write_text(json.dumps(cfg))
    text = tmp_path / "in.txt"
    text.write_text("hello\n")
    argv = [
        "embed",
        "--model",
        str(d),
        "--input",
        str(text),
        "--output",
        str(tmp_path / "out" / "v.npy"),
    ]
    last = fails_with_one_line(capsys, argv, "shape mismatch", "does config.json match")
    assert last.startswith(f"bertkit embed: error: {d}: "), last
    assert no_files(tmp_path / "out")


# ---- files, folders and disks ----------------------------------------------------------------


@pytest.mark.parametrize("what", ["input", "model", "vocab"])
def test_missing_file(tmp_path, capsys, model_dir, what):
    text = tmp_path / "in.txt"
    text.write_text("hello\n")
    missing = tmp_path / "nope"
    argv = {
        "input": [
            "embed",
            "--model",
            str(model_dir),
            "--input",
            str(missing),
            "--output",
            str(tmp_path / "out" / "v.npy"),
        ],
        "model": [
            "embed",
            "--model",
            str(missing),
            "--input",
            str(text),
            "--output",
            str(tmp_path / "out" / "v.npy"),
        ],
        "vocab": ["tokenize", "--vocab", str(missing), "--input", str(text)],
    }[what]
    fails_with_one_line(capsys, argv, str(missing))
    assert no_files(tmp_path / "out")


@pytest.mark.parametrize(
    "command",
    ["tokenize", "vocab", "train-vocab", "prepare-pretraining", "glue", "classify", "ner"],
)
def test_a_folder_where_a_file_belongs(tmp_path, capsys, model_dir, command):
    """The same line from every command: some said "file not found" (tokenize, train-vocab,
    prepare-pretraining, the GLUE data-dir lookup), others "cannot read (Is a directory)"."""
    text = tmp_path / "in.txt"
    text.write_text("hello\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    out = tmp_path / "out"
    if command == "glue":  # the task's train.tsv is a folder
        shutil.copytree(FIXTURES / "task_glue" / "SST-2", tmp_path / "glue" / "SST-2")
        folder = tmp_path / "glue" / "SST-2" / "train.tsv"
        folder.unlink()
        folder.mkdir()
    argv = {
        "tokenize": [
            "tokenize",
            "--vocab",
            str(FIXTURES / "tok_vocab.txt"),
            "--input",
            str(folder),
        ],
        "vocab": ["tokenize", "--vocab", str(folder), "--input", str(text)],
        "train-vocab": ["train-vocab", "--input", str(folder), "--output", str(out / "v.txt")],
        "prepare-pretraining": _prepare(folder, out),
        "glue": _finetune(
            "glue", model_dir, out, "--task", "SST-2", "--data-dir", str(tmp_path / "glue")
        ),
        "classify": _finetune(
            "classify",
            model_dir,
            out,
            "--train",
            str(folder),
            "--dev",
            str(folder),
            "--text-column",
            "t",
        ),
        "ner": _finetune(
            "ner", model_dir, out, "--train", str(folder), "--dev", str(FIXTURES / "task_conll.txt")
        ),
    }[command]
    last = fails_with_one_line(capsys, argv)
    assert last.endswith(f": error: {folder}: is a folder, expected a file"), last
    assert no_files(out)


def _deny_temp_files(monkeypatch):
    def deny(*args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(tempfile, "mkstemp", deny)


def test_unwritable_output_folder(tmp_path, capsys, model_dir, monkeypatch):
    text = tmp_path / "in.txt"
    text.write_text("hello\n")
    out = tmp_path / "out" / "v.npy"
    argv = ["embed", "--model", str(model_dir), "--input", str(text), "--output", str(out)]
    _deny_temp_files(monkeypatch)  # running as root, chmod would not stop the write
    fails_with_one_line(capsys, argv, str(out), "Permission denied")
    assert no_files(tmp_path / "out")


def test_output_under_a_file(tmp_path, capsys, model_dir):
    text = tmp_path / "in.txt"
    text.write_text("hello\n")
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder\n")
    argv = [
        "embed",
        "--model",
        str(model_dir),
        "--input",
        str(text),
        "--output",
        str(blocker / "v.npy"),
    ]
    fails_with_one_line(capsys, argv, str(blocker / "v.npy"))
    assert blocker.read_text() == "a file, not a folder\n"


def _disk_full(monkeypatch, where: str = "") -> None:
    """fsync fails with ENOSPC, as when the data cannot be flushed to a full disk: for every
    file, or only for files whose path contains ``where``."""
    fsync = os.fsync

    def full(fd):
        if where in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return fsync(fd)

    monkeypatch.setattr(os, "fsync", full)


def test_full_disk_embed(tmp_path, capsys, model_dir, monkeypatch):
    text = tmp_path / "in.txt"
    text.write_text("hello\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "v.npy").write_bytes(b"previous result")
    argv = [
        "embed",
        "--model",
        str(model_dir),
        "--input",
        str(text),
        "--output",
        str(out / "v.npy"),
    ]
    _disk_full(monkeypatch)
    fails_with_one_line(capsys, argv, str(out / "v.npy"), "No space left on device")
    assert [p.name for p in out.iterdir()] == ["v.npy"]  # no temp file left behind
    assert (out / "v.npy").read_bytes() == b"previous result"  # the old file is intact


def test_full_disk_prepare(tmp_path, capsys, monkeypatch):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat .\nit was fine .\n\nanother doc here .\nyes it is .\n")
    _disk_full(monkeypatch)
    fails_with_one_line(capsys, _prepare(corpus, tmp_path / "out"), "No space left on device")
    assert no_files(tmp_path / "out")


def test_full_disk_during_checkpoint(tmp_path, capsys, monkeypatch):
    data = prepare_tiny_corpus(tmp_path / "corpus", docs=6, holdout=0.0)
    run = tmp_path / "run"
    argv = [
        "pretrain",
        "--data",
        str(data),
        "--output",
        str(run),
        "--max-steps",
        "2",
        "--batch-size",
        "4",
        "--save-every",
        "1",
        "--threads",
        "1",
        "--peak-tflops",
        "1",
        "--no-progress",
    ]
    _disk_full(monkeypatch, where="/checkpoints/")  # training starts, the first checkpoint fails
    last = fails_with_one_line(capsys, argv, "No space left on device")
    assert "checkpoints" in last, last
    ckpts = run / "checkpoints"
    assert not ckpts.exists() or not list(ckpts.iterdir())  # no half checkpoint, no temp folder


# ---- files that parse but hold nothing to train on, select on or score ------------------------


def _squad_doc(data: list) -> str:
    return json.dumps({"version": "1.1", "data": data})


@pytest.mark.parametrize(
    ("family", "bad", "name", "text", "where"),
    [
        ("classify", "train", "a.csv", "text,label\n", ": no examples (expected labelled train"),
        ("classify", "dev", "a.csv", "text,label\n", ": no examples (expected labelled dev"),
        ("ner", "dev", "dev.txt", "-DOCSTART- -X- -X- O\n\n", ": no examples"),
        ("ner", "train", "train.txt", "EU\nrejects\n", ":1: expected labelled train data"),
        ("squad", "dev", "dev.json", _squad_doc([]), ": no examples (expected labelled dev"),
        (
            "swag",
            "dev",
            "val.csv",
            SWAG_HEAD.replace(",label", "") + "0,v,1,A. He,A.,He,g,a,b,c,d\n",
            ":2: expected labelled dev data",
        ),
    ],
)
def test_finetune_without_labelled_examples(
    tmp_path, capsys, model_dir, family, bad, name, text, where
):
    """A training file with no examples was "no training examples" (no file named, or a tokens-only
    CoNLL file an IndexError); a dev file with none, or without labels, trained and selected on
    a NaN or 0 score (exit 0) or ended in a traceback."""
    good = {
        "classify": FIXTURES / "task_glue" / "SST-2" / "dev.tsv",
        "ner": FIXTURES / "task_conll.txt",
        "squad": FIXTURES / "task_squad_v1.json",
        "swag": FIXTURES / "task_swag.csv",
    }[family]
    path = tmp_path / name
    path.write_text(text)
    if family == "classify":
        good = tmp_path / "good.csv"
        good.write_text("text,label\ngood film,1\nbad film,0\n")
    files = {"train": good, "dev": good, bad: path}
    extra = ["--text-column", "text"] if family == "classify" else []
    out = tmp_path / "out"
    argv = _finetune(
        family, model_dir, out, "--train", str(files["train"]), "--dev", str(files["dev"]), *extra
    )
    fails_with_one_line(capsys, argv, f"{path}{where}")
    assert no_files(out)


@pytest.fixture(scope="module")
def classifier_dir(model_dir, tmp_path_factory) -> Path:
    """A classify model fine-tuned for one step from the tiny checkpoint."""
    d = tmp_path_factory.mktemp("classifier")
    (d / "train.csv").write_text("text,label\nthe cat,a\nthe dog,b\n")
    argv = _finetune("classify", model_dir, d / "model", "--train", str(d / "train.csv"))
    argv += ["--dev", str(d / "train.csv"), "--text-column", "text", "--max-steps", "1"]
    argv += ["--max-seq-length", "32"]
    assert main(argv) == 0
    return d / "model"


def test_evaluate_and_predict_a_header_alone(tmp_path, capsys, classifier_dir):
    """A CSV with its header alone: evaluate and predict ended in a traceback (numpy "need at
    least one array to stack"); an empty CoNLL file or SQuAD "data": [] scored 0 with exit 0."""
    data = tmp_path / "dev.csv"
    data.write_text("text,label\n")
    argv = ["evaluate", "--model", str(classifier_dir), "--data", str(data)]
    fails_with_one_line(capsys, argv, f"{data}: no examples to score")
    out = tmp_path / "p.jsonl"
    argv = ["predict", "--model", str(classifier_dir), "--input", str(data), "--output", str(out)]
    assert main(argv) == 0  # nothing to predict: an empty JSONL file
    assert "wrote 0 predictions" in capsys.readouterr().err
    assert out.read_text() == ""


def test_train_vocab_from_no_text(tmp_path, capsys):
    """An empty corpus wrote a vocabulary of the special tokens alone, with exit 0."""
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    out = tmp_path / "out" / "vocab.txt"
    argv = ["train-vocab", "--input", str(empty), "--vocab-size", "50", "--output", str(out)]
    fails_with_one_line(capsys, argv, f"{empty}: no words to learn a vocabulary from")
    assert no_files(tmp_path / "out")


# ---- config.json that is not a BERT config ----------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda cfg, raw: "{not json", "config.json:1: invalid JSON"),
        (
            lambda cfg, raw: json.dumps({**cfg, "model_type": "roberta"}),
            "model_type 'roberta' is not a BERT model",
        ),
        (
            lambda cfg, raw: json.dumps({**cfg, "hidden_size": "16"}),
            "config.json: BertConfig.hidden_size",
        ),
    ],
)
def test_model_config_not_bert(tmp_path, capsys, model_dir, edit, needle):
    """Invalid JSON ended in a JSONDecodeError traceback; another model type was loaded as BERT
    (or failed on shapes, never naming the type); a mistyped value did not name the file."""
    d = _copy(model_dir, tmp_path)
    raw = (d / "config.json").read_text()
    (d / "config.json").write_text(edit(json.loads(raw), raw))
    text = tmp_path / "in.txt"
    text.write_text("hello\n")
    out = tmp_path / "out" / "v.npy"
    argv = ["embed", "--model", str(d), "--input", str(text), "--output", str(out)]
    last = fails_with_one_line(capsys, argv, needle)
    assert f"{d / 'config.json'}" in last
    assert no_files(tmp_path / "out")


def test_model_config_with_bom(tmp_path, capsys, model_dir):
    """A byte-order mark before config.json's JSON (a Windows editor) was a JSONDecodeError."""
    d = _copy(model_dir, tmp_path)
    (d / "config.json").write_bytes(b"\xef\xbb\xbf" + (d / "config.json").read_bytes())
    text = tmp_path / "in.txt"
    text.write_text("hello\n")
    out = tmp_path / "v.npy"
    assert main(["embed", "--model", str(d), "--input", str(text), "--output", str(out)]) == 0
    assert out.is_file()


# ---- an output folder that cannot be made -----------------------------------------------------


def test_finetune_output_is_a_file(tmp_path, capsys, model_dir):
    """``--output`` naming a file: the run trained, then ended in a FileExistsError traceback
    when it saved the selected model; now refused before the data is read."""
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder\n")
    conll = str(FIXTURES / "task_conll.txt")
    argv = _finetune("ner", model_dir, blocker, "--train", conll, "--dev", conll)
    fails_with_one_line(capsys, argv, f"{blocker}: cannot create the output folder")
    assert blocker.read_text() == "a file, not a folder\n"


def test_finetune_output_under_a_read_only_folder(tmp_path, capsys, model_dir, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == ro else real(p, mode))
    conll = str(FIXTURES / "task_conll.txt")
    argv = _finetune("ner", model_dir, ro / "out", "--train", conll, "--dev", conll)
    fails_with_one_line(
        capsys, argv, f"{ro / 'out'}: cannot create the output folder", "not writable"
    )
    assert not (ro / "out").exists()


@pytest.mark.parametrize("command", ["embed", "predict"])
def test_folder_output_is_a_file(tmp_path, capsys, model_dir, classifier_dir, command):
    """A folder ``--output`` (``DIR/``) that is a file: a FileExistsError traceback."""
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder\n")
    text = tmp_path / "in.csv"
    text.write_text("text\nhello\n")
    model = model_dir if command == "embed" else classifier_dir
    flag = "--input"
    argv = [command, "--model", str(model), flag, str(text), "--output", f"{blocker}/"]
    fails_with_one_line(capsys, argv, f"{blocker}: cannot create the output folder")
    assert blocker.read_text() == "a file, not a folder\n"


def test_pretrain_output_is_a_file(tmp_path, capsys):
    """``--output`` naming a file: a FileExistsError traceback."""
    data = prepare_tiny_corpus(tmp_path / "corpus", docs=6, holdout=0.0)
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder\n")
    argv = ["pretrain", "--data", str(data), "--output", str(blocker), "--max-steps", "1"]
    argv += ["--batch-size", "2", "--no-progress"]
    fails_with_one_line(capsys, argv, f"{blocker}: cannot create the output folder")
    assert blocker.read_text() == "a file, not a folder\n"
