"""A PNG chart of recall by k, per category and overall (matplotlib, the `eval` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stratamem.errors import Unavailable
from stratamem.eval.metrics import CATEGORIES, CATEGORY_NAMES


def write_chart(report: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib  # noqa: PLC0415 - optional extra, imported only when a chart is asked

        matplotlib.use("Agg")
        from matplotlib import pyplot  # noqa: PLC0415
    except ImportError as exc:
        raise Unavailable(
            "the chart needs matplotlib: pip install 'stratamem[eval]'"
        ) from exc
    ks = [int(k) for k in report["recall_at_k"]]
    figure, axes = pyplot.subplots(figsize=(7, 4.5))
    for category in CATEGORIES:
        block = report["per_category"][str(category)]
        if block["questions"]:
            values = [block["recall_at_k"][str(k)] for k in ks]
            axes.plot(ks, values, marker="o", label=f"{category} {CATEGORY_NAMES[category]}")
    axes.plot(ks, [report["recall_at_k"][str(k)] for k in ks], "k-o", lw=2.5, label="all")
    if "baseline" in report:
        base = report["baseline"]
        values = [base["recall_at_k"][str(k)] for k in ks]
        axes.plot(ks, values, "k--s", lw=1.5, label=f"all ({base['system']})")
    axes.set(xlabel="k", ylabel="recall of evidence turns", ylim=(0, 1), xticks=ks)
    axes.set_title(f"LoCoMo retrieval, mode {report['mode']}, embedder {report['embedder']}")
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    pyplot.close(figure)
