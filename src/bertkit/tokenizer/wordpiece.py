"""Vocabulary (vocab.txt) and WordPiece: greedy longest-match-first with ``##`` continuations."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bertkit.errors import InputError
from bertkit.input_files import FOLDER_NOT_FILE
from bertkit.io import atomic_write, read_text_lines

SPECIAL_TOKENS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PREFIX = "##"


@dataclass
class Vocab:
    """Token <-> id. In vocab.txt the id of a token is its 0-based line number.

    ``token_to_id`` is derived from ``id_to_token`` (a later duplicate line wins the mapping, as in
    both Hugging Face implementations).
    """

    id_to_token: list[str]
    token_to_id: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.token_to_id = {tok: i for i, tok in enumerate(self.id_to_token)}

    def __len__(self) -> int:
        return len(self.id_to_token)

    def __contains__(self, token: object) -> bool:
        return token in self.token_to_id

    @classmethod
    def from_file(cls, path: str | Path) -> Vocab:
        """Read vocab.txt (UTF-8, one token per line; trailing whitespace is not part of a token).

        Raises InputError naming the file and line on invalid UTF-8, or when the file is empty.
        """
        inside = Path(path) / "vocab.txt"
        if inside.is_file():  # a model folder given as --vocab: name the file it holds
            raise InputError(path, None, f"{FOLDER_NOT_FILE} (its vocabulary is {inside})")
        tokens = [line.rstrip() for _, line in read_text_lines(path)]
        if not tokens:
            raise InputError(path, None, "empty vocabulary (expected one token per line)")
        return cls(tokens)

    def save(self, path: str | Path) -> None:
        """Write vocab.txt atomically (one token per line, id = line number)."""
        for i, tok in enumerate(self.id_to_token):
            if not tok or tok != tok.strip() or "\n" in tok:
                raise ValueError(f"token {i} ({tok!r}) cannot be stored on one vocab.txt line")
        with atomic_write(path) as f:
            f.write("".join(tok + "\n" for tok in self.id_to_token))

    def special_id(self, token: str) -> int | None:
        """The id of a special token such as ``[CLS]``, or None when the vocabulary lacks it."""
        return self.token_to_id.get(token)


def continuation_table(token_to_id: dict[str, int]) -> dict[str, int]:
    """``##`` tokens keyed without their prefix (``{"ing": id of "##ing"}``), for ``wordpiece``."""
    n = len(PREFIX)
    return {t[n:]: i for t, i in token_to_id.items() if t.startswith(PREFIX)}


def wordpiece(
    word: str,
    token_to_id: dict[str, int],
    max_token_chars: int,
    continuations: dict[str, int] | None = None,
) -> list[tuple[int, int, int]] | None:
    """Split a normalized word greedily, longest vocabulary match first.

    Returns ``[(id, start, end), ...]`` with character spans into ``word``, or None when some
    position has no match (the caller then emits one [UNK] for the whole word).
    ``max_token_chars`` bounds the candidate length (the longest token in the vocabulary, ``##``
    not counted), which keeps the cost linear in the word length. ``continuations`` is
    ``continuation_table(token_to_id)``: passing it saves building ``"##" + piece`` strings.

    >>> wordpiece("unwanted", {"un": 0, "##want": 1, "##ed": 2}, 6)
    [(0, 0, 2), (1, 2, 6), (2, 6, 8)]
    """
    n = len(word)
    get = token_to_id.get
    whole = get(word)
    if whole is not None:
        return [(whole, 0, n)]
    # the first piece (the whole word was just tried)
    end = min(n - 1, max_token_chars)
    while end > 0:
        found = get(word[:end])
        if found is not None:
            break
        end -= 1
    else:
        return None
    pieces = [(found, 0, end)]
    start = end
    if continuations is None:
        cont = None
    else:
        cont = continuations.get
    while start < n:
        end = min(n, start + max_token_chars)
        while end > start:
            found = cont(word[start:end]) if cont else get(PREFIX + word[start:end])
            if found is not None:
                break
            end -= 1
        else:
            return None
        pieces.append((found, start, end))
        start = end
    return pieces
