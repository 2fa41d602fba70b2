"""The task families by name, and building a task from its settings (a saved task is rebuilt by
:mod:`bertkit.tasks.saved`).

===============  ===============================  ======================================
family           head                             official metric (selection key)
===============  ===============================  ======================================
glue, classify   BertForSequenceClassification    the GLUE task's (mcc/accuracy/f1/spearman)
ner, tag         BertForTokenClassification       entity F1 (conlleval)
squad            BertForQuestionAnswering         SQuAD F1 (v2.0: at the tuned null threshold)
swag             BertForMultipleChoice            accuracy
embeddings       BiEncoder (BertModel + pooling)  MRR@10 of exact search over the dev corpus;
                                                  labelled pairs: spearman_cosine / cosine_ap
rerank           BertForSequenceClassification    MRR@10 of each dev query's pairs
sparse           SpladeEncoder (BertForMaskedLM   MRR@10 of exact sparse search over the dev
                 + SPLADE pooling)                corpus
===============  ===============================  ======================================

embeddings, rerank and sparse models are saved as sentence-transformers folders (a
``SentenceTransformer``, a ``CrossEncoder`` and a ``SparseEncoder``), without
``bertkit_task.json``: every tool that reads those loads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bertkit.data.tasks.glue import glue_file
from bertkit.errors import ConfigError
from bertkit.io import format_stem
from bertkit.tasks.base import TaskAdapter
from bertkit.tasks.classification import ClassificationAdapter
from bertkit.tasks.embedding import EmbeddingAdapter
from bertkit.tasks.multiple_choice import MultipleChoiceAdapter
from bertkit.tasks.rerank import RerankAdapter
from bertkit.tasks.span_qa import SquadAdapter
from bertkit.tasks.sparse import SparseAdapter
from bertkit.tasks.squad_features import SquadFeatureConfig
from bertkit.tasks.squad_post import SquadPostConfig
from bertkit.tasks.tagging import TaggingAdapter
from bertkit.tasks.windows import WindowConfig

FAMILIES: dict[str, tuple[type[TaskAdapter], str]] = {
    "glue": (ClassificationAdapter, "a GLUE task, from a folder laid out like the official one"),
    "ner": (TaggingAdapter, "named-entity tagging on CoNLL column files (BIO/IOB1/IOB2)"),
    "squad": (SquadAdapter, "extractive QA on SQuAD v1.1 / v2.0 JSON"),
    "swag": (MultipleChoiceAdapter, "multiple choice on SWAG-format CSV"),
    "classify": (
        ClassificationAdapter,
        "text or text-pair classification (or regression) on your CSV/TSV/JSONL",
    ),
    "tag": (TaggingAdapter, "token tagging on your CSV/TSV/JSONL (token and tag lists)"),
    "embeddings": (
        EmbeddingAdapter,
        "a bi-encoder for retrieval, contrastive on (query, positive[, negatives]) pairs",
    ),
    "rerank": (
        RerankAdapter,
        "a cross-encoder reranker: binary cross-entropy on labelled (query, passage) pairs, "
        "or a listwise loss on (query, positive, negatives) groups",
    ),
    "sparse": (
        SparseAdapter,
        "a SPLADE sparse encoder from a masked-LM model, ranking loss + FLOPS regularisers",
    ),
}


def default_max_seq_length(family: str) -> int:
    """The family adapter's ``max_seq_length`` default: 128 tokens, 384 for SQuAD (the paper's
    settings; :data:`~bertkit.tasks.windows.DEFAULT_MAX_SEQ_LENGTH`,
    :data:`~bertkit.tasks.squad_features.SQUAD_MAX_SEQ_LENGTH`)."""
    return FAMILIES[family][0].max_seq_length


@dataclass
class TaskSettings:
    """What names a task and its files (the ``bertkit finetune FAMILY`` options).

    glue reads ``data_dir`` (the GLUE root or the task folder) for ``task``; every other family
    reads ``train`` and ``dev`` files. The family-specific fields are ignored by the others.
    """

    family: str
    """A key of :data:`FAMILIES`."""
    train: Path | None = None
    """Training file."""
    dev: Path | None = None
    """Dev file (scored each epoch, used for selection)."""
    task: str | None = None
    """GLUE task name."""
    data_dir: Path | None = None
    """GLUE root (holding TASK/) or the task folder."""
    max_seq_length: int | None = None
    """Tokens per input (None: embeddings and sparse, the starting sentence-transformers folder's
    ``max_seq_length``; else the family's :func:`default_max_seq_length`)."""
    tag_column: int = -1
    """ner: column of the tag (-1: the last)."""
    scheme: str = "auto"
    """ner: tag scheme of the files: auto, IOB1, IOB2/BIO, IOBES."""
    tokens_field: str = "tokens"
    """tag: the field holding the token list."""
    tags_field: str = "tags"
    """tag: the field holding the tag list."""
    text_column: str | None = None
    """classify: the column holding the text (required)."""
    text_pair_column: str | None = None
    """classify: the column holding the second text of a pair."""
    label_column: str = "label"
    """classify: the column holding the label."""
    regression: bool = False
    """classify: float labels, MSE loss, Pearson/Spearman."""
    format: str | None = None
    """classify, tag, embeddings, rerank, sparse: csv, tsv or jsonl (None: from the extension)."""
    document_context: bool = False
    """ner: join the sentences of each -DOCSTART- document, window them, label and score per sentence."""
    version_2_with_negative: bool = False
    """squad: SQuAD v2.0, questions may have no answer."""
    windows: SquadFeatureConfig = field(default_factory=SquadFeatureConfig)
    """squad: window settings."""
    search: SquadPostConfig = field(default_factory=SquadPostConfig)
    """squad: span search settings."""
    long_inputs: WindowConfig = field(default_factory=WindowConfig)
    """glue, classify, ner, tag: windows over inputs longer than max_seq_length."""
    pooling: str | None = None
    """embeddings: mean, cls or max pooling of the token vectors (None: the starting
    sentence-transformers folder's Pooling, else mean)."""
    normalize: bool | None = None
    """embeddings: the saved model L2-normalises its vectors (a Normalize module; None: as the
    starting sentence-transformers folder does, else yes)."""
    scale: float | None = None
    """embeddings: the ranking loss's similarity scale, 1 / temperature (None: 20 by cosine,
    sentence-transformers' default; 1 by dot product, its advice for dot_score)."""
    similarity_fn_name: str | None = None
    """embeddings: what the loss scores the vectors by and the saved folder declares, cosine or
    dot, which needs a model that does not normalise (None: the starting folder's dot, else dot
    for a teacher loss without normalising, else cosine)."""
    symmetric: bool = False
    """embeddings: also pick each positive's query among the batch's queries (symmetric loss)."""
    matryoshka_dims: tuple[int, ...] = ()
    """embeddings: also train the first d values of each vector as an embedding, for each d."""
    mini_batch_size: int | None = None
    """embeddings, sparse: encode a batch's texts (rows: each example's query, positive and negatives
    count one each) this many per pass, twice, keeping every in-batch negative (GradCache;
    sentence-transformers' CachedMultipleNegativesRankingLoss mini_batch_size, also texts per
    pass): the batch's loss in the activation memory of this many rows, for a third more
    compute. None: all rows in one pass."""
    loss: str | None = None
    """The family's training loss (None: its default). rerank: bce (default; labelled pairs or
    triples, BinaryCrossEntropyLoss), ranking (each query's positive against its hard and
    in-batch negatives, sentence-transformers' CrossEncoder MultipleNegativesRankingLoss) or
    listnet (ListNetLoss), both on a triples / n-tuple or listwise (query, docs, labels) file.
    embeddings: ranking (default; in-batch and hard negatives, MultipleNegativesRankingLoss),
    margin-mse (MarginMSELoss) or distill-kl (DistillKLDivLoss): distil the teacher scores of
    rows from `bertkit mine --cross-encoder --output-scores`, pairwise margins (margin-mse) or
    the softmax over all of a row's candidates (distill-kl)."""
    in_batch_negatives: int | None = None
    """rerank --loss ranking: other queries' documents of the batch scored per query (CrossEncoder
    MultipleNegativesRankingLoss num_negatives; None: its default, 4; 0: none)."""
    temperature: float = 1.0
    """embeddings: distill-kl's softmax temperature, of the student's and the teacher's scores
    alike unless --student-temperature / --teacher-temperature set one side
    (DistillKLDivLoss' temperature)."""
    student_temperature: float | None = None
    """embeddings: distill-kl's temperature of the student's scores; the loss is multiplied by
    its square (DistillKLDivLoss' student_temperature; None: --temperature)."""
    teacher_temperature: float | None = None
    """embeddings: distill-kl's temperature of the teacher's scores (DistillKLDivLoss'
    teacher_temperature; None: --temperature)."""
    query_prompt: str | None = None
    """embeddings, sparse: text put before every query, in training, in the dev search and as the saved
    folder's "query" prompt (sentence-transformers' prompts: "query: " for e5); None: the model
    folder's own "query" prompt (config_sentence_transformers.json), else none."""
    document_prompt: str | None = None
    """embeddings, sparse: text put before every positive, negative and dev document, saved as the
    folder's "document" prompt; None: the model folder's own "document" prompt, else none."""
    pooling_strategy: str | None = None
    """sparse: SPLADE pooling of the token weights, max (SPLADE v2 and later) or sum; None: the
    starting SparseEncoder folder's (its SpladePooling), else max."""
    activation_function: str | None = None
    """sparse: SPLADE token weight, log(1 + relu(logit)) (relu) or log1p of that (log1p_relu);
    None: the starting SparseEncoder folder's, else relu."""
    query_regularizer_weight: float = 5e-5
    """sparse: FLOPS regulariser weight of the query vectors (SpladeLoss'
    query_regularizer_weight; 0: none)."""
    document_regularizer_weight: float = 3e-5
    """sparse: FLOPS regulariser weight of the positive and negative vectors (SpladeLoss'
    document_regularizer_weight)."""
    pair_kind: str = "auto"
    """Labelled sentence pairs (finetune embeddings --dev, evaluate --data) scored as sts (gold
    scores; main metric Spearman) or pair_classification (0/1 labels; main metric average
    precision); auto: GLUE STS-B is sts, MRPC and QQP pair_classification, another file
    pair_classification when every label is 0 or 1, else sts."""

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ConfigError(
                f"unknown task family {self.family!r}; expected one of {sorted(FAMILIES)}"
            )
        if self.family == "glue" and (self.task is None or self.data_dir is None):
            raise ConfigError("glue needs a task name and a data folder")
        if self.family != "glue" and (self.train is None or self.dev is None):
            raise ConfigError(f"{self.family} needs a training file and a dev file")
        if self.family == "classify" and not self.text_column:
            raise ConfigError("classify needs the name of the text column (--text-column)")


def _given(s: TaskSettings, *names: str) -> dict[str, Any]:
    """The fields ``names`` of ``s`` that are set, as the adapter's keywords (None: its default)."""
    return {n: getattr(s, n) for n in names if getattr(s, n) is not None}


def build_task(s: TaskSettings) -> tuple[TaskAdapter, list[Any], dict[str, list[Any]]]:
    """The adapter, the training examples and the dev sets (name -> examples) ``s`` describes.

    Training and dev data are read by the same ``adapter.read``; labels come from training.
    Each must hold labelled examples (InputError naming the file otherwise: an empty training
    set, or a dev set that cannot be scored, would only fail, or select on nothing, later).
    """
    msl = s.max_seq_length or default_max_seq_length(s.family)
    adapter: TaskAdapter
    if s.family == "glue":
        adapter = ClassificationAdapter.for_glue(str(s.task), msl, s.long_inputs)

        def read(split: str) -> list[Any]:
            found = adapter.read(s.data_dir, split)  # type: ignore[arg-type]
            path = glue_file(s.data_dir, adapter.name, split)  # type: ignore[arg-type]
            return adapter.require_labelled(path, split, found)

        return adapter, read("train"), {d: read(d) for d in adapter.dev_splits()}
    assert s.train is not None and s.dev is not None
    if s.family == "classify":
        cols = {"text": s.text_column, "text_pair": s.text_pair_column, "label": s.label_column}
        adapter, train = ClassificationAdapter.for_files(
            s.train,
            cols,
            regression=s.regression,
            file_format=s.format,
            max_seq_length=msl,
            windows=s.long_inputs,
        )
    elif s.family in ("ner", "tag"):
        cols = (
            {"tag_column": s.tag_column, "scheme": s.scheme}
            if s.family == "ner"
            else {"tokens": s.tokens_field, "tags": s.tags_field}
        )
        adapter = TaggingAdapter(
            s.family,
            format_stem(s.train),
            msl,
            columns=cols,
            file_format=s.format,
            windows=s.long_inputs,
            document_context=s.document_context,
        )
        train = adapter.read(s.train, "train")
    elif s.family == "embeddings":
        adapter = EmbeddingAdapter(
            "embeddings",
            format_stem(s.train),
            msl,
            scale=s.scale,
            symmetric=s.symmetric,
            matryoshka_dims=list(s.matryoshka_dims),
            mini_batch_size=s.mini_batch_size,
            file_format=s.format,
            **_given(s, "loss", "pooling", "normalize", "similarity_fn_name"),
            temperature=s.temperature,
            student_temperature=s.student_temperature,
            teacher_temperature=s.teacher_temperature,
            pair_kind=s.pair_kind,
            query_prompt=s.query_prompt or "",
            document_prompt=s.document_prompt or "",
        )
        train = adapter.read(s.train, "train")
    elif s.family == "sparse":
        adapter = SparseAdapter(
            "sparse",
            format_stem(s.train),
            msl,
            file_format=s.format,
            mini_batch_size=s.mini_batch_size,
            query_prompt=s.query_prompt or "",
            document_prompt=s.document_prompt or "",
            pooling_strategy=s.pooling_strategy or "max",
            activation_function=s.activation_function or "relu",
            query_regularizer_weight=s.query_regularizer_weight,
            document_regularizer_weight=s.document_regularizer_weight,
        )
        train = adapter.read(s.train, "train")
    elif s.family == "rerank":
        adapter = RerankAdapter(
            "rerank", format_stem(s.train), msl, file_format=s.format, **_given(s, "loss")
        )
        if s.in_batch_negatives is not None:  # None: the adapter's default (ST's)
            if adapter.loss != "ranking":
                raise ConfigError(
                    f"--in-batch-negatives applies to --loss ranking only (got --loss "
                    f"{adapter.loss}, which scores each query's own documents)"
                )
            adapter = replace(adapter, num_negatives=s.in_batch_negatives)
        train = adapter.read(s.train, "train")
    elif s.family == "swag":
        adapter = MultipleChoiceAdapter("swag", "swag", msl)
        train = adapter.read(s.train, "train")
    else:
        name = "squad2" if s.version_2_with_negative else "squad1"
        SquadFeatureConfig.of(s.windows).check_stride(msl)
        adapter = SquadAdapter(
            "squad",
            name,
            msl,
            version_2=s.version_2_with_negative,
            windows=s.windows,
            search=s.search,
        )
        train = adapter.read(s.train, "train")
    adapter.require_labelled(s.train, "train", train)
    adapter.fit_labels(train)
    dev = adapter.require_labelled(s.dev, "dev", adapter.read(s.dev, "dev"))
    return adapter, train, {"dev": dev}
