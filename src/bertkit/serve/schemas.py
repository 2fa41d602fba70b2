"""Request bodies, validated by pydantic (a wrong type, a missing field, a number out of range is a
422 with the field named). Shapes follow text-embeddings-inference and OpenAI's embeddings API."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Texts = str | list[str]
# TEI writes "Right"/"Left"; bertkit cuts the end only, so "left" is refused by the route (422)
Direction = Literal["right", "left", "Right", "Left"]


def _unicode(value: Any) -> Any:
    """``value`` as it is; UnicodeEncodeError for a string (in any list) with a lone surrogate."""
    if isinstance(value, str):
        value.encode("utf-8")
    elif isinstance(value, list):
        for v in value:
            _unicode(v)
    return value


class _Body(BaseModel):
    """Every string field of a request is text: JSON lets a lone surrogate escape ("\\ud800")
    through, which is no character and which no answer that quotes the text (NER's tokens,
    rerank's texts, OpenAI's model name) could be written with: a 422 here, not a 500 there."""

    @field_validator("*")
    @classmethod
    def _text(cls, value: Any) -> Any:
        try:
            return _unicode(value)
        except UnicodeEncodeError:
            raise ValueError("a lone surrogate escape (such as \\ud800) is not text") from None


class _Request(_Body):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())
    model: str | None = Field(None, description="which served model (default: the first that can)")


class EmbedRequest(_Request):
    inputs: Texts
    normalize: bool = True
    truncate: bool = False
    """False: an input over the model's limit is read in windows (over --max-input-tokens: a 413);
    True: it is cut to the model's limit."""
    truncation_direction: Direction = "right"
    dimensions: int | None = Field(None, ge=1)
    """Keep the first ``dimensions`` values (then normalise): for Matryoshka-trained models."""
    prompt_name: str | None = None


class OpenAIEmbeddingRequest(_Body):
    model_config = ConfigDict(extra="ignore", protected_namespaces=())
    input: Texts
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    user: str | None = None
    dimensions: int | None = Field(None, ge=1)


class TokenizeRequest(_Request):
    inputs: Texts
    add_special_tokens: bool = True


class PredictParameters(_Body):
    """huggingface_hub's ``text_classification`` sends these (``{}`` by default)."""

    model_config = ConfigDict(extra="forbid")
    top_k: int | None = Field(None, ge=1)
    function_to_apply: Literal["softmax"] | None = None


class PredictRequest(_Request):
    inputs: str | list[str | list[str]]
    """A text, or a list of texts and text pairs (``[a, b]``)."""
    raw_scores: bool = False
    """True: the model's logits instead of probabilities (TEI's raw_scores)."""
    truncate: bool = False
    truncation_direction: Direction = "right"
    parameters: PredictParameters | None = None


class RerankRequest(_Request):
    """TEI's /rerank (plus ``top_n`` as Infinity and vLLM have it)."""

    query: str
    texts: list[str] = Field(min_length=1)
    truncate: bool = False
    truncation_direction: Direction = "right"
    raw_scores: bool = False
    """True: the model's output as it is; False: through a sigmoid."""
    return_text: bool = False
    top_n: int | None = Field(None, ge=1)


class TagRequest(_Request):
    inputs: Texts
    """Texts, split into words at whitespace."""


class QAInput(_Body):
    model_config = ConfigDict(extra="forbid")
    question: str
    context: str


class QARequest(_Request):
    inputs: QAInput | list[QAInput]


class FillMaskRequest(_Request):
    inputs: Texts
    top_k: int = Field(5, ge=1, le=100)
    truncate: bool = False


class SimilarityInput(_Body):
    model_config = ConfigDict(extra="forbid")
    source_sentence: str
    sentences: list[str] = Field(min_length=1)


class SimilarityParameters(_Body):
    """TEI's (and huggingface_hub's ``sentence_similarity``) optional ``parameters``."""

    model_config = ConfigDict(extra="forbid")
    truncate: bool | None = None
    truncation_direction: Direction | None = None
    prompt_name: str | None = None


class SimilarityRequest(_Request):
    inputs: SimilarityInput
    truncate: bool = False
    parameters: SimilarityParameters | None = None


class TokenVectorsRequest(_Request):
    """TEI's /embed_all and /embed_sparse: one vector per token, or one sparse vector per input;
    an input longer than the model's limit is a 413 unless ``truncate``."""

    inputs: Texts
    truncate: bool = False
    truncation_direction: Direction = "right"
    prompt_name: str | None = None


class DecodeRequest(_Request):
    """TEI's /decode: token ids (one list, or a list of lists) back to text."""

    ids: list[int] | list[list[int]]
    skip_special_tokens: bool = True
