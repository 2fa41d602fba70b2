"""A small mutation-testing pass: flip one operator at a time in a module and see whether its tests
notice (a surviving mutant is a wrong answer the suite would let through).

Mutations (AST level, one site at a time): comparison operators (< <= > >= == != swapped with
their neighbours), arithmetic (+ -, * /), ``min``/``max`` swapped, ``and``/``or`` swapped, a
``not`` dropped, integer constants +1, and slice bounds dropped. Each mutant is written over the
module in a scratch copy of the repository, the module's tests run with ``-x``, and the mutant is
"killed" when they fail (or time out).

    .venv/bin/python scripts/mutation_pass.py --module src/bertkit/tasks/squad_post.py \\
        --tests tests/tasks/test_squad_post.py --sample 40 [--repo DIR]
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


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--module", required=True)
    ap.add_argument("--tests", nargs="+", required=True)
    ap.add_argument("--sample", type=int, default=40, help="mutants to try (a fixed random sample)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    source = (args.repo / args.module).read_text(encoding="utf-8")
    found = sites(ast.parse(source))
    random.Random(args.seed).shuffle(found)
    chosen = found[: args.sample]
    scratch = Path(tempfile.mkdtemp(prefix="bertkit-mutants-"))
    work = scratch / "repo"
    shutil.copytree(
        args.repo, work, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info")
    )
    env = {"PYTHONPATH": str(work / "src"), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1", "HOME": str(scratch)}  # fmt: skip
    survivors, killed = [], 0
    for n, (index, kind) in enumerate(chosen, start=1):
        mutated, where = mutate(source, index, kind)
        if mutated == ast.unparse(ast.parse(source)):
            continue
        (work / args.module).write_text(mutated, encoding="utf-8")
        try:
            r = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *args.tests],
                               cwd=work, env=env, capture_output=True, timeout=args.timeout)  # fmt: skip
            alive = r.returncode == 0
        except subprocess.TimeoutExpired:
            alive = False
        (work / args.module).write_text(source, encoding="utf-8")
        if alive:
            survivors.append(where)
        else:
            killed += 1
        print(f"[{n}/{len(chosen)}] {where}: {'SURVIVED' if alive else 'killed'}", flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    total = killed + len(survivors)
    print(f"{args.module}: {killed}/{total} mutants killed, {len(survivors)} survived: {survivors}")
    if args.json:
        args.json.write_text(json.dumps({"module": args.module, "tests": args.tests, "killed": killed,
                                         "survivors": survivors}, indent=1) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
