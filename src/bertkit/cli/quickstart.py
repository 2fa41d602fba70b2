"""``bertkit quickstart``: raw text to a pre-trained tiny BERT on the built-in corpus, in minutes.

Steps: read WikiText-103 validation (shipped in ``bertkit/resources``, see ATTRIBUTION.txt), hold
out every 10th article, train a WordPiece vocabulary, build MLM+NSP instances, pre-train a tiny
BERT on the CPU, then report held-out MLM/NSP accuracy and show fill-mask predictions.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Iterator
from pathlib import Path

HELP = "pre-train a tiny BERT on the built-in corpus and show what it learned (about 5 minutes)"

CORPUS = "wikitext-103-valid.raw"
_TITLE = re.compile(r"^ ?= ([^=].*) = ?$")  # " = Title = "; sections are "= = Section = ="
_DETOK = ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."), ("<unk>", ""))
EXAMPLES = (
    "the river flows into the [MASK] .",
    "he was born in [MASK] and studied law .",
    "the album was [MASK] in 1995 .",
    "the [MASK] of the united states .",
    "she played the role of a [MASK] in the film .",
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--output",
        type=Path,
        default=Path("bertkit-quickstart"),
        help="working folder (default: ./bertkit-quickstart); rerunning resumes",
    )
    p.add_argument("--max-steps", type=int, default=800, help="pre-training updates")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads (default: 2, or 1 when other work keeps the cores busy)",
    )
    p.add_argument(
        "--corpus",
        type=Path,
        default=None,
        help="a WikiText-format file instead of the built-in one",
    )


def read_wikitext(path: Path) -> Iterator[list[str]]:
    """Articles of a WikiText file as lists of sentences.

    Top-level headings (`` = Title = ``) separate articles; section headings are dropped; each
    paragraph line is de-tokenized (``@-@`` joiners, ``<unk>`` removed) and split into sentences
    with the data pipeline's splitter.
    """
    from bertkit.data.corpus import split_sentences
    from bertkit.io import read_text_lines

    doc: list[str] = []
    for _, line in read_text_lines(path):
        if _TITLE.match(line):
            if doc:
                yield doc
            doc = []
            continue
        text = line.strip()
        if not text or text.startswith("="):
            continue
        for a, b in _DETOK:
            text = text.replace(a, b)
        doc.extend(s for s in split_sentences(" ".join(text.split())) if s)
    if doc:
        yield doc


def auto_threads(cores: int = 2) -> int:
    """``cores`` threads on an idle machine, 1 when the load average says the cores are busy:
    oversubscribed OpenMP threads made a tiny-BERT step ~5x slower than one thread here."""
    import os

    try:
        load = os.getloadavg()[0]
    except OSError:
        return cores
    return cores if load < 0.5 * cores else 1


def _write_bert_format(docs: list[list[str]], path: Path) -> None:
    from bertkit.io import atomic_write_text

    atomic_write_text(path, "".join("\n".join(d) + "\n\n" for d in docs))


def fill_mask(
    model, tokenizer, sentences: tuple[str, ...], k: int = 5
) -> list[tuple[str, list[str]]]:
    """Top-k predictions for the first [MASK] of each sentence."""
    import torch

    results = []
    model.eval()
    with torch.no_grad():
        for text in sentences:
            enc = tokenizer.encode(text)
            ids = torch.tensor([enc.input_ids])
            out = model(
                ids,
                attention_mask=torch.ones_like(ids),
                token_type_ids=torch.tensor([enc.token_type_ids]),
            )
            pos = enc.input_ids.index(tokenizer.mask_token_id)
            top = out.prediction_logits[0, pos].topk(k).indices.tolist()
            results.append((text, tokenizer.convert_ids_to_tokens(top)))
    return results


def run(args: argparse.Namespace) -> int:
    import importlib.resources

    import torch

    from bertkit.data.prepare import PrepareSettings, prepare_pretraining
    from bertkit.interop import load_pretrained
    from bertkit.model import BertForPreTraining
    from bertkit.tokenizer import BertTokenizer, train_wordpiece
    from bertkit.training.loop import TrainConfig
    from bertkit.training.pretraining import PretrainOptions, pretrain

    t0 = time.perf_counter()
    out: Path = args.output
    out.mkdir(parents=True, exist_ok=True)
    threads = args.threads or auto_threads()
    torch.set_num_threads(threads)
    corpus = args.corpus or Path(str(importlib.resources.files("bertkit") / "resources" / CORPUS))
    docs = list(read_wikitext(corpus))
    train_docs = [d for i, d in enumerate(docs) if i % 10 != 9]
    held_docs = [d for i, d in enumerate(docs) if i % 10 == 9]
    print(
        f"[1/5] corpus: {len(docs)} articles, {sum(map(len, docs))} sentences "
        f"({len(held_docs)} articles held out)"
    )
    _write_bert_format(train_docs, out / "train.txt")
    _write_bert_format(held_docs, out / "heldout.txt")

    vocab = out / "vocab.txt"
    if not vocab.exists():
        train_wordpiece(
            (s for d in train_docs for s in d),
            vocab_size=args.vocab_size,
            output=vocab,
            show_progress=False,
        )
    print(
        f"[2/5] vocabulary: {sum(1 for _ in vocab.open(encoding='utf-8'))} WordPiece tokens "
        f"({time.perf_counter() - t0:.0f}s)"
    )

    common = {"max_seq_length": 128, "format": "bert", "seed": 12345}
    if not (out / "data" / "manifest.json").exists():
        prepare_pretraining(
            [out / "train.txt"],
            vocab,
            out / "data",
            num_workers=1,
            settings=PrepareSettings(dupe_factor=5, **common),
            overwrite=True,
            show_progress=False,
        )
    if not (out / "heldout" / "manifest.json").exists():
        prepare_pretraining(
            [out / "heldout.txt"],
            vocab,
            out / "heldout",
            num_workers=1,
            settings=PrepareSettings(dupe_factor=1, **common),
            overwrite=True,
            show_progress=False,
        )
    print(f"[3/5] instances written to {out / 'data'} ({time.perf_counter() - t0:.0f}s)")

    opts = PretrainOptions(
        data=out / "data",
        output=out / "run",
        model_size="tiny",
        max_steps=args.max_steps,
        learning_rate=2e-3,
        warmup_proportion=0.05,
        eval_data=out / "heldout",
        device="cpu",
        threads=threads,
        train=TrainConfig(
            batch_size=args.batch_size,
            seed=0,
            log_every=50,
            eval_every=max(1, args.max_steps // 4),
            eval_examples=1000,
            save_every=max(1, args.max_steps // 4),
            keep_last=2,
            peak_flops=None,
            show_progress=None,
        ),
    )
    print(
        f"[4/5] pre-training a tiny BERT (L=2, H=128) for {args.max_steps} steps of "
        f"{args.batch_size} on {threads} CPU thread{'s' if threads > 1 else ''}"
    )
    result = pretrain(opts, log=print)
    e = result.final_eval or {}
    print(
        f"      held-out MLM accuracy {e.get('mlm_acc', float('nan')):.1%}, "
        f"NSP accuracy {e.get('nsp_acc', float('nan')):.1%} ({time.perf_counter() - t0:.0f}s)"
    )

    model = load_pretrained(out / "run" / "model", BertForPreTraining)
    tokenizer = BertTokenizer.from_pretrained(out / "run" / "model")
    print("[5/5] fill-mask with the trained model (top 5):")
    for text, preds in fill_mask(model, tokenizer, EXAMPLES):
        print(f"      {text}\n        -> {', '.join(preds)}")
    print(
        f"done in {time.perf_counter() - t0:.0f}s; model in {out / 'run' / 'model'}, curves in "
        f"{out / 'run' / 'curves.png'}"
    )
    return 0
