"""Request bodies, validated by pydantic (a wrong type, a missing field, a number out of range is a
422 with the field named). Shapes follow text-embeddings-inference and OpenAI's embeddings API."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Texts = str | list[str]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())
    model: str | None = Field(None, description="which served model (default: the first that can)")


class EmbedRequest(_Request):
    inputs: Texts
    normalize: bool = True
    truncate: bool = False
    """False: an input over the model's limit is read in windows (over --max-input-tokens: a 413);
    True: it is cut to the model's limit."""


class OpenAIEmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", protected_namespaces=())
    input: Texts
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    user: str | None = None


class TokenizeRequest(_Request):
    inputs: Texts
    add_special_tokens: bool = True


class PredictRequest(_Request):
    inputs: str | list[str | list[str]]
    """A text, or a list of texts and text pairs (``[a, b]``)."""
    raw_scores: bool = False
    """True: logits instead of probabilities."""
    truncate: bool = False


class TagRequest(_Request):
    inputs: Texts
    """Texts, split into words at whitespace."""


class QAInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: str
    context: str


class QARequest(_Request):
    inputs: QAInput | list[QAInput]


class FillMaskRequest(_Request):
    inputs: Texts
    top_k: int = Field(5, ge=1, le=100)
    truncate: bool = False


class SimilarityInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source_sentence: str
    sentences: list[str] = Field(min_length=1)


class SimilarityRequest(_Request):
    inputs: SimilarityInput
    truncate: bool = False
