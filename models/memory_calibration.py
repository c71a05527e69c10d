"""The fitted constants of the analytic memory estimate, and the file they ship in.

``models/calibration/memory.json`` holds the constants ``models.memory_fitting`` fitted on measured
peaks of public projects (their sources and licenses in the file's ``sources`` and in
``models/calibration/SOURCES.md``), so that every install, and a model trained on a cluster log that
records no memory peaks, starts from measured data rather than from our own formula.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from pathlib import Path

from features.errors import InputError

__all__ = ["MemoryCalibration", "CALIBRATION_PATH", "FITTED", "shipped_calibration", "load_calibration",
           "save_calibration"]

CALIBRATION_PATH = Path(__file__).resolve().parent / "calibration" / "memory.json"
#: The constants fitted on measured peaks (the rest of ``MemoryCalibration`` is provenance).
FITTED = ("activation_bytes", "checkpoint_bytes", "logit_bytes", "allocator", "logit_reserve", "context_mib",
          "image_sample_mib")


@dataclass(frozen=True)
class MemoryCalibration:
    """Constants of ``models.memory_analytic`` (defaults: the physical priors before any fit).

    Attributes
    ----------
    activation_bytes : float
        Bytes kept per token, hidden unit and layer without recomputation (Megatron's ideal: 34).
    checkpoint_bytes : float
        The same with full checkpointing (each layer's 16-bit input: 2).
    logit_bytes : float
        Bytes per logit (16-bit logits, fp32 upcast, fp32 gradient: ~10).
    allocator : float
        Reserved over allocated memory of the caching allocator.
    logit_reserve : float
        What the caching allocator holds beyond the logits themselves, as a share of them: the
        logits and their fp32 copies are the largest transient blocks of a step, and the blocks
        they leave behind fragment (a peak measured as allocated memory does not see it).
    context_mib : float
        CUDA context, library workspaces and the allocator's first blocks (MiB).
    image_sample_mib : float
        Activations per sample of a model without a sequence length (16-bit; MiB).
    upper_margins : tuple of float
        Log margins of the upper bound (``models.memory_analytic.upper_bound``): over the point
        estimate of a states-dominated job (weights, gradients, optimizer: fixed by the descriptors),
        over that of any other job (activations and logits, whose cost differs between
        implementations), and over the upper scenario where a descriptor is unknown (at least 0: the
        bound covers every plausible value). Each is chosen on held-out residuals
        (``models.memory_fitting``) to leave at most ``upper_miss_rate`` of its rows above the bound.
    upper_miss_rate : float
        That share.
    upper_states_share : float
        Share of model states in the estimate above which a job is states-dominated (chosen with the
        margins, among ``models.memory_fitting.STATES_SHARE_CANDIDATES``).
    sources : list of dict
        Provenance: per source, repository, license, rows used.
    validation : dict
        Leave-one-source-out metrics at fitting time.
    """

    activation_bytes: float = 34.0
    checkpoint_bytes: float = 2.0
    logit_bytes: float = 10.0
    allocator: float = 1.1
    logit_reserve: float = 0.5
    context_mib: float = 750.0
    image_sample_mib: float = 40.0
    upper_margins: tuple[float, float, float] = (0.4, 0.4, 0.0)
    upper_miss_rate: float = 0.10
    upper_states_share: float = 0.5
    sources: list[dict] = field(default_factory=list)
    validation: dict = field(default_factory=dict)

    def with_fitted(self, values: dict[str, float]) -> MemoryCalibration:
        """A copy with some fitted constants replaced."""
        return MemoryCalibration(**{**asdict(self), **values})


def load_calibration(path: Path) -> MemoryCalibration:
    """Read a calibration file; ``InputError`` naming the file and the problem when it is not one."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read memory calibration {path}: {exc}") from exc
    names = {f.name for f in fields(MemoryCalibration)}
    unknown = sorted(set(data) - names)
    if not isinstance(data, dict) or unknown:
        raise InputError(f"{path}: not a memory calibration (unknown keys: {', '.join(unknown) or 'not an object'})")
    if "upper_margins" in data:
        data["upper_margins"] = tuple(float(v) for v in data["upper_margins"])
    return MemoryCalibration(**data)


def save_calibration(calibration: MemoryCalibration, path: Path) -> None:
    """Write a calibration file atomically (a temporary file renamed over the target)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(asdict(calibration), out, indent=2, sort_keys=False)
            out.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@lru_cache(maxsize=1)
def shipped_calibration() -> MemoryCalibration:
    """The calibration shipped with the package (the physical priors if the file is missing)."""
    if not CALIBRATION_PATH.is_file():
        return MemoryCalibration()
    return load_calibration(CALIBRATION_PATH)
