"""Optimizers for pre-training: AdamW (google-research/bert's settings) and LAMB, plus pickle-free state.

Weight decay follows google-research/bert: decoupled decay of 0.01 on every weight except biases and
LayerNorm parameters. Layer-wise learning-rate decay (ELECTRA's ``layerwise_lr_decay``) gives the
layers near the input smaller rates (:func:`layer_exponents`). ``optimizer_state_to_tensors`` and
``..._from_tensors`` turn an optimizer's ``state_dict`` into a flat dict of tensors (for safetensors)
and a JSON-able dict, so checkpoints never need pickle.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from bertkit.errors import CheckpointError, ConfigError
from bertkit.model.bert import BertModel

OPTIMIZERS = ("adamw", "lamb")


@dataclass(frozen=True)
class OptimizerConfig:
    """Optimizer choice and hyperparameters (defaults: BERT's AdamW)."""

    name: str = "adamw"
    """"adamw" or "lamb" (LAMB keeps large-batch training stable, You et al. 2019)."""
    lr: float = 1e-4
    """Peak learning rate (the schedule scales it)."""
    weight_decay: float = 0.01
    """Decoupled weight decay for every parameter except biases and LayerNorm."""
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-6
    layerwise_lr_decay: float = 1.0
    """Learning-rate factor per encoder layer down from the top (1.0: one rate for all;
    :func:`layer_exponents`)."""

    def __post_init__(self) -> None:
        if self.name not in OPTIMIZERS:
            raise ConfigError(f"optimizer must be 'adamw' or 'lamb', got {self.name!r}")
        if not self.lr > 0:
            raise ConfigError(f"learning rate must be positive, got {self.lr}")
        if self.weight_decay < 0:
            raise ConfigError(f"weight decay must be >= 0, got {self.weight_decay}")
        check_layerwise_lr_decay(self.layerwise_lr_decay)


def check_layerwise_lr_decay(decay: float) -> None:
    """Refuse a layer-wise learning-rate decay outside (0, 1] (1 is off; above 1 the embeddings
    would learn fastest, which no recipe wants, and 0 would freeze the encoder)."""
    if not 0.0 < decay <= 1.0:
        raise ConfigError(f"layerwise_lr_decay must be in (0, 1] (1.0: off), got {decay}")


def decays(name: str, module: nn.Module) -> bool:
    """Whether parameter ``name`` of ``module`` (its direct owner) gets weight decay.

    Biases and LayerNorm weights are excluded, as in google-research/bert's ``exclude_from_weight_decay``
    (``["LayerNorm", "layer_norm", "bias"]``); the LayerNorm test is on the module type so that it does
    not depend on attribute names.
    """
    if isinstance(module, nn.LayerNorm):
        return False
    return not name.endswith("bias")


def layer_exponents(model: nn.Module) -> dict[int, int]:
    """``{id(param): k}``: parameter ``param`` learns at ``lr * decay**k`` under layer-wise
    learning-rate decay. For each :class:`BertModel` inside ``model`` (found by type, so a
    classifier's ``bert.``, a bi-encoder's or a bare encoder alike) with L layers, encoder
    layer i (0-based) has k = L - i and the embeddings k = L + 1; a parameter not listed has
    k = 0: the task head, and the pooler, which like the head sits above the last layer
    (ELECTRA's ``_get_layer_lrs`` gives everything outside the layers and embeddings the top
    rate). With L = 2: head and pooler 0, layer 1 -> 1, layer 0 -> 2, embeddings -> 3.
    """
    out: dict[int, int] = {}
    for module in model.modules():
        if isinstance(module, BertModel):
            top = len(module.encoder.layers)
            out.update((id(p), top + 1) for p in module.embeddings.parameters())
            for i, layer in enumerate(module.encoder.layers):
                out.update((id(p), top - i) for p in layer.parameters())
    return out


def param_groups(
    model: nn.Module, weight_decay: float, *, lr: float = 1.0, layerwise_lr_decay: float = 1.0
) -> list[dict[str, Any]]:
    """Two groups: ``{"params", "weight_decay": wd, "names"}`` and the no-decay group (wd 0).

    Tied parameters (the MLM decoder sharing the word embeddings) appear once. ``names`` lists the
    qualified parameter names in each group (for tests and logs; torch ignores the extra key).

    With ``layerwise_lr_decay`` below 1 each depth k of :func:`layer_exponents` has its own pair
    (decay, no decay) with ``"lr": lr * layerwise_lr_decay**k``, the head's first (k = 0, the
    rate the training loop logs) and the embeddings' last. At 1.0 the groups are the two above,
    with no ``"lr"`` key (the optimizer's default fills it), as before the option existed.
    """
    layered = layerwise_lr_decay != 1.0
    depth = layer_exponents(model) if layered else {}
    if layered and not depth:
        raise ConfigError("layerwise_lr_decay needs a model with a BERT encoder; found none")
    seen: set[int] = set()
    groups: dict[tuple[int, bool], tuple[list[nn.Parameter], list[str]]] = {}
    for module_name, module in model.named_modules():
        for pname, param in module.named_parameters(recurse=False):
            if not param.requires_grad or id(param) in seen:
                continue
            seen.add(id(param))
            key = (depth.get(id(param), 0), decays(pname, module))
            params, names = groups.setdefault(key, ([], []))
            params.append(param)
            names.append(f"{module_name}.{pname}" if module_name else pname)
    out = []
    for k, decay in sorted(groups, key=lambda key: (key[0], not key[1])):
        params, names = groups[k, decay]
        group = {"params": params, "weight_decay": weight_decay if decay else 0.0, "names": names}
        if layered:
            group["lr"] = lr * layerwise_lr_decay**k
        out.append(group)
    return out


def build_optimizer(model: nn.Module, config: OptimizerConfig) -> torch.optim.Optimizer:
    """AdamW or LAMB over :func:`param_groups` (the rates of layer-wise decay, if any, are
    the groups' peaks: the schedule scales each group's own)."""
    groups = param_groups(
        model, config.weight_decay, lr=config.lr, layerwise_lr_decay=config.layerwise_lr_decay
    )
    if config.name == "lamb":
        return Lamb(groups, lr=config.lr, betas=config.betas, eps=config.eps)
    # fused=True: one multi-tensor kernel per step (CPU and CUDA) instead of ~10 small ops per
    # parameter; the same AdamW update, equal to the per-parameter loop within fp32 rounding.
    return torch.optim.AdamW(groups, lr=config.lr, betas=config.betas, eps=config.eps, fused=True)


class Lamb(torch.optim.Optimizer):
    """LAMB (You et al., 2019): Adam's update with decoupled decay, scaled per tensor by a trust ratio.

    For each parameter p with gradient g (bias-corrected moments m̂, v̂):
        u = m̂ / (sqrt(v̂) + eps) + weight_decay * p
        p <- p - lr * (||p|| / ||u||) * u        (trust ratio 1 when either norm is 0)
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        foreach: bool = True,
    ) -> None:
        """``foreach`` (default): each step is ~15 multi-tensor kernels for all parameters of a
        group (``torch._foreach_*``) instead of ~15 per parameter; the same arithmetic in the
        same order as the per-tensor loop (``foreach=False``, kept as the reference)."""
        super().__init__(
            params,
            {
                "lr": lr,
                "betas": betas,
                "eps": eps,
                "weight_decay": weight_decay,
                "foreach": foreach,
            },
        )

    def _state(self, p: torch.Tensor) -> dict[str, Any]:
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32)  # on the CPU: no device read
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                (self._group_foreach if group.get("foreach", True) else self._group_loop)(
                    group, params
                )
        return loss

    def _group_loop(self, group: dict[str, Any], params: list[torch.Tensor]) -> None:
        beta1, beta2 = group["betas"]
        for p in params:
            state = self._state(p)
            state["step"] += 1
            t = float(state["step"])
            m, v = state["exp_avg"], state["exp_avg_sq"]
            m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
            v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
            m_hat = m / (1 - beta1**t)
            v_hat = v / (1 - beta2**t)
            update = m_hat / (v_hat.sqrt() + group["eps"])
            if group["weight_decay"]:
                update.add_(p, alpha=group["weight_decay"])
            w_norm, u_norm = p.norm(), update.norm()
            trust = torch.where(
                (w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm)
            )
            p.add_(update * trust, alpha=-group["lr"])

    def _group_foreach(self, group: dict[str, Any], params: list[torch.Tensor]) -> None:
        beta1, beta2 = group["betas"]
        states = [self._state(p) for p in params]
        grads = [p.grad for p in params]
        m = [s["exp_avg"] for s in states]
        v = [s["exp_avg_sq"] for s in states]
        for s in states:
            s["step"] += 1
        t = [float(s["step"]) for s in states]  # CPU scalars
        torch._foreach_mul_(m, beta1)
        torch._foreach_add_(m, grads, alpha=1 - beta1)
        torch._foreach_mul_(v, beta2)
        torch._foreach_addcmul_(v, grads, grads, value=1 - beta2)
        m_hat = torch._foreach_div(m, [1 - beta1**k for k in t])
        v_hat = torch._foreach_div(v, [1 - beta2**k for k in t])
        denom = torch._foreach_sqrt(v_hat)
        torch._foreach_add_(denom, group["eps"])
        update = torch._foreach_div(m_hat, denom)
        if group["weight_decay"]:
            torch._foreach_add_(update, params, alpha=group["weight_decay"])
        w_norm = torch.stack(torch._foreach_norm(params))
        u_norm = torch.stack(torch._foreach_norm(update))
        trust = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
        torch._foreach_mul_(update, list(trust.unbind(0)))
        torch._foreach_add_(params, update, alpha=-group["lr"])


# ---- pickle-free optimizer state ---------------------------------------------------------------


def optimizer_state_to_tensors(
    optimizer: torch.optim.Optimizer,
) -> tuple[dict[str, torch.Tensor], dict]:
    """Split ``optimizer.state_dict()`` into tensors ``"state.<idx>.<key>"`` and a JSON-able rest."""
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for idx, entry in sd["state"].items():
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{idx}.{key}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(idx), {})[key] = value
    groups = [
        {k: list(v) if isinstance(v, tuple) else v for k, v in g.items()}
        for g in sd["param_groups"]
    ]
    for g in groups:
        for k, v in g.items():
            if not isinstance(v, (int, float, str, bool, list, type(None))):
                raise CheckpointError(f"optimizer setting {k}={v!r} cannot be stored as JSON")
    return tensors, {"param_groups": groups, "scalars": scalars}


def optimizer_state_from_tensors(tensors: dict[str, torch.Tensor], meta: dict) -> dict[str, Any]:
    """Inverse of ``optimizer_state_to_tensors``: a dict for ``optimizer.load_state_dict``."""
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        _, idx, key = name.split(".", 2)
        state.setdefault(int(idx), {})[key] = value
    for idx, entry in meta.get("scalars", {}).items():
        state.setdefault(int(idx), {}).update(entry)
    groups = []
    for g in meta["param_groups"]:
        g = dict(g)
        if "betas" in g:
            g["betas"] = tuple(g["betas"])
        groups.append(g)
    return {"state": state, "param_groups": groups}


def count_params(model: nn.Module) -> int:
    """Distinct trainable parameters (tied weights counted once)."""
    seen = {id(p): p.numel() for p in model.parameters() if p.requires_grad}
    return int(math.fsum(seen.values()))
