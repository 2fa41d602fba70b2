"""Deployment formats: ONNX export (``onnx.py``: the traced graph in ``graph.py``, each head's
outputs in ``heads.py``) and the ONNX Runtime wrapper that runs an exported file like a bertkit
model (``runtime.py``). onnx and onnxruntime are the optional extra ``bertkit[onnx]``; nothing here
imports them before it is used."""

from bertkit.export.onnx import OnnxExportConfig, export_onnx, require_onnxruntime
from bertkit.export.runtime import OnnxModel, find_onnx

__all__ = ["OnnxExportConfig", "OnnxModel", "export_onnx", "find_onnx", "require_onnxruntime"]
