"""The layers of src/bertkit and what each may import, read from docs/architecture.md (the one
copy of the rules) and checked against the source.

Every ``bertkit.*`` import counts, at module level or inside a function, so a lazy import cannot
hide an upward arrow. The table itself is checked too: it may not let a room import a layer above.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "bertkit"
DOC = ROOT / "docs" / "architecture.md"
LAYERS_HEADER = "| layer | room | holds | may import |"
TOLERATED_HEADER = "| room | imports | why |"


@dataclass(frozen=True)
class Room:
    name: str
    layer: int
    row: int  # position in the table: a layer-0 room may import only rows above it
    may_import: frozenset[str] | None  # None: not checked (the package root)


# ---- the table ---------------------------------------------------------------------------------


def table_rows(text: str, header: str) -> list[list[str]]:
    """The cells of each row of the markdown table under ``header``."""
    lines = text.splitlines()
    if header not in lines:
        raise ValueError(f"no table {header!r}")
    rows = []
    for line in lines[lines.index(header) + 2 :]:  # past the |---| line
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def _name(cell: str) -> str:
    """```evaluation/``` -> ``evaluation``; ```hub``` -> ``hub``."""
    m = re.fullmatch(r"`(\w+)/?`", cell.strip())
    if m is None:
        raise ValueError(f"not a room: {cell!r}")
    return m.group(1)


def _expand(items: str, layers: dict[str, int]) -> set[str]:
    """```a`, layer 0, layers 1-3`` -> the rooms they name."""
    out: set[str] = set()
    for item in items.split(","):
        item = item.strip()
        if m := re.fullmatch(r"layers? (\d+)(?:-(\d+))?", item):
            low, high = int(m.group(1)), int(m.group(2) or m.group(1))
            out |= {room for room, layer in layers.items() if low <= layer <= high}
        else:
            out.add(_name(item))
    return out


def parse_layers(text: str) -> dict[str, Room]:
    """The layer table: room -> :class:`Room`; a cell the grammar does not read is an error."""
    rows = table_rows(text, LAYERS_HEADER)
    layers = {_name(room): int(layer) for layer, room, _holds, _may in rows}
    rooms = {}
    for index, (layer, room, _holds, may) in enumerate(rows):
        if may.startswith("not checked"):
            allowed = None
        elif re.fullmatch(r"nothing( \(.*\))?", may):
            allowed = frozenset()
        else:
            include, _, exclude = may.partition(" except ")
            allowed = _expand(include, layers) - (_expand(exclude, layers) if exclude else set())
            allowed = frozenset(allowed - {_name(room)})
        rooms[_name(room)] = Room(_name(room), int(layer), index, allowed)
    return rooms


def parse_tolerated(text: str) -> set[tuple[str, str]]:
    """(room, room it imports) for each arrow tolerated for now."""
    return {
        (_name(room), _name(target)) for room, target, _why in table_rows(text, TOLERATED_HEADER)
    }


def table_errors(rooms: dict[str, Room]) -> list[str]:
    """Arrows the table itself draws upward (or to a room it does not hold)."""
    bad = []
    for room in rooms.values():
        for target in sorted(room.may_import or ()):
            other = rooms.get(target)
            if other is None:
                bad.append(f"{room.name} may import {target}, which has no row")
            elif other.layer > room.layer or (other.layer == room.layer and other.row > room.row):
                bad.append(
                    f"{room.name} (layer {room.layer}) may import {target} "
                    f"(layer {other.layer}, a row below)"
                )
            elif other.layer == room.layer != 0:
                bad.append(f"{room.name} may import {target}, its peer in layer {room.layer}")
    return bad


def allowed_imports(text: str) -> dict[str, set[str] | None]:
    """room -> the rooms it may import (None: not checked): the table plus the tolerated arrows."""
    allowed: dict[str, set[str] | None] = {
        name: None if room.may_import is None else set(room.may_import)
        for name, room in parse_layers(text).items()
    }
    for room, target in parse_tolerated(text):
        if allowed.get(room) is not None:
            allowed[room].add(target)  # type: ignore[union-attr]
    return allowed


TEXT = DOC.read_text(encoding="utf-8")
ROOMS = parse_layers(TEXT)
TOLERATED = parse_tolerated(TEXT)
ALLOWED = allowed_imports(TEXT)

# ---- the source --------------------------------------------------------------------------------


def _room(module: str) -> str:
    """``bertkit.tasks.glue`` -> ``tasks``; ``bertkit`` -> ``bertkit`` (the root package)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "bertkit"


