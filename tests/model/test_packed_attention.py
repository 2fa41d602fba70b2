"""Attention over packed tokens (the CUDA path, dispatched only there) against the padded path,
run on the CPU through the same packing: the collated Layout's indices and cu_seqlens."""

from __future__ import annotations

import pytest
import torch

from bertkit.config import BertConfig
from bertkit.model import BertModel
from bertkit.model.attention import attend, packed_attention, packed_backend
from bertkit.model.batching import layout

LENGTHS = [5, 12, 1, 9, 12, 3]


def _padded_and_packed(heads: int = 2, dim: int = 4, seed: int = 0):
    B, T = len(LENGTHS), max(LENGTHS)
    mask = (torch.arange(T)[None] < torch.tensor(LENGTHS)[:, None]).long()
    lay = layout(mask)
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(B * T, 3 * heads * dim, generator=g)
    return mask, lay, qkv


@pytest.mark.parametrize(
    ("backend", "causal"), [("reference", False), ("reference", True), ("nested", False)]
)
def test_packed_equals_padded(backend, causal):
    N, D = 2, 4
    mask, lay, qkv = _padded_and_packed(N, D)
    B, T = mask.shape
    packed = qkv.index_select(0, lay.indices)  # (S, 3H): what the unpadded encoder holds
    got = packed_attention(
        packed, lay.cu_seqlens, lay.max_seqlen, N, causal=causal, backend=backend
    )
    q, k, v = qkv.view(B, T, 3, N, D).permute(2, 0, 3, 1, 4).unbind(0)
    want = attend(q, k, v, mask.bool()[:, None, None, :], 0.0, causal)  # (B, N, T, D)
    want = want.transpose(1, 2).reshape(B * T, N * D).index_select(0, lay.indices)
    assert got.shape == want.shape == (sum(LENGTHS), N * D)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # negative control: cu_seqlens that cut the sequences elsewhere give other values
    wrong = lay.cu_seqlens.clone()
    wrong[1] += 1
    other = packed_attention(
        packed, wrong, lay.max_seqlen + 1, N, causal=causal, backend="reference"
    )
    assert not torch.allclose(other, want, atol=1e-3)


def test_the_layout_is_flash_attention_s_convention():
    mask, lay, _ = _padded_and_packed()
    assert lay.cu_seqlens.dtype == torch.int32
    assert lay.cu_seqlens.tolist() == [0, 5, 17, 18, 27, 39, 42]
    assert lay.max_seqlen == 12 and lay.padded and lay.tokens == 42
    assert lay.indices.tolist() == mask.reshape(-1).nonzero().squeeze(1).tolist()


def test_the_kernel_choice():
    cuda = torch.device("cuda", 0)
    assert packed_backend(cuda, 0.0) == "varlen"  # no dropout: FlashAttention's varlen kernel
    assert packed_backend(cuda, 0.0, causal=True) == "varlen"
    assert packed_backend(cuda, 0.1) == "nested"  # varlen has no dropout argument
    assert packed_backend(cuda, 0.1, causal=True) is None  # jagged SDPA: no causal mask
    assert packed_backend(torch.device("cpu"), 0.0) is None  # the CPU groups instead
    assert packed_backend(cuda, 0.0, dtype=torch.float32) is None  # flash: bf16 / fp16 only
    with pytest.raises(ValueError, match="no dropout"):
        packed_attention(torch.zeros(3, 6), torch.tensor([0, 3]), 3, 1, 0.1, backend="varlen")


def test_a_model_given_the_collated_layout_equals_one_that_works_it_out():
    """The encoder with the CPU-collated Layout (no reads in the forward pass) against the
    same encoder finding the layout itself, and against the padded path (unpad=False)."""
    config = BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
    )
    torch.manual_seed(0)
    model = BertModel(config).eval()
    mask, lay, _ = _padded_and_packed()
    ids = torch.randint(5, 50, mask.shape) * mask
    with torch.no_grad():
        given = model(ids, mask, layout=lay)
        found = model(ids, mask)
        padded = model(ids, mask, unpad=False)
    keep = mask.bool()
    torch.testing.assert_close(given.last_hidden_state, found.last_hidden_state)
    torch.testing.assert_close(
        given.last_hidden_state[keep], padded.last_hidden_state[keep], rtol=1e-5, atol=1e-5
    )
    torch.testing.assert_close(given.pooler_output, padded.pooler_output, rtol=1e-5, atol=1e-5)


CUDA_CASES = [
    ("varlen", False),
    ("varlen", True),
    ("nested", False),
    ("reference", False),
    ("reference", True),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize(("backend", "causal"), CUDA_CASES)
def test_packed_equals_padded_on_cuda(backend, causal, dtype):
    """The CUDA kernels themselves (FlashAttention varlen, jagged SDPA) against the padded path
    on the same device and dtype, forward and backward: the CPU tests above cannot run varlen.
    Head size 64, as BERT's (flash needs a multiple of 8)."""
    N, D = 4, 64
    mask, lay, qkv = _padded_and_packed(N, D)
    B, T = mask.shape
    qkv = qkv.to("cuda", dtype).requires_grad_()
    idx, cu = lay.indices.cuda(), lay.cu_seqlens.cuda()
    got = packed_attention(
        qkv.index_select(0, idx), cu, lay.max_seqlen, N, causal=causal, backend=backend
    )
    q, k, v = qkv.view(B, T, 3, N, D).permute(2, 0, 3, 1, 4).unbind(0)
    want = attend(q, k, v, mask.bool().cuda()[:, None, None, :], 0.0, causal)  # (B, N, T, D)
    want = want.transpose(1, 2).reshape(B * T, N * D).index_select(0, idx)
    tol = 2e-2 if dtype == torch.bfloat16 else 2e-3
    torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol)
    weight = torch.randn(got.shape, generator=torch.Generator().manual_seed(1)).to("cuda", dtype)
    (grad_got,) = torch.autograd.grad((got * weight).sum(), qkv)
    (grad_want,) = torch.autograd.grad((want * weight).sum(), qkv)
    torch.testing.assert_close(grad_got.float(), grad_want.float(), rtol=5 * tol, atol=5 * tol)
    assert grad_got.abs().sum() > 0  # the comparison is not vacuous
