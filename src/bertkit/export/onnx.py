"""``export_onnx``: a bertkit or Hugging Face BERT folder -> an ONNX file ONNX Runtime can run.

The file takes ``input_ids``, ``attention_mask`` and ``token_type_ids`` (int64) with dynamic batch
and sequence axes (and choices, for multiple choice) and returns the head's outputs under
transformers' names (``heads.HEADS``). The folder's tokenizer, ``config.json``, task file
(``bertkit_task.json``) and sentence-transformers pooling files are written beside it, so the
folder the file lands in is a model folder ``bertkit serve --backend onnx`` and
:class:`~bertkit.export.runtime.OnnxModel` can load.

The graph is traced with the TorchScript exporter (``torch.onnx.export(..., dynamo=False)``). With
torch 2.13 the dynamo exporter needs onnxscript and a ``torch.export`` of the forward pass, which
bertkit's data-dependent packing (``bool(mask.all())``, per-batch length groups) breaks; the traced
padded path (``graph.ExportGraph``) has no such branches, and its output matches bertkit's own to
1e-5 on the real MiniLM (tests/export).

``optimize`` applies ONNX Runtime's transformer fusions (``onnxruntime.transformers.optimizer``,
model type ``bert``: Attention, SkipLayerNormalization, BiasGelu, ...); ``quantize="int8"``
applies ONNX Runtime's dynamic quantization (int8 weights with one scale per output channel,
uint8 activations quantized per call), after the fusions when both are asked for.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bertkit import hardware, hub
from bertkit.errors import CheckpointError, ConfigError
from bertkit.export.graph import ExportGraph
from bertkit.export.heads import HEADS, INPUTS
from bertkit.interop import load_with_report
from bertkit.interop.pretrained import WEIGHT_FILES, load_config
from bertkit.interop.sentence_folder import MODULES, SENTENCE_FILES
from bertkit.io import make_folder
from bertkit.progress import progress
from bertkit.staging import staged_folder
from bertkit.tasks import TASK_FILE, load_adapter
from bertkit.tokenizer import BertTokenizer

EXTRA = "onnx"
"""The optional dependency group (``pip install 'bertkit[onnx]'``)."""
HEAD_CHOICES = ("auto", "encoder", "masked-lm")
QUANTIZE_CHOICES = ("none", "int8")
_NAMED_HEADS = {"encoder": "BertModel", "masked-lm": "BertForMaskedLM"}
HEAD_KEY = "bertkit_head"
"""ONNX metadata key naming the head class the graph computes."""


def require_onnxruntime() -> None:
    """A one-line ConfigError naming the extra when onnx or onnxruntime is not installed."""
    for module in ("onnx", "onnxruntime"):
        try:
            __import__(module)
        except ImportError as e:
            raise ConfigError(
                f"ONNX support needs the {module} package: pip install 'bertkit[{EXTRA}]'"
            ) from e


@dataclass
class OnnxExportConfig:
    opset: int = 17
    """ONNX opset of the graph (14 or newer: scaled attention and LayerNormalization need it)."""
    optimize: bool = False
    """Apply ONNX Runtime's BERT fusions (Attention, SkipLayerNormalization, BiasGelu)."""
    quantize: str = "none"
    """none, or int8: ONNX Runtime dynamic quantization (int8 weights per channel, uint8 activations)."""
    head: str = "auto"
    """What the graph computes: auto (a fine-tuned folder's task head, else the head config.json's
    architectures names, else the encoder), encoder, or masked-lm (fill-mask logits)."""

    def __post_init__(self) -> None:
        if self.opset < 14:
            raise ConfigError(f"opset must be >= 14, got {self.opset}")
        if self.quantize not in QUANTIZE_CHOICES:
            raise ConfigError(
                f"quantize must be one of {', '.join(QUANTIZE_CHOICES)}, got {self.quantize!r}"
            )
        if self.head not in HEAD_CHOICES:
            raise ConfigError(f"head must be one of {', '.join(HEAD_CHOICES)}, got {self.head!r}")


@dataclass
class ExportResult:
    """What was written."""

    path: Path
    head: str
    outputs: tuple[str, ...]
    bytes: int
    fused: dict[str, int] = field(default_factory=dict)
    """ONNX Runtime's fused-operator counts (with ``optimize``)."""
    seconds: float = 0.0
    """Wall time of the export (loading, tracing, fusions, quantization, writing)."""


