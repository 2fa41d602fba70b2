"""BertModel: embeddings, encoder and the tanh pooler over [CLS]."""

from __future__ import annotations

import torch
from torch import nn

from bertkit.config import BertConfig
from bertkit.errors import ConfigError
from bertkit.model.attention import Packing, Selection
from bertkit.model.batching import Layout, layout_of
from bertkit.model.embeddings import BertEmbeddings
from bertkit.model.encoder import Encoder
from bertkit.model.kernels import Linear
from bertkit.model.outputs import BaseModelOutput


def init_bert_weights(module: nn.Module, std: float) -> None:
    """BERT's initialisation: weights ~ N(0, std), biases 0, LayerNorm gain 1 and bias 0.

    The padding row of the word embeddings starts at zero, as in Hugging Face.
    """
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        if module.padding_idx is not None:
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


def check_supported(config: BertConfig) -> None:
    """Reject config.json options describing a model that is not the BERT encoder built here."""
    kind = config.extra.get("position_embedding_type", "absolute")
    if kind != "absolute":
        raise ConfigError(f"position_embedding_type {kind!r} is not supported (only 'absolute')")
    if config.extra.get("add_cross_attention"):
        raise ConfigError("BERT with cross-attention (add_cross_attention) is not supported")


class Pooler(nn.Module):
    """tanh(dense(h_[CLS])): the sentence representation the NSP and classification heads use."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size)

    def forward(self, cls_hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(cls_hidden))


class BertModel(nn.Module):
    """The BERT encoder.

    ``add_pooling_layer=False`` builds no pooler (as Hugging Face does for the masked-LM, token
    classification and question-answering heads, whose checkpoints then hold no pooler weights).
    """

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True) -> None:
        super().__init__()
        check_supported(config)
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = Encoder(config)
        self.pooler = Pooler(config) if add_pooling_layer else None
        self.apply(lambda m: init_bert_weights(m, config.initializer_range))

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        unpad: bool | None = None,
        final_positions: torch.Tensor | None = None,
        layout: Layout | None = None,
        final_rows: torch.Tensor | None = None,
        output_hidden_states: bool = False,
    ) -> BaseModelOutput:
        """Encode a batch.

        input_ids, attention_mask (1 = token, 0 = padding), token_type_ids, position_ids: (B, T).
        unpad: run the dense layers on the real tokens only, packed as (S, H), when the batch has
            padding. None (default) decides automatically: on whenever the mask has padding.
            Numerically the same as the padded path (fp32 rounding aside), except that
            last_hidden_state is zero at padding positions instead of a meaningless value.
        final_positions: (K,) flat positions (b * T + t) of the only tokens whose final hidden
            state the caller needs, e.g. the masked tokens in pre-training. The last layer then
            runs its attention output and feed-forward on those K tokens (and [CLS], for the
            pooler) only, and last_hidden_state is (K, H) in that order. The values are the
            same as the full computation's; they must not be padding positions.
        layout: the batch's :class:`~bertkit.model.batching.Layout`, computed at collation on
            the CPU and moved with the batch: the forward pass then reads nothing back from the
            device. None works it out here from the mask (one read of the mask).
        final_rows: (K,) the packed rows of ``final_positions`` (``Layout.label_rows``); None
            derives them (with a check that reads back).
        output_hidden_states: also return the embeddings' and every layer's output
            (``hidden_states``, L + 1 tensors of (B, T, H)).
        """
        B, T = input_ids.shape
        packing = Packing(batch=B, length=T, causal=self.config.is_decoder)
        packing.attention_mask = attention_mask
        if attention_mask is not None:
            if layout is None:
                layout = layout_of(attention_mask, input_ids.device)
            if layout.padded:
                # (B, 1, 1, T): broadcast over heads and queries
                packing.key_mask = attention_mask.bool()[:, None, None, :]
                if unpad is None or unpad:
                    packing.set_indices(layout.indices)  # (S,)
                    if layout.prefix:
                        packing.cu_seqlens = layout.cu_seqlens
                        packing.max_seqlen = layout.max_seqlen
                        if input_ids.device.type == "cpu":  # CUDA: the varlen kernel instead
                            packing.group(layout.lengths)
        x = self.embeddings(input_ids, token_type_ids, position_ids, packing.indices)
        if final_positions is not None:
            return self._forward_selected(x, packing, final_positions, final_rows)
        every: list[torch.Tensor] | None = [x] if output_hidden_states else None
        x = self.encoder(x, packing, every_layer=every)  # (B, T, H) or (S, H)
        if packing.indices is not None:
            x = packing.pad(x)  # (B, T, H)
        states = None
        if every is not None:
            states = tuple(packing.pad(h) if packing.indices is not None else h for h in every)
        pooled = None
        if self.pooler is not None:
            first = (
                self.pooled_positions(B, T, attention_mask, x.device)
                - torch.arange(B, device=x.device) * T
            )
            pooled = self.pooler(x[torch.arange(B, device=x.device), first])
        return BaseModelOutput(last_hidden_state=x, pooler_output=pooled, hidden_states=states)

    def pooled_positions(
        self, B: int, T: int, attention_mask: torch.Tensor | None, device: torch.device
    ) -> torch.Tensor:
        """(B,) flat positions of the token the pooler reads: [CLS], or for a causal model
        (``is_decoder``) each sequence's last real token, the only one that has seen the whole
        input (Hugging Face pools position 0 there too, which under causal attention sees only
        itself)."""
        start = torch.arange(B, device=device) * T
        if not self.config.is_decoder:
            return start
        last = (
            attention_mask.sum(1) - 1
            if attention_mask is not None
            else torch.full((B,), T - 1, device=device)
        )
        return start + last.to(start.dtype)

    def _forward_selected(
        self,
        x: torch.Tensor,
        packing: Packing,
        positions: torch.Tensor,
        rows: torch.Tensor | None = None,
    ) -> BaseModelOutput:
        B, T, K = packing.batch, packing.length, positions.numel()
        if rows is not None and packing.indices is None:
            rows = positions  # not unpadded after all (unpad=False): rows are flat positions
        if self.pooler is not None:  # the pooler reads [CLS] (or a decoder's last token) too
            pooled = self.pooled_positions(B, T, packing.attention_mask, positions.device)
            positions = torch.cat([positions, pooled])
            if rows is not None and packing.cu_seqlens is not None:
                cu = packing.cu_seqlens.long()
                first = cu[1:] - 1 if self.config.is_decoder else cu[:-1]
                rows = torch.cat([rows, first])
            else:
                rows = None
        if rows is None:
            rows = self._rows_of(positions, packing)
        select = Selection(rows=rows, batch=positions // T, token=positions % T)
        x = self.encoder(x, packing, select)  # (K [+ B], H)
        pooled = self.pooler(x[K:]) if self.pooler is not None else None
        return BaseModelOutput(last_hidden_state=x[:K], pooler_output=pooled)

    @staticmethod
    def _rows_of(positions: torch.Tensor, packing: Packing) -> torch.Tensor:
        """The layer-input rows of flat ``positions`` (read back once to check for padding)."""
        B, T = packing.batch, packing.length
        rows = positions
        if packing.indices is not None:  # flat position -> packed row
            to_row = torch.full((B * T,), -1, dtype=torch.long, device=positions.device)
            to_row[packing.indices] = torch.arange(packing.indices.numel(), device=to_row.device)
            rows = to_row[positions]
            if bool((rows < 0).any()):
                raise ValueError("final_positions include padding positions")
        return rows
