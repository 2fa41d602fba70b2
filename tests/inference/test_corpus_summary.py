"""What a corpus run reports (inference/corpus.py): lines, window counts and peak memory of
``embed_to``'s summary, and the summary line's rate."""

from __future__ import annotations

import random
import threading
from pathlib import Path

from bertkit.inference import Embedder
from bertkit.inference.corpus import StreamSummary, embed_to, write_stream
from bertkit.inference.sharded import StreamConfig, lines_bytes
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
        resumed=6,
    )
    assert s.line("out/") == (
        "embedded 4 lines -> out/ (3 shards, 1 written now, 6 lines already done; 2.0 lines/s, "
        "2.0 s, peak RSS 512 MiB)"
    )
    instant = StreamSummary(1, 1, 1, 1, 0, 0.0, 1.0, WindowCounts(1, 0, 1, 0))
    assert "1000000000.0 lines/s" in instant.line("o")  # a zero duration does not divide by 0
    assert instant.line("o").startswith("embedded 1 line -> o (1 shard, 1 written now;")
    one = StreamSummary(3, 1, 2, 1, 0, 1.0, 1.0, WindowCounts(1, 0, 1, 0), resumed=1)
    assert ", 1 example already done; 1.0 examples/s" in one.line("o", "predicted", "example")


def test_counts_agree_with_their_noun() -> None:
    from bertkit.progress import counted

    assert [counted(n, "shard") for n in (0, 1, 2)] == ["0 shards", "1 shard", "2 shards"]
    assert (counted(1, "query"), counted(3, "query"), counted(2, "day")) == (
        "1 query",
        "3 queries",
        "2 days",
    )
    assert (counted(2, "batch"), counted(2, "judged query")) == ("2 batches", "2 judged queries")


def _two_ranks(folder: Path, n: int) -> list[StreamSummary]:
    """``write_stream`` of ``n`` lines by two ranks (threads sharing a barrier), as torchrun's
    processes run it: each computes every other window of 5 lines."""
    barrier = threading.Barrier(2)
    out: list[StreamSummary | None] = [None, None]

    def compute(chunk: list[str]):
        return (lambda a, b: "".join(chunk[a:b]).encode()), WindowCounts(len(chunk), 0, 0, 0)

    def rank(r: int) -> None:
        out[r] = write_stream(
            folder,
            iter([f"line {i}\n" for i in range(n)]),
            kind="lines",
            suffix=".txt",
            model_dir=None,
            settings={},
            extra={},
            compute=compute,
            item_bytes=lines_bytes,
            desc="test",
            config=StreamConfig(5, 5),
            source=None,
            show_progress=False,
            rank=r,
            world=2,
            barrier=barrier.wait,
        )

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(out)
    return out  # type: ignore[return-value]


def test_a_rank_reports_as_already_done_only_what_was_on_disk(tmp_path: Path) -> None:
    """The other rank's lines are not "already done" in a fresh run (they were: lines -
    embedded); on a resume, the lines on disk at the start are."""
    fresh = _two_ranks(tmp_path / "a", 20)
    assert [(s.lines, s.embedded, s.resumed) for s in fresh] == [(20, 10, 0), (20, 10, 0)]
    assert "already done" not in fresh[0].line("a")
    again = _two_ranks(tmp_path / "a", 20)  # complete: nothing to compute
    assert [(s.embedded, s.resumed) for s in again] == [(0, 20), (0, 20)]
    assert "20 lines already done" in again[1].line("a")