def head_class(directory: Path, head: str) -> str:
    """The head class the export of ``directory`` computes (see :class:`OnnxExportConfig`)."""
    if head != "auto":
        return _NAMED_HEADS[head]
    if (directory / TASK_FILE).is_file():
        return load_adapter(directory).head_class
    named = load_config(directory).architectures or []
    return next((n for n in named if n in HEADS), "BertModel")


def dummy_inputs(graph_head: str, vocab_size: int, type_vocab: int) -> tuple[torch.Tensor, ...]:
    """Inputs to trace with: two sequences (two choices each for multiple choice) of 8 tokens, the
    second half of the last row padding, so the traced graph keeps the mask arithmetic."""
    g = torch.Generator().manual_seed(0)
    shape = (2, 2, 8) if len(HEADS[graph_head].input_axes) == 3 else (2, 8)
    ids = torch.randint(0, vocab_size, shape, generator=g)
    mask = torch.ones(shape, dtype=torch.long)
    mask[-1, ..., 4:] = 0
    types = torch.zeros(shape, dtype=torch.long)
    types[..., 2:4] = min(1, type_vocab - 1)
    return ids * mask, mask, types


def export_onnx(
    directory: str | Path,
    output: str | Path,
    config: OnnxExportConfig,
    allow_pickle: bool = False,
    show_progress: bool | None = None,
) -> ExportResult:
    """Export the folder's model to ``output`` (.onnx) and write its tokenizer and configs beside it.

    ``show_progress``: a bar over the steps (trace, fusions, quantization), naming the one under
    way (None: on a terminal); each is one opaque call, minutes for a large model."""
    start = time.perf_counter()
    require_onnxruntime()
    directory, output = hub.resolve(directory, allow_pickle=allow_pickle), Path(output)
    if output.suffix != ".onnx":
        raise ConfigError(f"--output must end in .onnx, got {output}")
    _refuse_another_models_folder(directory, output.parent)
    newest = _newest_opset()
    if newest is not None and config.opset > newest:  # torch printed its whole graph, then raised
        raise ConfigError(
            f"--opset {config.opset}: torch {torch.__version__}'s exporter writes opsets 14 to "
            f"{newest}"
        )
    name = head_class(directory, config.head)
    model, report = load_with_report(directory, name, allow_pickle=allow_pickle)
    if model.config.is_decoder:
        raise CheckpointError(f"{directory}: a left-to-right model (is_decoder) is not exported")
    if name == "BertForMaskedLM" and any(k.startswith("mlm.") for k in report.missing):
        raise CheckpointError(
            f"{directory}: no masked-LM head weights to export (cls.predictions.*)"
        )
    outputs = tuple(HEADS[name].outputs)
    if name == "BertModel" and any(k.startswith("pooler.") for k in report.missing):
        outputs = ("last_hidden_state",)  # no trained pooler: do not export a random one
    make_folder(output.parent)
    steps = 1 + int(config.optimize) + int(config.quantize == "int8")  # trace, fuse, quantize
    bar = progress(total=steps, desc="export", unit="step", enabled=show_progress)
    with bar, tempfile.TemporaryDirectory(prefix="bertkit-onnx-") as tmp:
        bar.set_postfix_str("tracing")
        plain = Path(tmp) / "plain.onnx"
        _trace(model, name, outputs, plain, config.opset)
        bar.update(1)
        current, fused = plain, {}
        if config.optimize:
            bar.set_postfix_str("fusing")
            current, fused = _optimize(current, Path(tmp) / "fused.onnx", model.config)
            bar.update(1)
        if config.quantize == "int8":
            bar.set_postfix_str("quantizing")
            current = _quantize(current, Path(tmp) / "int8.onnx")
            bar.update(1)
        _tag(current, name, config)
        # the graph and the files beside it are one set, the graph renamed in last: a failure
        # leaves the previous export whole, never a new graph beside old configs
        with staged_folder(output.parent, last=output.name) as work:
            shutil.move(str(current), work / output.name)
            if directory.resolve() != output.parent.resolve():  # else they are there already
                _write_folder_files(directory, work)
    seconds = time.perf_counter() - start
    return ExportResult(output, name, outputs, output.stat().st_size, fused, seconds)


def _newest_opset() -> int | None:
    """The newest opset torch's TorchScript exporter writes (20 in torch 2.13), None where this
    torch no longer names it (the exporter's own error then stands)."""
    try:
        from torch.onnx import _constants  # no public name for it
    except ImportError:
        return None
    newest = getattr(_constants, "ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET", None)
    return newest if isinstance(newest, int) else None


