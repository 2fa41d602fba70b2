"""bertkit.inference.quantize against sentence-transformers 6.3: quantize_embeddings byte for
byte, and the rescored search of semantic_search_usearch (int8, binary, ubinary) and
semantic_search_faiss (uint8), run with exact numpy stand-ins for their indexes."""

from __future__ import annotations

import numpy as np
import pytest
from sentence_transformers.util import quantization as st

from bertkit.errors import ConfigError
from bertkit.inference.quantize import (
    PRECISIONS,
    Quantization,
    calibrate_stream,
    calibration_ranges,
    dequantize,
    quantize,
    search_quantized,
)
from support import fake_vector_index

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("dim", [37, 384])  # 37: the last packed byte is padded
@pytest.mark.parametrize("precision", PRECISIONS)
def test_quantize_equals_quantize_embeddings_byte_for_byte(precision, dim) -> None:
    vectors = RNG.standard_normal((60, dim)).astype(np.float32)
    calibration = RNG.standard_normal((200, dim)).astype(np.float32) * 0.8  # some x out of range
    ranges = calibration_ranges(calibration)
    ours = quantize(vectors, precision, ranges)
    ref = st.quantize_embeddings(vectors, precision, calibration_embeddings=calibration)
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    assert ours.tobytes() == ref.tobytes()
    own = st.quantize_embeddings(vectors, precision)  # ranges of the vectors themselves
    assert quantize(vectors, precision).tobytes() == own.tobytes()


def test_constant_dimensions_and_dequantize_follow_the_reference() -> None:
    vectors = RNG.standard_normal((30, 16)).astype(np.float32)
    vectors[:, 3] = 0.25  # max == min: step 1
    ranges = calibration_ranges(vectors)
    for precision in ("int8", "uint8"):
        codes = quantize(vectors, precision, ranges)
        assert codes.tobytes() == st.quantize_embeddings(vectors, precision).tobytes()
        np.testing.assert_array_equal(
            dequantize(codes, precision, ranges),
            st._dequantize_embeddings(codes.astype(int), precision, ranges),
        )


def test_bad_precision_ranges_and_integer_input_are_refused() -> None:
    with pytest.raises(ConfigError, match="one of"):
        quantize(np.zeros((2, 4), np.float32), "int4")
    with pytest.raises(ConfigError, match="at least 2"):
        quantize(np.zeros((1, 4), np.float32), "int8")
    with pytest.raises(ConfigError, match="must be float"):
        quantize(np.zeros((2, 4), np.int8), "binary")
    with pytest.raises(ConfigError, match="needs calibration ranges"):
        Quantization("uint8")


def _reference(precision, queries, corpus, ranges, k, multiplier):
    if precision == "uint8":
        hits, _ = st.semantic_search_faiss(
            queries, corpus_embeddings=corpus, corpus_precision="uint8", top_k=k,
            ranges=ranges, rescore_multiplier=multiplier,
        )  # fmt: skip
    else:
        hits, _ = st.semantic_search_usearch(
            queries, corpus_embeddings=corpus, corpus_precision=precision, top_k=k,
            ranges=ranges, rescore_multiplier=multiplier,
        )  # fmt: skip
    return [[h["corpus_id"] for h in row] for row in hits], [
        [h["score"] for h in row] for row in hits
    ]


@pytest.mark.parametrize("multiplier", [1, 4])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_search_equals_the_reference_rescored_search(precision, multiplier, monkeypatch) -> None:
    fake_vector_index.install(monkeypatch)
    dim = 40
    docs = RNG.standard_normal((300, dim)).astype(np.float32)
    queries = RNG.standard_normal((7, dim)).astype(np.float32)
    ranges = calibration_ranges(docs[:100]) if precision.endswith("int8") else None
    quant = Quantization(precision, ranges)
    codes = quant.apply(docs)
    blocks = [codes[:64], codes[64:65], codes[65:]]  # uneven shards, one of a single row
    ids, scores = search_quantized(queries, blocks, quant, 5, multiplier)
    ref_ids, ref_scores = _reference(precision, queries, codes, ranges, 5, multiplier)
    assert ids.tolist() == ref_ids
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-12)


