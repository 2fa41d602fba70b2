"""sentence-transformers folder files: how a model folder declares pooling, normalisation and
length, read by ``Embedder.load`` and written by ``Embedder.save`` (the one home of the format).

A sentence-transformers folder is a Hugging Face BERT folder plus:

- ``modules.json``: the module chain, here ``Transformer`` (the folder itself, path ``""``) ->
  ``Pooling`` (``1_Pooling``) -> ``Normalize`` (``2_Normalize``, only when vectors are
  L2-normalised);
- ``1_Pooling/config.json``: the pooling, as ``pooling_mode_*`` flags (every version of
  sentence-transformers and text-embeddings-inference reads these; sentence-transformers 6
  writes ``"pooling_mode": "mean"`` instead, which is read too);
- ``sentence_bert_config.json``: ``max_seq_length`` (inputs are cut there) and ``do_lower_case``
  (false: the tokenizer lowercases);
- ``config_sentence_transformers.json``: versions and the similarity function.

A sentence-transformers ``SparseEncoder`` folder (SPLADE) has ``MLMTransformer`` (or
``Transformer`` with ``"transformer_task": "fill-mask"``) -> ``SpladePooling`` instead, its
``config.json`` holding ``pooling_strategy`` and ``activation_function``, and may cap the
active dimensions (``max_active_dims`` in ``config_sentence_transformers.json``):
:func:`splade_spec` reads them. A folder holding a single ``Router`` (inference-free or
two-encoder SPLADE, a dense query/document bi-encoder) has its routes read by
:mod:`bertkit.interop.sentence_router` (:func:`router_of`).

The written folder uses the classic module names (``sentence_transformers.models.Pooling``),
which sentence-transformers 2 to 6 load (6 maps them to its new ones).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit import __version__
from bertkit.errors import CheckpointError, ConfigError
from bertkit.interop.sentence_dense import PostPooling, read_dense, read_dropout, save_head
from bertkit.interop.sentence_pooling import FLAGS, OTHER_FLAGS, pooling_mode
from bertkit.interop.sentence_router import DenseRouter, SparseRouter, read_router
from bertkit.io import atomic_write_text
from bertkit.model.pooling import SpladeSpec
from bertkit.tokenizer.conventions import LARGE_INTEGER, read_config

MODULES = "modules.json"
POOLING_DIR = "1_Pooling"
NORMALIZE_DIR = "2_Normalize"
SPLADE_DIR = "1_SpladePooling"
SENTENCE_CONFIG = "sentence_bert_config.json"
VERSIONS = "config_sentence_transformers.json"
EMBEDDING_INFO = "bertkit_embedding.json"
SENTENCE_FILES = (MODULES, SENTENCE_CONFIG, VERSIONS)
"""The top-level files (besides the module folders that ``modules.json`` names)."""
SENTENCE_LAYOUT = (
    *SENTENCE_FILES,
    EMBEDDING_INFO,
    f"{POOLING_DIR}/config.json",
    f"{SPLADE_DIR}/config.json",
)
"""Every file a sentence-transformers folder written by bertkit has beyond a model folder's: what
a fine-tuned task's folder saved over it drops (``modules.json`` would make it an embedder)."""


