"""Request bodies: JSON (:class:`JSONBodyRoute` reads every POST body first: another Content-Type
is a 415, a body that is not JSON a 400), then validated by pydantic (a wrong type, a missing
field, a number out of range is a 422 with the field named). Shapes follow
text-embeddings-inference and OpenAI's embeddings API; types are strict, as TEI's (Rust serde):
``0`` is no ``false``, ``"5"`` and ``2.0`` are no integer ``5`` and ``2``. ``null`` is "not
given" where the reference reads it so: TEI's ``truncate`` (an ``Option<bool>``) and OpenAI's
optional fields (``encoding_format``, ``dimensions``, ``user``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine, Sequence
from typing import Annotated, Any, Literal

from fastapi import Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from bertkit.inference.token_ids import TokenIds
from bertkit.serve.errors import EMPTY, ServeError

_SEND_JSON = "send the body as JSON, with Content-Type: application/json"


def _null_as(default: Any) -> BeforeValidator:
    """``null`` read as the field's default (not given); any other value validated as typed."""
    return BeforeValidator(lambda v: default if v is None else v)


Truncate = Annotated[bool, _null_as(False)]
"""TEI's ``truncate: Option<bool>``: ``null`` is the default (a text over the limit is read in
windows, token ids over it are a 413)."""


def _is_json(content_type: str) -> bool:
    """``application/json`` or ``application/*+json`` (parameters aside), as FastAPI reads."""
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


async def read_json(request: Request) -> Any:
    """The body of ``request`` as JSON: a 415 for a Content-Type that is not JSON, or none (as
    TEI's axum answers, and FastAPI's default: a page of another site can send a body without
    one, with no CORS preflight), and for a compressed body (``Content-Encoding`` other than
    ``identity``: RFC 9110's 415), a 400 for a body that is not JSON (empty, a syntax error, not
    UTF-8, nested too deeply). Starlette keeps what it read: FastAPI's parse after this one
    reads no byte again."""
    content_type = request.headers.get("content-type")
    if not content_type:
        raise ServeError(415, f"the request has no Content-Type: {_SEND_JSON}")
    if not _is_json(content_type):
        raise ServeError(415, f"Content-Type {content_type!r} is not JSON: {_SEND_JSON}")
    coding = request.headers.get("content-encoding", "").strip().lower()
    if coding not in ("", "identity"):  # read as JSON, gzip is "invalid UTF-8 at byte 1"
        raise ServeError(
            415, f"Content-Encoding {coding!r} is not supported: send the body uncompressed"
        )
    if not await request.body():
        raise ServeError(400, "the body is empty: send a JSON object")
    try:
        return await request.json()
    except RecursionError:
        raise ServeError(400, "the body is not JSON: nested too deeply to read") from None
    except UnicodeDecodeError as e:
        raise ServeError(400, f"the body is not JSON: invalid UTF-8 at byte {e.start}") from None
    except json.JSONDecodeError as e:
        raise ServeError(
            400, f"the body is not JSON: {e.msg} at line {e.lineno} column {e.colno}"
        ) from None


