"""The cross-validation report (`cv.py`) as markdown tables (readable as text too)."""

from __future__ import annotations

from typing import Any

from stratamem.eval.metrics import CATEGORIES, CATEGORY_NAMES


def _cell(block: dict[str, Any], k: str) -> str:
    return f"{block['recall_at_k'][k]:.3f}" if block.get("questions", 1) else "–"


def _fold_table(cv: dict[str, Any], k: str) -> list[str]:
    cats = [f"{c} {CATEGORY_NAMES[c]}" for c in CATEGORIES]
    out = [
        f"| held out | chosen on the others | n | {' | '.join(cats)} | all R@{k} | MRR |",
        "|---|---|---|" + "---|" * len(cats) + "---|---|",
    ]
    for row in cv["folds"]:
        per = [_cell(row["per_category"][str(c)], k) for c in CATEGORIES]
        out.append(
            f"| {row['held_out']} | {row['chosen']} | {row['questions']} | {' | '.join(per)}"
            f" | **{row['recall_at_k'][k]:.3f}** | {row['mrr']:.3f} |"
        )
    mean, sd = cv["fold_mean"], cv["fold_sd"]
    per = [_mean_sd(mean["per_category"][str(c)], sd["per_category"][str(c)], k)
           for c in CATEGORIES]
    out.append(
        f"| **fold mean ± sd** | | | {' | '.join(per)} | **{_mean_sd(mean, sd, k)}**"
        f" | {mean['mrr']:.3f} ± {sd['mrr']:.3f} |"
    )
    for name in ("pooled", "all_data"):
        block = cv[name]
        label = "pooled held-out" if name == "pooled" else f"all data ({block['chosen']})"
        per = [_cell(block["per_category"][str(c)], k) for c in CATEGORIES]
        out.append(
            f"| {label} | | {block['questions']} | {' | '.join(per)}"
            f" | {block['recall_at_k'][k]:.3f} | {block['mrr']:.3f} |"
        )
    return out


def _mean_sd(mean: dict[str, Any], sd: dict[str, Any], k: str) -> str:
    if k not in mean["recall_at_k"]:
        return "–"
    return f"{mean['recall_at_k'][k]:.3f} ± {sd['recall_at_k'][k]:.3f}"


def _gaps(cv: dict[str, Any], k: str) -> str:
    """Each category's fold mean minus its all-data figure."""
    parts = []
    for c in CATEGORIES:
        mean = cv["fold_mean"]["per_category"][str(c)]["recall_at_k"]
        if k in mean:
            gap = mean[k] - cv["all_data"]["per_category"][str(c)]["recall_at_k"][k]
            parts.append(f"{c} {CATEGORY_NAMES[c]} {gap:+.3f}")
    gap = cv["fold_mean"]["recall_at_k"][k] - cv["all_data"]["recall_at_k"][k]
    return f"Fold mean − all data, R@{k}: {', '.join(parts)}; all {gap:+.3f}."


def _grid_table(cv: dict[str, Any], k: str) -> list[str]:
    folds = list(cv["grid"][0]["per_fold"])
    out = [
        f"| variant (R@{k}) | {' | '.join(folds)} | fold mean | pooled |",
        "|---|" + "---|" * (len(folds) + 2),
    ]
    for row in cv["grid"]:
        cells = " | ".join(f"{row['per_fold'][f]:.3f}" for f in folds)
        out.append(f"| {row['config']} | {cells} | {row['fold_mean']:.3f} | {row['pooled']:.3f} |")
    return out


def cv_markdown(report: dict[str, Any]) -> str:
    """The folds, their mean and spread, the all-data figures and the grid."""
    cv = report["cv"]
    k = str(cv["select_k"])
    out = [
        f"Leave-one-conversation-out over {len(cv['folds'])} conversations, {cv['variants']}"
        f" variant(s), chosen by R@{k} on the other conversations (mode {report['mode']},"
        f" embedder {report['embedder']}, base: {report['base_config']}):",
        "",
        *_fold_table(cv, k),
        "",
        _gaps(cv, k),
    ]
    if cv["variants"] > 1:
        out += ["", "Every variant on every conversation (in-sample):", "", *_grid_table(cv, k)]
    return "\n".join(out) + "\n"
