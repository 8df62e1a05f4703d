"""Which LoCoMo questions are measured: categories 1-4 whose evidence resolves to real turns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from stratamem.datasets.locomo import Question, Sample
from stratamem.eval.ingest import normalise_dia_id
from stratamem.eval.metrics import CATEGORIES


@dataclass(frozen=True, slots=True)
class Probe:
    """A question to ask, with its evidence as normalised dialogue ids that exist."""

    sample_id: str
    question: Question
    evidence: frozenset[str]


@dataclass(slots=True)
class Selection:
    """The probes of a dataset, and what was left out and why."""

    probes: list[Probe] = field(default_factory=list)
    other_category: int = 0
    no_evidence: int = 0
    unresolved_questions: int = 0
    unresolved_ids: int = 0

    def skipped(self) -> dict[str, int]:
        return {
            "other_category": self.other_category,
            "no_evidence": self.no_evidence,
            "evidence_unresolved": self.unresolved_questions,
            "evidence_ids_unresolved": self.unresolved_ids,
        }


def dialogue_ids(sample: Sample) -> set[str]:
    return {normalise_dia_id(str(m["id"])) for ms in sample.sessions.values() for m in ms}


def select(samples: Sequence[Sample]) -> Selection:
    selection = Selection()
    for sample in samples:
        _select_sample(sample, dialogue_ids(sample), selection)
    return selection


def _select_sample(sample: Sample, known: set[str], selection: Selection) -> None:
    for question in sample.questions:
        if question.category not in CATEGORIES:
            selection.other_category += 1
            continue
        if not question.evidence:
            selection.no_evidence += 1
            continue
        found = frozenset(e for e in question.evidence if e in known)
        selection.unresolved_ids += len(set(question.evidence) - found)
        if not found:
            selection.unresolved_questions += 1
            continue
        selection.probes.append(Probe(sample.sample_id, question, found))
