"""Prompt files (`stratamem/prompts/*.md`), each versioned in its front line.

The front line reads `<!-- prompt: NAME vN -->`; the rest is the system message. Prompts are
English; the memory layers' prompts tell the model to write memories in the language the user
writes in. Shared by the memory layers and context offload.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from stratamem.errors import ConfigError

_FRONT = re.compile(r"^<!--\s*prompt:\s*(?P<name>[a-z0-9_]+)\s+v(?P<version>\d+)\s*-->\s*$")


@dataclass(frozen=True, slots=True)
class Prompt:
    name: str
    version: int
    text: str

    @property
    def tag(self) -> str:
        """`name@vN`, recorded with what the prompt produced."""
        return f"{self.name}@v{self.version}"


@cache
def load_prompt(name: str) -> Prompt:
    """The prompt `name` shipped with stratamem; `ConfigError` if missing or unversioned."""
    path = resources.files("stratamem") / "prompts" / f"{name}.md"
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(f"prompt file {name}.md is missing from the package") from exc
    front, _, body = raw.partition("\n")
    match = _FRONT.match(front.strip())
    if match is None or match["name"] != name:
        raise ConfigError(f"prompt {name}.md must start with `<!-- prompt: {name} vN -->`")
    return Prompt(name=name, version=int(match["version"]), text=body.strip())
