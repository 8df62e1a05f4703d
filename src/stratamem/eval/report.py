"""The evaluation report: one JSON object, rendered as a text table or a markdown page."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stratamem.eval.metrics import CATEGORIES, CATEGORY_NAMES

_RATIO_KEYS = ("mrr", "search_p50_ms", "search_p95_ms", "ingest_s")


def ratios(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    """stratamem ÷ baseline for recall@k and the headline numbers (None where undefined)."""
    result: dict[str, Any] = {
        "recall_at_k": {
            k: _ratio(v, theirs["recall_at_k"].get(k)) for k, v in ours["recall_at_k"].items()
        }
    }
    for key in _RATIO_KEYS:
        result[key] = _ratio(ours[key], theirs[key])
    return result


def _ratio(a: float, b: float | None) -> float | None:
    return None if not b else round(a / b, 3)


def _rows(summary: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    rows = [(f"{c} {CATEGORY_NAMES[c]}", summary["per_category"][str(c)]) for c in CATEGORIES]
    return [*rows, ("all", summary)]


def _cells(block: dict[str, Any], ks: Sequence[str]) -> list[str]:
    ctx = block["context_chars_at_k"].get("10", block["context_chars_at_k"].get(ks[-1], 0))
    recall = [f"{block['recall_at_k'][k]:.3f}" for k in ks]
    return [str(block["questions"]), *recall, f"{block['mrr']:.3f}", f"{ctx:.0f}"]


def _header(ks: Sequence[str]) -> list[str]:
    return ["category", "n", *(f"R@{k}" for k in ks), "MRR", "ctx chars@10"]


def _title(report: dict[str, Any], summary: dict[str, Any]) -> str:
    return (
        f"{summary['system']} (mode {report['mode']}, embedder {report['embedder']}):"
        f" {report['samples']} samples, {summary['turns']} turns,"
        f" {summary['questions']} questions"
    )


def _footer(summary: dict[str, Any]) -> str:
    return (
        f"search p50 {summary['search_p50_ms']:.1f} ms, p95 {summary['search_p95_ms']:.1f} ms"
        f" (of which query embedding p50 {summary['query_embed_p50_ms']:.1f} ms,"
        f" p95 {summary['query_embed_p95_ms']:.1f} ms; retrieval alone p50"
        f" {summary['retrieval_p50_ms']:.1f} ms, p95 {summary['retrieval_p95_ms']:.1f} ms);"
        f" ingest {summary['ingest_s']:.1f} s (capture {summary['capture_s']:.1f} s,"
        f" embed {summary['embed_s']:.1f} s, layers {summary.get('layers_s', 0.0):.1f} s)"
    )


def _qa_lines(summary: dict[str, Any]) -> list[str]:
    if "qa" not in summary:
        return []
    qa = summary["qa"]
    per = ", ".join(
        f"{c} {CATEGORY_NAMES[c]} {qa['per_category'][str(c)]['judge_score']:.3f}"
        for c in CATEGORIES
    )
    stem = "" if qa["f1_stemmed"] else " (not stemmed: nltk is not installed)"
    return [
        f"QA: judge score {qa['judge_score']:.3f} ({per}); F1 {qa['f1']:.3f}{stem};"
        f" tokens per question: answer {qa['answer_tokens_per_query']:.0f},"
        f" judge {qa['judge_tokens_per_query']:.0f}"
    ]


def _failure_lines(summary: dict[str, Any]) -> list[str]:
    """The layers' failures of the run: counts per stage and kind, and the flushes stopped."""
    if "failures" not in summary:
        return []
    failures = summary["failures"]
    stages = "; ".join(
        f"{stage} " + ", ".join(f"{n} {kind}" for kind, n in kinds.items())
        for stage, kinds in failures["by_stage"].items()
    )
    lines = [
        f"Layer failures: {stages or 'none'}; flushes stopped by an error:"
        f" {failures['stopped_flushes']}"
    ]
    return lines + [f"  stopped: {line}" for line in failures["stopped"]]


def _systems(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [report, *([report["baseline"]] if "baseline" in report else [])]


def _failure_table(summary: dict[str, Any]) -> list[str]:
    """The layers' failures as a markdown table (a row per stage, a column per kind) and
    the flushes stopped."""
    if "failures" not in summary:
        return []
    failures = summary["failures"]
    by_stage: dict[str, dict[str, int]] = failures["by_stage"]
    kinds = sorted({kind for counts in by_stage.values() for kind in counts})
    out = ["", "Failures of the memory layers (records kept; `stratamem failures list`):", ""]
    if by_stage:
        out += ["| stage | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
        out += [f"| {stage} | " + " | ".join(str(counts.get(k, 0)) for k in kinds) + " |"
                for stage, counts in by_stage.items()]  # fmt: skip
    else:
        out.append("none")
    out += ["", f"Flushes stopped by an error: {failures['stopped_flushes']}"]
    return out + [f"- {line}" for line in failures["stopped"]]


def text_table(report: dict[str, Any]) -> str:
    """Fixed-width tables, one per system, and the ratio line when a baseline ran."""
    ks = list(report["recall_at_k"])
    lines: list[str] = []
    for summary in _systems(report):
        rows = [_header(ks), *([name, *_cells(block, ks)] for name, block in _rows(summary))]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines.append(_title(report, summary))
        for row in rows:
            lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                   for i, (c, w) in enumerate(zip(row, widths, strict=True))))
        lines.extend([_footer(summary), *_qa_lines(summary), *_failure_lines(summary), ""])
    if "ratio" in report:
        lines.append(_ratio_line(report["ratio"]))
    return "\n".join(lines).rstrip() + "\n"


def _ratio_line(ratio: dict[str, Any]) -> str:
    recall = ", ".join(f"R@{k} {v}" for k, v in ratio["recall_at_k"].items())
    return (
        f"stratamem / baseline: {recall}, MRR {ratio['mrr']},"
        f" p50 {ratio['search_p50_ms']}, p95 {ratio['search_p95_ms']}, ingest {ratio['ingest_s']}"
    )


def markdown(report: dict[str, Any], chart_name: str | None = None) -> str:
    """A markdown page: what was run, a table per system, the skipped questions, the chart."""
    ks = list(report["recall_at_k"])
    out = ["# LoCoMo retrieval evaluation", "", f"Data: `{report['dataset']}`", ""]
    for summary in _systems(report):
        out += [f"## {_title(report, summary)}", ""]
        out.append("| " + " | ".join(_header(ks)) + " |")
        out.append("|" + "---|" * len(_header(ks)))
        out += ["| " + " | ".join([n, *_cells(b, ks)]) + " |" for n, b in _rows(summary)]
        out += ["", _footer(summary), *_qa_lines(summary), *_failure_table(summary), ""]
    if "ratio" in report:
        out += [_ratio_line(report["ratio"]), ""]
    skipped = ", ".join(f"{k}: {v}" for k, v in report["skipped"].items())
    out += [f"Questions left out: {skipped}.", ""]
    if chart_name:
        out += [f"![recall by k and category]({chart_name})", ""]
    return "\n".join(out)