def test_rescoring_changes_the_order_of_the_candidates() -> None:
    """Negative control: the binary candidates' own (Hamming) order is not the answer."""
    docs = RNG.standard_normal((300, 40)).astype(np.float32)
    queries = RNG.standard_normal((20, 40)).astype(np.float32)
    quant = Quantization("ubinary")
    codes, q = quant.apply(docs), quant.apply(queries)
    ids, _ = search_quantized(queries, [codes], quant, 5, 4)
    hamming = np.unpackbits(q[:, None, :] ^ codes[None], axis=2).sum(axis=2)
    by_hamming = np.argsort(hamming, axis=1, kind="stable")[:, :5]
    assert ids.tolist() != by_hamming.tolist()
    assert np.isin(ids, np.argsort(hamming, axis=1, kind="stable")[:, :20]).all()


def test_a_started_folder_keeps_its_ranges_and_a_new_one_calibrates_on_the_first_window() -> None:
    lines = [f"line {i}" for i in range(10)]
    vectors = RNG.standard_normal((10, 8)).astype(np.float32)

    def embed(chunk):
        return vectors[[lines.index(t) for t in chunk]], len(chunk)

    quant, stream, first = calibrate_stream("int8", iter(lines), 4, None, embed)
    np.testing.assert_array_equal(quant.ranges, calibration_ranges(vectors[:4]))
    assert list(stream) == lines and first[0] == lines[:4]  # the peeked lines put back
    recorded = {"quantization": Quantization("int8", vectors[:2]).to_manifest()}

    def refuse(chunk):
        raise AssertionError("a started folder's ranges are read, not recomputed")

    again, stream, first = calibrate_stream("int8", lines, 4, recorded, refuse)
    np.testing.assert_array_equal(again.ranges, vectors[:2])
    assert first is None
    assert (
        Quantization.from_manifest(quant.to_manifest()).ranges.tobytes() == quant.ranges.tobytes()
    )


def test_two_calibration_vectors_are_enough_as_for_the_reference() -> None:
    vectors = RNG.standard_normal((2, 8)).astype(np.float32)
    for precision in ("int8", "uint8"):
        ref = st.quantize_embeddings(vectors, precision)  # the reference refuses only one
        assert quantize(vectors, precision).tobytes() == ref.tobytes()


def test_k_and_the_rescore_multiplier_are_each_checked() -> None:
    quant = Quantization("ubinary")
    docs, queries = quant.apply(np.ones((4, 8), np.float32)), np.ones((1, 8), np.float32)
    for k, multiplier in ((0, 4), (3, 0)):
        with pytest.raises(ConfigError, match="must be >= 1, got"):
            search_quantized(queries, [docs], quant, k, multiplier)


def test_hamming_pieces_cover_every_query_and_bound_the_xor(monkeypatch) -> None:
    """512 bits (8 words) against a 65,536-document piece: the XOR is made 8 queries at a time
    (8 x 65,536 x 8 = 2**22 words), so 20 queries take three pieces; the answer is the one
    small blocks give, where the 20 fit in one piece."""
    quant = Quantization("binary")
    docs = quant.apply(RNG.standard_normal((70_000, 512)).astype(np.float32))
    queries = RNG.standard_normal((20, 512)).astype(np.float32)
    xor, sizes = np.bitwise_xor, []

    def recorded(a, b):
        out = xor(a, b)
        sizes.append(out.size)
        return out

    monkeypatch.setattr(np, "bitwise_xor", recorded)
    ids, scores = search_quantized(queries, [docs], quant, 5, 4)
    monkeypatch.setattr(np, "bitwise_xor", xor)
    small = [docs[lo : lo + 4096] for lo in range(0, len(docs), 4096)]
    small_ids, small_scores = search_quantized(queries, small, quant, 5, 4)
    assert ids.tolist() == small_ids.tolist()
    np.testing.assert_array_equal(scores, small_scores)
    assert max(sizes) <= 1 << 22 and sizes.count(1 << 22) >= 2
