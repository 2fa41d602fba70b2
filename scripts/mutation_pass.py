"""A small mutation-testing pass: flip one operator at a time in a module and see whether its tests
notice (a surviving mutant is a wrong answer the suite would let through).

Mutations (AST level, one site at a time): comparison operators (< <= > >= == != swapped with
their neighbours), arithmetic (+ -, * /), ``min``/``max`` swapped, ``and``/``or`` swapped, a
``not`` dropped, integer constants +1, and slice bounds dropped.

The tests run once unmutated under coverage with a context per test (pytest-cov): that run must
pass (a mutant "killed" by a test that fails anyway proves nothing), and it tells, for every line,
which tests execute it. Each mutant is then written over its module in a scratch copy of the
repository and exactly the tests that execute its statement run with ``-x``: it is **killed**
when they fail, **survives** when they pass (or when no test runs it at all: "unrun"), and a
run past ``--timeout`` is counted apart (a hang is not a test that noticed). Code run only in a
subprocess (``torchrun``, a CLI started as a process) is not seen by the coverage run: its
mutants show as unrun. The default suite less the browser tests is run (``MARKERS``).

Some modules, the tests to run (default: the whole default suite)::

    .venv/bin/python scripts/mutation_pass.py --module src/bertkit/tasks/windows.py \\
        --tests tests/tasks --sample 40

Every module of some rooms, ``--sample`` mutants each (a fixed sample of ``--seed``)::

    .venv/bin/python scripts/mutation_pass.py --rooms tasks serve inference training --sample 3 \\
        --json /tmp/mutants.json
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


def sites(tree: ast.AST) -> list[tuple[int, str, tuple[int, ...] | None]]:
    """(node index in ast.walk order, kind, lines) of every mutable site; ``lines``: the lines
    whose tests can notice it (its statement's inside a function; a function's body for its
    defaults and decorators), or None for code run at import (module and class level: every
    test that runs the module)."""
    parents = {c: n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
    out = []
    for i, node in enumerate(ast.walk(tree)):
        kind = _kind(node)
        if kind is None:
            continue
        stmt = node
        while not isinstance(stmt, ast.stmt) and stmt in parents:
            stmt = parents[stmt]
        out.append((i, kind, _lines(stmt, parents)))
    return out


def _lines(stmt: ast.AST, parents: dict[ast.AST, ast.AST]) -> tuple[int, ...] | None:
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):  # a default, a decorator
        return tuple(range(stmt.body[0].lineno, (stmt.end_lineno or stmt.lineno) + 1))
    up = parents.get(stmt)
    while up is not None and not isinstance(up, ast.FunctionDef | ast.AsyncFunctionDef):
        up = parents.get(up)
    return None if up is None else (stmt.lineno,)


def _kind(node: ast.AST) -> str | None:
    if isinstance(node, ast.Compare) and type(node.ops[0]) in SWAP_CMP:
        return "cmp"
    if isinstance(node, ast.BinOp) and type(node.op) in SWAP_BIN:
        return "bin"
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("min", "max")
    ):
        return "minmax"
    if isinstance(node, ast.BoolOp):
        return "boolop"
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return "not"
    if (
        isinstance(node, ast.Constant)
        and type(node.value) is int
        and not isinstance(node.value, bool)
    ):
        return "int"
    if isinstance(node, ast.Slice) and (node.lower is not None or node.upper is not None):
        return "slice"
    return None


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


def covering(work: Path, env: dict[str, str], tests: list[str]) -> dict[str, dict[int, set[str]]]:
    """One run of ``tests`` under coverage with a context per test (pytest-cov): for every
    module (path relative to ``work``) and line, the tests that ran it. Exits when the tests
    fail unmutated (a mutant "killed" by a test that fails anyway proves nothing)."""
    from coverage import CoverageData

    data_file = work / ".coverage"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-m",
        MARKERS,
        f"--cov={work / 'src' / 'bertkit'}",
        "--cov-context=test",
        "--cov-report=",
        *tests,
    ]
    r = subprocess.run(
        cmd, cwd=work, env={**env, "COVERAGE_FILE": str(data_file)}, capture_output=True, text=True
    )
    if r.returncode != 0:
        sys.exit(f"the unmutated tests fail in the scratch copy:\n{r.stdout[-3000:]}")
    print(f"baseline under coverage: {r.stdout.strip().splitlines()[-1]}", flush=True)
    data = CoverageData(basename=str(data_file))
    data.read()
    out: dict[str, dict[int, set[str]]] = {}
    for name in data.measured_files():
        by_line = data.contexts_by_lineno(name)
        out[str(Path(name).relative_to(work))] = {
            line: {c.split("|")[0] for c in contexts if c} for line, contexts in by_line.items()
        }
    return out


def run_module(
    repo: Path,
    work: Path,
    module: str,
    runs: dict[int, set[str]],
    sample: int,
    seed: int,
    timeout: float,
    env: dict[str, str],
) -> dict:
    """Mutants of one module, each run against the tests that execute its statement (``runs``:
    line -> test ids): ``{"module", "killed", "timed_out", "survivors", "unrun"}``; a mutant no
    test runs survives (``unrun`` counts those among the survivors)."""
    source = (repo / module).read_text(encoding="utf-8")
    found = sites(ast.parse(source))
    random.Random(seed).shuffle(found)
    survivors: list[str] = []
    killed = timed_out = unrun = 0
    plain = ast.unparse(ast.parse(source))
    chosen = found[:sample]
    anywhere = set().union(*runs.values()) if runs else set()
    for n, (index, kind, lines) in enumerate(chosen, start=1):
        mutated, where = mutate(source, index, kind)
        if mutated == plain:
            continue
        tests = sorted(
            anywhere if lines is None else set().union(*(runs.get(x, set()) for x in lines))
        )
        if not tests:
            survivors.append(f"{where} (no test runs it)")
            unrun += 1
            print(f"[{n}/{len(chosen)}] {module} {where}: SURVIVED (no test runs it)", flush=True)
            continue
        (work / module).write_text(mutated, encoding="utf-8")
        try:
            cmd = [
                sys.executable,
                "-m",
                "pytest",
                "-x",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:cov",
                "-m",
                MARKERS,
                *tests,
            ]
            r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, timeout=timeout)
            verdict = "SURVIVED" if r.returncode == 0 else "killed"
        except subprocess.TimeoutExpired:
            verdict = "timed out"
        (work / module).write_text(source, encoding="utf-8")
        if verdict == "SURVIVED":
            survivors.append(f"{where} ({len(tests)} tests run it)")
        elif verdict == "killed":
            killed += 1
        else:
            timed_out += 1
        print(f"[{n}/{len(chosen)}] {module} {where}: {verdict} ({len(tests)} tests)", flush=True)
    return {
        "module": module,
        "killed": killed,
        "timed_out": timed_out,
        "survivors": survivors,
        "unrun": unrun,
    }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--module", nargs="+", help="modules (src/bertkit/...py)")
    ap.add_argument("--rooms", nargs="+", help="every module of these rooms (tasks serve ...)")
    ap.add_argument("--tests", nargs="+", default=["tests"], help="the tests to run (default: all)")
    ap.add_argument(
        "--sample", type=int, default=40, help="mutants per module (a fixed random sample)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if bool(args.module) == bool(args.rooms):
        ap.error("give --module or --rooms")
    modules = args.module or sorted(
        str(m.relative_to(args.repo))
        for room in args.rooms
        for m in (args.repo / "src" / "bertkit" / room).glob("*.py")
    )
    scratch = Path(tempfile.mkdtemp(prefix="bertkit-mutants-"))
    work = scratch / "repo"
    ignore = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info")
    shutil.copytree(args.repo, work, ignore=ignore)
    env = {
        "PYTHONPATH": str(work / "src"),
        "PATH": "/usr/bin:/bin",
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "HOME": str(scratch),
    }
    try:
        runs = covering(work, env, args.tests)
        rows = [
            run_module(
                args.repo, work, m, runs.get(m, {}), args.sample, args.seed, args.timeout, env
            )
            for m in modules
        ]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"\n{'module':<44} {'killed':>6} {'timeout':>7} {'survived':>8} {'unrun':>5}")
    for r in rows:
        n = len(r["survivors"])
        print(f"{r['module']:<44} {r['killed']:>6} {r['timed_out']:>7} {n:>8} {r['unrun']:>5}")
    killed, timed_out = sum(r["killed"] for r in rows), sum(r["timed_out"] for r in rows)
    survived, unrun = sum(len(r["survivors"]) for r in rows), sum(r["unrun"] for r in rows)
    print(f"{'all':<44} {killed:>6} {timed_out:>7} {survived:>8} {unrun:>5}")
    for r in rows:
        for where in r["survivors"]:
            print(f"survivor: {r['module']} {where}")
    if args.json:
        out = {"seed": args.seed, "sample": args.sample, "tests": args.tests, "modules": rows}
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
