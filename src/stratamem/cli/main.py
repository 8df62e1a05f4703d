"""The `stratamem` command: a thin shell over the library.

Its commands are imported when one of them runs (or is asked for its help), not to print the
list of them: `stratamem --help` imports no more than click (`COMMANDS` names where each
lives, and the first sentence of its help, which the listing shows)."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator, MutableMapping
from pathlib import Path

import click

from stratamem.cli.exits import MappedGroup

#: Each command of `stratamem`: where it lives (`module:attribute` under stratamem.cli) and the
#: first sentence of its help (a test holds it to the command's own).
COMMANDS: dict[str, tuple[str, str]] = {
    "bench": ("pipeline_cmds:bench",
        "Benchmarks that print JSON figures against a baseline measured in the same run."),
    "capture": ("memory_cmds:capture",
        "Capture one message into the store (searchable by BM25 at once)."),
    "erase": ("memory_cmds:erase",
        "Forget a session, a turn or a memory, and what was built on it (docs/forgetting.md), or "
        "a whole tenant's data."),
    "eval": ("eval_cmds:eval_group",
        "Measure stratamem on public benchmarks, on this machine."),
    "export": ("lineage_cmds:export_",
        "Write everything held about a tenant as versioned JSONL: turns, memories with their "
        "versions and lineage, scenes, profile, offload entries and refs, the embedding model "
        "named (docs/forgetting.md#export-and-import)."),
    "failures": ("failures_cmds:failures",
        "Failure records of the LLM stages: quarantined turns, failed stages, rejected batches, "
        "dropped items, with their raw replies; retry a quarantined turn or a failed stage."),
    "flush": ("layers_cmds:flush",
        "Run the layers for a session now (L1 until caught up, L2, L3) and wait."),
    "import": ("memory_cmds:import_",
        "Import a JSONL file of messages, or LoCoMo conversations (one tenant per sample)."),
    "import-export": ("lineage_cmds:import_export",
        "Load a `stratamem export` file into this store (SQLite or PostgreSQL), keeping ids and "
        "validity; the records are embedded again with this store's model."),
    "keys": ("service_cmds:keys",
        "API keys: each maps to one tenant and is stored only hashed."),
    "lineage": ("lineage_cmds:lineage",
        "Why something is known: what a memory, scene or profile version was built from (turns, "
        "memories, scene versions) and what was built from it, as JSON."),
    "llm": ("llm_cmds:llm",
        "The LLM endpoint of the memory layers and offload (STRATAMEM_LLM_*)."),
    "mcp": ("service_cmds:mcp",
        "Serve the MCP tools over stdio for one tenant (for an agent on this machine)."),
    "memories": ("layers_cmds:memories",
        "List, show and trace the versions of L1 memories."),
    "migrate": ("migrate_cmds:migrate",
        "Copy a SQLite store into PostgreSQL (vectors included), verify the rows per tenant and "
        "table; run it again to finish an interrupted copy."),
    "offload": ("offload_cmds:offload",
        "Context offload: tool results out of the context window, exact read-back by ref."),
    "pipeline": ("pipeline_cmds:pipeline",
        "Inspect and operate the task pipeline."),
    "prepare": ("model_cmds:prepare",
        "Load the configured embedder now: the local model's ONNX graph is built into the model "
        "cache if it is not there yet."),
    "profile": ("layers_cmds:profile",
        "The L3 profile of a tenant."),
    "reextract": ("layers_cmds:reextract",
        "Extract again the turns a model judged to hold nothing to remember (the turn ledger's "
        "nothing_to_remember), e.g. after changing the model (with the configured LLM endpoint; "
        "without one, the offline extractor)."),
    "recall": ("memory_cmds:recall",
        "What to put before the next model call: relevant memories and the stable block."),
    "reindex": ("memory_cmds:reindex",
        "Drop every vector and embed everything again with the configured embedder."),
    "scenes": ("layers_cmds:scenes",
        "The L2 scenes of a tenant."),
    "schedule": ("layers_cmds:schedule",
        "Run the backlog scheduler over the layers' owed work (L1, L2, L3, flush), and retention of"
        " the pipeline's log and receipts, until SIGTERM / SIGINT (workers and serve run one "
        "already; this is for a deployment without them)."),
    "search": ("memory_cmds:search",
        "Hybrid search (BM25 + vectors, fused by reciprocal rank) within one tenant."),
    "serve": ("service_cmds:serve",
        "Run the HTTP API, and the pipeline workers, until SIGINT / SIGTERM."),
    "stats": ("memory_cmds:stats",
        "Counts of turns, memories, sessions and pending embeddings."),
    "tenants": ("service_cmds:tenants",
        "Tenants of the service (each API key belongs to one)."),
    "worker": ("pipeline_cmds:worker",
        "Run a pipeline worker until SIGTERM / SIGINT (then stop gracefully)."),
}  # fmt: skip


class _Commands(MutableMapping[str, click.Command]):
    """A group's commands by name, each imported on first use."""

    def __init__(self, where: dict[str, tuple[str, str]]) -> None:
        self._where = where
        self._loaded: dict[str, click.Command] = {}

    def loaded(self, name: str) -> bool:
        return name in self._loaded

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded:
            module, _, attr = self._where[name][0].partition(":")
            command = getattr(importlib.import_module(f"stratamem.cli.{module}"), attr)
            self._loaded[name] = command
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        self._loaded.pop(name, None)
        self._where.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._where.keys() | self._loaded.keys()))

    def __len__(self) -> int:
        return len(self._where.keys() | self._loaded.keys())


