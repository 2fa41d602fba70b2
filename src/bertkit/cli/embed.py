"""`bertkit embed`: one vector per input line from a bertkit or Hugging Face checkpoint.

Lines longer than the model's limit are read in windows (``--truncate`` cuts them instead);
``--layers``/``--layer-combine`` pick the hidden layers (the paper's feature-based approach) and
``--per-token`` writes one vector per word piece with its character offsets (``.npy`` plus a
``.jsonl`` index beside it).

``--pooling splade`` (the default for a sentence-transformers ``SparseEncoder`` folder) writes
SPLADE vectors from the masked-LM head (:mod:`bertkit.inference.sparse`) as JSON lines
``{"line": 1, "indices": [...], "values": [...]}``, the non-zero entries only: a dense ``.npy``
would hold a vocabulary's worth (30522 floats) per line, nearly all zero. A folder output gets
CSR ``.npz`` shards plus the manifest, streamed and resumable as the dense folder
(:mod:`bertkit.inference.sparse_corpus`).

Prompts are sentence-transformers': ``--task query`` or ``--task document`` embeds as
``encode_query`` / ``encode_document`` do (each line behind the folder's prompt of that name, and
for a ``Router`` folder through that task's route: an inference-free SPLADE's static query
weights, a two-encoder SPLADE's or a dense bi-encoder's query encoder); without it, as ``encode``
(dense: behind the folder's default prompt if it names one; SPLADE: no prompt; a Router: its
default route, usually document).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from bertkit.cli import options, pooling_options
from bertkit.progress import counted

HELP = "embed lines (stdin or --input) into vectors (.npy or .jsonl) with a BERT checkpoint"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from bertkit.inference.embedder import Embedder, LayerSpec
    from bertkit.model.pooling import LAYER_COMBINES

    options.add_model(p, "checkpoint folder (config.json, weights, vocab.txt or tokenizer.json)")
    p.add_argument(
        "--input", type=Path, default=None, help="text file, one item per line (default: stdin)"
    )
    p.add_argument(
        "--output",
        required=True,
        help="vectors: .npy (float32 N x H) or .jsonl; a folder (DIR/, an existing folder "
        "or a name without suffix): .npy shards (SPLADE: CSR .npz shards) + manifest.json, "
        "streamed, resumable",
    )
    pooling_options.add_pooling(
        p,
        "token vectors -> one vector; splade: a sparse vector from the masked-LM head, "
        "written as .jsonl of indices and values or a folder of CSR shards (default: the "
        "folder's sentence-transformers pooling, splade for a SparseEncoder folder, else mean)",
    )
    from bertkit.interop.sentence_router import TASKS

    p.add_argument(
        "--task",
        choices=TASKS,
        default=None,
        help="embed as sentence-transformers' encode_query / encode_document: each line behind "
        "the folder's prompt of that name (and a Router folder's route for it); default: "
        "as encode, behind the folder's default prompt if it names one",
    )
    p.add_argument(
        "--normalize",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="L2-normalise every vector (default: as the folder's sentence-transformers config says, else no)",
    )
    options.add_batch_size(p, Embedder)
    options.add_max_length(p)
    # long inputs and the feature-based approach (issue 16)
    options.add_windows(p, length="--max-length")
    options.add_streaming(p)  # folder output only
    from bertkit.inference.quantize import PRECISIONS

    p.add_argument(
        "--quantize",
        choices=PRECISIONS,
        default=None,
        help="folder output only: store the vectors quantized as sentence-transformers' "
        "quantize_embeddings (int8/uint8 ranges calibrated on the first --sort-window lines; "
        "binary/ubinary: packed sign bits); `bertkit search` rescores with the float query",
    )
    options.add_fields(
        p, LayerSpec, ("layers", "layer_combine"), choices={"layer_combine": LAYER_COMBINES}
    )
    p.add_argument(
        "--per-token",
        action="store_true",
        help="one vector per word piece (.npy) and a .jsonl index of pieces and offsets",
    )
    options.add_precision(p, inference=True)
    p.add_argument(
        "--bf16",
        dest="precision",
        action="store_const",
        const="bf16",
        help="deprecated alias of --precision bf16",
    )
    options.add_device(p)
    options.add_allow_pickle(p)
    options.add_split_special_tokens(p)
    options.add_encoding_errors(p)


def _run_sparse(args: argparse.Namespace) -> int:
    """SPLADE vectors as JSON lines, or CSR shards in a folder (see the module doc)."""
    from bertkit.errors import InputError
    from bertkit.io import atomic_write

    folder = options.is_folder_output(args.output)
    refused = {
        ".npy (dense vectors of the vocabulary's size)": not folder
        and Path(args.output).suffix.lower() != ".jsonl",
        "--per-token": args.per_token,
        "--normalize": args.normalize is not None,
        "--layers": bool(args.layers),
        "--quantize (dense vectors only)": args.quantize is not None,
    }
    bad = [what for what, hit in refused.items() if hit]
    if bad:
        raise InputError(
            args.output,
            None,
            f"--pooling splade writes sparse vectors to a .jsonl file or a folder; not with {bad[0]}",
        )
    if folder:
        args.output = Path(args.output)
        return _run_folder(args, sparse=True)
    model = _load_sparse(args)
    texts = _read_lines(args.input, args.encoding_errors)
    start = time.perf_counter()
    vectors, counts = model.embed(texts, args.task)
    with atomic_write(Path(args.output), "w") as f:
        for n, vec in enumerate(vectors, start=1):
            row = {"line": n, "indices": vec.indices.tolist(), "values": vec.values.tolist()}
            f.write(json.dumps(row) + "\n")
    seconds = time.perf_counter() - start
    spec, active = model.spec, sum(len(v.indices) for v in vectors) / max(len(vectors), 1)
    print(
        f"embedded {counted(len(texts), 'line')} -> {args.output} (SPLADE {spec.pooling_strategy} pooling, "
        f"{active:.1f} of {model.vocab_size} entries non-zero on average, "
        f"{model.embedder.precision}; {len(texts) / max(seconds, 1e-9):.1f} lines/s); "
        f"long inputs: {counts.summary('line')}",
        file=sys.stderr,
    )
    return 0


def _read_lines(path: Path | None, errors: str) -> list[str]:
    return list(_stream_lines(path, errors))


def _stream_lines(path: Path | None, errors: str):
    """The input's lines one at a time (stdin too), so memory does not grow with the corpus."""
    from bertkit.io import read_input_lines

    return (line for _, line in read_input_lines(path, errors=errors, replace_hint=True))


