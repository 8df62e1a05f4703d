"""Retry-After parsing and backoff of the shared HTTP retry helper."""

from __future__ import annotations

import email.utils

import pytest

from stratamem.httpretry import RetryPolicy, parse_retry_after


@pytest.mark.parametrize(
    ("value", "expected"),
    [("7", 7.0), (" 1.5 ", 1.5), ("-3", 0.0), ("", None), (None, None), ("soon", None)],
)
def test_parse_retry_after_seconds(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, now_s=0.0) == expected


def test_parse_retry_after_http_date() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after(email.utils.formatdate(now + 30, usegmt=True), now) == 30.0
    assert parse_retry_after(email.utils.formatdate(now - 30, usegmt=True), now) == 0.0


def test_backoff_doubles_and_is_capped() -> None:
    policy = RetryPolicy(base_delay_s=1.0, max_delay_s=5.0)
    assert [policy.backoff_s(n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_policy_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
