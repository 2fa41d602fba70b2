"""tokenizer.json, the ``tokenizers`` library's file: written for every folder, read when alone.

Serving stacks that run the Rust tokenizer (text-embeddings-inference, ``tokenizers`` itself,
transformers' fast tokenizers) read a model folder's tokenizer from ``tokenizer.json`` and refuse
a folder without it; many Hub folders hold only that file (no vocab.txt). This module is the one
place that knows its layout for BERT:

- :func:`to_tokenizer_json` builds the file transformers writes for the same vocab.txt and
  settings (``BertTokenizerFast.from_pretrained(folder).backend_tokenizer.to_str()``) from a
  :class:`BertTokenizer`: BertNormalizer, BertPreTokenizer, WordPiece, the
  ``[CLS] A [SEP] (B [SEP])`` template and the vocabulary's BERT special tokens as added tokens
  (matched in the raw text, case-sensitively, as bertkit does with
  ``split_special_tokens=False``; the file has no field for ``True``, which transformers keeps
  in tokenizer_config.json).
- :func:`from_tokenizer_json` reads such a file back, refusing (one-line CheckpointError) any
  component bertkit does not reproduce (BPE, Unigram, Metaspace, another normalizer, extra added
  tokens, a different template), so a folder never loads as a silently different tokenizer.

Where a folder's vocabulary and settings come from (vocab.txt, tokenizer.json or both) is
:mod:`bertkit.tokenizer.folder`'s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bertkit.errors import CheckpointError, MissingFileError
from bertkit.io import atomic_write_text
from bertkit.tokenizer.wordpiece import PREFIX, SPECIAL_TOKENS, Vocab

TOKENIZER_JSON = "tokenizer.json"
VOCAB_TXT = "vocab.txt"
_SUPPORTED = (
    "bertkit reads BERT WordPiece tokenizers only (BertNormalizer, BertPreTokenizer, WordPiece)"
)
# an added token is matched as written, anywhere in the raw text: what bertkit does with specials
_ADDED_FLAGS = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False}
# BERT's template, written by to_tokenizer_json and required by from_tokenizer_json
_SINGLE = (("[CLS]", 0), ("$A", 0), ("[SEP]", 0))
_PAIR = (*_SINGLE, ("$B", 1), ("[SEP]", 1))


class WordPieceSettings(Protocol):
    """What tokenizer.json records of a tokenizer (a :class:`BertTokenizer` has it all)."""

    @property
    def vocab(self) -> Vocab: ...
    @property
    def do_lower_case(self) -> bool: ...
    @property
    def strip_accents(self) -> bool | None: ...
    @property
    def tokenize_chinese_chars(self) -> bool: ...
    @property
    def max_input_chars_per_word(self) -> int: ...


def to_tokenizer_json(tokenizer: WordPieceSettings) -> dict[str, Any]:
    """The tokenizer.json content (a JSON object) that tokenizes as ``tokenizer`` does.

    ``tokenizers.Tokenizer.from_str(json.dumps(result))`` gives bertkit's ids, token type ids
    and character offsets (tests/tokenizer/test_tokenizer_json.py,
    scripts/tokenizer_json_parity.py). Truncation and padding are null: callers set them per
    call (transformers does the same when it loads the file). A vocabulary without [CLS] or
    [SEP] gets no post-processor (bertkit then encodes with ``add_special_tokens=False`` only).
    """
    vocab = tokenizer.vocab
    ids = vocab.token_to_id
    specials = sorted((ids[t], t) for t in SPECIAL_TOKENS if t in ids)
    cls, sep = ids.get("[CLS]"), ids.get("[SEP]")
    post_processor = None
    if cls is not None and sep is not None:
        post_processor = {
            "type": "TemplateProcessing",
            "single": [_template_item(*p) for p in _SINGLE],
            "pair": [_template_item(*p) for p in _PAIR],
            "special_tokens": {
                t: {"id": t, "ids": [i], "tokens": [t]} for t, i in (("[CLS]", cls), ("[SEP]", sep))
            },
        }
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": t, **_ADDED_FLAGS, "special": True} for i, t in specials
        ],
        "normalizer": {
            "type": "BertNormalizer",
            "clean_text": True,  # bertkit always drops control characters (normalize.py)
            "handle_chinese_chars": bool(tokenizer.tokenize_chinese_chars),
            # null follows lowercase, as in BERT; transformers writes it so too
            "strip_accents": tokenizer.strip_accents,
            "lowercase": bool(tokenizer.do_lower_case),
        },
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": post_processor,
        "decoder": {"type": "WordPiece", "prefix": PREFIX, "cleanup": True},
        "model": {
            "type": "WordPiece",
            "unk_token": "[UNK]",
            "continuing_subword_prefix": PREFIX,
            "max_input_chars_per_word": int(tokenizer.max_input_chars_per_word),
            # by id; a token listed twice in vocab.txt keeps its last id, as in both HF readers
            "vocab": dict(sorted(ids.items(), key=lambda kv: kv[1])),
        },
    }


def _template_item(name: str, type_id: int) -> dict[str, Any]:
    """``("$A", 0)`` -> the JSON of sequence A with type id 0; ``("[CLS]", 0)`` -> a special."""
    if name.startswith("$"):
        return {"Sequence": {"id": name[1:], "type_id": type_id}}
    return {"SpecialToken": {"id": name, "type_id": type_id}}


def write_tokenizer_json(tokenizer: WordPieceSettings, directory: str | Path) -> Path:
    """Write ``directory/tokenizer.json`` atomically; returns its path."""
    path = Path(directory) / TOKENIZER_JSON
    atomic_write_text(path, json.dumps(to_tokenizer_json(tokenizer), ensure_ascii=False) + "\n")
    return path


@dataclass(frozen=True)
class TokenizerJson:
    """What bertkit takes from a tokenizer.json.

    ``settings`` holds the BertTokenizer keyword arguments the file fixes: ``do_lower_case``,
    ``strip_accents``, ``tokenize_chinese_chars``, ``max_input_chars_per_word``.
    """

    vocab: Vocab
    settings: dict[str, Any]


def from_tokenizer_json(path: str | Path) -> TokenizerJson:
    """Read a BERT WordPiece tokenizer.json (as :func:`to_tokenizer_json` or transformers write it).

    Accepted: a BertNormalizer (alone or as the one member of a ``Sequence``), a BertPreTokenizer
    (likewise), a WordPiece model with prefix ``##`` and unk token ``[UNK]`` whose ids are
    0..n-1, a ``[CLS] A [SEP] (B [SEP])`` template (TemplateProcessing or BertProcessing) with
    type ids 0/1, added tokens that are BERT's special tokens at their vocabulary ids, and a
    WordPiece decoder (or none). ``truncation`` and ``padding`` are ignored: they are per call.

    Raises a one-line CheckpointError naming the file and the component it cannot reproduce.
    """
    path = Path(path)
    data = _read_json(path)
    model = data.get("model")
    if not isinstance(model, dict):
        raise CheckpointError(f"{path}: no tokenizer model ('model' is missing); {_SUPPORTED}")
    vocab = _wordpiece_vocab(path, model)
    settings = _normalizer_settings(path, data.get("normalizer"))
    _check_pre_tokenizer(path, data.get("pre_tokenizer"))
    _check_template(path, data.get("post_processor"), vocab)
    _check_added_tokens(path, data.get("added_tokens") or [], vocab)
    _check_decoder(path, data.get("decoder"))
    settings["max_input_chars_per_word"] = int(model.get("max_input_chars_per_word", 100))
    return TokenizerJson(vocab, settings)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise MissingFileError(path, None, "file not found") from e
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: not a readable tokenizer.json ({e})") from e
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return data


def _describe(component: Any) -> str:
    """``'BPE'``, ``Sequence[NFD, Lowercase]`` or ``null``: how errors name a component."""
    if not isinstance(component, dict):
        return json.dumps(component)
    kind = component.get("type", "untyped")
    members = component.get("normalizers") or component.get("pretokenizers")
    if kind == "Sequence" and isinstance(members, list):
        return "Sequence[" + ", ".join(_describe(m) for m in members) + "]"
    return repr(kind) if isinstance(kind, str) else json.dumps(kind)


def _only_member(component: Any, key: str) -> Any:
    """A ``Sequence`` of one component is that component (some Hub files wrap it so)."""
    if isinstance(component, dict) and component.get("type") == "Sequence":
        members = component.get(key)
        if isinstance(members, list) and len(members) == 1:
            return members[0]
    return component


def _wordpiece_vocab(path: Path, model: dict[str, Any]) -> Vocab:
    kind = model.get("type", "WordPiece" if "max_input_chars_per_word" in model else None)
    if kind != "WordPiece":
        raise CheckpointError(f"{path}: model {_describe(model)} is not supported; {_SUPPORTED}")
    for key, expected in (("continuing_subword_prefix", PREFIX), ("unk_token", "[UNK]")):
        if model.get(key, expected) != expected:
            raise CheckpointError(
                f"{path}: WordPiece {key} {model[key]!r} is not supported (bertkit uses {expected!r})"
            )
    table = model.get("vocab")
    if not isinstance(table, dict) or not table:
        raise CheckpointError(f"{path}: the WordPiece model has no vocabulary")
    tokens: list[str | None] = [None] * len(table)
    for token, i in table.items():
        if not isinstance(i, int) or not 0 <= i < len(table) or tokens[i] is not None:
            raise CheckpointError(
                f"{path}: WordPiece ids must be 0..{len(table) - 1}, each once "
                f"(token {token!r} has id {i!r})"
            )
        tokens[i] = token
    return Vocab(tokens)  # type: ignore[arg-type]  # every slot was filled above


def _normalizer_settings(path: Path, normalizer: Any) -> dict[str, Any]:
    norm = _only_member(normalizer, "normalizers")
    if not isinstance(norm, dict) or norm.get("type") != "BertNormalizer":
        raise CheckpointError(
            f"{path}: normalizer {_describe(normalizer)} is not supported; {_SUPPORTED}"
        )
    if not norm.get("clean_text", True):
        raise CheckpointError(
            f"{path}: BertNormalizer clean_text false is not supported (bertkit always drops "
            "control characters)"
        )
    strip = norm.get("strip_accents")
    return {
        "do_lower_case": bool(norm.get("lowercase", True)),
        "strip_accents": None if strip is None else bool(strip),
        "tokenize_chinese_chars": bool(norm.get("handle_chinese_chars", True)),
    }


def _check_pre_tokenizer(path: Path, pre_tokenizer: Any) -> None:
    pre = _only_member(pre_tokenizer, "pretokenizers")
    if not isinstance(pre, dict) or pre.get("type") != "BertPreTokenizer":
        raise CheckpointError(
            f"{path}: pre_tokenizer {_describe(pre_tokenizer)} is not supported; {_SUPPORTED}"
        )


def _check_template(path: Path, post: Any, vocab: Vocab) -> None:
    """The post-processor must add what bertkit adds: [CLS] A [SEP] and [CLS] A [SEP] B [SEP],
    type ids 0 0 0 and 0 0 0 1 1, at the vocabulary's ids of [CLS] and [SEP]."""
    cls, sep = vocab.special_id("[CLS]"), vocab.special_id("[SEP]")
    if post is None and (cls is None or sep is None):
        return  # nothing to add, as bertkit adds nothing without them
    kind = post.get("type") if isinstance(post, dict) else None
    found = None
    if kind == "BertProcessing":
        pair = [tuple(post.get("cls") or ()), tuple(post.get("sep") or ())]
        found = pair == [("[CLS]", cls), ("[SEP]", sep)]
    elif kind == "TemplateProcessing":
        single = [_piece(p) for p in post.get("single") or []]
        pair = [_piece(p) for p in post.get("pair") or []]
        specials = {
            t: (s.get("ids"), s.get("tokens"))
            for t, s in (post.get("special_tokens") or {}).items()
        }
        found = (
            single == list(_SINGLE)
            and pair == list(_PAIR)
            and specials.get("[CLS]") == ([cls], ["[CLS]"])
            and specials.get("[SEP]") == ([sep], ["[SEP]"])
        )
    if not found:
        raise CheckpointError(
            f"{path}: post_processor {_describe(post)} is not BERT's [CLS] A [SEP] B [SEP] "
            f"template at ids [CLS]={cls}, [SEP]={sep}; {_SUPPORTED}"
        )


