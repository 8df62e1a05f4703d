"""Context offload: tool results out of the context window, the agent kept oriented.

`Offload` is the library face: `ingest` tool pairs, record `user_message`s as task boundaries,
`compact` a chat context for a token budget, `read_back` a ref. The stages (`run_l1`,
`run_l15`, `run_l2`) run on the pipeline (`stratamem.offload.executors.register_executors`) or
in-process (`InProcessRunner`).
"""

from __future__ import annotations

from stratamem.offload.compaction import Compaction, Level
from stratamem.offload.facade import DiagramsView, Offload
from stratamem.offload.ingest import IngestResult
from stratamem.offload.readback import ReadBack
from stratamem.offload.runner import InProcessRunner, RunReport
from stratamem.offload.schedule import Scheduler, Stage, StageTask
from stratamem.offload.settings import OffloadSettings
from stratamem.store.offload.records import Diagram, Entry, Ref, TaskStatus, ToolPair

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
