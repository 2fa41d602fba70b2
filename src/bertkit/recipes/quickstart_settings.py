"""The quickstart's measured recipe: its constants, its options (:class:`QuickstartSettings`, the
flags of ``bertkit quickstart``) and the pre-training options of each of its runs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bertkit import precision as P
from bertkit.training.loop import TrainConfig
from bertkit.training.pretraining import PretrainOptions

CORPUS = "wikipedia-sample.txt.xz"
HELDOUT_EVERY = 15  # every 15th article is held out (114 of the built-in 1,717)
# The recipe, measured choice by choice in docs/pretraining-learning.md ("The quickstart recipe").
# A tiny BERT trained on 128-token instances from the start stays at the unigram plateau (its
# [MASK] predictions are the most frequent token's) for >10k updates: near-uniform attention over
# 128 positions carries almost no signal about neighbours. The paper's short-then-long phases fix
# it: most updates on 32-token instances teach the attention to use nearby words, then 128-token
# instances. No dropout. Batches of 64 at peak lr 1.5e-3: at equal seconds on 32-token
# instances they beat 16 at 1e-3 (train MLM accuracy 14.1% vs 12.4%) and 128 at 2e-3 (13.7%).
# A 4,096-piece vocabulary: 1.4x the updates per second of 8,192 at 128 tokens. Initial weights
# with std 0.06 instead of BERT's 0.02 (config.json's initializer_range): attention starts less
# uniform and leaves the plateau within ~1,300 updates (train MLM accuracy on 32-token
# instances 15.7% vs 14.4% after 1,500; held-out 25.9% vs 13.2% at the end of the run).
# Phase 2 (128 tokens) as its own run warm-started from phase 1's model, warming up again to
# 1.5e-3, phase 1's peak: on the AVX2-only AMD EPYC (fp32, 720 phase-2 updates from one
# phase-1 checkpoint) held-out MLM 28.4% / NSP 63.3% against 26.0% / 61.4% at 7.5e-4, the
# earlier choice (Intel Xeon, 2 heads; the history is in the docs). Phase 2's update count is
# fitted when phase 1 ends (fit_phase2), and both runs keep the job's deadline (end_by): a run
# slower than fitted ends its decay sooner, so no margin is kept back and the job ends on time
# on a machine of any speed. The budget is 9.5 minutes, data preparation included (with fits
# made once before each phase and nothing to correct them, two runs of six on the AMD EPYC had
# ended 5 and 23 s past 10 minutes at 9.5).
# 4 attention heads of 32 instead of BERT-Tiny's 2 of 64 (the same parameters and FLOPs): NSP
# is learned in the 128-token phase by matching B's tokens with A's, and 2 heads per layer are
# taken by the neighbour attention MLM needs. Seed 0 on the AMD EPYC: held-out NSP 73.2% against
# 66.0% with 2 heads (MLM 32.1% against 34.6%). 15% of the updates at 128 tokens, not 25%:
# with 2 heads, seed 0, NSP 66.0% against 62.6% (MLM 34.6% against 30.6%).
LEARNING_RATE = 1.5e-3
PHASE2_LEARNING_RATE = 1.5e-3
WARMUP = 0.02
PHASE1_SEQ_LENGTH = 32
PHASE2_FRACTION = 0.15
HEADS = 4
VOCAB_SIZE = 4096
BATCH_SIZE = 64
INIT_RANGE = 0.06
MINUTES = 9.5


@dataclass
class QuickstartSettings:
    """The quickstart's options (``bertkit quickstart --help``); defaults: the measured recipe."""

    output: Path = Path("bertkit-quickstart")
    """Working folder; rerunning resumes."""
    minutes: float = MINUTES
    """Wall-clock budget of the whole job (data preparation included); the step count is
    fitted to the time left after the data is prepared."""
    max_steps: int | None = None
    """A fixed number of updates instead of --minutes."""
    batch_size: int = BATCH_SIZE
    """Instances per update."""
    seq_length: int = 128
    """Max tokens per instance (the last phase's)."""
    phase1_seq_length: int = PHASE1_SEQ_LENGTH
    """First phase's instance length (0: a single phase at --seq-length)."""
    phase2_fraction: float = PHASE2_FRACTION
    """Planned fraction of the updates at --seq-length (with --minutes, phase 2 is fitted to
    the time phase 1 leaves)."""
    phase2_batch_size: int | None = None
    """Instances per update at --seq-length (None: --batch-size)."""
    vocab_size: int = VOCAB_SIZE
    """WordPiece vocabulary size."""
    learning_rate: float = LEARNING_RATE
    """Peak learning rate."""
    phase2_learning_rate: float = PHASE2_LEARNING_RATE
    """Phase 2's own peak: phase 1 decays to zero, phase 2 warms up again and decays."""
    initializer_range: float = INIT_RANGE
    """Std of the initial weights."""
    num_attention_heads: int = HEADS
    """Attention heads per layer (BERT-Tiny: 2)."""
    nsp_weight: float = 1.0
    """Weight of the NSP loss (BERT: 1)."""
    seed: int = 0
    """Model initialisation and data order."""
    precision: str = P.DEFAULT
    """See bertkit.precision."""
    threads: int | None = None
    """CPU threads (None: 2, or 1 when other work keeps the cores busy)."""
    corpus: Path | None = None
    """A corpus file instead of the built-in one (any prepare-pretraining format, WikiText
    included; .xz/.gz/.bz2 read as such)."""


def run_options(
    out: Path,
    data: Path,
    heldout: Path | None,
    steps: int,
    s: QuickstartSettings,
    threads: int,
    phase2: bool = False,
    init_from: Path | None = None,
    end_by: float | None = None,
) -> PretrainOptions:
    """One run's pre-training options: phase 1 (short instances, from scratch) or phase 2 (the
    last length, its own peak and batch size, warm-started from phase 1's model), ending its
    decay by ``end_by`` (``time.time()``) when given. Two held-out evaluations per run (half
    way and at the end): each is ~1% of the budget on a 2-core CPU."""
    return PretrainOptions(
        data=data,
        output=out,
        model_size="tiny",
        max_steps=steps,
        learning_rate=s.phase2_learning_rate if phase2 else s.learning_rate,
        warmup_proportion=WARMUP,
        dropout=0.0,
        initializer_range=s.initializer_range,
        num_attention_heads=s.num_attention_heads,
        nsp_weight=s.nsp_weight,
        eval_data=heldout,
        init_from=init_from,
        device="auto",
        threads=threads,
        train=TrainConfig(
            batch_size=(s.phase2_batch_size or s.batch_size) if phase2 else s.batch_size,
            seed=s.seed,
            precision=s.precision,
            log_every=min(25, max(1, steps // 8)),
            eval_every=max(1, steps // 2),
            eval_examples=2000,
            save_every=max(1, steps // 4),
            keep_last=2,
            peak_flops=1e11,  # nominal: skips the start-up matmul benchmark, MFU is not shown
            show_progress=None,
            end_by=end_by,
        ),
    )
