"""The knobs of hybrid search, in one typed value that the search reads and the eval varies.

Every retrieval choice that was tuned (fusion weights and constant, the BM25 weights of a
turn's fields, feedback, the speaker preference, phrases) is a field here, so the evaluation
harness can measure any variant through the one search code path (`search.py`), and
`stratamem eval locomo --cv --vary NAME=V1,V2` can choose among variants on four conversations
and measure on the fifth (docs/eval-locomo.md has the figures behind each default).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from typing import Any

from stratamem.errors import InvalidInput
from stratamem.retrieval.feedback import FEEDBACK_HITS, FEEDBACK_MAX_ROWS, FEEDBACK_TERMS
from stratamem.retrieval.sessions import SESSION_DEPTH, SESSION_WEIGHT
from stratamem.retrieval.speakers import OTHER_SPEAKER_FACTOR
from stratamem.store.core.port import TurnFieldWeights

_FIELDS = TurnFieldWeights()
#: The lists a fused score sums, each with its weight (`RetrievalConfig.weight`).
RETRIEVERS = ("bm25", "vector", "feedback", "session")


@dataclass(frozen=True, slots=True)
class RetrievalConfig:
    """How a search ranks. The defaults are the product's; `off` values are noted per field."""

    candidates: int = 50
    """Candidates each retriever contributes before fusion."""
    rrf_k: int = 30
    """Reciprocal rank fusion constant: score = Σ weight / (rrf_k + rank)."""
    bm25_weight: float = 1.0
    vector_weight: float = 0.3
    feedback_weight: float = 0.3
    """Fusion weight of the pseudo-relevance feedback list (0: no feedback query at all)."""
    feedback_hits: int = FEEDBACK_HITS
    """First-pass hits the feedback words are taken from."""
    feedback_terms: int = FEEDBACK_TERMS
    """Feedback words searched (0: no feedback)."""
    feedback_max_share: float = 0.05
    """Feedback words in more than this share of a tenant's rows are left out."""
    feedback_max_rows: int = FEEDBACK_MAX_ROWS
    """Feedback words in this many of a tenant's rows or more are left out, whatever its size
    (`feedback.py`)."""
    speaker_factor: float = OTHER_SPEAKER_FACTOR
    """Score factor of turns by others when the query names one speaker (1: no preference)."""
    phrases: bool = True
    """Adjacent query words are also searched as phrases."""
    session_weight: float = SESSION_WEIGHT
    """Weight of the per-session list: the best hit of each session, sessions ranked by their
    hits' summed scores (`sessions.py`; 0: off)."""
    session_depth: int = SESSION_DEPTH
    """Hits whose sessions are summed."""
    text_weight: float = _FIELDS.text
    speaker_field_weight: float = _FIELDS.speaker
    context_weight: float = _FIELDS.context
    around_weight: float = _FIELDS.around
    dated_weight: float = _FIELDS.dated
    """BM25 weights of a turn's fields: its text, speaker, previous turn, the turn before that
    and the next one, and its date in words (`store/sqlite/turn_context.py`)."""

    def __post_init__(self) -> None:
        """Refuse, once, a configuration no search could run with."""
        if self.candidates < 1 or self.rrf_k < 1 or self.feedback_max_rows < 1:
            raise InvalidInput("candidates, rrf_k and feedback_max_rows must be at least 1")
        if self.feedback_hits < 0 or self.feedback_terms < 0 or self.session_depth < 0:
            raise InvalidInput(
                "feedback_hits, feedback_terms and session_depth must not be negative"
            )
        numbers = [getattr(self, f.name) for f in fields(self) if isinstance(f.default, float)]
        if any(value < 0 for value in numbers):
            raise InvalidInput("retrieval weights and factors must not be negative")

    @property
    def turn_fields(self) -> TurnFieldWeights:
        return TurnFieldWeights(
            text=self.text_weight,
            speaker=self.speaker_field_weight,
            context=self.context_weight,
            around=self.around_weight,
            dated=self.dated_weight,
        )

    def weight(self, retriever: str) -> float:
        """The fusion weight of a retriever's list ("bm25", "vector", "feedback", "session")."""
        weights = {
            "bm25": self.bm25_weight,
            "vector": self.vector_weight,
            "feedback": self.feedback_weight,
            "session": self.session_weight,
        }
        return weights.get(retriever, 1.0)

    @property
    def feedback(self) -> bool:
        return self.feedback_terms > 0 and self.feedback_hits > 0 and self.feedback_weight > 0

    def changed(self) -> list[str]:
        """The knobs whose values are not the defaults."""
        default = RetrievalConfig()
        return [n for n in KNOBS if getattr(self, n) != getattr(default, n)]

    def label(self, names: Iterable[str] | None = None) -> str:
        """`name=value` of the knobs `names` (None: `changed()`), or `defaults`."""
        shown = self.changed() if names is None else names
        return ", ".join(f"{n}={_show(getattr(self, n))}" for n in shown) or "defaults"


def _show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else f"{value:g}" if isinstance(
        value, float
    ) else str(value)


KNOBS = tuple(f.name for f in fields(RetrievalConfig))


def varying(configs: Iterable[RetrievalConfig]) -> list[str]:
    """The knobs whose values are not the same in all `configs`."""
    chosen = list(configs)
    return [n for n in KNOBS if len({getattr(c, n) for c in chosen}) > 1]


def parse_values(name: str, text: str) -> list[Any]:
    """The comma-separated values of knob `name`, each typed like the knob's default."""
    if name not in KNOBS:
        raise InvalidInput(f"unknown retrieval knob {name!r}: use one of {', '.join(KNOBS)}")
    kind = type(getattr(RetrievalConfig(), name))
    values = [part.strip() for part in text.split(",") if part.strip()]
    if not values:
        raise InvalidInput(f"knob {name!r} has no value")
    return [_typed(name, kind, value) for value in values]


def _typed(name: str, kind: type, value: str) -> Any:
    if kind is bool:
        if value.lower() in {"true", "1", "yes", "on"}:
            return True
        if value.lower() in {"false", "0", "no", "off"}:
            return False
        raise InvalidInput(f"knob {name!r} takes true or false, got {value!r}")
    try:
        return kind(value)
    except ValueError as exc:
        raise InvalidInput(f"knob {name!r} takes {kind.__name__} values, got {value!r}") from exc


def parse_assignment(text: str) -> tuple[str, list[Any]]:
    """`NAME=V1,V2,…` → (name, typed values)."""
    name, sep, values = text.partition("=")
    if not sep:
        raise InvalidInput(f"expected NAME=VALUE[,VALUE…], got {text!r}")
    return name.strip(), parse_values(name.strip(), values)


def grid(base: RetrievalConfig, axes: list[tuple[str, list[Any]]]) -> list[RetrievalConfig]:
    """Every combination of the axes' values over `base`, base values first when listed."""
    configs = [base]
    for name, values in axes:
        configs = [replace(config, **{name: value}) for config in configs for value in values]
    return list(dict.fromkeys(configs))
