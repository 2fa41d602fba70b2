"""Texts cut into the windows an :class:`~bertkit.inference.Embedder` reads (its ``window``),
with what each window holds: the shape that the embedder, the token features and the server's
input checks share."""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.tasks.features import EncodedInput
from bertkit.tasks.windows import WindowCounts


@dataclass
class Windowed:
    """Texts as windows: ``inputs`` (one per window), each window's text (``owners``), its first
    content token in the text (``starts``), and per window token whether it has its maximum
    context there (``is_max``, content tokens only)."""

    inputs: list[EncodedInput]
    owners: list[int]
    starts: list[int]
    is_max: list[list[bool]]
    counts: WindowCounts

    @property
    def tokens(self) -> int:
        return sum(len(x.input_ids) for x in self.inputs)
