"""An agent loop with stratamem as its long-term memory, against a running service.

    make run                                   # in one shell: the service on 127.0.0.1:8420
    .venv/bin/python examples/agent_loop.py    # in another: a short scripted conversation
    .venv/bin/python examples/agent_loop.py --interactive

Before each model call the loop asks `/v1/recall` for the memories that matter; after each turn
it captures the user message and the answer with `/v1/capture`; when the conversation ends it
flushes the session through the memory layers. The "model" here is a stand-in that shows what
it was given, so the example runs without an LLM: replace `call_model` with your client.

Settings: STRATAMEM_URL (default http://127.0.0.1:8420) and STRATAMEM_KEY (default: the key
`make run` wrote to ./stratamem-data/demo.key).
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx

SCRIPT = [
    "Hi! I'm Maya. I just adopted a dog called Biscuit.",
    "Please always give distances in kilometres.",
    "What's my dog called, and how should you give distances?",
]


class Memory:
    """The two calls an agent loop needs, and the one at the end of a session."""

    def __init__(self, url: str, key: str) -> None:
        self.http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )

    def recall(self, query: str, session: str) -> dict[str, Any]:
        return self._post("/v1/recall", {"query": query, "session": session})

    def capture(self, session: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """Idempotent: each message carries its own id, so a retried capture stores it once."""
        return self._post("/v1/capture", {"session": session, "messages": messages})

    def end_session(self, session: str) -> dict[str, Any]:
        return self._post(f"/v1/sessions/{session}/flush", {})

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.http.post(path, json=body)
        if response.is_error:
            error = response.json().get("error", {})
            sys.exit(f"{path}: {response.status_code} {error.get('type')}: {error.get('message')}")
        result: dict[str, Any] = response.json()
        return result


def call_model(system: str, messages: list[dict[str, str]]) -> str:
    """Stand-in for an LLM call: answers with what the memory put in front of it."""
    recalled = [line for line in messages[-1]["content"].splitlines() if line.startswith("- [")]
    if not recalled:
        return "(model) Noted."
    return "(model) From memory:\n" + "\n".join(f"  {line}" for line in recalled)


def prompt_for(user_text: str, recall: dict[str, Any]) -> tuple[str, list[dict[str, str]]]:
    """The stable block (profile, scenes) goes in the system prompt, where a provider can cache
    it; the per-turn block goes with the user's message. Both are tagged, so capturing the
    prompt text would not store recalled memories again."""
    system = "You are a helpful assistant.\n" + recall["stable"]
    turn = f"{recall['context']}\n\n{user_text}" if recall["context"] else user_text
    return system.strip(), [{"role": "user", "content": turn}]


def run(memory: Memory, session: str, user_turns: Iterable[str]) -> None:
    for user_text in user_turns:
        recall = memory.recall(user_text, session)
        system, messages = prompt_for(user_text, recall)
        answer = call_model(system, messages)
        print(f"user: {user_text}\n{answer}\n")
        turn_id = uuid.uuid4().hex
        memory.capture(session, [
            {"role": "user", "content": user_text, "id": f"{turn_id}-u"},
            {"role": "assistant", "content": answer, "id": f"{turn_id}-a"},
        ])  # fmt: skip
    queued = memory.end_session(session)["queued"]
    print(f"session {session} ended: flush task {queued['id']} queued")


def _key() -> str:
    key = os.environ.get("STRATAMEM_KEY")
    if key:
        return key
    demo = Path(os.environ.get("STRATAMEM_DATA_DIR", "stratamem-data")) / "demo.key"
    if demo.exists():
        return demo.read_text().strip()
    sys.exit("set STRATAMEM_KEY (or run `make run` once, which writes stratamem-data/demo.key)")


def _stdin_turns() -> Iterable[str]:
    print("type messages, an empty line ends the session")
    while (line := input("> ").strip()) != "":
        yield line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interactive", action="store_true", help="read turns from stdin")
    parser.add_argument("--session", default=f"chat-{uuid.uuid4().hex[:8]}")
    args = parser.parse_args()
    memory = Memory(os.environ.get("STRATAMEM_URL", "http://127.0.0.1:8420"), _key())
    run(memory, args.session, _stdin_turns() if args.interactive else SCRIPT)


if __name__ == "__main__":
    main()
