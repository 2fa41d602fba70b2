"""What a corpus run reports (inference/corpus.py): lines, window counts and peak memory of
``embed_to``'s summary, and the summary line's rate."""

from __future__ import annotations

import random
from pathlib import Path

from bertkit.inference import Embedder
from bertkit.inference.corpus import StreamSummary, embed_to
from bertkit.inference.sharded import StreamConfig
from bertkit.tasks.windows import WindowCounts
from support.tiny_mlm import WORDS
from support.tiny_mlm import tiny_mlm as _model


def test_embed_to_counts_every_line_and_window_once(tmp_path: Path) -> None:
    rng = random.Random(1)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 40))) for _ in range(23)]
    embedder = Embedder.load(_model(tmp_path), device="cpu", precision="fp32", batch_size=4)
    embedder.show_progress = False
    _, want = embedder.embed(lines)
    assert want.windowed > 0  # some lines are longer than the model's 32 positions
    summary = embed_to(embedder, iter(lines), tmp_path / "out", config=StreamConfig(5, 10))
    assert (summary.lines, summary.embedded, summary.mismatched) == (23, 23, 0)
    assert summary.counts == want
    assert 10 < summary.peak_rss_mib < 1_000_000  # MiB of this process (ru_maxrss is KiB)
    empty = embed_to(embedder, iter([]), tmp_path / "none", config=StreamConfig(5, 10))
    assert (empty.lines, empty.embedded, empty.shards, empty.counts.inputs) == (0, 0, 0, 0)


def test_the_summary_line_states_the_rate_and_what_was_already_done() -> None:
    s = StreamSummary(
        lines=10,
        embedded=4,
        shards=3,
        written=1,
        mismatched=0,
        seconds=2.0,
        peak_rss_mib=512.4,
        counts=WindowCounts(4, 0, 4, 0),
    )
    assert s.line("out/") == (
        "embedded 4 lines -> out/ (3 shards, 1 written now, 6 lines already done; 2.0 lines/s, "
        "2.0 s, peak RSS 512 MiB)"
    )
    instant = StreamSummary(1, 1, 1, 1, 0, 0.0, 1.0, WindowCounts(1, 0, 1, 0))
    assert "1000000000.0 lines/s" in instant.line("o")  # a zero duration does not divide by 0
