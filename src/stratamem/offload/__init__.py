"""Context offload: tool results out of the context window, the agent kept oriented.

`Offload` is the library face: `ingest` tool pairs, record `user_message`s as task boundaries,
`compact` a chat context for a token budget, `read_back` a ref. The stages (`run_l1`,
`run_l15`, `run_l2`) run on the pipeline (`stratamem.offload.executors.register_executors`) or
in-process (`InProcessRunner`).

The names below are imported when first used (PEP 562, as the package root does), so that
what only parses offload's records (the REST client) does not load its stages.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stratamem.offload.facade import Offload
    from stratamem.offload.readback import ReadBack
    from stratamem.offload.results import Compaction, DiagramsView, IngestResult, Level
    from stratamem.offload.runner import InProcessRunner, RunReport
    from stratamem.offload.schedule import Scheduler, Stage, StageTask
    from stratamem.offload.settings import OffloadSettings
    from stratamem.store.offload.records import Diagram, Entry, Ref, TaskStatus, ToolPair

#: Each public name and the module it comes from.
_HOME = {
    **dict.fromkeys(("Compaction", "Level"), "stratamem.offload.results"),
    "Offload": "stratamem.offload.facade",
    "ReadBack": "stratamem.offload.readback",
    **dict.fromkeys(("DiagramsView", "IngestResult"), "stratamem.offload.results"),
    **dict.fromkeys(("InProcessRunner", "RunReport"), "stratamem.offload.runner"),
    **dict.fromkeys(("Scheduler", "Stage", "StageTask"), "stratamem.offload.schedule"),
    "OffloadSettings": "stratamem.offload.settings",
    **dict.fromkeys(("Diagram", "Entry", "Ref", "TaskStatus", "ToolPair"),
                    "stratamem.store.offload.records"),
}  # fmt: skip

__all__ = [
    "Compaction",
    "Diagram",
    "DiagramsView",
    "Entry",
    "InProcessRunner",
    "IngestResult",
    "Level",
    "Offload",
    "OffloadSettings",
    "ReadBack",
    "Ref",
    "RunReport",
    "Scheduler",
    "Stage",
    "StageTask",
    "TaskStatus",
    "ToolPair",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'stratamem.offload' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
