"""The migrations both databases apply as they are (each rendered as the database spells it:
`store/migration.py`), by version; each database's list (`sqlite/migrations.py`,
`postgres/schema.py`) adds its own to them.
"""

from __future__ import annotations

from stratamem.store.core import schema as core
from stratamem.store.evidence import schema as evidence
from stratamem.store.failures.schema import PER_CONDITION
from stratamem.store.layers.ledger import LEDGER
from stratamem.store.lineage.schema import LINEAGE_MIGRATION, STALE_MIGRATION
from stratamem.store.migration import Migration
from stratamem.store.offload.schema import OFFLOAD, OFFLOAD_BACKLOG
from stratamem.store.tenants.schema import TENANTS

SHARED: tuple[Migration, ...] = (
    core.PENDING_BY_TENANT,  # 6
    core.FENCE_OWNERS,  # 8
    PER_CONDITION,  # 14
    evidence.AUTHENTICATED_RECEIPTS,  # 15
    LEDGER,  # 16
    evidence.EXECUTIONS,  # 17
    evidence.LOG_RETENTION,  # 18
    OFFLOAD,  # 20
    OFFLOAD_BACKLOG,  # 21
    TENANTS,  # 30
    LINEAGE_MIGRATION,  # 40
    STALE_MIGRATION,  # 41
)
