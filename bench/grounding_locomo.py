"""How often the support checks (`stratamem.stages.support`) refuse faithful memories, on LoCoMo.

Two sets of faithful items from the LoCoMo dev conversations (read from their place on the
machine, never copied): the scripted cooperative extractor's (`stratamem.testing.layers`, one
memory per user turn, through the prompt the stage really builds) and LoCoMo's own observations
(facts a capable model wrote about each session, each citing its dialogue id: paraphrases). The
unfaithful set: every observation pinned on another turn of its conversation, picked at random
(seeded). The threshold `min_support` is chosen leave-one-conversation-out: for each
conversation, the highest threshold that refuses ≤ 1 % of the other conversations' faithful
items, then measured on the held-out one.

    PYTHONPATH=src .venv/bin/python bench/grounding_locomo.py [--data PATH] [--show N]
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stratamem.datasets.locomo import Sample, load
from stratamem.domain import Role, Turn
from stratamem.eval.ingest import normalise_dia_id
from stratamem.layers import l1_extract
from stratamem.layers.settings import LayerSettings
from stratamem.llm.prompts import load_prompt
from stratamem.stages.support import MIN_SUPPORT, Cited, support_problem, support_share
from stratamem.testing.layers import l1_reply
from stratamem.testing.replies import RecordedRequest

DATA = Path("/work/shared/data/locomo/locomo_dev.json")
THRESHOLDS = [round(0.01 * i, 2) for i in range(0, 60)]
MAX_REFUSED = 0.01


@dataclass(frozen=True, slots=True)
class Item:
    conversation: str
    source: str
    content: str
    cited: tuple[Turn, ...]
    names: frozenset[str] = frozenset()

    def share(self) -> float:
        return support_share(self.content, self.cited, self.names)[0]


def turns_of(sample: Sample) -> dict[str, Turn]:
    turns: dict[str, Turn] = {}
    for session, messages in sample.sessions.items():
        for seq, m in enumerate(messages):
            dia = normalise_dia_id(str(m["id"]))
            turns[dia] = Turn(dia, sample.sample_id, session, Role.USER, str(m["text"]),
                              float(m["timestamp"]), m["speaker"], seq=seq)  # fmt: skip
    return turns


def cooperative(sample: Sample, turns: dict[str, Turn]) -> list[Item]:
    """The scripted extractor's memories, one request per session as the stage builds it."""
    items: list[Item] = []
    settings = LayerSettings()
    for session in sample.sessions:
        batch = [t for t in turns.values() if t.session == session]
        messages, aliases = l1_extract.extraction_messages(load_prompt("l1_extract"), batch, [],
                                                           settings)  # fmt: skip
        request = RecordedRequest("POST", "/v1/chat/completions", {}, {"messages": messages}, "L1")
        reply: Any = json.loads(l1_reply(request).content or "{}")
        by_id = {t.id: t for t in batch}
        for memory in reply["memories"]:
            cited = tuple(by_id[aliases.real[a]] for a in memory["source_turn_ids"])
            items.append(Item(sample.sample_id, "cooperative", memory["content"], cited,
                              frozenset(sample.speakers)))  # fmt: skip
    return items


def observations(sample: Sample, raw: dict[str, Any], turns: dict[str, Turn]) -> list[Item]:
    items: list[Item] = []
    for per_speaker in raw.get("observation", {}).values():
        for facts in per_speaker.values():
            for fact, dia in facts:
                ids = dia if isinstance(dia, list) else [dia]
                cited = tuple(turns[d] for d in _ids(ids) if d in turns)
                if cited:
                    items.append(Item(sample.sample_id, "observation", fact, cited,
                                      frozenset(sample.speakers)))  # fmt: skip
    return items


def _ids(raw: Sequence[str]) -> list[str]:
    found = []
    for text in raw:
        try:
            found.append(normalise_dia_id(text))
        except ValueError:
            continue
    return found