class Shell(MappedGroup):
    """The root group: errors mapped once (`MappedGroup`), commands imported when used; the
    list of them (`--help`) is written from `COMMANDS`."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.commands = _Commands(dict(COMMANDS))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        commands = self.commands
        assert isinstance(commands, _Commands)
        names = list(commands)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            command = commands[name] if commands.loaded(name) else summary_of(name)
            rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def summary_of(name: str) -> click.Command:
    """A stand-in for the command `name` that has only the first sentence of its help."""
    return click.Command(name, help=COMMANDS[name][1])


@click.group(cls=Shell)
@click.version_option(package_name="stratamem")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="STRATAMEM_DATA_DIR",
    default=None,
    help="Directory of the embedded store [env STRATAMEM_DATA_DIR; default ./stratamem-data].",
)
@click.option(
    "--embedder",
    default=None,
    help="local | local:fp32 | local:int8 | onnx:DIR | st | hash[:DIM] | openai:MODEL | none"
    " [env STRATAMEM_EMBEDDER; default local].",
)
@click.pass_context
def cli(ctx: click.Context, data_dir: Path | None, embedder: str | None) -> None:
    """stratamem: layered long-term memory for AI agents."""
    from stratamem.cli import envcheck  # noqa: PLC0415 - every setting's model: not for --help

    for line in envcheck.warnings(os.environ):
        click.echo(line, err=True)
    ctx.ensure_object(dict)
    ctx.obj["data_dir"] = data_dir
    ctx.obj["embedder"] = embedder


#: numpy's BLAS threads for stratamem's processes unless the environment names its own: a
#: search multiplies one query by a tenant's vectors, which a second thread does not speed up
#: (memory bound at 100k 384-d vectors: 27.7 ms with one thread or two) and slows when the cores
#: are shared (9,090 vectors at load 3-10 on 2 cores: 0.6 ms with one thread, 2.9 with two; its
#: threads spin after each product beside the store's and the workers' own).
BLAS_THREADS = {"OPENBLAS_NUM_THREADS": "1"}


def default_blas_threads(environ: MutableMapping[str, str]) -> None:
    """Set `BLAS_THREADS` in `environ` where it names none; read by numpy when it loads."""
    for name, value in BLAS_THREADS.items():
        environ.setdefault(name, value)


def main() -> None:
    default_blas_threads(os.environ)  # before any command loads numpy
    cli()


if __name__ == "__main__":
    main()
