"""Leave-one-conversation-out cross-validation of retrieval variants.

Given the results of every variant (a grid of `RetrievalConfig`s, or just one) on every
conversation, each fold holds one conversation out, chooses the variant with the best recall@k
on the other conversations' questions (ties go to the variant listed first), and measures that
variant on the held-out conversation. Nothing is tuned beyond choosing among the variants the
caller passed: with one variant, the folds are simply its per-conversation figures.

Reported: each fold (held-out conversation, the variant chosen without it, its figures there),
the mean and sample standard deviation over folds (per category over the folds that have
questions of it), the pooled held-out figures (every question measured by the variant chosen
without its conversation), the all-data figures (the variant chosen on all conversations,
measured on them: what tuning on everything would claim), and every variant's per-fold recall.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from stratamem.errors import InvalidInput
from stratamem.eval.metrics import CATEGORIES, QuestionResult, block_summary
from stratamem.retrieval.config import RetrievalConfig, varying

Results = Mapping[RetrievalConfig, Sequence[QuestionResult]]


def choose(results: Results, keep: set[str], k: int) -> RetrievalConfig:
    """The variant with the best mean recall@k over the questions of conversations `keep`."""
    best, best_score = None, -1.0
    for config, answered in results.items():
        scores = [r.recall_at(k) for r in answered if r.sample_id in keep]
        score = sum(scores) / len(scores) if scores else 0.0
        if score > best_score + 1e-12:
            best, best_score = config, score
    if best is None:
        raise InvalidInput("cross-validation needs at least one retrieval variant")
    return best


def cross_validate(results: Results, ks: Sequence[int], select_k: int) -> dict[str, Any]:
    """The cross-validation report of `results` (see the module's docstring). Variants are
    named by the knobs that differ among them."""
    names = varying(results)
    first = next(iter(results.values()), ())
    folds = list(dict.fromkeys(r.sample_id for r in first))
    if len(folds) < 2:
        raise InvalidInput("cross-validation needs at least two conversations")
    held_out: list[QuestionResult] = []
    fold_rows = []
    for fold in folds:
        chosen = choose(results, set(folds) - {fold}, select_k)
        mine = [r for r in results[chosen] if r.sample_id == fold]
        held_out.extend(mine)
        fold_rows.append({"held_out": fold, "chosen": chosen.label(names), **_summary(mine, ks)})
    everything = choose(results, set(folds), select_k)
    return {
        "select_k": select_k,
        "variants": len(results),
        "folds": fold_rows,
        "fold_mean": _over_folds(fold_rows, statistics.fmean),
        "fold_sd": _over_folds(fold_rows, _sd),
        "pooled": _summary(held_out, ks),
        "all_data": {"chosen": everything.label(names), **_summary(results[everything], ks)},
        "grid": [_variant_row(config, answered, folds, select_k, names)
                 for config, answered in results.items()],
    }


def _summary(results: Sequence[QuestionResult], ks: Sequence[int]) -> dict[str, Any]:
    summary = block_summary(results, ks)
    summary["per_category"] = {
        str(c): block_summary([r for r in results if r.category == c], ks) for c in CATEGORIES
    }
    return summary


def _sd(values: Sequence[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def _over_folds(rows: Sequence[dict[str, Any]], stat: Any) -> dict[str, Any]:
    """`stat` (mean or sd) of each figure over the folds; per category over the folds that
    have questions of that category (`folds` says how many)."""
    out = _stat_block(rows, stat)
    out["per_category"] = {}
    for c in CATEGORIES:
        blocks = [r["per_category"][str(c)] for r in rows if r["per_category"][str(c)]["questions"]]
        out["per_category"][str(c)] = {**_stat_block(blocks, stat), "folds": len(blocks)}
    return out


def _stat_block(blocks: Sequence[dict[str, Any]], stat: Any) -> dict[str, Any]:
    if not blocks:
        return {"recall_at_k": {}, "mrr": 0.0}
    ks = list(blocks[0]["recall_at_k"])
    return {
        "recall_at_k": {k: round(stat([b["recall_at_k"][k] for b in blocks]), 4) for k in ks},
        "mrr": round(stat([b["mrr"] for b in blocks]), 4),
    }


def _variant_row(
    config: RetrievalConfig,
    answered: Sequence[QuestionResult],
    folds: Sequence[str],
    k: int,
    names: Sequence[str],
) -> dict[str, Any]:
    """One variant measured on everything: per conversation, their mean, and pooled."""
    per_fold = {}
    for fold in folds:
        mine = [r.recall_at(k) for r in answered if r.sample_id == fold]
        per_fold[fold] = round(statistics.fmean(mine), 4) if mine else 0.0
    pooled = [r.recall_at(k) for r in answered]
    return {
        "config": config.label(names),
        "per_fold": per_fold,
        "fold_mean": round(statistics.fmean(per_fold.values()), 4),
        "pooled": round(statistics.fmean(pooled), 4) if pooled else 0.0,
    }
