"""Model FLOP counts used for utilisation (MFU) figures.

Counts only *useful* multiply-adds (2 FLOPs each) of a BERT pre-training or inference step, the same
for every implementation, so a faster implementation shows as a higher utilisation:

Per sequence of T tokens, with L layers, hidden H, feed-forward I, vocabulary V and M masked
positions, the forward pass costs

    encoder    L * (2*T*4*H*H  [Q, K, V, output projections]
                    + 2*T*2*H*I [feed-forward in and out]
                    + 2*2*T*T*H) [scores Q K^T and the weighted sum P V]
    pooler     2*H*H            (on [CLS]) + NSP classifier 2*H*2
    MLM head   M * (2*H*H + 2*H*V)   transform + decoder, at the masked positions only

Embedding lookups, LayerNorm, softmax and activations are not counted (they are not matmuls).
A training step is 3x the forward FLOPs (backward = 2x forward). For inference on mixed lengths,
T is each sequence's own length: padding is not useful work. Implementations that run the MLM
decoder over all T positions (Hugging Face) do extra work that is deliberately not counted.
"""

from __future__ import annotations


def encoder_flops(
    tokens: int, layers: int, hidden: int, intermediate: int, seq_len: int | None = None
) -> float:
    """Forward FLOPs of the encoder stack for ``tokens`` tokens in sequences of ``seq_len``."""
    seq_len = tokens if seq_len is None else seq_len
    dense = 2 * tokens * (4 * hidden * hidden + 2 * hidden * intermediate)
    attention = 2 * 2 * tokens * seq_len * hidden
    return float(layers * (dense + attention))


def pretraining_step_flops(
    batch: int,
    seq_len: int,
    masked_per_seq: int,
    layers: int,
    hidden: int,
    intermediate: int,
    vocab: int,
) -> float:
    """Useful FLOPs of one pre-training step (forward + backward) on a full (B, T) batch: the
    trainer's own count (``bertkit.training.metrics.pretraining_flops``, ``padded``; on a full
    batch its ``real`` count differs only by the last layer's unneeded tokens)."""
    from types import SimpleNamespace

    from bertkit.training.metrics import pretraining_flops

    config = SimpleNamespace(
        num_hidden_layers=layers,
        hidden_size=hidden,
        intermediate_size=intermediate,
        vocab_size=vocab,
    )
    return pretraining_flops(
        config,
        lengths=[seq_len] * batch,
        seq_len=seq_len,
        masked=batch * masked_per_seq,
        definition="padded",
    )


def inference_flops(lengths: list[int], layers: int, hidden: int, intermediate: int) -> float:
    """Useful forward FLOPs of the encoder + pooler for sequences of the given true lengths."""
    total = sum(encoder_flops(t, layers, hidden, intermediate, t) for t in lengths)
    return total + len(lengths) * 2 * hidden * hidden


def matmul_candidates(dtype_name: str, n: int = 2048) -> dict[str, object]:
    """The n x n x n matmuls that define the peak: torch's own ``a @ b`` (MKL for fp32 on the CPU,
    oneDNN for bf16) and, where torch has it, oneDNN's fp32 linear. The peak is the faster of the
    two: on CPUs where MKL's sgemm takes its AVX2 path, oneDNN's AVX-512 fp32 kernels are about
    2.3x faster, and a peak measured with MKL alone would not be the machine's limit."""
    import torch

    dtype = getattr(torch, dtype_name)
    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    fns: dict[str, object] = {"matmul-peak": lambda: a @ b}
    op = getattr(torch.ops.mkldnn, "_linear_pointwise", None)
    if dtype == torch.float32 and op is not None and torch.backends.mkldnn.is_available():
        fns["matmul-peak-onednn"] = lambda: op(a, b, None, "none", [], "")
    return fns


def matmul_peaks_gflops(
    dtype_name: str = "float32", n: int = 2048, repeats: int = 10
) -> dict[str, float]:
    """Best observed GFLOP/s of each n x n x n matmul of :func:`matmul_candidates` in this process;
    the machine's practical peak is the highest of them."""
    import time

    out = {}
    for name, fn in matmul_candidates(dtype_name, n).items():
        for _ in range(2):
            fn()
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        out[name] = 2 * n**3 / best / 1e9
    return out