def _piece(item: Any) -> tuple[str, int] | None:
    """``{"SpecialToken": {"id": "[CLS]", "type_id": 0}}`` -> ``("[CLS]", 0)``; a sequence
    ``{"Sequence": {"id": "A", ...}}`` -> ``("$A", type_id)``."""
    if not isinstance(item, dict) or len(item) != 1:
        return None
    kind, body = next(iter(item.items()))
    if not isinstance(body, dict):
        return None
    name = body.get("id")
    return (f"${name}" if kind == "Sequence" else name, body.get("type_id", 0))


def _check_added_tokens(path: Path, added: list[Any], vocab: Vocab) -> None:
    """Only BERT's special tokens, at their vocabulary ids and matched as written: any other
    added token would be matched by ``tokenizers`` and not by bertkit."""
    for entry in added:
        if not isinstance(entry, dict):
            raise CheckpointError(f"{path}: added_tokens holds {entry!r}, not an object")
        content, ident = entry.get("content"), entry.get("id")
        if content not in SPECIAL_TOKENS or vocab.special_id(content) != ident:
            raise CheckpointError(
                f"{path}: added token {content!r} (id {ident!r}) is not supported "
                f"(bertkit matches only {', '.join(SPECIAL_TOKENS)} at their vocabulary ids)"
            )
        flags = {k: bool(entry.get(k, False)) for k in _ADDED_FLAGS}
        if flags != _ADDED_FLAGS:
            raise CheckpointError(
                f"{path}: added token {content!r} with {flags} is not supported (bertkit matches "
                "special tokens as written, before normalization)"
            )