def _refuse_another_models_folder(source: Path, target: Path) -> None:
    """The files written beside the graph (config.json, tokenizer, task file) would replace those
    of a model whose weights are in ``target``, leaving its weights with the exported model's
    config (a NER folder read as SQuAD): refuse, unless ``target`` is ``source`` itself."""
    if not target.is_dir() or target.resolve() == source.resolve():
        return
    held = [name for name in WEIGHT_FILES if (target / name).is_file()]
    if held:
        raise ConfigError(
            f"{target} holds another model's weights ({held[0]}): the export's config.json and "
            f"tokenizer files would replace that model's; write the .onnx into a folder of its "
            f"own, or into {source} itself"
        )


def _trace(
    model: torch.nn.Module, name: str, outputs: tuple[str, ...], path: Path, opset: int
) -> None:
    graph = ExportGraph(model, outputs)
    cfg = model.config
    inputs = dummy_inputs(name, cfg.vocab_size, cfg.type_vocab_size)
    axes = {i: HEADS[name].input_axes for i in INPUTS}
    axes.update({o: HEADS[name].outputs[o] for o in outputs})
    # the tracer records ATen ops: the fp32 products must be F.linear, not the oneDNN call
    with warnings.catch_warnings(), torch.no_grad(), hardware.forced("fp32_matmul", "blas"):
        # the tracer warns on every Python branch it freezes (the ones graph.py describes)
        warnings.simplefilter("ignore")
        torch.onnx.export(
            graph,
            inputs,
            str(path),
            dynamo=False,
            opset_version=opset,
            input_names=list(INPUTS),
            output_names=list(outputs),
            dynamic_axes=axes,
            do_constant_folding=True,
        )


def _optimize(src: Path, dst: Path, cfg) -> tuple[Path, dict[str, int]]:
    from onnxruntime.transformers.optimizer import optimize_model

    with _quiet():
        opt = optimize_model(
            str(src),
            model_type="bert",
            num_heads=cfg.num_attention_heads,
            hidden_size=cfg.hidden_size,
        )
        opt.save_model_to_file(str(dst))
    stats = {k: int(v) for k, v in opt.get_fused_operator_statistics().items() if v}
    return dst, stats


def _quantize(src: Path, dst: Path) -> Path:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _quiet():
        # per_channel: one scale per output column, as bertkit's own int8 (ORT's default is one
        # per tensor: CoNLL-2003 F1 -1.66 points against -0.64 per channel, same speed);
        # fused (com.microsoft) nodes defeat ONNX shape inference: every tensor here is fp32
        quantize_dynamic(
            str(src),
            str(dst),
            weight_type=QuantType.QInt8,
            per_channel=True,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
    return dst


def _tag(path: Path, name: str, config: OnnxExportConfig) -> None:
    """Record the head class and the export options in the file's metadata."""
    import onnx

    model = onnx.load(str(path))
    meta = {
        HEAD_KEY: name,
        "bertkit_optimize": str(config.optimize),
        "bertkit_quantize": config.quantize,
    }
    for key, value in meta.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(model, str(path))


@contextlib.contextmanager
def _quiet():
    """ONNX Runtime's tools log each fusion and warn about inferred shapes; keep the CLI quiet."""
    import logging

    loggers = [logging.getLogger(n) for n in ("onnxruntime", "root", "")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _write_folder_files(source: Path, target: Path) -> None:
    """Tokenizer, config.json, the task file and sentence-transformers pooling files of the
    folder ``source``, into ``target`` (the work folder of the graph's)."""
    BertTokenizer.from_pretrained(source).save_pretrained(target)
    for extra in ("special_tokens_map.json",):
        if (source / extra).is_file():
            shutil.copy2(source / extra, target / extra)
    shutil.copy2(source / "config.json", target / "config.json")
    if (source / TASK_FILE).is_file():
        shutil.copy2(source / TASK_FILE, target / TASK_FILE)
    for name in SENTENCE_FILES:  # copied, not rewritten: other modules (Dense, ...) survive
        if (source / name).is_file():
            shutil.copy2(source / name, target / name)
    modules = source / MODULES
    if modules.is_file():
        for module in json.loads(modules.read_text(encoding="utf-8")):
            sub = module.get("path", "")
            if sub and (source / sub).is_dir():
                shutil.copytree(source / sub, target / sub, dirs_exist_ok=True)
