"""A small mutation-testing pass: flip one operator at a time in a module and see whether its tests
notice (a surviving mutant is a wrong answer the suite would let through).

Mutations (AST level, one site at a time): comparison operators (< <= > >= == != swapped with
their neighbours), arithmetic (+ -, * /), ``min``/``max`` swapped, ``and``/``or`` swapped, a
``not`` dropped, integer constants +1, and slice bounds dropped. Each mutant is written over the
module in a scratch copy of the repository, the module's tests run with ``-x``, and the mutant is
"killed" when they fail by an assertion or an error. A mutant whose tests run past ``--timeout``
is counted apart ("timed out"): a hang is not a test that noticed.

One module and its tests::

    .venv/bin/python scripts/mutation_pass.py --module src/bertkit/tasks/squad_post.py \\
        --tests tests/tasks/test_squad_post.py --sample 40 [--repo DIR]

Every module of some rooms, ``--sample`` mutants each, each module's tests found by
:func:`tests_of` (the default suite's test files that name the module), one table at the end::

    .venv/bin/python scripts/mutation_pass.py --rooms tasks serve inference training --sample 3 \\
        --json docs/mutation-pass.json
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SWAP_CMP = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
}
# the default suite less the browser tests (minutes each; the page's logic is not under test here)
MARKERS = "not slow and not gpu and not browser"
SWAP_BIN = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}


def sites(tree: ast.AST) -> list[tuple[int, str]]:
    """(node index in ast.walk order, kind) of every mutable site."""
    out = []
    for i, node in enumerate(ast.walk(tree)):
        if isinstance(node, ast.Compare) and type(node.ops[0]) in SWAP_CMP:
            out.append((i, "cmp"))
        elif isinstance(node, ast.BinOp) and type(node.op) in SWAP_BIN:
            out.append((i, "bin"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("min", "max")
        ):
            out.append((i, "minmax"))
        elif isinstance(node, ast.BoolOp):
            out.append((i, "boolop"))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            out.append((i, "not"))
        elif (
            isinstance(node, ast.Constant)
            and type(node.value) is int
            and not isinstance(node.value, bool)
        ):
            out.append((i, "int"))
        elif isinstance(node, ast.Slice) and (node.lower is not None or node.upper is not None):
            out.append((i, "slice"))
    return out


def mutate(source: str, index: int, kind: str) -> tuple[str, str]:
    tree = ast.parse(source)
    parents = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    node = list(ast.walk(tree))[index]
    line = getattr(node, "lineno", 0)
    if kind == "cmp":
        node.ops[0] = SWAP_CMP[type(node.ops[0])]()
    elif kind == "bin":
        node.op = SWAP_BIN[type(node.op)]()
    elif kind == "minmax":
        node.func.id = "max" if node.func.id == "min" else "min"
    elif kind == "boolop":
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif kind == "not":
        parent = parents[node]
        for field, value in ast.iter_fields(parent):
            if value is node:
                setattr(parent, field, node.operand)
            elif isinstance(value, list):
                setattr(parent, field, [node.operand if v is node else v for v in value])
    elif kind == "int":
        node.value = node.value + 1
    elif kind == "slice":
        node.lower = node.upper = None
    return ast.unparse(tree), f"line {line}: {kind}"


def tests_of(repo: Path, module: str) -> list[str]:
    """The test files that name ``module`` (``src/bertkit/tasks/windows.py`` -> a file holding
    ``bertkit.tasks.windows`` or ``from bertkit.tasks import windows``); none found: the room's
    test folder."""
    parts = Path(module).with_suffix("").parts[1:]  # ("bertkit", "tasks", "windows")
    dotted = ".".join(p for p in parts if p != "__init__")
    parent, stem = ".".join(parts[:-1]), parts[-1]
    names = (dotted, f"from {parent} import {stem}")
    found = sorted(
        str(t.relative_to(repo))
        for t in (repo / "tests").rglob("test_*.py")
        if any(n in t.read_text(encoding="utf-8") for n in names)
    )
    room = repo / "tests" / parts[1]
    return found or ([str(room.relative_to(repo))] if room.is_dir() else [])


def run_module(
    repo: Path,
    work: Path,
    module: str,
    tests: list[str],
    sample: int,
    seed: int,
    timeout: float,
    env: dict[str, str],
) -> dict:
    """Mutants of one module: ``{"module", "tests", "killed", "timed_out", "survivors"}``."""
    source = (repo / module).read_text(encoding="utf-8")
    found = sites(ast.parse(source))
    random.Random(seed).shuffle(found)
    survivors: list[str] = []
    killed = timed_out = 0
    plain = ast.unparse(ast.parse(source))
    chosen = found[:sample]
    for n, (index, kind) in enumerate(chosen, start=1):
        mutated, where = mutate(source, index, kind)
        if mutated == plain:
            continue
        (work / module).write_text(mutated, encoding="utf-8")
        try:
            r = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-x",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    "-m",
                    MARKERS,
                    *tests,
                ],
                cwd=work,
                env=env,
                capture_output=True,
                timeout=timeout,
            )
            verdict = "SURVIVED" if r.returncode == 0 else "killed"
        except subprocess.TimeoutExpired:
            verdict = "timed out"
        (work / module).write_text(source, encoding="utf-8")
        if verdict == "SURVIVED":
            survivors.append(where)
        elif verdict == "killed":
            killed += 1
        else:
            timed_out += 1
        print(f"[{n}/{len(chosen)}] {module} {where}: {verdict}", flush=True)
    return {
        "module": module,
        "tests": tests,
        "killed": killed,
        "timed_out": timed_out,
        "survivors": survivors,
    }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--module", help="one module (src/bertkit/...py)")
    ap.add_argument("--tests", nargs="+", help="its tests (with --module)")
    ap.add_argument("--rooms", nargs="+", help="every module of these rooms (tasks serve ...)")
    ap.add_argument(
        "--sample", type=int, default=40, help="mutants per module (a fixed random sample)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if bool(args.module) == bool(args.rooms) or (args.module and not args.tests):
        ap.error("give --module with --tests, or --rooms")
    if args.module:
        plan = [(args.module, args.tests)]
    else:
        modules = sorted(
            str(m.relative_to(args.repo))
            for room in args.rooms
            for m in (args.repo / "src" / "bertkit" / room).glob("*.py")
        )
        plan = [(m, tests_of(args.repo, m)) for m in modules]
    scratch = Path(tempfile.mkdtemp(prefix="bertkit-mutants-"))
    work = scratch / "repo"
    shutil.copytree(
        args.repo, work, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info")
    )
    env = {
        "PYTHONPATH": str(work / "src"),
        "PATH": "/usr/bin:/bin",
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "HOME": str(scratch),
    }
    rows = []
    union = sorted({t for _m, tests in plan for t in tests})
    baseline = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", MARKERS, *union],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    if baseline.returncode != 0:  # a mutant "killed" by a test that fails anyway proves nothing
        shutil.rmtree(scratch, ignore_errors=True)
        sys.exit(f"the unmutated tests fail in the scratch copy:\n{baseline.stdout[-3000:]}")
    print(f"baseline: {baseline.stdout.strip().splitlines()[-1]}", flush=True)
    try:
        for module, tests in plan:
            if not tests:
                print(f"{module}: no tests name it; skipped", flush=True)
                continue
            rows.append(
                run_module(
                    args.repo, work, module, tests, args.sample, args.seed, args.timeout, env
                )
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"\n{'module':<44} {'killed':>6} {'timeout':>7} {'survived':>8}")
    for r in rows:
        print(
            f"{r['module']:<44} {r['killed']:>6} {r['timed_out']:>7} {len(r['survivors']):>8}  "
            f"{'; '.join(r['survivors'])}"
        )
    total = [
        sum(r[k] if k != "survivors" else len(r[k]) for r in rows)
        for k in ("killed", "timed_out", "survivors")
    ]
    print(f"{'all':<44} {total[0]:>6} {total[1]:>7} {total[2]:>8}")
    if args.json:
        args.json.write_text(
            json.dumps({"seed": args.seed, "sample": args.sample, "modules": rows}, indent=1) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
