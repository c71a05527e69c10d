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

import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from features.errors import InputError
from predictor.store import Actor
from serving.settings import Settings, TokenSpec, load_tokens, token_digest

__all__ = ["Principal", "TokenRegistry", "WS_SUBPROTOCOL_PREFIX"]

WS_SUBPROTOCOL_PREFIX = "bearer."
log = logging.getLogger(__name__)


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
    """Maps bearer tokens (by digest) to principals.

    With ``watch`` (the tokens file), every lookup first compares the file's identity (inode, size,
    modification time: one ``stat``) with the one last read, and re-reads it when it changed, so a
    token rotated or removed in the file is refused at once by every worker. A file that no longer
    reads (malformed, removed) fails closed: its tokens are refused until it is fixed, the inline ones
    (``PREDICTOR_TOKENS``) still work, and the problem is logged.
    """

    def __init__(self, specs: Iterable[TokenSpec], *, watch: Path | None = None,
                 reload: Callable[[], list[TokenSpec]] | None = None,
                 fallback: Iterable[TokenSpec] = ()) -> None:
        self._by_digest = self._index(specs)
        self._watch, self._reload, self._fallback = watch, reload, tuple(fallback)
        self._seen = self._identity() if watch is not None else None
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> TokenRegistry:
        """The tokens of ``settings``, following its tokens file as it changes."""
        return cls(load_tokens(settings), watch=settings.tokens_file, reload=lambda: load_tokens(settings),
                   fallback=settings.tokens)

    @staticmethod
    def _index(specs: Iterable[TokenSpec]) -> dict[str, Principal]:
        return {s.digest: Principal(s.name, s.role, s.team) for s in specs}

    def _identity(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self._watch)  # type: ignore[arg-type]
        except OSError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def _current(self) -> dict[str, Principal]:
        if self._watch is None or self._reload is None:
            return self._by_digest
        seen = self._identity()
        if seen != self._seen:
            with self._lock:
                if seen != self._seen:
                    try:
                        self._by_digest = self._index(self._reload())
                    except InputError as exc:
                        log.error("tokens file changed and no longer reads; refusing its tokens: %s", exc)
                        self._by_digest = self._index(self._fallback)
                    self._seen = seen
        return self._by_digest

    def __len__(self) -> int:
        return len(self._current())

    def authenticate(self, token: str | None) -> Principal | None:
        """The principal holding ``token``, or None when it is missing or unknown."""
        if not token:
            return None
        return self._current().get(token_digest(token))

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