def module_chain(root: Path) -> list[tuple[str, str]] | None:
    """``modules.json``'s modules in order as (class name, sub-folder) ("Pooling", "1_Pooling"),
    None for a folder without one. Raises CheckpointError for an unreadable file."""
    path = root / MODULES
    if not path.is_file():
        return None
    try:
        modules = json.loads(path.read_text(encoding="utf-8"))
        return [(m["type"].rsplit(".", 1)[-1], m.get("path", "")) for m in modules]
    except (OSError, KeyError, TypeError, AttributeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{root}: unreadable sentence-transformers config ({e})") from e


def _module_kinds(root: Path) -> dict[str, str] | None:
    """``modules.json``'s modules as {class name: sub-folder}, None for a folder without one."""
    chain = module_chain(root)
    return None if chain is None else dict(chain)


DENSE_CHAIN = ("Transformer", "Pooling", "Dense", "Normalize")
"""The modules of an embedding folder, in this order (Dense any number of times, Pooling and
Normalize at most once); :func:`sentence_transformers_spec` refuses any other."""
READ_ELSEWHERE = ("Router", "MLMTransformer", "SpladePooling", "SparseStaticEmbedding")
"""Modules of folders read by :func:`router_of` and :func:`splade_spec`, not as embeddings."""


@dataclass(frozen=True)
class PoolingSpec:
    """How token vectors become one vector, and the token limit of the inputs."""

    pooling: str = "mean"
    normalize: bool = False
    max_length: int | None = None
    dense: tuple[PostPooling, ...] = ()
    """The folder's Dense modules, applied in order after the pooling, and the Dropout modules
    among them and after them (before Normalize), which act in training only."""
    lowercase: bool = False
    """``sentence_bert_config.json``'s ``do_lower_case``: texts are lowercased before the
    tokenizer (:meth:`bertkit.tokenizer.BertTokenizer.lowercased`)."""


def sentence_transformers_spec(directory: str | Path) -> PoolingSpec | None:
    """The pooling a sentence-transformers folder declares, or None for a plain BERT folder.

    ``max_length`` is ``sentence_bert_config.json``'s ``max_seq_length``, else (folders saved by
    sentence-transformers 6 keep it there) tokenizer_config.json's ``model_max_length``, else
    None. Raises CheckpointError for an unreadable file or a pooling bertkit does not compute.
    """
    root = Path(directory)
    chain = module_chain(root)
    if chain is None:
        return None
    after_pooling = _after_pooling(chain)
    chain = [(kind, path) for kind, path in chain if kind != "Dropout"]  # nothing at inference
    kinds = dict(chain)
    try:
        spec: dict[str, Any] = {"normalize": "Normalize" in kinds}
        if "Pooling" in kinds:
            spec["pooling"] = pooling_mode(root / kinds["Pooling"], root)
        if not any(k in READ_ELSEWHERE for k in kinds):
            _check_chain(root, chain)
        spec["dense"] = tuple(
            read_dense(root / path) if kind == "Dense" else read_dropout(root / path)
            for kind, path in after_pooling
        )
        st = root / SENTENCE_CONFIG
        if st.is_file():
            sentence = json.loads(st.read_text(encoding="utf-8"))
            spec["max_length"] = sentence.get("max_seq_length")
            spec["lowercase"] = bool(sentence.get("do_lower_case", False))
        if spec.get("max_length") is None:
            limit = read_config(root).get("model_max_length")
            if limit is not None and limit <= LARGE_INTEGER:
                spec["max_length"] = limit
    except (OSError, KeyError, TypeError, AttributeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{root}: unreadable sentence-transformers config ({e})") from e
    return PoolingSpec(**spec)


def _after_pooling(chain: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The Dense and Dropout modules between the Pooling and Normalize (or the end): what the
    pooled vector goes through. A Dropout elsewhere is left out (before the Pooling,
    sentence-transformers has no vector to drop values of; after Normalize, where bertkit's
    trained head has ended)."""
    kinds = [kind for kind, _ in chain]
    start = kinds.index("Pooling") + 1 if "Pooling" in kinds else 1
    end = kinds.index("Normalize") if "Normalize" in kinds else len(chain)
    return [(kind, path) for kind, path in chain[start:end] if kind in ("Dense", "Dropout")]


def _check_chain(root: Path, chain: list[tuple[str, str]]) -> None:
    """CheckpointError unless ``chain`` is :data:`DENSE_CHAIN`'s modules in its order (a
    ``Dropout``, nothing at inference, is left out before): another module
    (``WeightedLayerPooling``, ``LayerNorm``, ``CNN``, ...), or these in another order, would give
    vectors other than sentence-transformers' without a word."""
    rank = [DENSE_CHAIN.index(k) if k in DENSE_CHAIN else -1 for k, _ in chain]
    unknown = [f"{k} ({p or 'the folder'})" for (k, p), r in zip(chain, rank, strict=True) if r < 0]
    if unknown:
        raise CheckpointError(
            f"{root}: modules.json names {', '.join(unknown)}, which bertkit does not compute "
            f"(it computes {' -> '.join(DENSE_CHAIN)})"
        )
    once = [
        k for k in ("Transformer", "Pooling", "Normalize") if [c for c, _ in chain].count(k) > 1
    ]
    if rank != sorted(rank) or once or not chain or chain[0][0] != "Transformer":
        order = " -> ".join(k for k, _ in chain)
        raise CheckpointError(
            f"{root}: modules.json chains {order}; bertkit computes Transformer -> Pooling -> "
            "Dense (any number) -> Normalize, each but Dense at most once, in that order"
        )


def splade_spec(directory: str | Path) -> SpladeSpec | None:
    """The SPLADE pooling a sentence-transformers ``SparseEncoder`` folder declares (its
    ``SpladePooling`` module's config and the folder's ``max_active_dims``; a ``Router``'s
    document route: :mod:`bertkit.interop.sentence_router`), or None for a folder without that
    module (a dense Router too). Raises CheckpointError for an unreadable or unknown config."""
    root = Path(directory)
    kinds = _module_kinds(root)
    if kinds is not None and "Router" in kinds:
        router = router_of(root)
        return router.spec if isinstance(router, SparseRouter) else None
    if kinds is None or "SpladePooling" not in kinds:
        return None
    try:
        path = root / kinds["SpladePooling"] / "config.json"
        cfg = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        versions = root / VERSIONS
        top = json.loads(versions.read_text(encoding="utf-8")) if versions.is_file() else {}
        return SpladeSpec(
            cfg.get("pooling_strategy", "max"),
            cfg.get("activation_function", "relu"),
            top.get("max_active_dims"),
        )
    except (OSError, KeyError, TypeError, AttributeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{root}: unreadable sentence-transformers config ({e})") from e
    except ConfigError as e:
        raise CheckpointError(f"{root}: {e}") from e


def router_of(
    directory: str | Path, *, sparse: bool | None = None
) -> SparseRouter | DenseRouter | None:
    """The Router of a local folder (:mod:`~bertkit.interop.sentence_router`: SPLADE or dense,
    or read as ``sparse`` says), None for any other folder (a Hub id too); CheckpointError for a
    Router bertkit does not compute."""
    root = Path(directory)
    kinds = _module_kinds(root) if root.is_dir() else None
    if kinds is None or "Router" not in kinds:
        return None
    versions = root / VERSIONS
    try:
        top = json.loads(versions.read_text(encoding="utf-8")) if versions.is_file() else {}
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{versions}: unreadable ({e})") from e
    return read_router(root, kinds, top.get("max_active_dims"), sparse=sparse)


def save_sentence_transformers_files(
    folder: str | Path,
    pooling: str = "mean",
    normalize: bool = False,
    max_seq_length: int | None = None,
    *,
    dimension: int | None = None,
    similarity: str = "cosine",
    prompts: dict[str, str] | None = None,
    default_prompt_name: str | None = None,
    include_prompt: bool = True,
    dense: Any = None,
) -> None:
    """Write the sentence-transformers files of a model folder (each atomically), so that
    ``SentenceTransformer(folder)`` pools as bertkit's ``Embedder`` does.

    Args:
        folder: a model folder (config.json, weights, tokenizer files) or the folder it will be.
        pooling: ``"mean"``, ``"cls"`` or ``"max"`` (bertkit's poolings).
        normalize: add the ``Normalize`` module (unit-length vectors).
        max_seq_length: the longest input in tokens, specials included; None: the model's
            ``max_position_embeddings`` from ``folder/config.json``.
        dimension: the vector size; None: ``hidden_size`` from ``folder/config.json``.
        similarity: ``similarity_fn_name``, what the vectors are compared by (``cosine``, or
            ``dot`` for a model trained on dot products).
        prompts: named prompts (``{"query": "query: ", "document": "passage: "}``), and
            ``default_prompt_name`` the one ``encode`` puts before every text (None: none).
        include_prompt: false leaves [CLS] and a prompt's tokens out of the pooling (a loaded
            folder's, kept; written only when false, which releases before 2.4 cannot read).
        dense: Dense modules after the pooling, as ``Embedder.head`` holds them (a
            ``torch.nn.Sequential`` of linear layers, each followed by its activation, and
            dropouts), each written as a ``{i}_Dense`` or ``{i}_Dropout`` folder
            (:func:`bertkit.interop.sentence_dense.save_head`).

    Raises ConfigError for another pooling, or when a value must come from a missing config.json.
    """
    if pooling not in FLAGS:
        raise ConfigError(f"pooling must be one of {', '.join(FLAGS)}, got {pooling!r}")
    root = Path(folder)
    if dimension is None or max_seq_length is None:
        config = _model_config(root)
        dimension = dimension or int(config["hidden_size"])
        max_seq_length = max_seq_length or int(config["max_position_embeddings"])
    modules = [("Transformer", ""), ("Pooling", POOLING_DIR)]
    modules += save_head(root, dense, len(modules))
    if normalize:
        named = f"{len(modules)}_Normalize" if len(modules) > 2 else NORMALIZE_DIR
        modules.append(("Normalize", named))
    chain = [
        {"idx": i, "name": str(i), "path": path, "type": f"sentence_transformers.models.{kind}"}
        for i, (kind, path) in enumerate(modules)
    ]
    flags = {flag: mode == pooling for mode, flag in FLAGS.items()}
    pool_config = {"word_embedding_dimension": dimension, **flags}
    pool_config.update(dict.fromkeys(OTHER_FLAGS, False))
    if not include_prompt:
        pool_config["include_prompt"] = False
    versions = {
        # no "sentence_transformers" version: that key makes older releases warn that the
        # folder comes from a newer one
        "__version__": {"bertkit": __version__},
        "prompts": dict(prompts or {}),
        "default_prompt_name": default_prompt_name,
        "similarity_fn_name": similarity,
    }
    _write(root / POOLING_DIR / "config.json", pool_config)
    _write(root / SENTENCE_CONFIG, {"max_seq_length": max_seq_length, "do_lower_case": False})
    _write(root / VERSIONS, versions)
    _write(root / MODULES, chain)  # last: a folder with modules.json has all its files


def save_sparse_encoder_files(
    folder: str | Path,
    spec: SpladeSpec,
    max_seq_length: int,
    *,
    prompts: dict[str, str] | None = None,
    default_prompt_name: str | None = None,
) -> None:
    """Write the files that make a masked-LM model folder a sentence-transformers
    ``SparseEncoder`` (each atomically, ``modules.json`` last): ``MLMTransformer`` (the folder
    itself) -> ``SpladePooling`` (``spec``'s strategy and activation), similarity dot, its
    ``max_active_dims``, named ``prompts`` and the ``default_prompt_name`` among them that
    ``encode`` puts before every text; what :func:`splade_spec` reads back."""
    root = Path(folder)
    st = "sentence_transformers.sparse_encoder.modules"
    chain = [
        {"idx": 0, "name": "0", "path": "", "type": f"{st}.mlm_transformer.MLMTransformer"},
        {"idx": 1, "name": "1", "path": SPLADE_DIR, "type": f"{st}.splade_pooling.SpladePooling"},
    ]
    pooling = {
        "pooling_strategy": spec.pooling_strategy,
        "activation_function": spec.activation_function,
        "embedding_dimension": None,
    }
    versions = {
        "__version__": {"bertkit": __version__},
        "model_type": "SparseEncoder",
        "prompts": dict(prompts or {}),
        "default_prompt_name": default_prompt_name,
        "similarity_fn_name": "dot",
        "max_active_dims": spec.max_active_dims,
    }
    _write(root / SPLADE_DIR / "config.json", pooling)
    _write(root / SENTENCE_CONFIG, {"max_seq_length": max_seq_length, "do_lower_case": False})
    _write(root / VERSIONS, versions)
    _write(root / MODULES, chain)


def save_embedding_info(folder: str | Path, matryoshka_dims: list[int] | tuple[int, ...]) -> None:
    """Write ``bertkit_embedding.json``: the vector sizes (besides the full one) the model was
    trained to embed with (Matryoshka); ``bertkit serve`` accepts ``dimensions`` for those."""
    _write(
        Path(folder) / EMBEDDING_INFO, {"matryoshka_dims": sorted(matryoshka_dims, reverse=True)}
    )


def matryoshka_dims(folder: str | Path) -> tuple[int, ...]:
    """The Matryoshka sizes ``bertkit_embedding.json`` names (empty: none, or no such file)."""
    path = Path(folder) / EMBEDDING_INFO
    if not path.is_file():
        return ()
    try:
        return tuple(
            int(d) for d in json.loads(path.read_text(encoding="utf-8"))["matryoshka_dims"]
        )
    except (OSError, KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: unreadable ({e})") from e


def similarity_of(folder: str | Path) -> str | None:
    """The ``similarity_fn_name`` of ``config_sentence_transformers.json`` ("cosine", "dot",
    "euclidean", "manhattan"; "dot_product" read as "dot"), None without one."""
    path = Path(folder) / VERSIONS
    if not path.is_file():
        return None
    try:
        name = json.loads(path.read_text(encoding="utf-8")).get("similarity_fn_name")
    except (OSError, AttributeError, ValueError) as e:
        raise CheckpointError(f"{path}: unreadable ({e})") from e
    return "dot" if name == "dot_product" else name


def _model_config(root: Path) -> dict[str, Any]:
    path = root / "config.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(
            f"{path}: needed for the vector size and length limit (pass dimension and "
            f"max_seq_length, or save the model first) ({e})"
        ) from e


def _write(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")
