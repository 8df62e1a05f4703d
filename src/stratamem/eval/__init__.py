"""The evaluation harness: LoCoMo retrieval, measured through the public capture and search."""

from stratamem.eval.locomo import LocomoRequest, evaluate_locomo, write_outputs
from stratamem.eval.runner import EvalOptions

__all__ = ["EvalOptions", "LocomoRequest", "evaluate_locomo", "write_outputs"]
