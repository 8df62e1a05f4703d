"""The store contract: the system of record behind one interface.

Every read and write takes a `Scope` (the tenant) as its first argument, so no query can leave
it. Implementations: `stratamem.store.sqlite.SqliteStore` (embedded) and
`stratamem.store.postgres.PostgresStore`; `store.opening` opens the one a URL names. The
contract test suite in
`tests/store/test_contract.py` runs against each implementation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from stratamem.domain import Hit, Layer, MemoryRecord, MemoryType, Scope, Turn

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True, slots=True)
class Filters:
    """Filters shared by every search and listing.

    `since` / `until` bound the turn time (L0) or the activity time of a memory (L1, falling back
    to when it became valid). `as_of` asks which memories were valid at that time; without it only
    current memories (no `valid_to`) are searched.
    """

    types: tuple[MemoryType, ...] | None = None
    sessions: tuple[str, ...] | None = None
    since: float | None = None
    until: float | None = None
    as_of: float | None = None


NO_FILTERS = Filters()


@dataclass(frozen=True, slots=True)
class TurnFieldWeights:
    """BM25 weights of the fields a turn (L0) is full-text indexed by: its own text, its
    speaker, the previous turn of its session (`context`), the turn before that and the next one
    (`around`), and its date in words (`dated`, "8 May 2023"). A weight of 0 ignores a field."""

    text: float = 1.0
    speaker: float = 0.5
    context: float = 0.5
    around: float = 0.2
    dated: float = 1.0


@dataclass(frozen=True, slots=True)
class Candidate:
    """One ranked candidate from a single retriever (BM25 or vector)."""

    id: str
    score: float


@dataclass(frozen=True, slots=True)
class Fence:
    """A fencing token: the write is accepted only if `token` is the newest seen for `key`,
    and, when it equals the newest, only from the `owner` that token was recorded for.

    `owner` names the lock grant (`LockGrant.owner`, unique per acquisition): if the backend's
    counter went backwards and granted the same token twice, the store tells the two holders
    apart and only the first to write is accepted. None (no owner) passes an equal token only
    where no owner was recorded either (rows from before owners were recorded).
    """

    key: str
    token: int
    owner: str | None = None


@dataclass(frozen=True, slots=True)
class EmbeddingInfo:
    model: str
    dim: int


@dataclass(frozen=True, slots=True)
class PendingText:
    """A record whose embedding has not been computed yet."""

    layer: Layer
    tenant: str
    id: str
    text: str
    pieces: tuple[str, ...] = ()
    """The texts to embed, one vector each (`store/core/pieces.py`); empty means `(text,)`."""

    @property
    def texts(self) -> tuple[str, ...]:
        return self.pieces or (self.text,)


class Store(Protocol):
    """System of record for L0 turns and L1 memories, with BM25 and vector retrieval."""

    #: Whether a search's full-text and vector lists gain from running at the same time (each
    #: a query on its own connection, as on PostgreSQL); False where they share the process.
    searches_in_parallel: bool

    def close(self) -> None:
        """Release connections. The store cannot be used afterwards."""

    # -- embedding model ---------------------------------------------------------------------
    def embedding_info(self) -> EmbeddingInfo | None:
        """The embedding model and dimension the stored vectors were made with, if any."""

    def bind_embedding(self, info: EmbeddingInfo) -> None:
        """Record `info` if none is recorded; raise `EmbeddingMismatch` if another one is."""

    def reset_embeddings(self, info: EmbeddingInfo | None) -> int:
        """Drop every stored vector and record `info` instead; return how many were dropped."""

    def pending_embeddings(
        self, layer: Layer, limit: int, tenant: str | None = None
    ) -> list[PendingText]:
        """Records of `layer` (any tenant, or only `tenant`'s) that still need a vector, shared
        fairly: each tenant with such records gets an equal part of `limit` (what one leaves
        goes to the others), its oldest first; so one tenant's big import cannot hold back
        another's few."""

    def count_pending_embeddings(self, scope: Scope) -> int:
        """How many of the tenant's records (turns and memories) still need a vector."""

    def store_embeddings(
        self,
        layer: Layer,
        items: Sequence[tuple[str, str]],
        vectors: np.ndarray,
        counts: Sequence[int] | None = None,
    ) -> None:
        """Store the vectors of each `(tenant, id)` item: `counts[i]` consecutive rows of
        `vectors` for item i (one row each without `counts`). Rows that vanished meanwhile are
        skipped; a record scores as its best vector."""

    # -- L0 turns ----------------------------------------------------------------------------
    def add_turns(self, scope: Scope, turns: Sequence[Turn]) -> list[Turn]:
        """Insert turns idempotently by id, in one transaction; return those newly stored.

        Per-session sequence numbers are assigned here, in arrival order.
        """

    def get_turns(self, scope: Scope, ids: Sequence[str]) -> list[Turn]:
        """The named turns that exist in the tenant, in the order asked."""

    def list_turns(
        self, scope: Scope, session: str, after_seq: int = 0, limit: int = 100
    ) -> list[Turn]:
        """Turns of a session with `seq > after_seq`, in order."""

    def list_sessions(self, scope: Scope) -> list[str]:
        """Sessions of the tenant that have turns."""

    def sessions_with_data(self, scope: Scope) -> list[str]:
        """Every session of the tenant with a row anywhere (turns, layer, offload or
        bookkeeping records), by name."""

    # -- L1 memories -------------------------------------------------------------------------
    def upsert_memories(
        self,
        scope: Scope,
        memories: Sequence[MemoryRecord],
        fence: Fence | None = None,
        expect_current: Sequence[str] = (),
    ) -> None:
        """Insert or replace memories by id in one transaction.

        With a `fence`, the whole write is refused with `StaleFencingToken` when a newer token
        has been used for its key, or the same token by another owner; otherwise the token and
        its owner are recorded as the newest. With
        `expect_current`, it is refused with `MemoryChanged` unless each of those memories is
        still current (neither superseded nor forgotten) when the write begins: a compare-and-set
        for an edit based on what was read.
        """

    def get_memory(self, scope: Scope, memory_id: str) -> MemoryRecord:
        """The memory, or `NotFound`."""

    def list_memories(
        self, scope: Scope, filters: Filters = NO_FILTERS, limit: int = 100, offset: int = 0
    ) -> list[MemoryRecord]:
        """Memories matching `filters`, newest first."""

    # -- retrieval ---------------------------------------------------------------------------
    def search_text(
        self,
        scope: Scope,
        layer: Layer,
        query: str,
        filters: Filters,
        limit: int,
        max_share: float | None = None,
        phrases: bool = True,
        fields: TurnFieldWeights | None = None,
        max_rows: int | None = None,
    ) -> list[Candidate]:
        """BM25 candidates, best first (higher score is better).

        Turns are ranked by their fields weighted by `fields` (the defaults when None); a
        memory has one field.

        With `phrases`, pairs of content words adjacent in `query` are searched as phrases too
        (`fts_query.phrase_terms`); a query that is a bag of words, not a text, turns it off.

        With `max_share`, query words found in more than that share of the tenant's rows are
        left out (for machine-made queries, such as feedback words, that may hold common ones);
        with `max_rows`, those found in that many rows or more, whatever the tenant's size
        (bounds the rows such a query reads; both together: the smaller bound).
        """

    def search_vector(
        self, scope: Scope, layer: Layer, vector: np.ndarray, filters: Filters, limit: int
    ) -> list[Candidate]:
        """Nearest records by cosine similarity, best first."""

    def load_hits(self, scope: Scope, layer: Layer, ids: Sequence[str]) -> dict[str, Hit]:
        """Display records for the given ids (score 0; the caller fills it in)."""

    # -- fencing and statistics --------------------------------------------------------------
    def newest_fence(self, key: str) -> int:
        """The newest fencing token recorded for `key` (0 when none)."""

    def erase_session(self, scope: Scope, session: str) -> dict[str, int]:
        """Delete a session's turns, every memory drawn from them (even in part) or stated in
        it, and the session's layer and offload records, in one transaction. Returns counts of
        deleted rows: `turns`, `memories`, `other`. Scenes and the profile are not rewritten."""

    def erase_tenant(self, scope: Scope) -> dict[str, int]:
        """Delete every record of the tenant (turns, memories, layers, offload) in one
        transaction; returns counts like `erase_session`."""

    def stats(self, scope: Scope | None = None) -> dict[str, Any]:
        """Counts of records, pending embeddings and the embedding model."""
