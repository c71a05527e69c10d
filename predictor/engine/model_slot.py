"""The model in use, swapped atomically when the registry alias moves (hot reload).

A :class:`ModelSlot` holds one :class:`LoadedModel` (a registered model version, or the fallback).
A request reads ``slot.current`` once and uses that object to the end, so a swap in the middle of
a request never mixes two models and never fails it. A background thread asks the registry every
``poll_s`` seconds which version the alias points at; when it moved (or the slot is still on the
fallback), the new version is loaded in that thread and swapped in with one reference assignment.
If loading fails the current model stays (or the fallback, saying why).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import pandas as pd

__all__ = ["FramePredictor", "LoadedModel", "ModelSlot", "Warmup"]

log = logging.getLogger(__name__)


class FramePredictor(Protocol):
    """What the engine needs from a model bundle (and from the fallback)."""

    def predict_frame(self, jobs: pd.DataFrame, history: Any, now: float) -> pd.DataFrame: ...


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """A predictor and what it is: ``version`` is ``job-predictor/<n>`` or ``fallback``."""

    predictor: FramePredictor
    version: str
    fallback: bool
    fallback_reason: str | None
    loaded_at: float


@dataclass(frozen=True, slots=True)
class Warmup:
    """How far the warm-up of ``version`` is: ``counts`` as the warm-up last reported them (the
    engine's: boosters, compiled, failed, skipped), ``done`` once it returned."""

    version: str
    done: bool
    counts: dict[str, int]


#: When a new version's warm-up runs (``ModelSlot.check_once``).
WarmupWhen = Literal["now", "background", "skip"]
#: A warm-up: (version, its predictor, report) -> None; ``report(counts)`` says how far it is.
WarmFn = Callable[[str, "FramePredictor", Callable[[dict[str, int]], None]], None]


class ModelSlot:
    """Holds the model in use and keeps it in step with the registry alias.

    Parameters
    ----------
    uri : str
        What is served, e.g. ``models:/job-predictor@champion`` (shown in status).
    resolve : callable () -> str or None
        The version the alias points at now (None: no such model or alias). May raise.
    load : callable (version) -> FramePredictor
        Loads that version. May raise; may take seconds.
    fallback : FramePredictor
        Answers whenever no model can be used.
    poll_s : float
        Seconds between two registry checks of the background thread.
    on_change : callable (LoadedModel) -> None, optional
        Called after every swap (metrics, history re-seeding).
    warm : callable (version, predictor, report) -> None, optional
        Run after a version is swapped in, in the same thread (compiling its boosters); may take
        minutes, never raises into the slot (logged).
    """

    def __init__(self, *, uri: str, resolve: Callable[[], str | None], load: Callable[[str], FramePredictor],
                 fallback: FramePredictor, poll_s: float = 30.0,
                 on_change: Callable[[LoadedModel], None] | None = None,
                 clock: Callable[[], float] = time.time, warm: WarmFn | None = None) -> None:
        self.uri = uri
        self._resolve = resolve
        self._load = load
        self._fallback = fallback
        self.poll_s = poll_s
        self._listeners: list[Callable[[LoadedModel], None]] = [on_change] if on_change else []
        self._clock = clock
        self._warm = warm
        self.warmup: Warmup | None = None
        self._current = LoadedModel(fallback, "fallback", True, "model not loaded yet", clock())
        self._check_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.first_check_done = threading.Event()
        self.last_checked_at: float | None = None
        self.last_error: str | None = None

    @classmethod
    def fixed(cls, predictor: FramePredictor, version: str, *, fallback_reason: str | None = None) -> ModelSlot:
        """A slot that always holds ``predictor`` (no registry): a null predictor for the rules layer
        alone, or a table of given predictions. With ``fallback_reason`` it is reported as a fallback."""
        slot = cls(uri=version, resolve=lambda: version, load=lambda _v: predictor, fallback=predictor, poll_s=3600.0)
        if fallback_reason is None:
            slot.check_once()
        else:
            slot._swap(LoadedModel(predictor, version, True, fallback_reason, slot._clock()))
            slot.first_check_done.set()
        return slot

    @property
    def current(self) -> LoadedModel:
        """The model to use for one request (read it once per request)."""
        return self._current

    @property
    def fallback(self) -> FramePredictor:
        return self._fallback

    def subscribe(self, listener: Callable[[LoadedModel], None]) -> None:
        """Call ``listener`` after every swap (metrics, caches)."""
        self._listeners.append(listener)

    def check_once(self, *, warmup: WarmupWhen = "now") -> bool:
        """Ask the registry where the alias points; load and swap if it moved. Returns True on a swap.

        A new version's warm-up runs after the swap: ``now``, before this returns; ``background``, in
        a thread of its own (an admin's request, a loop that should not wait for it); ``skip``, not at
        all (a one-shot command, for which compiling costs more than it saves)."""
        if warmup not in ("now", "background", "skip"):
            raise ValueError(f"warmup: now, background or skip, not {warmup!r}")
        with self._check_lock:
            try:
                return self._check(warmup)
            finally:
                self.last_checked_at = self._clock()
                self.first_check_done.set()

    def _check(self, warmup: WarmupWhen) -> bool:
        try:
            version = self._resolve()
        except Exception as exc:  # registry unreachable: keep what we have
            self.last_error = f"cannot reach the model registry: {_one_line(exc)}"
            log.warning("model check: %s", self.last_error)
            self._fallback_reason(self.last_error)
            return False
        if version is None:
            self.last_error = f"no model registered at {self.uri}"
            self._fallback_reason(self.last_error)
            return False
        if not self._current.fallback and self._current.version == version:
            self.last_error = None
            return False
        try:
            predictor = self._load(version)
        except Exception as exc:
            self.last_error = f"loading {version} failed: {_one_line(exc)}"
            log.error("model check: %s", self.last_error)
            self._fallback_reason(self.last_error)
            return False
        self._swap(LoadedModel(predictor, version, False, None, self._clock()))
        self.last_error = None
        log.info("model %s loaded from %s", version, self.uri)
        if self._warm is not None and warmup != "skip":
            self.last_checked_at = self._clock()
            self.first_check_done.set()  # the version answers now: ready, not still loading
            self.warmup = Warmup(version, False, {})
            if warmup == "background":
                threading.Thread(target=self._run_warmup, args=(version, predictor), name="model-warmup",
                                 daemon=True).start()
            else:
                self._run_warmup(version, predictor)
        return True

    def _run_warmup(self, version: str, predictor: FramePredictor) -> None:
        last: dict[str, int] = {}

        def report(counts: dict[str, int]) -> None:
            last.clear()
            last.update(counts)
            self.warmup = Warmup(version, False, dict(counts))

        try:
            self._warm(version, predictor, report)
        except Exception:  # the version answers without it
            log.exception("warm-up of model %s failed", version)
        self.warmup = Warmup(version, True, dict(last))

    def _fallback_reason(self, reason: str) -> None:
        if self._current.fallback and self._current.fallback_reason != reason:
            self._swap(LoadedModel(self._fallback, "fallback", True, reason, self._clock()))

    def _swap(self, model: LoadedModel) -> None:
        self._current = model  # one reference assignment: atomic for readers
        for listener in self._listeners:
            listener(model)

    def start(self) -> None:
        """Start the background thread (first check at once, then every ``poll_s`` seconds)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="model-reload", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.check_once()
            except Exception:  # never let the reload thread die
                log.exception("model check failed unexpectedly")
            self._stop.wait(self.poll_s)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
