"""LightGBM boosters compiled to machine code for inference (lleaves), LightGBM as the fallback.

A served bundle predicts with six boosters (duration quantiles, memory median and upper bound,
topology); LightGBM's ``Booster.predict`` spends most of a small batch in per-call set-up. lleaves
compiles a booster's trees (its model text) to native code through LLVM: the same predictions
(a test checks every booster to 1e-6) in a quarter of the time on one row and on a hundred.

Compiling takes seconds per booster (minutes for a whole bundle on a slow host), so it happens once
per model version, after the model is loaded and already answering with LightGBM
(``compile_boosters``, called by the engine's model slot in its background thread as the version's
warm-up), never per request; each booster switches to its compiled form as soon as that is ready.
The object code is cached in a directory keyed by the sha256 of the booster's model text, the
compile options and the host CPU, so a restart or a re-load of the same version loads it in
milliseconds; workers starting together take a lock per booster in that directory, so one compiles
it and the others wait for its file instead of compiling it again. ``models.lgbm.predict_booster``
asks :func:`compiled_for` for the compiled form of the booster it is given and uses LightGBM when
there is none: lleaves not installed, compilation disabled (``PREDICTOR_COMPILE_BOOSTERS=false``)
or failed (logged, once).

=============================  ==============================================  ==========================
variable                        meaning                                         default
=============================  ==============================================  ==========================
``PREDICTOR_COMPILE_BOOSTERS``  compile boosters at load (``false``: LightGBM)  ``true``
``PREDICTOR_COMPILE_CACHE``     directory of compiled object files               ``~/.cache/gpu-job-predictor/lleaves``
=============================  ==============================================  ==========================
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import logging
import os
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CompiledBooster", "compile_booster", "compile_boosters", "compiled_for", "compilation_enabled",
           "compiler_available", "cache_dir", "boosters_in", "forget"]

log = logging.getLogger(__name__)

#: lleaves compile options (part of the cache key). ``finline`` off compiles 5-10x faster for a few
#: percent slower prediction; the default (on) is what the issue's figures were measured with.
COMPILE_OPTIONS: dict[str, Any] = {"fblocksize": 34, "finline": True, "fcodemodel": "large"}

_compiled: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Booster -> CompiledBooster
_lock = threading.Lock()


def compilation_enabled() -> bool:
    """False when ``PREDICTOR_COMPILE_BOOSTERS`` says so (``0``, ``false``, ``no``, ``off``)."""
    return os.environ.get("PREDICTOR_COMPILE_BOOSTERS", "true").strip().lower() not in ("0", "false", "no", "off")


def compiler_available() -> bool:
    """Whether lleaves (and an llvmlite it works with) imports here."""
    try:
        import lleaves  # noqa: F401
    except Exception:  # ImportError, or an llvmlite without the API lleaves needs
        return False
    return True


def cache_dir() -> Path:
    """Where compiled object files are kept (``PREDICTOR_COMPILE_CACHE``)."""
    given = os.environ.get("PREDICTOR_COMPILE_CACHE")
    return Path(given).expanduser() if given else Path.home() / ".cache" / "gpu-job-predictor" / "lleaves"


#: The compiled entry point as lleaves builds it (data, results, first row, end row), taking raw
#: addresses: ``lleaves.Model.predict`` converts its input and wraps each pointer in ctypes objects on
#: every call, which on one row costs more than the trees.
_ENTRY = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32)


def _direct_entry(model: Any) -> Any:
    """The compiled function of an lleaves model (float64, one output per row) called with raw
    addresses; None where this lleaves keeps it otherwise (``Model.predict`` is used then)."""
    func = getattr(model, "_c_entry_func", None)
    if func is None or not getattr(model, "use_fp64", False) or getattr(model, "_n_classes", None) != 1:
        return None
    return _ENTRY(ctypes.cast(func, ctypes.c_void_p).value)


class CompiledBooster:
    """One booster as native code: ``predict(X)`` gives what ``Booster.predict(X)`` gives."""

    __slots__ = ("_model", "_entry", "n_features", "key", "__weakref__")

    def __init__(self, model: Any, n_features: int, key: str) -> None:
        self._model = model
        self._entry = _direct_entry(model)
        self.n_features = n_features
        self.key = key

    def predict(self, X: np.ndarray) -> np.ndarray:
        X = np.ascontiguousarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise ValueError(f"compiled booster expects (n, {self.n_features}) rows, got {X.shape}")
        if self._entry is None:
            return self._model.predict(X, n_jobs=1)
        n = X.shape[0]
        if n >= 2**31 - 1:  # the entry point counts rows in int32 (as lleaves refuses)
            raise ValueError(f"compiled booster predicts fewer than 2^31 - 1 rows, got {n}")
        out = np.zeros(n, dtype=np.float64)
        self._entry(X.ctypes.data, out.ctypes.data, 0, n)  # releases the GIL while the trees run
        return out


def _host_cpu() -> str:
    import llvmlite.binding as llvm

    return f"{llvm.get_host_cpu_name()}:{hashlib.sha256(llvm.get_host_cpu_features().flatten().encode()).hexdigest()[:12]}"


def _with_objective(text: str) -> str:
    """A booster trained with a custom objective (``models.lgbm.welsch_objective``) writes no
    ``objective=`` line, which lleaves requires; LightGBM predicts raw scores for it, which is what
    ``objective=regression`` (identity output) compiles to."""
    head, sep, rest = text.partition("\nfeature_names=")
    if not sep or "\nobjective=" in head:
        return text
    return f"{head}\nobjective=regression{sep}{rest}"


def compile_booster(booster: Any, *, cache: Path | None = None) -> CompiledBooster:
    """Compile ``booster`` (a ``lightgbm.Booster``), or load its compiled form from the cache.

    The model text written is ``booster.model_to_string()`` (the best iteration where there is one,
    as ``Booster.predict`` uses). Raises whatever lleaves raises; :func:`compile_boosters` logs it.
    """
    from importlib.metadata import version

    import lleaves

    text = _with_objective(booster.model_to_string())
    options = ",".join(f"{k}={v}" for k, v in sorted(COMPILE_OPTIONS.items()))
    key = hashlib.sha256(f"{text}\n{options}\n{_host_cpu()}\nlleaves-{version('lleaves')}".encode()).hexdigest()
    folder = cache if cache is not None else cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    _sweep_stale(folder)
    target = folder / f"{key}.o"
    with _cache_lock(folder / f".{key}.lock"), tempfile.TemporaryDirectory(dir=folder, prefix=".compile-") as tmp:
        model_file = Path(tmp) / "model.txt"
        model_file.write_text(text, encoding="utf-8")
        model = lleaves.Model(model_file=str(model_file))
        if target.exists():
            model.compile(cache=str(target), **COMPILE_OPTIONS)
        else:  # compile into a private file, then move it in place: a second worker never reads half a file
            partial = Path(tmp) / "object.o"
            model.compile(cache=str(partial), **COMPILE_OPTIONS)
            if partial.exists():
                os.replace(partial, target)
    return CompiledBooster(model, int(booster.num_feature()), key)


#: A private compile directory older than this was left by a process that died compiling.
STALE_COMPILE_S = 3600.0


def _sweep_stale(folder: Path) -> None:
    """Remove the private compile directories (``.compile-*``) that a killed process left (a worker
    stopped mid-compile, a loop interrupted while its background compile ran); never raises."""
    import shutil
    import time

    cutoff = time.time() - STALE_COMPILE_S
    for old in folder.glob(".compile-*"):
        try:
            if old.is_dir() and old.stat().st_mtime < cutoff:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            continue


@contextlib.contextmanager
def _cache_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing) while compiling the booster it names: a
    second process (another worker starting with the same model) waits, then finds the object file.
    Where ``fcntl`` is missing (Windows) nothing is locked: each process compiles, and the atomic
    rename keeps the cache whole either way."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    with open(path, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def boosters_in(obj: Any, *, depth: int = 4) -> list[Any]:
    """The ``lightgbm.Booster`` objects ``obj`` holds (attributes, lists, tuples, dicts; ``depth`` levels)."""
    import lightgbm as lgb

    found: list[Any] = []
    seen: set[int] = set()

    def walk(x: Any, level: int) -> None:
        if id(x) in seen or level > depth:
            return
        seen.add(id(x))
        if isinstance(x, lgb.Booster):
            found.append(x)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v, level + 1)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v, level + 1)
        elif hasattr(x, "__dict__") and type(x).__module__.split(".")[0] == "models":
            for v in vars(x).values():
                walk(v, level + 1)

    walk(obj, 0)
    return found


def compile_boosters(obj: Any, *, cache: Path | None = None,
                     progress: Callable[[dict[str, int]], None] | None = None) -> dict[str, int]:
    """Compile every booster ``obj`` (a model bundle) holds, once; later ``predict_booster`` calls use it
    (each booster from the moment its own compilation ends).

    Returns counts: ``compiled`` (now or earlier), ``failed``, ``skipped`` (compilation disabled or no
    compiler: LightGBM predicts). ``progress`` is called with the counts so far before the first
    booster and after each one. Never raises for a booster that does not compile: it stays on LightGBM.
    """
    boosters = boosters_in(obj)
    counts = {"boosters": len(boosters), "compiled": 0, "failed": 0, "skipped": 0}
    if not boosters:
        return counts
    if not compilation_enabled() or not compiler_available():
        counts["skipped"] = len(boosters)
        return counts
    if progress is not None:
        progress(dict(counts))
    for booster in boosters:
        counts[_compile_one(booster, cache)] += 1
        if progress is not None:
            progress(dict(counts))
    return counts


def _compile_one(booster: Any, cache: Path | None) -> str:
    """Compile one booster unless it is already: ``compiled`` or ``failed`` (logged; LightGBM stays)."""
    with _lock:
        if booster in _compiled:
            return "compiled"
    try:
        done = compile_booster(booster, cache=cache)
    except Exception:
        log.warning("compiling a booster failed; LightGBM predicts with it", exc_info=True)
        return "failed"
    with _lock:
        _compiled[booster] = done
    return "compiled"


def compiled_for(booster: Any) -> CompiledBooster | None:
    """The compiled form of ``booster`` (None: not compiled, LightGBM predicts)."""
    try:
        return _compiled.get(booster)
    except TypeError:  # not weak-referenceable: never compiled
        return None


def forget(booster: Any) -> None:
    """Drop the compiled form of ``booster`` (LightGBM predicts with it again)."""
    with _lock:
        _compiled.pop(booster, None)
