"""``bertkit export onnx``: a model folder -> an ONNX file for ONNX Runtime (bertkit.export).

    bertkit export onnx --model MODEL_DIR --output out/model.onnx --optimize --quantize int8

The tokenizer and configs are written beside the file; ``bertkit serve --backend onnx --model
out`` serves it. The flags are the fields of :class:`bertkit.export.onnx.OnnxExportConfig`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bertkit.cli import options

HELP = "export a model to a deployment format (onnx: ONNX Runtime, optional fusions and int8)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from bertkit.export.onnx import HEAD_CHOICES, QUANTIZE_CHOICES, OnnxExportConfig

    formats = p.add_subparsers(dest="format", metavar="FORMAT", required=True)
    onnx = formats.add_parser(
        "onnx", help="ONNX (opset 17 by default), dynamic batch and sequence axes"
    )
    options.add_model(onnx, "model folder (bertkit or Hugging Face)")
    onnx.add_argument("--output", type=Path, required=True, help="the .onnx file to write")
    options.add_fields(
        onnx,
        OnnxExportConfig,
        ("opset", "optimize", "quantize", "head"),
        choices={"quantize": QUANTIZE_CHOICES, "head": HEAD_CHOICES},
    )
    options.add_allow_pickle(onnx)


def run(args: argparse.Namespace) -> int:
    from bertkit.export.onnx import OnnxExportConfig, export_onnx

    config = options.values(args, OnnxExportConfig)
    result = export_onnx(args.model, args.output, config, allow_pickle=args.allow_pickle)
    fused = ", ".join(f"{k} {v}" for k, v in result.fused.items())
    weights = ", int8 weights" if config.quantize == "int8" else ""  # the size's reason
    print(
        f"wrote {result.path} ({result.head}: {', '.join(result.outputs)}; "
        f"{result.bytes / 2**20:.1f} MiB{weights}{'; fused ' + fused if fused else ''}) "
        f"in {result.seconds:.1f}s",
        file=sys.stderr,
    )
    return 0
