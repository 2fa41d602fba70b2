"""What the quickstart aims for, and the plain sentence that ends it: did the model learn?"""

from __future__ import annotations

# The quickstart's targets (issue: a newcomer must see that the model learned something).
TARGET_MLM, TARGET_NSP = 0.25, 0.70


def verdict(
    mlm: float, nsp: float, base: dict[str, float], distinct_top1: int, prompts: int
) -> str:
    """One plain sentence a newcomer can read: did the model learn, and what says so."""
    reached = mlm >= TARGET_MLM and nsp >= TARGET_NSP
    facts = (
        f"held-out masked-word accuracy {mlm:.1%} against {base['mlm_acc']:.1%} for always "
        f"guessing the most frequent token, next-sentence accuracy {nsp:.1%} against "
        f"{base['nsp_acc']:.1%} for always guessing the majority label, and {distinct_top1} "
        f"different first answers for {prompts} fill-mask prompts"
    )
    if reached:
        return f"verdict: the model learned ({facts}; targets {TARGET_MLM:.0%} and {TARGET_NSP:.0%} reached)."
    return (
        f"verdict: the model learned less than the quickstart aims for ({facts}; targets "
        f"{TARGET_MLM:.0%} and {TARGET_NSP:.0%}). Give it more time with --minutes, or see "
        "docs/pretraining-learning.md."
    )
