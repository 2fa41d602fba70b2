"""``embed --quantize int8`` under torchrun: rank 0 calibrates and every rank quantizes with its
ranges (two ranks as threads, as tests/inference/test_corpus_summary.py runs them)."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path

import numpy as np

from bertkit.inference import Embedder
from bertkit.inference.corpus import embed_to
from bertkit.inference.quantize import calibration_ranges, quantize
from bertkit.inference.sharded import StreamConfig
from support.tiny_mlm import WORDS
from support.tiny_mlm import tiny_mlm as _model

SHIFT = 0.05  # rank 1's machine: its kernels round differently (exaggerated to show in codes)


def _ranked(base: Embedder, calls: list[str], shift: float) -> Embedder:
    class Ranked(Embedder):
        def embed(self, texts, *args, **kwargs):
            calls.append(texts[0])
            vectors, counts = super().embed(texts, *args, **kwargs)
            return vectors + shift, counts

    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base) if f.init}
    return Ranked(**fields)


def test_every_rank_quantizes_with_rank_0s_ranges_and_only_rank_0_calibrates(
    tmp_path: Path,
) -> None:
    base = Embedder.load(_model(tmp_path), device="cpu", precision="fp32", batch_size=4)
    base.show_progress = False
    lines = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(3 + i % 5)) for i in range(20)]
    calls: list[list[str]] = [[], []]
    box: dict[str, np.ndarray] = {}
    meet, barrier = threading.Barrier(2), threading.Barrier(2)

    def share(rank: int):
        def exchange(ranges: np.ndarray | None) -> np.ndarray:
            assert (ranges is None) == (rank != 0)  # only rank 0 embeds the window
            if rank == 0:
                box["ranges"] = ranges
            meet.wait()
            return box["ranges"]

        return exchange

    def run(rank: int) -> None:
        embed_to(
            _ranked(base, calls[rank], SHIFT * rank),
            iter(lines),
            tmp_path / "out",
            config=StreamConfig(5, 5),
            show_progress=False,
            rank=rank,
            world=2,
            barrier=barrier.wait,
            quantize="int8",
            share=share(rank),
        )

    threads = [threading.Thread(target=run, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert lines[0] not in calls[1]  # rank 1 never embedded the calibration window
    ranges = calibration_ranges(base.embed(lines[:5])[0])
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    np.testing.assert_array_equal(
        np.asarray(manifest["quantization"]["ranges"], np.float32), ranges
    )
    shard = tmp_path / "out" / manifest["shards"][1]["path"]  # lines 6-10: rank 1's
    want = quantize(base.embed(lines[5:10])[0] + SHIFT, "int8", ranges)
    assert np.load(shard).tobytes() == want.tobytes()
