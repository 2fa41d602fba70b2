"""Loading a model folder for inference, the one way every inference class does it.

:func:`load_for_inference` resolves the folder (a path or a Hub id), fixes the device and the
precision once (:class:`Placement`: a value the loaded object carries and never resolves again),
reads the tokenizer and the weights for the wanted head, and places the model (moved to the
device, quantized for int8). :class:`~bertkit.inference.Embedder`,
:class:`~bertkit.inference.FillMasker` and :class:`~bertkit.inference.TaskModel` load through it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from bertkit import hardware, hub
from bertkit import precision as P
from bertkit.interop import load_with_report
from bertkit.interop.hf import LoadReport
from bertkit.model.quantize import for_precision
from bertkit.tokenizer import BertTokenizer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Placement:
    """Where a loaded model runs and at which precision (concrete: never ``auto``; bf16 on a
    CPU without native bf16 is already fp32 here)."""

    device: torch.device
    precision: str

    @classmethod
    def of(cls, device: str | torch.device | None, precision: str) -> Placement:
        """``device`` (None or ``auto``: CUDA when present) and the requested ``precision``,
        resolved for it (:func:`bertkit.precision.resolve`)."""
        dev = torch.device(hardware.resolve_device(device))
        return cls(dev, P.resolve(precision, dev))

    def place(self, model: nn.Module) -> nn.Module:
        """``model`` on this device, quantized when the precision is int8."""
        return for_precision(model.to(self.device), self.precision)


@dataclass
class Loaded:
    """A folder read for inference: its path, tokenizer, placed model and placement;
    ``report`` says what loading the weights did (None when the caller gave the model)."""

    directory: Path
    tokenizer: BertTokenizer
    model: nn.Module
    placement: Placement
    report: LoadReport | None


def load_for_inference(
    directory: str | Path,
    head: type[nn.Module] | str,
    *,
    device: str | torch.device | None = None,
    precision: str = P.DEFAULT,
    allow_pickle: bool = False,
    split_special_tokens: bool = False,
    model: nn.Module | None = None,
    warn_unused: bool = True,
) -> Loaded:
    """Read ``directory`` (a folder or a Hub id) for inference with the ``head`` model class.

    ``model``: one already loaded for this folder (an exported ONNX file, a fill-mask model's
    encoder), placed instead of reading the weights again. ``warn_unused``: log the weights the
    head leaves missing or unused (off where that is expected: an encoder read from a masked-LM
    checkpoint leaves its head unused)."""
    folder = Path(hub.resolve(directory, allow_pickle=allow_pickle))
    placement = Placement.of(device, precision)
    report = None
    if model is None:
        model, report = load_with_report(folder, head, allow_pickle=allow_pickle)
        if warn_unused and (report.missing or report.unused):
            log.warning("%s -> %s: %s", folder, type(model).__name__, report.summary())
    tokenizer = BertTokenizer.from_pretrained(folder, split_special_tokens=split_special_tokens)
    return Loaded(folder, tokenizer, placement.place(model), placement, report)
