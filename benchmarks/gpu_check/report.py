"""The GPU check's markdown summary: what a session pastes into docs/gpu.md.

:func:`markdown` reads only the summary dict the driver writes (``gpu_check.json``: ``env`` and
``stages``, each with its ``status`` and its stage's ``result``), so a table can be made again
from a returned JSON (``python -m benchmarks.gpu_check.report gpu_check.json``).
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _f(x: Any, kind: str = "") -> str:
    """A cell: percentages, thousands, milliseconds; an em dash for no figure."""
    if x is None or x == "":
        return "—"
    if kind == "%":
        return f"{x:.1%}"
    if kind == "n":
        return f"{x:,.0f}"
    if kind == "ms":
        return f"{x:.1f}"
    if kind == "x":
        return f"{x:.2f}x"
    if kind == "gib":
        return f"{x:.1f}"
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def _notes(name: str, r: dict[str, Any]) -> str:
    """One line of a stage's headline figures."""
    if name == "data":
        parts = [f"{_f(r.get('articles'), 'n')} articles, {_f(r.get('vocab_size'), 'n')} pieces"]
        parts += [
            f"{k[4:]} tokens: {_f(v.get('train'), 'n')} train / {_f(v.get('eval'), 'n')} held out"
            for k, v in r.items()
            if k.startswith("data") and isinstance(v, dict)
        ]
        return "; ".join(parts)
    if name == "correctness":
        c = r.get("counts", {})
        return ", ".join(f"{c.get(k, 0)} {k}" for k in ("passed", "failed", "error", "skipped"))
    if name == "pretrain_speed":
        h = r.get("host_syncs", {})
        if h.get("applicable"):
            return f"host waits per update {h['cuda_waits_per_update']:.2f} (goal 1)"
        return f"host syncs: {h.get('reason', 'not measured')[:60]}" if h else ""
    if name == "task_speed":
        e = r.get("embed", {})
        return f"embedding cosine min {_f(e.get('cosine_min'))} vs {e.get('reference', '—')}"
    if name == "pretrain_run":
        run = r.get("run", {})
        return (
            f"held-out loss {_f(run.get('first_heldout_loss'))} -> "
            f"{_f(run.get('last_heldout_loss'))} in {_f(run.get('updates'), 'n')} updates"
        )
    if name == "glue":
        ft = r.get("finetune", {})
        return ", ".join(f"{t} {v.get('metric')} {_f(v.get('dev_score'))}" for t, v in ft.items())
    return ""


def _status(s: dict[str, Any]) -> str:
    return s["status"] + (f" ({s['reason']})" if s.get("reason") else "")


def correctness_table(r: dict[str, Any]) -> list[str]:
    """What the CUDA tests recorded (differences found), and every test that did not pass."""
    out = ["| test | outcome | recorded |", "|---|---|---|"]
    for t in r.get("tests", []):
        if t["properties"] or t["outcome"] != "passed":
            props = "; ".join(f"{k} {v}" for k, v in t["properties"].items())
            note = f"{t['outcome']}: {t['message']}" if t["message"] else t["outcome"]
            out.append(f"| {t['id'].split('.')[-1]} | {note} | {props or '—'} |")
    return out if len(out) > 2 else []


