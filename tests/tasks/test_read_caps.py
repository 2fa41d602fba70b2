"""The caps of ``encode_classification`` a rerank request may set (Cohere's
``max_tokens_per_doc`` and ``max_chunks_per_doc``): a pair's second text cut to its first N word
pieces before it is windowed, and each input read in its first N windows. Exact windows on the
tiny vocabulary (a b c d, ##x ##y), max length 16, a 2-piece query: room 11, stride 5."""

from __future__ import annotations

import pytest

from bertkit.data.tasks.glue import ClassificationExample
from bertkit.tasks.features import encode_classification
from bertkit.tasks.windows import WindowConfig

QUERY = "a a"
DOC = " ".join(["b", "c", "d"] * 10)  # 30 pieces, one per word


def _encode(tok, doc: str, windows: WindowConfig | None = None, **caps):
    return encode_classification(
        tok, [ClassificationExample("0", QUERY, doc, None)], 16, windows, **caps
    )


def _doc_pieces(tok, feature) -> list[int]:
    """The document's pieces in a window: segment 1 less its [SEP]."""
    return [i for i, t in zip(feature.input_ids, feature.token_type_ids) if t == 1][:-1]


def test_max_windows_reads_the_first_windows_as_the_input_cut_where_they_end(tiny_tok):
    whole = _encode(tiny_tok, DOC)
    pieces = tiny_tok.encode_ids(DOC)
    spans = [(0, 11), (6, 17), (12, 23), (18, 29), (24, 30)]
    assert [_doc_pieces(tiny_tok, f) for f in whole] == [pieces[s:e] for s, e in spans]
    assert {f.input_length for f in whole} == {2 + 30 + 3} and not any(f.truncated for f in whole)
    two = _encode(tiny_tok, DOC, max_windows=2)
    assert [f.input_ids for f in two] == [f.input_ids for f in whole[:2]]
    assert all(f.truncated and f.input_length == 2 + 17 + 3 for f in two)
    # the same windows as the document cut after its 17th piece, read whole
    cut = _encode(tiny_tok, " ".join(DOC.split()[:17]))
    assert [f.input_ids for f in cut] == [f.input_ids for f in two]
    assert cut[0].input_length == two[0].input_length
    for enough in (5, 6, 100):  # as many windows as there are, or more: nothing changes
        assert _encode(tiny_tok, DOC, max_windows=enough) == whole


def test_text_pair_max_tokens_reads_the_text_cut_after_that_piece(tiny_tok):
    capped = _encode(tiny_tok, DOC, text_pair_max_tokens=14)
    pieces = tiny_tok.encode_ids(DOC)
    assert [_doc_pieces(tiny_tok, f) for f in capped] == [pieces[0:11], pieces[6:14]]
    assert all(f.truncated and f.input_length == 2 + 14 + 3 for f in capped)
    cut = _encode(tiny_tok, " ".join(DOC.split()[:14]))
    assert [f.input_ids for f in cut] == [f.input_ids for f in capped]
    assert _encode(tiny_tok, DOC, text_pair_max_tokens=30) == _encode(tiny_tok, DOC)
    # the query is not capped, nor is a single text (no second text)
    (one,) = _encode(tiny_tok, "b c", text_pair_max_tokens=1)
    assert _doc_pieces(tiny_tok, one) == pieces[:1] and one.input_ids[1:3] == tiny_tok.encode_ids(
        QUERY
    )
    (single,) = encode_classification(
        tiny_tok, [ClassificationExample("0", "b c d", None, None)], 16, text_pair_max_tokens=1
    )
    assert len(single.input_ids) == 5 and not single.truncated


def test_a_cut_inside_a_word_is_the_text_cut_there(tiny_tok):
    """WordPiece matches longest-first from a word's start, so the first pieces of a word are
    what the word's prefix tokenizes to: "bxy" is b ##x ##y, its first two pieces "bx"'s."""
    doc = "bxy bxy"
    assert tiny_tok.convert_ids_to_tokens(tiny_tok.encode_ids(doc)) == ["b", "##x", "##y"] * 2
    for n, text in ((1, "b"), (2, "bx"), (4, "bxy b"), (5, "bxy bx")):
        assert (
            _encode(tiny_tok, doc, text_pair_max_tokens=n)[0].input_ids
            == _encode(tiny_tok, text)[0].input_ids
        )


@pytest.mark.parametrize("cap", [4, 20])
def test_both_caps_compose_and_apply_under_truncate(tiny_tok, cap):
    """The token cap comes first, then the windows of what is left; under ``truncate`` (one
    window, cut longest-first) the text is cut to ``cap`` pieces first too."""
    both = _encode(tiny_tok, DOC, text_pair_max_tokens=cap, max_windows=1)
    cut = " ".join(DOC.split()[:cap])
    assert [f.input_ids for f in both] == [
        f.input_ids for f in _encode(tiny_tok, cut, max_windows=1)
    ]
    truncate = WindowConfig(truncate=True)
    (one,) = _encode(tiny_tok, DOC, truncate, text_pair_max_tokens=cap)
    (want,) = _encode(tiny_tok, cut, truncate)
    assert one.input_ids == want.input_ids and one.truncated
