"""Read-back: the original exactly, or the slice around a query, within a token cap."""

from __future__ import annotations

from stratamem.offload.readback import read_slice
from stratamem.store.offload.records import Ref

LOG = "\n".join(f"{i:04d} INFO request handled in {i % 7} ms" for i in range(2000))
LOG = LOG.replace("1500 INFO request handled", "1500 ERROR database timeout on orders")


def test_small_results_come_back_whole() -> None:
    ref = Ref("ref-1", "s", "c", "cat", "exact\ncontent  with  spaces\n")
    back = read_slice(ref, 100)
    assert back.text == ref.content and back.complete and back.total_chars == len(ref.content)


def test_the_slice_around_a_query_is_within_the_cap() -> None:
    ref = Ref("ref-1", "s", "c", "cat", LOG)
    back = read_slice(ref, 50, query="database timeout")
    assert "1500 ERROR database timeout on orders" in back.text
    assert len(back.text) <= 200 and not back.complete
    assert LOG[back.start : back.end] == back.text
    assert back.text.startswith(("1", "0")) or back.start == 0


def test_without_a_match_or_query_the_head_comes_back() -> None:
    ref = Ref("ref-1", "s", "c", "cat", LOG)
    assert read_slice(ref, 25).text == LOG[:100]
    assert read_slice(ref, 25, query="nothing-like-this").start == 0
