"""The layer rule of DESIGN.md §6: lower layers never import higher ones."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "appliance"

# rank of each top-level part of the package; base modules are rank 0
RANK = {
    "__init__": 0, "limits": 0, "errors": 0, "clock": 0, "durations": 0, "native": 0, "_native": 0, "log": 0, "__main__": 6,
    "config": 1, "protocol": 1, "raft": 1, "store": 1, "fabric": 1,
    "server": 2, "cluster": 2,
    "jetstream": 3,
    "worker": 4, "supervisor": 4, "testing": 4, "bench": 4,
    "cli": 5, "spark": 5,
}
# imports across parts of the same rank that the design allows
SAME_RANK_ALLOWED = {
    ("native", "_native"),
    ("cluster", "server"),
    ("worker", "supervisor"),
    ("supervisor", "worker"),
    ("testing", "bench"),
    ("fabric", "protocol"),  # the route link (fabric/route.py) speaks the route protocol (protocol/route_parser.py)
}


def part_of(module_path: Path) -> str:
    rel = module_path.relative_to(ROOT)
    return rel.parts[0].removesuffix(".py")


def imported_parts(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("appliance."):
                    found.append((node.lineno, alias.name.split(".")[1]))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "appliance":
                found.extend((node.lineno, alias.name) for alias in node.names)
            elif node.module.startswith("appliance."):
                found.append((node.lineno, node.module.split(".")[1]))
    return found


def test_every_part_has_a_rank() -> None:
    parts = {part_of(p) for p in ROOT.rglob("*.py")}
    assert parts - RANK.keys() == set()


def test_imports_point_down() -> None:
    violations = []
    for path in sorted(ROOT.rglob("*.py")):
        importer = part_of(path)
        tree = ast.parse(path.read_text(), filename=str(path))
        for lineno, imported in imported_parts(tree):
            if imported == importer or imported not in RANK:
                continue
            lower = RANK[imported] < RANK[importer]
            if not lower and (importer, imported) not in SAME_RANK_ALLOWED:
                violations.append(f"{path.relative_to(ROOT.parent)}:{lineno}: {importer} must not import {imported}")
    assert violations == []