class JSONBodyRoute(APIRoute):
    """A route whose POST body is read by :func:`read_json` before FastAPI (or the route) looks
    at it: the one place the server decides what a body must be (``app.router.route_class``)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if "POST" not in self.methods:
            return handler

        async def json_first(request: Request) -> Response:
            await read_json(request)
            return await handler(request)

        return json_first


Texts = str | list[str]
Inputs = str | list[int] | list[str | list[int]]
"""What the embedding routes read, as TEI's ``Input`` and OpenAI's ``input``: a text, a list of
token ids (one input), or a list of texts and id lists (``[[101, 7592, 102], "hello"]``)."""
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


def inputs_of(value: Inputs, field: str = "inputs") -> list[str | TokenIds]:
    """The inputs an :data:`Inputs` value lists, each a text or :class:`TokenIds` (the model's
    input as it is): ``[101, 7592, 102]`` is one input of three ids, ``[[101], [102]]`` two,
    ``[]`` none (the count's check answers that). Its types are the schema's, checked already
    (strict: ``true`` is no id); an empty text or id list is a 400 (:func:`refuse_empty`, naming
    ``field``: OpenAI's shape calls it ``input``)."""
    if isinstance(value, str):
        inputs: list[str | TokenIds] = [value]
    elif value and isinstance(value[0], int):
        inputs = [TokenIds(value)]  # type: ignore[arg-type]
    else:
        inputs = [x if isinstance(x, str) else TokenIds(x) for x in value]  # type: ignore[arg-type]
    refuse_empty(inputs, field)
    return inputs


def refuse_empty(
    items: Sequence[str | TokenIds | tuple[str, str]], field: str = "inputs", note: str = ""
) -> None:
    """A 400 naming the first empty input of ``items``: a text ``""``, an id list ``[]``, a pair
    whose two texts are (TEI's ``EncodingInput::is_empty``: it tokenizes no such input, and an
    empty text would embed ``[CLS] [SEP]`` alone, a vector of no text). ``field``: the request's
    name for the list; ``note``: what the reason adds. Blank text (``" "``) is text, as there."""
    for i, x in enumerate(items):
        if isinstance(x, tuple):
            empty, what = not any(x), "a pair of empty texts"
        elif isinstance(x, TokenIds):
            empty, what = not x.input_ids, "an empty list of token ids"
        else:
            empty, what = x == "", "an empty text"
        if empty:
            raise ServeError(
                400,
                f"Input validation error: `{field}` cannot be empty: input {i} is {what}{note}",
                EMPTY,
            )


def refuse_blank_qa(pairs: Sequence[tuple[str, str]]) -> None:
    """A 400 naming the first (question, context) pair whose question or context is empty or
    only whitespace: there is nothing to ask, or no span to answer from (the SQuAD reader
    refuses such an example too, :mod:`bertkit.data.tasks.squad`)."""
    for i, (question, context) in enumerate(pairs):
        for field, text in (("question", question), ("context", context)):
            if not text.strip():
                raise ServeError(
                    400,
                    f"Input validation error: `inputs` cannot be empty: input {i} has "
                    f"{'an empty' if text == '' else 'a blank'} {field}",
                    EMPTY,
                )


class _Body(BaseModel):
    """Every string field of a request is text: JSON lets a lone surrogate escape ("\\ud800")
    through, which is no character and which no answer that quotes the text (NER's tokens,
    rerank's texts, OpenAI's model name) could be written with: a 422 here, not a 500 there.
    Every field is strict (subclasses inherit the config): a bool is ``true``/``false``, an
    integer a JSON integer, never a string, a float or a bool read as one."""

    model_config = ConfigDict(strict=True)

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
    inputs: Inputs
    normalize: bool = True
    truncate: Truncate = False
    """False: a text over the model's limit is read in windows (over --max-input-tokens: a 413),
    token ids over it are a 413; True: it is cut to the model's limit."""
    truncation_direction: Direction = "right"
    dimensions: int | None = Field(None, ge=1)
    """Keep the first ``dimensions`` values (then normalise): for Matryoshka-trained models."""
    prompt_name: str | None = None
    task: Literal["query", "document"] | None = Field(
        None,
        description="query or document: the route of a Router model (an asymmetric bi-encoder), "
        "as sentence-transformers' encode_query / encode_document (prompts: prompt_name); "
        "default: the model's default route, as encode",
    )


class OpenAIEmbeddingRequest(_Body):
    model_config = ConfigDict(extra="ignore", protected_namespaces=())
    input: Inputs
    model: str | None = None
    encoding_format: Annotated[Literal["float", "base64"], _null_as("float")] = "float"
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
    truncate: Truncate = False
    truncation_direction: Direction = "right"
    parameters: PredictParameters | None = None


class RerankRequest(_Request):
    """TEI's /rerank (plus ``top_n`` as Infinity and vLLM have it)."""

    query: str
    texts: list[str]
    """At least one (an empty list: a 400, as TEI's)."""
    truncate: Truncate = False
    truncation_direction: Direction = "right"
    raw_scores: bool = False
    """True: the model's output as it is; False: through a sigmoid."""
    return_text: bool = False
    top_n: int | None = Field(None, ge=1)


class RerankDocument(_Body):
    """A document as an object (Cohere's v1 shape): its ``text`` is ranked; Cohere's other keys
    (a title, an id) are allowed and not read, as Cohere ranks ``text`` unless ``rank_fields``
    names others."""

    model_config = ConfigDict(extra="allow")
    text: str


class CohereRerankRequest(_Body):
    """The rerank body of Cohere (v1 and v2), Jina, vLLM, Infinity and LiteLLM (``/v1/rerank``,
    ``/v2/rerank``). Unknown fields are ignored, as OpenAI's shape is read: clients send their
    own (Cohere's v2 SDK ``priority``, vLLM's ``truncate_prompt_tokens``), often as ``null``."""

    model_config = ConfigDict(extra="ignore", protected_namespaces=())
    model: str | None = None
    query: str
    documents: list[str | RerankDocument]
    """At least one (an empty list: a 400, as /rerank's ``texts``)."""
    top_n: int | None = Field(None, ge=0)
    """The best ``top_n`` (all when absent, ``null`` or 0: vLLM's default is 0)."""
    return_documents: bool | None = None
    """Each result's ``document: {"text"}``; absent or ``null``: true (vLLM and Jina return the
    documents; Cohere's v1 API defaults to false, and its clients that want them send true)."""
    rank_fields: list[str] | None = None
    """Cohere v1's: only ``["text"]`` (bertkit ranks the text; other fields: a 422)."""
    max_tokens_per_doc: int | None = Field(None, ge=1)
    """Cohere v2's cap: each document cut to its first N word pieces (its own tokens, not the
    query's or the special tokens) before it is paired and read in windows; scored as the text
    cut there would be. Absent or ``null``: the whole document (bertkit does not impose Cohere's
    hosted default of 4096)."""
    max_chunks_per_doc: int | None = Field(None, ge=1)
    """Cohere v1's cap on chunks: each (query, document) pair read in its first N windows of the
    model's length (the document's score combines them with the model's window pooling, mean
    unless saved as max), as if cut where the N-th ends. Absent or ``null``: every window."""

    def texts(self) -> list[str]:
        return [d if isinstance(d, str) else d.text for d in self.documents]


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
    truncate: Truncate = False


class SimilarityInput(_Body):
    model_config = ConfigDict(extra="forbid")
    source_sentence: str
    sentences: list[str]
    """At least one (an empty list: a 400, as TEI's)."""


class SimilarityParameters(_Body):
    """TEI's (and huggingface_hub's ``sentence_similarity``) optional ``parameters``."""

    model_config = ConfigDict(extra="forbid")
    truncate: bool | None = None
    truncation_direction: Direction | None = None
    prompt_name: str | None = None


class SimilarityRequest(_Request):
    inputs: SimilarityInput
    truncate: Truncate = False
    parameters: SimilarityParameters | None = None


class TokenVectorsRequest(_Request):
    """TEI's /embed_all and /embed_sparse: one vector per token, or one sparse vector per input;
    an input longer than the model's limit is a 413 unless ``truncate``."""

    inputs: Inputs
    truncate: Truncate = False
    truncation_direction: Direction = "right"
    prompt_name: str | None = None


class SparseVectorsRequest(TokenVectorsRequest):
    """TEI's /embed_sparse, plus ``task``: a SPLADE Router's route."""

    task: Literal["query", "document"] | None = Field(
        None,
        description="query or document: the route of a SPLADE Router model (inference-free or "
        "two-encoder), "
        "as sentence-transformers' encode_query / encode_document (prompts: prompt_name); "
        "default: the model's default route (document), as encode",
    )


class DecodeRequest(_Request):
    """TEI's /decode: token ids (one list, or a list of lists) back to text."""

    ids: list[int] | list[list[int]]
    skip_special_tokens: bool = True
