"""Question answering on LoCoMo: answer from the recalled context, judge with an LLM, token F1.

The judge prompt is the one published memory-system evaluations use (mem0's LoCoMo evaluation:
generous CORRECT/WRONG labelling against the gold answer, dates compared as periods); F1 follows
LoCoMo's own scorer (lower-cased, punctuation and articles dropped, Porter-stemmed when `nltk` is
installed; category 1 gold answers are comma lists scored part by part, category 3 gold answers
keep the part before ';').
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, field_validator

from stratamem.domain import Hit
from stratamem.eval.metrics import CATEGORIES
from stratamem.llm import LLM
from stratamem.retrieval.render import hit_line

ANSWER_STAGE = "eval-answer"
JUDGE_STAGE = "eval-judge"
#: Hits given to the answering model, and the characters they may take.
CONTEXT_HITS = 10
CONTEXT_CHARS = 6000
ANSWER_MAX_TOKENS = 100
JUDGE_MAX_TOKENS = 200

ANSWER_PROMPT = """You answer a question about a long conversation between {speakers}, using \
only the memories recalled from it below. Each memory shows the date it was said. When the \
question asks when something happened, answer with a specific date, month or year, worked out \
from the memory's date (said on 8 May 2023, "last week" means the week before 8 May 2023). \
Answer with a short phrase, no explanation.

Memories:
{context}

Question: {question}
Answer:"""

JUDGE_PROMPT = """Your task is to label an answer to a question as 'CORRECT' or 'WRONG'. You \
will be given the following data:
    (1) a question (posed by one user to another user),
    (2) a 'gold' (ground truth) answer,
    (3) a generated answer
which you will score as CORRECT/WRONG.

The point of the question is to ask about something one user should know about the other user \
based on their prior conversations.
The gold answer will usually be a concise and short answer that includes the referenced topic, \
for example:
Question: Do you remember what I got the last time I went to Hawaii?
Gold answer: A shell necklace
The generated answer might be much longer, but you should be generous with your grading - as \
long as it touches on the same topic as the gold answer, it should be counted as CORRECT.

For time related questions, the gold answer will be a specific date, month, year, etc. The \
generated answer might be much longer or use relative time references (like "last Tuesday" or \
"next month"), but you should be generous with your grading - as long as it refers to the same \
date or time period as the gold answer, it should be counted as CORRECT. Even if the format \
differs (e.g., "May 7th" vs "7 May"), consider it CORRECT if it's the same date.

Now it's time for the real question:
Question: {question}
Gold answer: {gold}
Generated answer: {answer}

Return the label CORRECT or WRONG in a JSON object with the key "label"."""


class Judgement(BaseModel):
    label: Literal["CORRECT", "WRONG"]

    @field_validator("label", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value


@dataclass(frozen=True, slots=True)
class QAResult:
    category: int
    answer: str
    correct: bool
    f1: float


async def answer_and_judge(
    llm: LLM, question: str, gold: str, category: int, hits: Sequence[Hit], speakers: str
) -> QAResult:
    """Answer `question` from `hits`, then have the judge label the answer."""
    context = "\n".join(hit_line(h) for h in hits[:CONTEXT_HITS])[:CONTEXT_CHARS]
    prompt = ANSWER_PROMPT.format(speakers=speakers, context=context, question=question)
    answer = await llm.complete_text(
        ANSWER_STAGE, [{"role": "user", "content": prompt}], max_tokens=ANSWER_MAX_TOKENS
    )
    answer = answer.strip()
    judge = JUDGE_PROMPT.format(question=question, gold=gold, answer=answer)
    verdict = await llm.complete_json(
        JUDGE_STAGE, [{"role": "user", "content": judge}], Judgement,
        max_tokens=JUDGE_MAX_TOKENS,
    )
    return QAResult(category, answer, verdict.label == "CORRECT", locomo_f1(answer, gold, category))


def qa_summary(results: Sequence[QAResult], usage: dict[str, dict[str, int]]) -> dict[str, Any]:
    """Judge score and F1, overall and per category, and LLM tokens per question."""
    summary = _scores(results)
    summary["f1_stemmed"] = STEMMED
    summary["per_category"] = {
        str(c): _scores([r for r in results if r.category == c]) for c in CATEGORIES
    }
    for stage, key in ((ANSWER_STAGE, "answer"), (JUDGE_STAGE, "judge")):
        counts = usage.get(stage, {})
        total = counts.get("prompt_tokens", 0) + counts.get("completion_tokens", 0)
        summary[f"{key}_tokens_per_query"] = round(total / len(results), 1) if results else 0.0
    return summary


def _scores(results: Sequence[QAResult]) -> dict[str, Any]:
    count = len(results)
    return {
        "questions": count,
        "judge_score": round(sum(r.correct for r in results) / count, 4) if count else 0.0,
        "f1": round(sum(r.f1 for r in results) / count, 4) if count else 0.0,
    }


# -- token F1 (LoCoMo's scorer) ------------------------------------------------------------------
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def _stemmer() -> Callable[[str], str]:
    try:
        from nltk.stem import PorterStemmer  # type: ignore[import-not-found]  # noqa: PLC0415
    except ImportError:
        return lambda word: word
    stem: Callable[[str], str] = PorterStemmer().stem
    return stem


_STEM = _stemmer()
STEMMED = _STEM("running") != "running"


def tokens(text: str) -> list[str]:
    text = _ARTICLES.sub(" ", text.lower().replace(",", " ").translate(_PUNCTUATION))
    return [_STEM(word) for word in text.split()]


def token_f1(prediction: str, gold: str) -> float:
    predicted, expected = tokens(prediction), tokens(gold)
    common = sum((Counter(predicted) & Counter(expected)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


def locomo_f1(prediction: str, gold: str, category: int) -> float:
    if category == 3:
        gold = gold.split(";", maxsplit=1)[0]
    if category != 1:
        return token_f1(prediction, gold)
    parts = [p for p in prediction.split(",") if p.strip()] or [prediction]
    golds = [g for g in gold.split(",") if g.strip()] or [gold]
    return sum(max(token_f1(p, g) for p in parts) for g in golds) / len(golds)