def pretrain_table(r: dict[str, Any]) -> list[str]:
    p = r.get("peak", {})
    out = [
        f"Pre-training step, bf16 autocast, fused AdamW, dropout {r.get('dropout')}; peak: "
        f"{_f(p.get('datasheet_tflops'), 'n')} TFLOP/s ({p.get('datasheet_source')}), measured "
        f"{_f(p.get('measured_tflops'), 'n')} ({p.get('measured_source')}); {r.get('timing')}",
        "",
        "| model | T x B | batch | impl | ms/step | seq/s | tokens/s | MFU real | MFU padded "
        "| MFU real (measured peak) | peak GiB | vs HF sdpa |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for w in r.get("rows", []):
        out.append(
            f"| {w['model']} | {w['seq']} x {w['batch']} | {w['case']} | {w['impl']} | "
            f"{_f(w['step_ms'], 'ms')} | {_f(w['sequences_per_s'], 'n')} | "
            f"{_f(w['tokens_per_s'], 'n')} | {_f(w['mfu_real_datasheet'], '%')} | "
            f"{_f(w['mfu_padded_datasheet'], '%')} | {_f(w['mfu_real_measured'], '%')} | "
            f"{_f(w.get('peak_gib'), 'gib')} | {_f(w['speedup_vs_hf_sdpa'], 'x')} |"
        )
    h = r.get("host_syncs")
    if h:
        counts = ", ".join(f"{k} {v:g}" for k, v in h.get("per_update", {}).items()) or "none"
        out += [
            "",
            f"Host synchronisations per update of bertkit's training update "
            f"({h.get('model')}, {h.get('precision')}, {h.get('updates')} updates traced): "
            f"{counts}" + ("" if h.get("applicable") else f" ({h.get('reason')})"),
        ]
    return out


def task_table(r: dict[str, Any]) -> list[str]:
    out = [
        "| task | case | impl | ms/step | seq or texts/s | tokens/s | MFU real | "
        "MFU real (measured peak) | vs reference |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for w in r.get("finetune", []):
        out.append(
            f"| fine-tune cls {w['model']} {w['batch']} x {w['seq']} | {w['case']} | "
            f"{w['impl']} | {_f(w['step_ms'], 'ms')} | {_f(w['sequences_per_s'], 'n')} | "
            f"{_f(w['tokens_per_s'], 'n')} | {_f(w['mfu_real_datasheet'], '%')} | "
            f"{_f(w['mfu_real_measured'], '%')} | {_f(w['speedup_vs_hf_sdpa'], 'x')} |"
        )
    e = r.get("embed", {})
    for w in e.get("rows", []):
        out.append(
            f"| embed {w['model']}, {w['texts']} mixed texts | {e['precision']} | "
            f"{w['impl']} | — | {_f(w['texts_per_s'], 'n')} | {_f(w['tokens_per_s'], 'n')} "
            f"| {_f(w['mfu_real_datasheet'], '%')} | {_f(w['mfu_real_measured'], '%')} | "
            f"{_f(w['speedup_vs_reference'], 'x')} |"
        )
    return out


def run_table(stages: dict[str, Any]) -> list[str]:
    bench = next(
        (
            w
            for w in stages.get("pretrain_speed", {}).get("result", {}).get("rows", [])
            if w["impl"] == "bertkit" and w["case"] == "real"
        ),
        None,
    )
    out = [
        "| run | updates | first held-out loss | last held-out loss | trainer MFU | tokens/s "
        "| s/update | wall s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, key in (("pretrain_run", "run"), ("glue", "pretrain")):
        r = stages.get(name, {}).get("result", {})
        run = r.get(key)
        if not run:
            continue
        label = (
            f"stage {4 if name == 'pretrain_run' else 5}: {r.get('settings', {}).get('model_size')}"
        )
        out.append(
            f"| {label} | {_f(run.get('updates'), 'n')} | {_f(run.get('first_heldout_loss'))} "
            f"| {_f(run.get('last_heldout_loss'))} | {_f(run.get('trainer_mfu'), '%')} | "
            f"{_f(run.get('tokens_per_s'), 'n')} | {_f(run.get('seconds_per_update'))} | "
            f"{_f(run.get('seconds'))} |"
        )
    if bench:
        out.append(
            f"| stage 2 benchmark, bertkit {bench['model']} {bench['seq']} x "
            f"{bench['batch']} real (for scale) | — | — | — | "
            f"{_f(bench['mfu_real_datasheet'], '%')} | {_f(bench['tokens_per_s'], 'n')} | "
            f"{_f(bench['step_ms'] / 1e3)} | — |"
        )
    glue = stages.get("glue", {}).get("result", {}).get("finetune", {})
    if glue:
        out += [
            "",
            "| GLUE dev (stage 5) | metric | score | epochs | wall s |",
            "|---|---|---:|---:|---:|",
        ]
        for task, g in glue.items():
            out.append(
                f"| {task} | {g.get('metric')} | {_f(g.get('dev_score'))} | "
                f"{_f(g.get('epoch'))} | {_f(g.get('seconds'))} |"
            )
    return out


def markdown(summary: dict[str, Any]) -> str:
    """The whole summary as markdown: a line on the machine, a status table, then each stage's
    figures (those of stages that did not run are left out)."""
    env = summary.get("env", {})
    stages = summary.get("stages", {})
    dry = " (DRY RUN on the CPU: no figure here is a GPU figure)" if summary.get("dry_run") else ""
    lines = [
        f"GPU check{dry}: {env.get('device', '—')}, torch {env.get('torch', '—')}, transformers "
        f"{env.get('transformers', '—')}, sentence-transformers "
        f"{env.get('sentence_transformers', '—')}; {summary.get('started', '')}; total "
        f"{_f(summary.get('seconds'))} s",
        "",
        "| stage | status | s / cap | figures |",
        "|---|---|---:|---|",
    ]
    for name, s in stages.items():
        lines.append(
            f"| {s['number']} {name} | {_status(s)} | {_f(s.get('seconds'))} / "
            f"{_f(s.get('budget_s'))} | {_notes(name, s.get('result', {}))} |"
        )
    if stages.get("correctness", {}).get("status") in ("passed", "failed"):  # it ran on CUDA
        lines += ["", *correctness_table(stages["correctness"].get("result", {}))]
    if "pretrain_speed" in stages:
        lines += ["", *pretrain_table(stages["pretrain_speed"].get("result", {}))]
    if "task_speed" in stages:
        lines += ["", *task_table(stages["task_speed"].get("result", {}))]
    if "pretrain_run" in stages or "glue" in stages:
        lines += ["", *run_table(stages)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        print(markdown(json.load(f)))
