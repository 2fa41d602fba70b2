"""An exported ONNX file run by ONNX Runtime behind the interface of a bertkit model.

:class:`OnnxModel` is called like the head it was exported from (``model(input_ids=...,
attention_mask=..., token_type_ids=...)``) and returns the same output dataclass, so
:class:`~bertkit.inference.Embedder` and :class:`~bertkit.inference.TaskModel` (and through them
``bertkit serve --backend onnx``) run it unchanged: length-sorted batches, pooling, decoding.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertkit.errors import CheckpointError
from bertkit.export.heads import HEADS, INPUTS
from bertkit.export.onnx import HEAD_KEY, require_onnxruntime
from bertkit.interop.pretrained import load_config


def find_onnx(path: str | Path) -> Path:
    """``path`` itself when it is an .onnx file, else the only .onnx file in the folder."""
    path = Path(path)
    if path.is_file():
        if path.suffix != ".onnx":
            raise CheckpointError(f"{path}: not an .onnx file")
        return path
    found = sorted(path.glob("*.onnx")) if path.is_dir() else []
    if len(found) != 1:
        what = (
            "no .onnx file"
            if not found
            else f"{len(found)} .onnx files ({', '.join(f.name for f in found)}); name one"
        )
        raise CheckpointError(f"{path}: {what}")
    return found[0]


def session_options(threads: int | None = None, spinning: bool = True) -> Any:
    """ONNX Runtime session options: ``threads`` intra-op threads (None: torch's thread count);
    ``spinning=False`` lets idle pool threads sleep (needed when ORT shares the cores with other
    work, e.g. interleaved benchmarks)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads or torch.get_num_threads()
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if not spinning:
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return opts


class OnnxModel(nn.Module):
    """An ONNX Runtime session that answers like the bertkit head it was exported from."""

    def __init__(self, path: str | Path, threads: int | None = None, spinning: bool = True) -> None:
        super().__init__()
        require_onnxruntime()
        import onnxruntime as ort

        self.path = find_onnx(path)
        self.config = load_config(self.path.parent)
        try:
            self.session = ort.InferenceSession(
                str(self.path),
                session_options(threads, spinning),
                providers=["CPUExecutionProvider"],
            )
        except Exception as e:  # onnxruntime raises its own exception types for bad files
            raise CheckpointError(
                f"{self.path}: ONNX Runtime cannot load it ({str(e).splitlines()[0]})"
            ) from e
        meta = self.session.get_modelmeta().custom_metadata_map
        self.head = meta.get(HEAD_KEY, "BertModel")
        if self.head not in HEADS:
            raise CheckpointError(f"{self.path}: unknown head {self.head!r} in its metadata")
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.quantized = meta.get("bertkit_quantize", "none")
        # Embedder and predict_rows find the device through the parameters: one empty anchor
        self._anchor = nn.Parameter(torch.zeros(0), requires_grad=False)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        **_ignored: Any,
    ) -> Any:
        """The head's output dataclass (fp32 tensors); other keyword arguments (``unpad``,
        labels) are accepted and ignored: the graph is the padded inference pass."""
        ids = input_ids.cpu().numpy().astype(np.int64, copy=False)
        feeds = {
            "input_ids": ids,
            "attention_mask": np.ones_like(ids)
            if attention_mask is None
            else attention_mask.cpu().numpy().astype(np.int64, copy=False),
            "token_type_ids": np.zeros_like(ids)
            if token_type_ids is None
            else token_type_ids.cpu().numpy().astype(np.int64, copy=False),
        }
        wanted = {i.name for i in self.session.get_inputs()}
        got = self.session.run(
            None, {k: v for k, v in feeds.items() if k in INPUTS and k in wanted}
        )
        values = {n: torch.from_numpy(v) for n, v in zip(self.output_names, got)}
        return HEADS[self.head].output_class(**values)
