"""Stage 0: pre-training shards from the built-in corpus, made by bertkit's own pipeline.

A WordPiece vocabulary (``train_wordpiece``) and MLM + NSP shards at the two lengths of the
sizes (``prepare_pretraining``: dynamic masking, 5% of the articles held out as an ``eval``
split), into ``WORK/data``. The articles are written to one file per worker first, because the
pipeline prepares files in parallel and the corpus is a single file. Stage 5 prepares its own
corpus with :func:`prepare_corpus`.
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchmarks.gpu_check.common import context, finish

VOCAB_SAMPLE_WORDS = 2_000_000
"""Words the vocabulary is trained on: the most frequent pieces settle well before that."""


def builtin_corpus() -> Path:
    """The built-in corpus file (the quickstart's)."""
    import importlib.resources

    from bertkit.recipes.quickstart_settings import CORPUS

    return Path(str(importlib.resources.files("bertkit") / "resources" / CORPUS))


def _workers() -> int:
    return max(1, min(16, os.cpu_count() or 1))


def prepare_corpus(
    docs: Iterable[list[str]],
    folder: Path,
    vocab_size: int,
    lengths: Iterable[int],
    small_lengths: Iterable[int] = (),
    holdout: float = 0.05,
) -> dict[str, Any]:
    """Vocabulary and shards of ``docs`` (lists of sentences) in ``folder``: ``vocab.txt`` and
    ``data{N}/`` for each of ``lengths`` (every article) and ``small_lengths`` (the first
    quarter of the chunk files: enough for timing batches, a quarter of the time), each with
    an ``eval`` split of about ``holdout`` of the articles. Returns what was made, with seconds
    per step."""
    from bertkit.data.corpus import CorpusOptions
    from bertkit.data.prepare import PrepareSettings, prepare_pretraining
    from bertkit.data.pretraining import InstanceConfig
    from bertkit.data.shards import PretrainingDataset
    from bertkit.tokenizer import train_wordpiece

    t0 = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    docs = list(docs)
    workers = _workers()
    chunks = [folder / f"chunk{k:02d}.txt" for k in range(min(workers, len(docs)))]
    for k, path in enumerate(chunks):  # bert format: a sentence a line, a blank line per doc
        path.write_text("".join("\n".join(d) + "\n\n" for d in docs[k :: len(chunks)]), "utf-8")
    words = sum(len(s.split()) for d in docs for s in d)
    made: dict[str, Any] = {
        "articles": len(docs),
        "words": words,
        "workers": workers,
        "read_s": round(time.perf_counter() - t0, 2),
    }
    t1 = time.perf_counter()
    sample, budget = [], VOCAB_SAMPLE_WORDS
    for d in docs:
        sample.extend(d)
        budget -= sum(len(s.split()) for s in d)
        if budget <= 0:
            break
    vocab = folder / "vocab.txt"
    train_wordpiece(sample, vocab_size=vocab_size, output=vocab, show_progress=False)
    made.update(
        vocab=str(vocab),
        vocab_size=sum(1 for _ in vocab.open(encoding="utf-8")),
        vocab_s=round(time.perf_counter() - t1, 2),
    )
    parts = [(n, chunks) for n in lengths]
    parts += [(n, chunks[: max(1, len(chunks) // 4)]) for n in small_lengths]
    for length, inputs in parts:
        t2 = time.perf_counter()
        settings = PrepareSettings(
            instance=InstanceConfig(max_seq_length=length, dupe_factor=1, balanced_next=True),
            corpus=CorpusOptions(format="bert"),
            dynamic_masking=True,
            holdout_fraction=holdout,
        )
        out = folder / f"data{length}"
        prepare_pretraining(
            inputs, vocab, out, settings, num_workers=workers, overwrite=True, show_progress=False
        )
        made[f"data{length}"] = {
            "path": str(out),
            "train": len(PretrainingDataset(out, "train")),
            "eval": len(PretrainingDataset(out, "eval")),
            "seconds": round(time.perf_counter() - t2, 2),
        }
    for path in chunks:
        path.unlink()
    made["seconds"] = round(time.perf_counter() - t0, 2)
    return made


def main(argv: list[str] | None = None) -> int:
    ctx = context(0, argv)
    from bertkit.data.corpus import read_documents

    s = ctx.sizes
    docs = itertools.islice(read_documents([builtin_corpus()]), s.articles)  # lazily: dry run
    made = prepare_corpus(docs, ctx.vocab.parent, s.vocab, s.lengths[:1], s.lengths[1:], s.holdout)
    print(f"stage 0: {made}", flush=True)
    ctx.write(corpus="built-in (bertkit/resources/wikipedia-sample.txt.xz)", **made)
    ok = all(made[f"data{n}"]["train"] > 0 and made[f"data{n}"]["eval"] > 0 for n in s.lengths)
    return finish(ctx, ok, "" if ok else "a split came out empty")


if __name__ == "__main__":
    sys.exit(main())