def _module_of(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    return ".".join(["bertkit", *(p for p in rel.parts if p != "__init__")])


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported bertkit module) for every bertkit import in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "bertkit":
                # ``from bertkit import precision`` names a room; ``__version__`` is the root's
                out += [
                    (node.lineno, "bertkit" if a.name.startswith("__") else f"bertkit.{a.name}")
                    for a in node.names
                ]
            elif node.module.startswith("bertkit."):
                out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("bertkit")]
    return out


def arrows(root: Path = SRC) -> list[tuple[str, int, str, str]]:
    """(file, line, room, imported room) for every import between two rooms under ``root``."""
    out = []
    for path in sorted(root.rglob("*.py")):
        room = _room(_module_of(path, root))
        for line, target in imports(path):
            if _room(target) != room:
                out.append((str(path.relative_to(root)), line, room, target))
    return out


def upward_arrows(root: Path = SRC, allowed: dict[str, set[str] | None] = ALLOWED) -> list[str]:
    bad, unknown = [], set()
    for file, line, room, target in arrows(root):
        if room not in allowed:
            unknown.add(f"{file}: room {room!r} is not in the layer table")
        elif allowed[room] is not None and _room(target) not in allowed[room]:  # type: ignore[operator]
            bad.append(f"{file}:{line}: {room} imports {target}")
    return sorted(unknown) + bad


def unused_tolerated(tolerated: set[tuple[str, str]], root: Path = SRC) -> list[str]:
    """Tolerated arrows no import draws any more (remove their row)."""
    drawn = {(room, _room(target)) for _f, _l, room, target in arrows(root)}
    return [f"{a} -> {b}" for a, b in sorted(tolerated - drawn)]


def missing_rooms(rooms: dict[str, Room], root: Path = SRC) -> list[str]:
    """Rooms of the table with no package, module or (the root) ``__init__.py`` under ``root``."""
    where = {"bertkit": "__init__.py"}
    return [
        name
        for name in rooms
        if not ((root / name).is_dir() or (root / where.get(name, f"{name}.py")).is_file())
    ]


