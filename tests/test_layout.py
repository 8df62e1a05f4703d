"""The direction of imports between the package's parts (../DESIGN.md, "Parts and the direction
of their imports"): read from the source, function-level imports included."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "src" / "stratamem"

_EDGES = ("stratamem.api", "stratamem.cli", "stratamem.proxy", "stratamem.runtime")
_LIBRARY = ("stratamem.core", "stratamem.sync", "stratamem.facade", *_EDGES)
_STAGES = ("stratamem.layers", "stratamem.offload", "stratamem.pipeline", *_LIBRARY)

#: A part, and the parts above it that none of its modules may import.
RULES = {
    "domain.py": ("stratamem.store", "stratamem.embed", "stratamem.llm", *_STAGES),
    "store": ("stratamem.retrieval", "stratamem.embed", "stratamem.llm", "stratamem.stages",
              *_STAGES),
    "embed": ("stratamem.store", "stratamem.retrieval", *_STAGES),
    "llm": ("stratamem.store", "stratamem.retrieval", *_STAGES),
    "retrieval": _STAGES,
    "stages": _STAGES,
    "pipeline": ("stratamem.layers", "stratamem.offload", "stratamem.retrieval", *_LIBRARY),
    "layers": _LIBRARY,
    "offload": _LIBRARY,
    "core.py": _EDGES,
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
    where = PACKAGE / part
    for path in [where] if where.is_file() else sorted(where.rglob("*.py")):
        above = {name for name in imported(path)
                 if any(name == up or name.startswith(f"{up}.") for up in RULES[part])}  # fmt: skip
        if above:
            wrong[str(path.relative_to(PACKAGE))] = sorted(above)
    assert wrong == {}


#: What the REST client must not load: the embedded system (its store, layers, pipeline, the
#: embedder's numpy).
_NOT_FOR_THE_CLIENT = ("stratamem.core", "stratamem.sync", "stratamem.layers.service",
                       "stratamem.pipeline", "stratamem.retrieval", "stratamem.embed", "numpy")


def test_the_client_does_not_load_the_embedded_system() -> None:
    code = "import sys, stratamem.client; print(' '.join(sys.modules))"
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    loaded = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, check=True).stdout.split()  # fmt: skip
    assert [m for m in loaded if m.startswith(_NOT_FOR_THE_CLIENT)] == []


#: The only ways a CLI command may end with a code of its own: click's usage errors (exit 2,
#: the code of `InvalidInput`) and `stratamem llm check`'s verdict on the endpoint.
_OWN_EXITS = {"cli/llm_cmds.py": {"sys.exit"}}


def _exits(path: Path) -> set[str]:
    """The exits and error catches a module writes itself: `sys.exit`, `ctx.exit`, raising a
    click exception other than `UsageError`, catching `StratamemError` or `Exception`."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = ast.unparse(node.func)
            if name in {"sys.exit", "ctx.exit"}:
                found.add(name)
        elif isinstance(node, ast.Raise) and node.exc is not None:
            raised = ast.unparse(node.exc)
            if raised.startswith("click.") and not raised.startswith("click.UsageError("):
                found.add(raised.split("(")[0])
        elif isinstance(node, ast.ExceptHandler) and node.type is not None:
            caught = ast.unparse(node.type)
            if caught in {"StratamemError", "Exception", "BaseException"}:
                found.add(f"except {caught}")
    return found


def test_every_cli_command_maps_errors_through_the_exit_code_table() -> None:
    """Library errors leave every command uncaught, for the root group (`cli.exits`) to map:
    no module but `cli/exits.py` exits or catches them by itself."""
    own = {}
    for path in sorted((PACKAGE / "cli").rglob("*.py")):
        name = str(path.relative_to(PACKAGE))
        extra = _exits(path) - _OWN_EXITS.get(name, set())
        if extra and name != "cli/exits.py":
            own[name] = sorted(extra)
    assert own == {}


#: The modules through which the parts' task types reach the pipeline, and the package's modules
#: each imports: the parts declare theirs over the pipeline's kit, one table lists them, and only
#: the pipeline's `task_type` reads the table (so its lookups are complete in every process).
_TYPE_DECLARATIONS = {
    "layers/task_types.py": {"stratamem.pipeline.task_type"},
    "offload/task_types.py": {"stratamem.pipeline.task_type"},
    "task_types.py": {"stratamem.layers.task_types", "stratamem.offload.task_types",
                      "stratamem.pipeline.task_type"},
}  # fmt: skip


def _modules(path: Path) -> set[str]:
    """The package's modules `path` imports (`from a import b` is `a.b` when b is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                where = PACKAGE.parent.joinpath(*node.module.split("."), alias.name)
                is_module = where.with_suffix(".py").is_file() or where.is_dir()
                found.add(f"{node.module}.{alias.name}" if is_module else node.module)
    return {name for name in found if name.startswith("stratamem.")}


def test_the_task_types_reach_the_pipeline_through_one_table() -> None:
    assert {name: _modules(PACKAGE / name) for name in _TYPE_DECLARATIONS} == _TYPE_DECLARATIONS
    readers = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                     if "stratamem.task_types" in _modules(p))  # fmt: skip
    assert readers == ["pipeline/task_type.py"]


def _code_strings(tree: ast.AST) -> set[str]:
    """The string constants of a module's code, its docstrings (bare strings) left out."""
    docs = {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}  # fmt: skip
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
            and isinstance(node.value, str) and id(node) not in docs}  # fmt: skip


def test_no_module_of_the_pipeline_names_a_task_type() -> None:
    """The pipeline knows task types by what they declare (`pipeline.task_type`), never by name:
    no name of a type, no prefix of a type's own lock or timer, no part's declared constant."""
    from stratamem.layers import task_types as layers  # noqa: PLC0415
    from stratamem.offload import task_types as offload  # noqa: PLC0415
    from stratamem.pipeline.task_type import registered  # noqa: PLC0415

    types = registered()
    names = set(types.names())
    prefixes = {f"{t.name}/" for t in types.session_timers()}
    prefixes |= {f"{t.lock.name}/" for t in types if t.lock is not None and t.lock.name}
    constants = {n for part in (layers, offload) for n in vars(part) if n.isupper()}
    wrong = {}
    for path in sorted((PACKAGE / "pipeline").rglob("*.py")):
        tree = ast.parse(path.read_text("utf-8"))
        said = {s for s in _code_strings(tree) if s in names or s.startswith(tuple(prefixes))}
        said |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in constants}
        said |= {n.attr for n in ast.walk(tree)
                 if isinstance(n, ast.Attribute) and n.attr in constants}  # fmt: skip
        if said:
            wrong[str(path.relative_to(PACKAGE))] = sorted(said)
    assert wrong == {}


def test_the_stores_are_built_in_one_place() -> None:
    """Outside `store/`, no module builds a store of a record family itself: each takes them
    from `store.opening.stores_of` (`Stores`), so a new family is wired there once."""
    wrong = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = str(path.relative_to(PACKAGE))
        if name.startswith("store/"):
            continue
        built = {node.func.id for node in ast.walk(ast.parse(path.read_text("utf-8")))
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                 and node.func.id.startswith("Sql") and node.func.id.endswith("Store")}  # fmt: skip
        if built:
            wrong[name] = sorted(built)
    assert wrong == {}
