"""``bertkit finetune --output``: a folder that already holds a model (or anything else) is
refused unless ``--overwrite`` is given, as ``bertkit convert`` and transformers' ``run_glue.py``
refuse; a run that was interrupted is rerun into its own folder by the same command."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bertkit.cli.main import main
from bertkit.training.model_dir import UNFINISHED_FILE
from support.cli_runs import FAST, finetune
from support.tiny_glue import write_sentiment


def _argv(model: Path, out: Path, data: Path, *extra: str) -> list[str]:
    glue = ["--task", "SST-2", "--data-dir", str(data)]
    return ["finetune", "glue", "--model", str(model), "--output", str(out), *FAST, *glue, *extra]


def test_a_finished_model_is_refused_before_any_work_unless_overwrite(
    tiny_model: Path, tmp_path: Path, capsys
) -> None:
    data = write_sentiment(tmp_path / "glue")
    out = tmp_path / "sst"
    finetune("glue", tiny_model, out, "--task", "SST-2", "--data-dir", str(data))
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert UNFINISHED_FILE not in before  # a finished job leaves no mark
    capsys.readouterr()

    # refused before the data are read: a missing data folder is not what it reports
    assert main(_argv(tiny_model, out, tmp_path / "missing")) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"bertkit finetune: error: {out}: already holds a fine-tuned model "
        "(pass --overwrite to replace it, or choose another --output)"
    )
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before

    assert main(_argv(tiny_model, out, data, "--seed", "4", "--overwrite")) == 0
    assert json.loads((out / "metrics.json").read_text())["config"]["seed"] == 4
    assert (out / "model.safetensors").read_bytes() != before["model.safetensors"]


def test_the_model_folder_or_any_other_files_are_refused(
    tiny_model: Path, tmp_path: Path, capsys
) -> None:
    """``--output`` naming the ``--model`` folder by mistake would replace the checkpoint."""
    data = write_sentiment(tmp_path / "glue")
    assert main(_argv(tiny_model, tiny_model, data)) == 1
    assert f"{tiny_model}: already holds a model (pass --overwrite" in capsys.readouterr().err
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("mine\n")
    assert main(_argv(tiny_model, notes, data)) == 1
    assert f"{notes}: exists and is not empty (pass --overwrite" in capsys.readouterr().err
    assert (notes / "todo.txt").read_text() == "mine\n"
    empty = tmp_path / "empty"
    empty.mkdir()  # an empty folder (mkdtemp's) is free
    assert main(_argv(tiny_model, empty, data)) == 0


def test_an_interrupted_run_reruns_into_its_folder_with_the_same_command(
    tiny_model: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    """A job stopped after its first save (Ctrl-C before metrics.json) leaves its mark: the
    same command, without --overwrite, replaces that output and finishes the job; another job
    (here ``classify`` on the same files), or the same job on another training file, is refused
    it. Its last line says what the folder keeps
    (it used to be ``interrupted`` alone)."""
    import bertkit.recipes.finetune as recipe

    data = write_sentiment(tmp_path / "glue")
    out = tmp_path / "sst"

    def interrupted(path, text) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(recipe, "atomic_write_text", interrupted)
    assert main(_argv(tiny_model, out, data)) == 130
    assert (out / "config.json").is_file() and (out / UNFINISHED_FILE).is_file()
    last = capsys.readouterr().err.strip().splitlines()[-1]
    kept = re.escape(f"{out} keeps the best model so far (")
    assert re.fullmatch(
        r"bertkit finetune: interrupted: " + kept + r"lr [\d.e-]+ seed \d+ epoch 1, dev accuracy "
        r"[01]\.\d{4}\), without metrics\.json; the same command starts the selection over in "
        r"it \(no mid-run checkpoint is kept\)",
        last,
    ), last
    monkeypatch.undo()
    # the kept model loads, with a warning that it is not the selection's result
    evaluate = ["evaluate", "--model", str(out), "--data", str(data)]
    assert main(evaluate) == 0
    warning = f"bertkit evaluate: warning: {out} is an interrupted fine-tuning job's folder"
    assert warning in capsys.readouterr().err

    # another job is refused the folder, as a finished model's, before it writes anything
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    sst = data / "SST-2"
    other = ["--train", str(sst / "train.tsv"), "--dev", str(sst / "dev.tsv")]
    other += ["--text-column", "sentence", "--label-column", "label"]
    classify = ["finetune", "classify", "--model", str(tiny_model), "--output", str(out)]
    assert main([*classify, *FAST, *other]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"bertkit finetune: error: {out}: holds an interrupted 'glue SST-2' job's model, not this "
        "'classify train' job's (pass --overwrite to replace it, or choose another --output)"
    )
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    # and so is the same task on another training file (a copy elsewhere), named in the mark
    copy = write_sentiment(tmp_path / "copy")
    trained = (data / "SST-2" / "train.tsv").resolve()
    assert (out / UNFINISHED_FILE).read_text().splitlines()[:2] == [
        "job: glue SST-2",
        f"data: {trained}",
    ]
    assert main(_argv(tiny_model, out, copy)) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"bertkit finetune: error: {out}: holds an interrupted 'glue SST-2' job's model on "
        f"{trained}, not this one's on {(copy / 'SST-2' / 'train.tsv').resolve()} (pass "
        "--overwrite to replace it, or choose another --output)"
    )
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before

    assert main(_argv(tiny_model, out, data)) == 0
    assert (out / "metrics.json").is_file() and not (out / UNFINISHED_FILE).exists()
    assert main(evaluate) == 0
    assert "warning" not in capsys.readouterr().err