def _load_sparse(args: argparse.Namespace):
    from bertkit.inference.sparse import SparseEmbedder
    from bertkit.tasks.windows import WindowConfig

    return SparseEmbedder.load(
        args.model,
        **pooling_options.splade_values(args),
        max_length=args.max_length,
        windows=options.values(args, WindowConfig, options.WINDOW_FIELDS),
        **options.loading_values(args),
    )


def _dense_prompt(args: argparse.Namespace) -> str:
    """What sentence-transformers puts before each text: with ``--task`` the folder's prompt of
    that name (``encode_query`` / ``encode_document``), else its default prompt (``encode``)."""
    from bertkit.interop.sentence_prompts import task_prompt

    return task_prompt(args.model, args.task)


def _routed(model: str) -> bool:
    """Whether ``model`` is a dense Router folder (its vectors depend on ``--task``'s route)."""
    from bertkit.interop.sentence_folder import router_of
    from bertkit.interop.sentence_router import DenseRouter

    return isinstance(router_of(model), DenseRouter)


def _load(args: argparse.Namespace):
    from bertkit.inference import Embedder
    from bertkit.inference.embedder import LayerSpec
    from bertkit.tasks.windows import WindowConfig

    return Embedder.load(
        args.model,
        pooling=args.pooling,
        normalize=args.normalize,
        max_length=args.max_length,
        windows=options.values(args, WindowConfig, options.WINDOW_FIELDS),
        layers=options.values(args, LayerSpec),
        **options.loading_values(args),
    ).for_task(args.task)  # a dense Router folder: that task's route


def _quantize_values(args: argparse.Namespace, info: Any, dim: int) -> dict[str, Any]:
    """embed_to's quantization: ``--quantize``; under torchrun rank 0 calibrates int8/uint8
    ranges and every rank quantizes with them (gathered: the others send no rows)."""
    import numpy as np
    import torch

    from bertkit.training import distributed as D

    def share(ranges: np.ndarray | None) -> np.ndarray:
        mine = np.zeros((0, dim), np.float32) if ranges is None else ranges
        return D.all_gather_rows(torch.from_numpy(mine), info)[0].numpy()

    return {"quantize": args.quantize, "share": share if info.distributed else None}


