"""Bearer-token authentication and role checks.

Roles (``serving.settings.ROLES``):

* ``scheduler`` - a scheduler or its webhook: scores, submits and changes any job, posts job events,
  reads everything; cannot change the policy.
* ``member`` - a person on a team: sees and changes only its own team's jobs and reservations; may
  score any job; reads teams, policy and models.
* ``admin`` - everything, including ``PUT /v1/policy`` and model reloads.

Tokens are compared by their sha256 digest, so a token file may hold digests instead of secrets.
Browsers cannot set headers on a WebSocket, so the stream also accepts the token as a subprotocol:
the client offers ``["bearer", "bearer.<token>"]`` and the server selects ``bearer`` (a browser
accepts only a subprotocol it offered, and the token is never echoed back).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from predictor.store import Actor
from serving.settings import TokenSpec, token_digest

__all__ = ["Principal", "TokenRegistry", "WS_SUBPROTOCOL_PREFIX"]

WS_SUBPROTOCOL_PREFIX = "bearer."


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller."""

    name: str
    role: str
    team: str | None = None

    @property
    def is_member(self) -> bool:
        return self.role == "member"

    def can_see_team(self, team: str | None) -> bool:
        """Members see only their own team; other roles see every team."""
        return not self.is_member or team == self.team

    def as_actor(self) -> Actor:
        return Actor(name=self.name, role=self.role, team=self.team)


class TokenRegistry:
    """Maps bearer tokens (by digest) to principals."""

    def __init__(self, specs: Iterable[TokenSpec]) -> None:
        self._by_digest = {s.digest: Principal(s.name, s.role, s.team) for s in specs}

    def __len__(self) -> int:
        return len(self._by_digest)

    def authenticate(self, token: str | None) -> Principal | None:
        """The principal holding ``token``, or None when it is missing or unknown."""
        if not token:
            return None
        return self._by_digest.get(token_digest(token))

    def from_authorization(self, header: str | None) -> Principal | None:
        """Authenticate an ``Authorization: Bearer <token>`` header value."""
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer":
            return None
        return self.authenticate(token.strip())

    def from_subprotocols(self, header: str | None) -> Principal | None:
        """Authenticate a ``Sec-WebSocket-Protocol`` list holding ``bearer.<token>``."""
        for proto in (header or "").split(","):
            proto = proto.strip()
            if proto.startswith(WS_SUBPROTOCOL_PREFIX):
                return self.authenticate(proto[len(WS_SUBPROTOCOL_PREFIX):])
        return None