def misplaced(items: Sequence[Item], turns: dict[str, Turn], rng: random.Random) -> list[Item]:
    pool = list(turns.values())
    out = []
    for item in items:
        other = rng.choice(pool)
        while other in item.cited:
            other = rng.choice(pool)
        out.append(Item(item.conversation, "misplaced", item.content, (other,), item.names))
    return out


def refused(items: Sequence[Item], threshold: float) -> list[tuple[Item, str]]:
    found = []
    for item in items:
        cited = Cited(item.cited, names=item.names)
        problem = support_problem(item.content, cited, min_support=threshold)
        if problem is not None:
            found.append((item, problem))
    return found


def share_refused(shares: dict[int, float], items: Sequence[Item], threshold: float) -> float:
    if not items:
        return 0.0
    return sum(shares[id(i)] < threshold for i in items) / len(items)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--show", type=int, default=50, help="refused items listed per set")
    args = parser.parse_args()

    raw_samples = json.loads(args.data.read_text(encoding="utf-8"))
    samples = load(args.data)
    rng = random.Random(29)
    faithful: list[Item] = []
    unfaithful: list[Item] = []
    for sample, raw in zip(samples, raw_samples, strict=True):
        turns = turns_of(sample)
        obs = observations(sample, raw, turns)
        faithful += cooperative(sample, turns) + obs
        unfaithful += misplaced(obs, turns, rng)
    shares = {id(i): i.share() for i in [*faithful, *unfaithful]}
    conversations = sorted({i.conversation for i in faithful})
    print(f"faithful items: {len(faithful)} (cooperative"
          f" {sum(i.source == 'cooperative' for i in faithful)}, observations"
          f" {sum(i.source == 'observation' for i in faithful)}); misplaced: {len(unfaithful)}")
    for source in ("cooperative", "observation"):
        values = [shares[id(i)] for i in faithful if i.source == source]
        print(f"  {source}: share 0: {sum(v == 0 for v in values)}, < 0.2:"
              f" {sum(v < 0.2 for v in values)}, < 0.34: {sum(v < 0.34 for v in values)}")
    values = [shares[id(i)] for i in unfaithful]
    print(f"  misplaced: share 0: {sum(v == 0 for v in values)}, < 0.2:"
          f" {sum(v < 0.2 for v in values)}, < 0.34: {sum(v < 0.34 for v in values)}")
    print("\nleave-one-conversation-out (threshold chosen on the other conversations):")
    for held in conversations:
        train = [i for i in faithful if i.conversation != held and i.source == "observation"]
        ok = [t for t in THRESHOLDS if share_refused(shares, train, t) <= MAX_REFUSED]
        chosen = max(ok) if ok else 0.0
        test = [i for i in faithful if i.conversation == held]
        bad = [i for i in unfaithful if i.conversation == held]
        print(f"  {held}: threshold {chosen:.2f}  faithful refused"
              f" {share_refused(shares, test, chosen):.2%} of {len(test)}  misplaced refused"
              f" {share_refused(shares, bad, chosen):.1%} of {len(bad)}")
    print(f"\nwith the shipped MIN_SUPPORT = {MIN_SUPPORT} (every check, not only the share):")
    for source in ("cooperative", "observation"):
        items = [i for i in faithful if i.source == source]
        found = refused(items, MIN_SUPPORT)
        print(f"  {source}: {len(found)} of {len(items)} refused ({len(found) / len(items):.2%})")
        for item, problem in found[: args.show]:
            cited = " | ".join(f"{t.id} {t.speaker}: {t.text[:100]}" for t in item.cited)
            print(f"    - {item.content!r}\n      cites {cited}\n      {problem}")
    found = refused(unfaithful, MIN_SUPPORT)
    print(f"  misplaced: {len(found)} of {len(unfaithful)} refused"
          f" ({len(found) / len(unfaithful):.1%})")


if __name__ == "__main__":
    main()