def run_time_cycles(root: Path = SRC) -> list[list[str]]:
    """Module cycles among the imports that run (module level or inside functions; an import
    under ``if TYPE_CHECKING:`` only names a type for annotations). ``from bertkit.a import b``
    counts as an arrow to module ``bertkit.a.b`` when there is one, else to ``bertkit.a``."""
    files = {_module_of(path, root): path for path in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                node.body = []
        targets = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    targets.add(full if full in files else node.module)
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
        graph[module] = {t for t in targets if t in files and t != module}
    cycles, done = [], set()
    for start in graph:  # each strongly connected part of more than one module, once
        if start in done:
            continue
        reach, todo = {start}, [start]
        while todo:
            for nxt in graph[todo.pop()]:
                if nxt not in reach:
                    reach.add(nxt)
                    todo.append(nxt)
        part = sorted(m for m in reach if start in _reachable(graph, m))
        done |= set(part)
        if len(part) > 1:
            cycles.append(part)
    return cycles


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


# ---- the rules hold ----------------------------------------------------------------------------


def test_no_module_imports_a_layer_above_it() -> None:
    assert upward_arrows() == []


def test_no_import_circle() -> None:
    assert run_time_cycles() == []


def test_the_table_points_down_only() -> None:
    assert table_errors(ROOMS) == []


def test_the_table_reads_as_the_layers_it_draws() -> None:
    """A few rows read through the grammar (``layers A-B except ...``, ``layer 0``, tolerated)."""
    foundation = {
        "bertkit",
        "errors",
        "input_files",
        "io",
        "staging",
        "progress",
        "config",
        "cpu",
        "probe_cache",
        "probes",
        "hardware",
        "env_report",
        "precision",
        "hub",
    }
    assert ALLOWED["bertkit"] is None
    assert ALLOWED["evaluation"] == set()
    assert ROOMS["hardware"].may_import == {"errors", "io", "cpu", "probe_cache", "probes"}
    assert ALLOWED["model"] == foundation
    assert ALLOWED["tasks"] == foundation | {"tokenizer", "evaluation", "data"}
    assert ALLOWED["training"] == ALLOWED["inference"] | {"inference"}
    assert ALLOWED["serve"] == ALLOWED["training"] | {"export"}
    assert ALLOWED["recipes"] == ALLOWED["serve"] | {"training"}
    assert ALLOWED["cli"] == ALLOWED["recipes"] | {"recipes", "serve"}
    assert ALLOWED["__main__"] == {"cli"}


# rooms the table names before their code exists (a strict xfail each: it fails once they do)
_NOT_YET: dict[str, str] = {}


@pytest.mark.parametrize(
    "room",
    [
        pytest.param(r, marks=pytest.mark.xfail(strict=True, reason=_NOT_YET[r]))
        if r in _NOT_YET
        else r
        for r in sorted(ROOMS)
    ],
)
def test_every_room_in_the_table_exists(room: str) -> None:
    assert room not in missing_rooms(ROOMS)


def test_every_tolerated_arrow_still_occurs() -> None:
    """An arrow removed from the source leaves the tolerated list too, so the list only shrinks."""
    assert unused_tolerated(TOLERATED) == []


# ---- negative controls: the checks can fail -----------------------------------------------------

TINY = f"""{LAYERS_HEADER}
|---|---|---|---|
| 0 | `errors` | errors | nothing |
| 0 | `io` | files | `errors` |
| 1 | `evaluation/` | metrics | nothing (the ground floor) |
| 1 | `model/` | modules | layer 0 |
| 2 | `training/` | loops | layers 0-1 except `evaluation` |
| 2 | `serve/` | the app | layer 0, `model` |
| 3 | `cli/` | commands | layers 0-2 |

{TOLERATED_HEADER}
|---|---|---|
| `io` | `model` | for the test |
"""


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, source in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(source)
    return root


def test_the_grammar_reads_each_form() -> None:
    allowed = allowed_imports(TINY)
    assert allowed == {
        "errors": set(),
        "io": {"errors", "model"},
        "evaluation": set(),
        "model": {"errors", "io"},
        "training": {"errors", "io", "model"},
        "serve": {"errors", "io", "model"},
        "cli": {"errors", "io", "evaluation", "model", "training", "serve"},
    }
    assert table_errors(parse_layers(TINY)) == []


def test_the_rule_catches_an_upward_import(tmp_path: Path) -> None:
    """Model importing training (lazily), evaluation importing data, serve importing cli, and a
    room the table lacks: each is reported; the tolerated arrow and cli's imports are not."""
    root = _tree(
        tmp_path,
        {
            "model/bad.py": "def f():\n    from bertkit.training.loop import Trainer\n",
            "evaluation/bad.py": "from bertkit.data.tasks.conll import read_conll\n",
            "serve/app.py": "import bertkit.model\nfrom bertkit.cli import main\n",
            "io.py": "from bertkit.model import BertModel\n",
            "cli/main.py": "from bertkit import serve, training\n",
            "hidden/x.py": "from bertkit import errors\n",
        },
    )
    assert upward_arrows(root, allowed_imports(TINY)) == [
        "hidden/x.py: room 'hidden' is not in the layer table",
        "evaluation/bad.py:1: evaluation imports bertkit.data.tasks.conll",
        "model/bad.py:2: model imports bertkit.training.loop",
        "serve/app.py:2: serve imports bertkit.cli",
    ]


def test_the_real_table_refuses_upward_imports(tmp_path: Path) -> None:
    """With the real table: serve may not import cli or recipes, recipes may not import serve or
    cli, model may not import inference; cli may import recipes."""
    root = _tree(
        tmp_path,
        {
            "serve/app.py": "from bertkit.cli.main import main\nfrom bertkit.recipes import x\n",
            "recipes/finetune.py": "from bertkit.training import loop\nfrom bertkit.serve import app\n"
            "import bertkit.cli.main\n",
            "model/bert.py": "from bertkit.inference import Embedder\n",
            "cli/finetune.py": "from bertkit.recipes.finetune import run\n",
        },
    )
    assert upward_arrows(root) == [
        "model/bert.py:1: model imports bertkit.inference",
        "recipes/finetune.py:2: recipes imports bertkit.serve",
        "recipes/finetune.py:3: recipes imports bertkit.cli.main",
        "serve/app.py:1: serve imports bertkit.cli.main",
        "serve/app.py:2: serve imports bertkit.recipes",
    ]


def test_a_table_pointing_up_is_refused() -> None:
    up = TINY.replace("| 1 | `model/` | modules | layer 0 |", "| 1 | `model/` | modules | `cli` |")
    peer = TINY.replace("| layer 0, `model` |", "| layer 0, `model`, `training` |")
    order = TINY.replace("| 0 | `errors` | errors | nothing |", "| 0 | `errors` | errors | `io` |")
    typo = TINY.replace("| layer 0, `model` |", "| layer 0, `modle` |")
    assert table_errors(parse_layers(up)) == [
        "model (layer 1) may import cli (layer 3, a row below)"
    ]
    assert table_errors(parse_layers(peer)) == ["serve may import training, its peer in layer 2"]
    assert table_errors(parse_layers(order)) == [
        "errors (layer 0) may import io (layer 0, a row below)"
    ]
    assert table_errors(parse_layers(typo)) == ["serve may import modle, which has no row"]


def test_an_unreadable_cell_is_refused() -> None:
    with pytest.raises(ValueError, match="not a room: 'everything'"):
        parse_layers(TINY.replace("| layers 0-2 |", "| everything |"))


def test_a_missing_room_and_a_stale_tolerated_arrow_are_found(tmp_path: Path) -> None:
    """``serve`` absent from the tree is reported (the check once exempted it by name), and a
    tolerated arrow no import draws is reported."""
    root = _tree(
        tmp_path,
        {
            "errors.py": "",
            "io.py": "",
            "evaluation/__init__.py": "",
            "model/__init__.py": "",
            "training/__init__.py": "",
            "cli/__init__.py": "",
        },
    )
    assert missing_rooms(parse_layers(TINY), root) == ["serve"]
    assert unused_tolerated(parse_tolerated(TINY), root) == ["io -> model"]
    (root / "io.py").write_text("from bertkit.model import BertModel\n")
    assert unused_tolerated(parse_tolerated(TINY), root) == []


def test_a_circle_is_found_and_a_type_only_import_is_not(tmp_path: Path) -> None:
    """Negative control: a -> b -> c -> a (c's import inside a function) is one circle; d and e
    import each other only under TYPE_CHECKING on one side, which is no circle."""
    root = _tree(
        tmp_path / "bertkit",
        {
            "__init__.py": "",
            "x/__init__.py": "",
            "x/a.py": "from bertkit.x import b\n",
            "x/b.py": "import bertkit.x.c\n",
            "x/c.py": "def f():\n    from bertkit.x.a import thing\n",
            "x/d.py": "from bertkit.x.e import E\n",
            "x/e.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from bertkit.x.d import D\n",
        },
    )
    assert run_time_cycles(root) == [["bertkit.x.a", "bertkit.x.b", "bertkit.x.c"]]


PAGE = 400  # lines: a reader's page, the limit for a hand-written file


def long_files(root: Path = SRC, limit: int = PAGE) -> list[str]:
    """Hand-written modules over ``limit`` lines (a generated one says GENERATED at its top)."""
    out = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "GENERATED by" not in text[:400] and text.count("\n") > limit:
            out.append(f"{path.relative_to(root)}: {text.count(chr(10))} lines")
    return out


def test_no_hand_written_module_is_longer_than_a_page(tmp_path: Path) -> None:
    assert long_files() == []
    # negative control: one line too many is caught, a generated file is not
    _tree(
        tmp_path, {"a.py": "x = 1\n" * 5, "b.py": '"""GENERATED by a script."""\n' + "y = 2\n" * 9}
    )
    assert long_files(tmp_path, limit=4) == ["a.py: 5 lines"]
