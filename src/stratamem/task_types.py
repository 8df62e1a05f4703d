"""Every task type of the package, in one table: what the pipeline reads
(`stratamem.pipeline.task_type.registered`).

Each part declares its types in one module of its own; a new part's types are added here, so the
table is complete in every process by construction, whichever parts it imported or runs.
"""

from __future__ import annotations

from stratamem.layers import task_types as layers
from stratamem.offload import task_types as offload
from stratamem.pipeline.task_type import TaskTypes

TABLE = TaskTypes((*layers.TYPES, *offload.TYPES))
