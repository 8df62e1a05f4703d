"""Two realistic conversations of our own, for the real-model tier and the replay-corpus tests.

Each holds what a memory must keep and may not invent: a name, a job, a family member's diet,
an allergy, a date, a preference about units and a change of plan, over three sessions, with
the assistant's turns between the user's (an assistant's words are not the user's facts).
Written for stratamem (no outside licence); `facts` names what an extraction should find.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from stratamem.domain import Role, Scope
from stratamem.layers.ledger import ledger_of as outcomes_of
from stratamem.stages.support import Cited, support_problem


@dataclass(frozen=True, slots=True)
class Conversation:
    name: str
    speaker: str
    sessions: dict[str, list[tuple[str, str]]]
    """Per session: its (role, text) turns in order."""
    starts: dict[str, str]
    """Per session: when its first turn was said (ISO, UTC); turns follow a minute apart."""
    facts: list[str] = field(default_factory=list)

    def messages(self, session: str) -> list[dict[str, Any]]:
        start = datetime.fromisoformat(self.starts[session]).replace(tzinfo=UTC).timestamp()
        return [
            {"role": role, "speaker": self.speaker if role == "user" else "assistant",
             "text": text, "timestamp": start + 60 * i, "id": f"{self.name}-{session}-{i}"}
            for i, (role, text) in enumerate(self.sessions[session])
        ]  # fmt: skip

    @property
    def turns(self) -> int:
        return sum(len(turns) for turns in self.sessions.values())

    @property
    def user_turns(self) -> int:
        return sum(role == "user" for turns in self.sessions.values() for role, _ in turns)


PRIYA = Conversation(
    name="priya",
    speaker="Priya",
    sessions={
        "s1": [
            ("user", "Hi! I'm Priya. I work night shifts as an ICU nurse at St Mary's."),
            ("assistant", "Nice to meet you, Priya. Night shifts must be tiring."),
            ("user", "They are. I sleep from 9 in the morning until about 4 in the afternoon."),
            ("assistant", "Noted. Shall I suggest meals that fit that schedule?"),
            ("user", "Yes please. My sister Maria is vegetarian and eats with us on Sundays."),
            ("assistant", "Then Sunday dinners should have a vegetarian main. Any allergies?"),
            ("user", "I'm allergic to shellfish, so no prawns or crab for me."),
            ("assistant", "Understood: nothing with shellfish in your meals."),
            ("user", "Our cat Biscuit has a vet appointment on 14 June, I can't miss it."),
            ("assistant", "I will remember the vet appointment on 14 June."),
        ],
        "s2": [
            ("user", "I'm training for the Lisbon half marathon in October."),
            ("assistant", "Great goal! How far do you run each week?"),
            ("user", "About 30 kilometres. Please always give distances in kilometres, not miles."),
            ("assistant", "Kilometres it is."),
            ("user", "Can you plan three runs for next week around my night shifts?"),
            ("assistant", "Sure: Tuesday 8 km easy, Thursday 6 km tempo, Saturday 14 km long."),
            ("user", "Thanks, that works."),
            ("assistant", "Good luck with the training!"),
        ],
        "s3": [
            ("user", "Change of plan: I'm running the Porto half marathon in November instead."),
            ("assistant", "Noted, Porto in November replaces Lisbon."),
            ("user", "Lisbon clashes with a double shift at the hospital."),
            ("assistant", "That makes sense. The extra month helps your training too."),
            ("user", "Maria will come to Porto with me to cheer."),
            ("assistant", "Lovely. Shall I look for vegetarian restaurants in Porto?"),
            ("user", "Yes, near the finish line if possible."),
        ],
    },
    starts={"s1": "2024-05-06T22:10:00", "s2": "2024-05-20T21:30:00",
            "s3": "2024-06-03T22:05:00"},
    facts=["Priya", "ICU nurse", "night shifts", "Maria is vegetarian", "allergic to shellfish",
           "vet on 14 June", "kilometres", "Porto half marathon in November"],
)

TOMAS = Conversation(
    name="tomas",
    speaker="Tomás",
    sessions={
        "s1": [
            ("user", "Hello, my name is Tomás and I'm a software engineer at a bank in Madrid."),
            ("assistant", "Hello Tomás! How can I help today?"),
            ("user", "My father has type 2 diabetes, so he follows a low-sugar diet."),
            ("assistant", "I see. Do you cook for him?"),
            ("user", "Every Friday. Last week I made lentil soup without any added sugar."),
            ("assistant", "That sounds like a good choice for him."),
            ("user", "My son Leo is allergic to peanuts, so we keep them out of the house."),
            ("assistant", "Understood, no peanuts in any recipe I suggest."),
        ],
        "s2": [
            ("user", "Please use Celsius for temperatures and grams in recipes."),
            ("assistant", "Of course: Celsius and grams from now on."),
            ("user", "I have a dentist appointment on 3 March at 10 in the morning."),
            ("assistant", "Noted: dentist on 3 March at 10:00."),
            ("user", "We are planning a family trip to Japan in August."),
            ("assistant", "Exciting! Tokyo, Kyoto, or both?"),
            ("user", "Both, two weeks in total."),
        ],
        "s3": [
            ("user", "We changed our plans: the trip in August is to South Korea, not Japan."),
            ("assistant", "Got it, South Korea in August instead of Japan."),
            ("user", "Flights to Seoul were much cheaper."),
            ("assistant", "Seoul has many peanut-free options, good for Leo."),
            ("user", "What is the weather in Seoul in August?"),
            ("assistant", "Hot and humid, around 30 degrees Celsius, with summer rain."),
            ("user", "Thanks, I'll pack light clothes."),
        ],
    },
    starts={"s1": "2024-02-12T19:00:00", "s2": "2024-02-26T20:15:00",
            "s3": "2024-04-08T18:40:00"},
    facts=["Tomás", "software engineer", "father low-sugar diet", "Leo allergic to peanuts",
           "dentist on 3 March", "Celsius and grams", "South Korea in August"],
)

CONVERSATIONS = (PRIYA, TOMAS)


async def ledger_of(memory: Any, tenant: str, conversation: Conversation) -> dict[str, int]:
    """Every turn's L1 outcome counted (over the conversation's sessions), after checking that
    each turn has one, that no user turn is left unrecorded, and that every accepted memory
    passes the support checks against the turns it cites."""
    scope, counts = Scope(tenant), {}
    by_id = {}
    for session in conversation.sessions:
        turns = await memory.turns(tenant, session, limit=1000)
        by_id.update({t.id: t for t in turns})
        for turn, entry in zip(turns, outcomes_of(memory.layers, scope, session, turns),
                               strict=True):  # fmt: skip
            assert entry.outcome.value != "unrecorded", (turn.text, entry)
            if turn.role is Role.USER:
                counts[entry.outcome.value] = counts.get(entry.outcome.value, 0) + 1
    names = frozenset(t.speaker for t in by_id.values() if t.speaker)
    for record in memory.store.list_memories(scope, limit=1000):
        if record.mode.value != "llm":
            continue
        cited = tuple(by_id[t] for t in record.source_turn_ids if t in by_id)
        following = tuple(_after(by_id, t) for t in cited)
        problem = support_problem(record.content, Cited(cited, following, names))
        assert problem is None, (record.content, problem)
    return counts


def _after(by_id: dict[str, Any], turn: Any) -> Any:
    later = [t for t in by_id.values() if t.session == turn.session and t.seq == turn.seq + 1]
    return later[0] if later else None
