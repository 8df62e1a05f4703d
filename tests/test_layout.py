"""The direction of imports between the package's parts (../DESIGN.md, "Parts and the direction
of their imports"): read from the source, function-level imports included."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "src" / "stratamem"

#: A part, and the parts above it that none of its modules may import.
RULES = {
    "store": ("stratamem.retrieval", "stratamem.core", "stratamem.runtime", "stratamem.layers",
              "stratamem.offload", "stratamem.pipeline", "stratamem.api", "stratamem.cli"),
    "pipeline": ("stratamem.core", "stratamem.runtime", "stratamem.layers", "stratamem.offload",
                 "stratamem.api", "stratamem.cli"),
    "layers": ("stratamem.core", "stratamem.runtime", "stratamem.api", "stratamem.cli"),
    "offload": ("stratamem.core", "stratamem.runtime", "stratamem.api", "stratamem.cli"),
}  # fmt: skip


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


@pytest.mark.parametrize("part", sorted(RULES))
def test_no_part_imports_a_part_above_it(part: str) -> None:
    wrong = {}
    for path in sorted((PACKAGE / part).rglob("*.py")):
        above = {name for name in imported(path)
                 if any(name == up or name.startswith(f"{up}.") for up in RULES[part])}  # fmt: skip
        if above:
            wrong[str(path.relative_to(PACKAGE))] = sorted(above)
    assert wrong == {}
