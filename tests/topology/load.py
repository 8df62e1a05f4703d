"""A bounded load on the API processes, as clients behind a load balancer send it: each request
goes to the next API process in turn, and one that fails in transport (its process was killed)
is sent again, unchanged, to the next. Every call is idempotent (captures and tool results by
their ids), so a resent request never stores anything twice.

What was acknowledged is recorded in a `Ledger`, checked against the store afterwards."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

MARKERS = {"acme": "quokka", "globex": "narwhal", "initech": "axolotl"}
"""A word only the tenant's texts carry: another tenant's word in a hit is a cross-tenant hit."""
RESEND_DEADLINE_S = 60.0
FLUSH_REFUSALS = {(503, "busy"), (409, "conflict")}
"""A waited flush's documented refusals: a lock stayed held by other work past the lock wait,
or a lock it held lapsed (a pause past the lock TTL) and the store refused its fenced write."""
ROUNDS = 10


@dataclass
class Ledger:
    """What the API processes acknowledged (answered 2xx), per (tenant, session)."""

    turns: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    results: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    leaks: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    resent: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def acked_turns(self) -> int:
        with self._lock:
            return sum(len(t) for t in self.turns.values())

    def ack_turns(self, key: tuple[str, str], ids: list[str], texts: list[str]) -> None:
        with self._lock:
            self.turns.setdefault(key, {}).update(zip(ids, texts, strict=True))

    def ack_results(self, key: tuple[str, str], results: dict[str, str]) -> None:
        with self._lock:
            self.results.setdefault(key, {}).update(results)

    def note(self, kind: str, text: str) -> None:
        """`kind`: "leaks" or "refused"."""
        with self._lock:
            getattr(self, kind).append(text)

    def count_resend(self) -> None:
        with self._lock:
            self.resent += 1


class Balancer:
    """Round robin over the live API processes' URLs (read anew for every request)."""

    def __init__(self, urls: Callable[[], list[str]], ledger: Ledger) -> None:
        self.urls, self.ledger = urls, ledger
        self._turn = itertools.count()
        self._client = httpx.Client(timeout=30)

    def send(self, method: str, path: str, token: str, **kwargs: Any) -> httpx.Response:
        """The first answer any API process gives; resent to the next on a transport error."""
        headers = {"Authorization": f"Bearer {token}"}
        deadline = time.monotonic() + RESEND_DEADLINE_S
        while True:
            urls = self.urls()
            url = urls[next(self._turn) % len(urls)]
            try:
                return self._client.request(method, url + path, headers=headers, **kwargs)
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                self.ledger.count_resend()

    def close(self) -> None:
        self._client.close()


@dataclass
class SessionLoad:
    """One client's conversation: captures, recalls, tool results, flushes, in rounds."""

    tenant: str
    session: str
    token: str
    balancer: Balancer
    ledger: Ledger

    @property
    def marker(self) -> str:
        return MARKERS[self.tenant]

    def run(self) -> None:
        for n in range(ROUNDS):
            self.capture(n)
            if n % 3 == 1:
                self.tool_results(n)
            if n % 4 == 2:
                self.recall(n)
            if n == ROUNDS // 2:
                self.flush(wait=False)
        self.flush(wait=True)

    def capture(self, n: int) -> None:
        texts = [f"In round {n} of {self.session} I visited the {self.marker} museum.",
                 f"The {self.marker} museum of round {n} sounds lovely."]  # fmt: skip
        messages = [{"role": role, "content": text, "id": f"{self.session}-{n}-{role}"}
                    for role, text in zip(("user", "assistant"), texts, strict=True)]  # fmt: skip
        body = {"session": self.session, "messages": messages}
        answer = self._ok(self.balancer.send("POST", "/v1/capture", self.token, json=body))
        if answer is not None:
            self.ledger.ack_turns((self.tenant, self.session), answer["ids"], texts)

    def tool_results(self, n: int) -> None:
        base = f"/v1/offload/sessions/{self.session}"
        said = {"text": f"Build the {self.marker} site, step {n}", "id": f"u{n}"}
        self._ok(self.balancer.send("POST", f"{base}/user-messages", self.token, json=said))
        results = {f"c{n}-{i}": f"{self.marker} build log {self.session} {n}.{i}\n" * 40
                   for i in range(2)}  # fmt: skip
        pairs = [{"call_id": call, "tool": "shell", "params": {"cmd": "make"}, "result": text}
                 for call, text in results.items()]  # fmt: skip
        sent = self.balancer.send("POST", f"{base}/tool-results", self.token, json={"pairs": pairs})
        if self._ok(sent) is not None:
            self.ledger.ack_results((self.tenant, self.session), results)

    def recall(self, n: int) -> None:
        query = {"query": "visited museum build log " + " ".join(MARKERS.values()), "k": 20}
        answer = self._ok(self.balancer.send("POST", "/v1/recall", self.token, json=query))
        if answer is not None:
            self.check_own(answer["context"] + answer["stable"], f"recall {n}")
            for hit in answer["hits"]:
                self.check_own(hit["text"], f"recall {n} hit {hit['id']}")

    def flush(self, wait: bool) -> None:
        path = f"/v1/sessions/{self.session}/flush" + ("?wait=true" if wait else "")
        sent = self.balancer.send("POST", path, self.token)
        if not (wait and (sent.status_code, _kind(sent)) in FLUSH_REFUSALS):
            self._ok(sent)

    def check_own(self, text: str, where: str) -> None:
        foreign = [m for t, m in MARKERS.items() if t != self.tenant and m in text]
        if foreign:
            self.ledger.note("leaks", f"{self.tenant} {where}: {foreign} in {text[:200]!r}")

    def _ok(self, response: httpx.Response) -> dict[str, Any] | None:
        if response.is_success:
            body: dict[str, Any] = response.json()
            return body
        self.ledger.note("refused", f"{response.request.url.path}: {response.status_code}"
                         f" {response.text[:200]}")  # fmt: skip
        return None


def _kind(response: httpx.Response) -> str | None:
    if response.is_success:
        return None
    return str(response.json()["error"]["type"])