def _check_decoder(path: Path, decoder: Any) -> None:
    """None, or WordPiece with ``##`` and clean-up: what ``BertTokenizer.decode`` does."""
    if decoder is None:
        return
    if not isinstance(decoder, dict) or decoder.get("type") != "WordPiece":
        raise CheckpointError(
            f"{path}: decoder {_describe(decoder)} is not supported; {_SUPPORTED}"
        )
    if decoder.get("prefix", PREFIX) != PREFIX or not decoder.get("cleanup", True):
        raise CheckpointError(
            f"{path}: WordPiece decoder prefix {decoder.get('prefix')!r}, cleanup "
            f"{decoder.get('cleanup')!r} is not supported (bertkit decodes with '##' and clean-up)"
        )


def tokenizer_json_size(path: str | Path) -> int:
    """The number of ids a tokenizer.json can produce (its largest id + 1), for checks against
    a model's embedding table; CheckpointError when the file is unreadable."""
    path = Path(path)
    data = _read_json(path)
    model = data.get("model") if isinstance(data.get("model"), dict) else {}
    ids = [i for i in (model.get("vocab") or {}).values() if isinstance(i, int)]
    added = [e for e in data.get("added_tokens") or [] if isinstance(e, dict)]
    ids += [e["id"] for e in added if isinstance(e.get("id"), int)]
    return max(ids, default=-1) + 1
