"""An agent loop with stratamem as its long-term memory, against a running service.

    make run                                   # in one shell: the service on 127.0.0.1:8420
    .venv/bin/python examples/agent_loop.py    # in another: a short scripted conversation
    .venv/bin/python examples/agent_loop.py --interactive

Before each model call the loop recalls the memories that matter; after each turn it captures
the user's message and the model's answer; when the conversation ends it flushes the session
through the memory layers. It uses `stratamem.client.Client`; with the embedded memory instead,
only the constructor changes (`stratamem.Memory(data_dir=...)`).

The "model" is a stand-in, so the example runs without an LLM: it shows what it was given and
answers without repeating it. (What a loop captures is the conversation: the user's message and
the model's answer, never the recalled blocks. An answer that merely restated recalled memories
would come back at the next recall as conversation, not as the memory it quoted.) Replace
`call_model` with your LLM client.

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

from stratamem import Recall
from stratamem.client import Client

SCRIPT = [
    "Hi! I'm Maya. I just adopted a dog called Biscuit.",
    "Please always give distances in kilometres.",
    "What's my dog called, and how should you give distances?",
]


def call_model(system: str, messages: list[dict[str, str]]) -> str:
    """Stand-in for an LLM call: prints what a model would read, answers with a placeholder."""
    print(f"  [the model reads] system: {system!r}")
    print(f"  [the model reads] user: {messages[-1]['content']!r}")
    return "(a model's answer would go here)"


def prompt_for(user_text: str, recall: Recall) -> tuple[str, list[dict[str, str]]]:
    """The stable block (profile, scenes) goes in the system prompt, where a provider can cache
    it; the per-turn block goes with the user's message. Both are tagged, so capturing the
    prompt text would not store recalled memories again."""
    system = "You are a helpful assistant.\n" + recall.stable
    turn = f"{recall.context}\n\n{user_text}" if recall.context else user_text
    return system.strip(), [{"role": "user", "content": turn}]


def run(memory: Client, session: str, user_turns: Iterable[str]) -> None:
    tenant = memory.tenant()  # the key's tenant
    for user_text in user_turns:
        # No session=: this loop sends the model no history, so the session's own turns
        # come from recall (with it, recall leaves out the last turns, as in the context).
        recall = memory.recall(tenant, user_text)
        system, messages = prompt_for(user_text, recall)
        answer = call_model(system, messages)
        print(f"user: {user_text}\nassistant: {answer}\n")
        turn_id = uuid.uuid4().hex  # each message's own id: a retried capture stores it once
        memory.capture(tenant, session, [
            {"role": "user", "content": user_text, "id": f"{turn_id}-u"},
            {"role": "assistant", "content": answer, "id": f"{turn_id}-a"},
        ])  # fmt: skip
    flushed = memory.flush(tenant, session)
    written = sum(r.counts.get("store", 0) for r in flushed.l1)
    print(f"session {session} ended: the layers wrote {written} memories")


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
    with Client(os.environ.get("STRATAMEM_URL"), _key()) as memory:
        run(memory, args.session, _stdin_turns() if args.interactive else SCRIPT)


if __name__ == "__main__":
    main()