def _run_folder(args: argparse.Namespace, sparse: bool = False) -> int:
    """Shards + manifest in the folder ``args.output``: :func:`bertkit.inference.corpus.embed_to`,
    or with ``sparse`` :func:`bertkit.inference.sparse_corpus.embed_sparse_to` (SPLADE).
    Under torchrun every rank embeds its share of the windows (rank 0's kernel choices, one
    barrier after the clean-up and one before the final manifest); alone, the group is a no-op."""
    from bertkit.errors import InputError
    from bertkit.inference.corpus import embed_to
    from bertkit.inference.sharded import file_size
    from bertkit.inference.sparse_corpus import embed_sparse_to
    from bertkit.io import count_lines
    from bertkit.training import distributed as D

    path = args.input
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and (path is None or not path.is_file()):
        # each rank reads the whole input and keeps its share: a pipe would deal lines out
        raise InputError(
            path or "<stdin>",
            None,
            "under torchrun every rank reads the whole input, which a pipe gives only once: "
            "pass a regular file with --input",
        )
    info = D.init_from_env(args.device)
    with D.reported(info):
        options.resume_precision(args)
        source = {"path": "-" if path is None else str(path), "size": file_size(path)}
        write, load = (embed_sparse_to, _load_sparse) if sparse else (embed_to, _load)
        prompt = "" if sparse else _dense_prompt(args)  # SPLADE: the embedder's own task prompt
        lines = _stream_lines(path, args.encoding_errors)
        model = load(args)
        summary = write(
            model,
            (prompt + line for line in lines) if prompt else lines,
            args.output,
            config=options.streaming_values(args),
            source=source,
            settings={
                "encoding_errors": args.encoding_errors,
                **({"prompt": prompt} if prompt else {}),  # what changes the vectors
                **({"task": args.task} if not sparse and _routed(args.model) else {}),
            },
            total=None if path is None else count_lines(path),
            show_progress=None if info.is_main else False,
            rank=info.rank,
            world=info.world_size,
            barrier=lambda: D.barrier(info),
            **({"task": args.task} if sparse else _quantize_values(args, info, model.dim)),
        )
    who = f"rank {info.rank}/{info.world_size}: " if info.distributed else ""
    print(
        f"{who}{summary.line(args.output)}; long inputs: {summary.counts.summary('line')}",
        file=sys.stderr,
    )
    if summary.mismatched:
        print(
            f"note: {summary.mismatched} shard(s) already on disk were recomputed with other bytes "
            "(kernel path or thread count changed?); the disk's were kept",
            file=sys.stderr,
        )
    return 0


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from bertkit.errors import InputError
    from bertkit.inference.token_features import save_token_features
    from bertkit.input_files import require_file
    from bertkit.io import atomic_write

    if args.input is not None:  # before the model loads; a FIFO is read once, as stdin
        require_file(args.input, stream=True)
    if pooling_options.is_sparse(args):
        return _run_sparse(args)
    folder = options.is_folder_output(args.output)
    args.output = Path(args.output)
    if folder and args.per_token:
        raise InputError(args.output, None, "--per-token writes one .npy file, not a folder")
    if args.quantize and not folder:
        raise InputError(
            args.output, None, "--quantize writes a folder (DIR/) of shards and their ranges"
        )
    suffix = args.output.suffix.lower()
    if not folder and suffix not in (".npy", ".jsonl"):
        raise InputError(args.output, None, "output must end in .npy or .jsonl")
    if args.per_token and suffix != ".npy":
        raise InputError(
            args.output, None, "--per-token writes .npy (and a .jsonl index beside it)"
        )
    if folder:
        return _run_folder(args)
    embedder = _load(args)
    prompt = _dense_prompt(args)
    texts = [prompt + t for t in _read_lines(args.input, args.encoding_errors)]
    start = time.perf_counter()
    if args.per_token:
        feats, counts = embedder.token_features(texts)
        index = save_token_features(args.output, feats)
        seconds = time.perf_counter() - start
        print(
            f"embedded {counted(len(texts), 'line')} -> {args.output} ({sum(len(f.tokens) for f in feats)} pieces x "
            f"{embedder.dim}) and {index} ({len(texts) / max(seconds, 1e-9):.1f} lines/s, "
            f"{seconds:.1f}s); long inputs: {counts.summary('line')}",
            file=sys.stderr,
        )
        return 0
    vectors, counts = embedder.embed(texts)
    with atomic_write(args.output, "wb" if suffix == ".npy" else "w") as f:
        if suffix == ".npy":
            np.save(f, vectors)
        else:
            for n, vec in enumerate(vectors, start=1):
                f.write(json.dumps({"line": n, "embedding": [float(x) for x in vec]}) + "\n")
    seconds = time.perf_counter() - start
    from bertkit.interop.sentence_dense import DenseModule

    spec = embedder.spec
    dense = sum(isinstance(m, DenseModule) for m in spec.dense)
    print(
        f"embedded {counted(len(texts), 'line')} -> {args.output} ({len(texts)} x {embedder.dim}, "
        f"{spec.pooling} pooling{f', {dense} Dense' if dense else ''}"
        f"{', normalised' if spec.normalize else ''}, {embedder.precision}; "
        f"{len(texts) / max(seconds, 1e-9):.1f} lines/s); long inputs: {counts.summary('line')}",
        file=sys.stderr,
    )
    return 0
