"""Write tests/fixtures/compat/v1: a model folder and a training checkpoint in today's formats.

Kept in the repository and loaded by tests/test_compat.py in every later version (torchtitan's
checkpoint-compatibility idea): a format change that breaks old folders fails that test. Run it
again only when a new format version is introduced (then as v2, keeping v1).

    .venv/bin/python scripts/make_compat_fixture.py
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "fixtures" / "compat" / "v1"
sys.path.insert(0, str(ROOT / "tests"))


def main() -> int:
    from training.helpers import make_trainer, stop_after, Stop  # noqa: I001

    from bertkit.cli.main import main as cli
    from bertkit.config import BertConfig
    from bertkit.interop import save_pretrained
    from bertkit.model import BertModel
    from bertkit.tokenizer import BertTokenizer

    torch.set_num_threads(1)
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    # 1. a fine-tuned classifier folder (config.json with bertkit_format, bertkit_task.json)
    work = OUT.parent / ".work"
    shutil.rmtree(work, ignore_errors=True)
    (work / "glue" / "SST-2").mkdir(parents=True)
    words = ["good", "bad", "film", "the", "was"]
    (work / "v.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n"
    )
    rows = ["sentence\tlabel"] + [
        f"the film was {w}\t{int(w == 'good')}" for w in ("good", "bad") * 4
    ]
    for split in ("train", "dev"):
        (work / "glue" / "SST-2" / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    cfg = BertConfig(
        vocab_size=10,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
    )
    torch.manual_seed(0)
    save_pretrained(BertModel(cfg), work / "enc", BertTokenizer(work / "v.txt"))
    assert (
        cli(
            [
                "finetune",
                "glue",
                "--task",
                "SST-2",
                "--data-dir",
                str(work / "glue"),
                "--model",
                str(work / "enc"),
                "--output",
                str(OUT / "model-sst2"),
                "--overwrite",  # the committed fixture, regenerated
                "--max-steps",
                "4",
                "--batch-size",
                "4",
                "--max-seq-length",
                "16",
                "--precision",
                "fp32",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    (OUT / "model-sst2" / "metrics.json").unlink()
    from bertkit.inference import Classifier

    clf = Classifier.load(OUT / "model-sst2", device="cpu", precision="fp32")
    texts = ["the film was good", "the film was bad"]
    expected = {"texts": texts, "predictions": clf(texts)}
    # 2. a pre-training run folder interrupted after its step-3 checkpoint, and the losses the
    # uninterrupted run logs for steps 4..6
    ref = make_trainer(work / "ref", steps=6, dropout=0.0)
    ref.fit()
    expected["losses"] = [
        json.loads(x)["loss"]
        for x in (work / "ref" / "metrics.jsonl").read_text().splitlines()
        if json.loads(x)["type"] == "train" and json.loads(x)["step"] > 3
    ]
    run = make_trainer(work / "run", steps=6, dropout=0.0)
    stop_after(run, 3)
    with contextlib.suppress(Stop):
        run.fit()
    shutil.copytree(work / "run" / "checkpoints", OUT / "run" / "checkpoints")
    (OUT / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    shutil.rmtree(work)
    size = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {OUT} ({size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
