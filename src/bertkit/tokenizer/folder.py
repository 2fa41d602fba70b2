"""Where a model folder's tokenizer comes from: :func:`folder_arguments` decides, for
``BertTokenizer.from_pretrained``, the vocabulary (vocab.txt, or tokenizer.json's WordPiece when
alone) and the settings (tokenizer_config.json, else tokenizer.json's normalizer), and logs once
where the two files disagree."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from bertkit.errors import CheckpointError, MissingFileError
from bertkit.tokenizer.conventions import read_config
from bertkit.tokenizer.tokenizer_json import TOKENIZER_JSON, VOCAB_TXT, from_tokenizer_json
from bertkit.tokenizer.wordpiece import Vocab

log = logging.getLogger("bertkit.tokenizer.tokenizer")
_warned: set[tuple[str, str]] = set()  # (file, what): each disagreement is logged once per process


def folder_arguments(directory: Path) -> tuple[Vocab | Path, dict[str, Any]]:
    """The vocabulary (a vocab.txt path or a Vocab) and BertTokenizer keyword arguments of a
    model folder, for ``BertTokenizer.from_pretrained``.

    - The vocabulary: ``vocab.txt`` when the folder has one (a tokenizer.json beside it that
      disagrees on the vocabulary is logged once), else ``tokenizer.json``'s WordPiece vocabulary.
    - The settings: tokenizer.json's normalizer and ``max_input_chars_per_word``, then what
      tokenizer_config.json states (``do_lower_case``, ``model_max_length``, ...), which wins, as
      in transformers (a disagreement is logged once: text-embeddings-inference follows
      tokenizer.json). A tokenizer.json bertkit cannot read is an error when it is the only
      vocabulary, and logged and ignored beside a vocab.txt.

    Raises MissingFileError when the folder has neither file.
    """
    vocab_txt, tok_json = directory / VOCAB_TXT, directory / TOKENIZER_JSON
    config = read_config(directory)
    if not tok_json.is_file():
        if not vocab_txt.is_file():
            raise MissingFileError(
                directory, None, f"no {VOCAB_TXT} or {TOKENIZER_JSON} (is this a model folder?)"
            )
        return vocab_txt, config
    if vocab_txt.is_file():
        try:
            parsed = from_tokenizer_json(tok_json)
        except CheckpointError as e:
            _warn_once(tok_json, "unsupported", f"{e}; {vocab_txt} is used")
            return vocab_txt, config
        vocab = Vocab.from_file(vocab_txt)  # read once: compared, then used
        _check_agrees(vocab, parsed.vocab, vocab_txt, tok_json)
    else:
        parsed = from_tokenizer_json(tok_json)
        vocab = parsed.vocab
    for key, value in parsed.settings.items():
        if key in config and config[key] != value:
            _warn_once(
                tok_json,
                key,
                f"{tok_json} says {key}={value!r} but tokenizer_config.json says "
                f"{config[key]!r}; following tokenizer_config.json as transformers does "
                "(text-embeddings-inference follows tokenizer.json)",
            )
    return vocab, {**parsed.settings, **config}


def _check_agrees(txt: Vocab, from_json: Vocab, txt_path: Path, json_path: Path) -> None:
    if len(txt) != len(from_json):
        _warn_once(
            json_path,
            "size",
            f"{txt_path} has {len(txt)} tokens but {json_path} has {len(from_json)}; "
            f"{txt_path} is used (other tools may read {json_path})",
        )
    elif txt.token_to_id != from_json.token_to_id:
        moved = sum(from_json.token_to_id.get(t) != i for t, i in txt.token_to_id.items())
        _warn_once(
            json_path,
            "ids",
            f"{moved} tokens of {txt_path} have other ids in {json_path}; {txt_path} is used "
            f"(other tools may read {json_path})",
        )


def _warn_once(path: Path, what: str, message: str) -> None:
    key = (str(path.resolve()), what)
    if key not in _warned:
        _warned.add(key)
        log.warning(message)
