"""GPU type vocabulary: one canonical name per GPU model, and every spelling that means it.

Schedulers and logs spell one GPU many ways: ``sacct`` writes ``gres/gpu:a100`` or ``a100-80gb``,
``predictor slurm config`` writes ``Type=a100-80gb`` into gres.conf, Kubernetes nodes carry
``nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB``, AMD nodes ``amd.com/gpu.product-name=AMD_Instinct_MI300X``,
and the inventory says ``A100-80GB``. :class:`GpuTypeVocabulary` maps all of them to the canonical
name (the inventory's), in this order:

1. an explicit alias (case-insensitive; the built-in ones below plus any an inventory file adds);
2. the canonical name itself, compared after *normalising* both sides: lower case, ``_`` and blanks
   as ``-``, vendor words (``nvidia``, ``tesla``, ``amd``, ``instinct``, ``geforce``) and form
   factors and memory kinds (``sxm``, ``sxm2``/``4``/``5``, ``pcie``, ``nvl``, ``hgx``, ``hbm3``) dropped, so
   ``NVIDIA-A100-SXM4-80GB`` and ``a100-80gb`` both become ``a100-80gb``;
3. the model *family* (``a100``) plus a memory size when one is written (``80gb``, ``80g``,
   ``80GiB``): the family's type whose memory is within 15 % of it. A family without a size
   (``a100``) means any memory variant of it: it resolves to every type of that family in the
   vocabulary (one, on a cluster that has one kind).

A name that matches none of these is an error that lists the known types
(:meth:`GpuTypeVocabulary.resolve`); readers that only tidy names use
:meth:`GpuTypeVocabulary.canonical_or_none` and keep a name they cannot place as written.
A request may list several acceptable types: ``"A10|A100-80GB"`` or ``"a10,a100"``
(:func:`split_request`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from features.errors import InputError

__all__ = ["GpuType", "KNOWN_GPU_TYPES", "GpuTypeVocabulary", "DEFAULT_VOCABULARY", "normalise_gpu_name",
           "split_request", "slurm_gres_type"]


@dataclass(frozen=True, slots=True)
class GpuType:
    """A GPU model: memory per device (MiB) and a relative cost per GPU-hour used to pick the cheapest fit."""

    name: str
    memory_mib: int
    cost_per_hour: float = 1.0


#: Memory sizes of common data-centre GPUs (vendor datasheets) and a rough relative price.
KNOWN_GPU_TYPES: Mapping[str, GpuType] = MappingProxyType(
    {
        g.name: g
        for g in (
            GpuType("K80", 11_441, 0.2),
            GpuType("P100", 16_384, 0.4),
            GpuType("T4", 15_360, 0.35),
            GpuType("V100", 16_384, 0.6),
            GpuType("V100M16", 16_384, 0.6),  # Alibaba PAI's names for the 16 and 32 GB V100
            GpuType("V100M32", 32_768, 0.75),
            GpuType("G2", 24_576, 0.5),  # openb trace's anonymised types
            GpuType("G3", 24_576, 0.5),
            GpuType("A10", 24_576, 0.6),
            GpuType("A40", 46_068, 0.9),
            GpuType("L4", 23_034, 0.45),
            GpuType("L40S", 46_068, 1.1),
            GpuType("A100-40GB", 40_960, 1.2),
            GpuType("A100-80GB", 81_920, 1.6),
            GpuType("H100-80GB", 81_559, 2.5),
            GpuType("H200", 143_771, 3.2),
            GpuType("B200", 183_359, 4.0),
            GpuType("MI210", 65_536, 1.0),
            GpuType("MI300X", 196_608, 3.0),
        )
    }
)

#: Spellings that normalisation alone does not reach (family names that differ, openb's ``M32``).
BUILTIN_ALIASES: Mapping[str, str] = MappingProxyType({
    "v100-32gb": "V100M32",
    "v100-sxm2-32gb": "V100M32",
    "v100-16gb": "V100",
    "h100": "H100-80GB",  # the 94 GB NVL variant is written with its size
    "h200-141gb": "H200",
    "b200-180gb": "B200",
    "l40s-48gb": "L40S",
    "a40-48gb": "A40",
    "a10-24gb": "A10",
    "l4-24gb": "L4",
    "t4-16gb": "T4",
    "mi300x-192gb": "MI300X",
})

_VENDOR_WORDS = frozenset({"nvidia", "tesla", "amd", "instinct", "geforce", "rtx", "radeon"})
_FORM_FACTORS = frozenset({"sxm", "sxm2", "sxm3", "sxm4", "sxm5", "sxm6", "pcie", "nvl", "hgx", "dgx", "oam",
                           "hbm2", "hbm2e", "hbm3", "hbm3e"})
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)(gb|g|gib)$")
_MIB_PER_GB = 1024.0
_MEMORY_TOLERANCE = 0.15


def normalise_gpu_name(name: str) -> str:
    """The comparison key of a GPU type name (see the module docstring): ``NVIDIA-A100-SXM4-80GB`` ->
    ``a100-80gb``; ``gres/gpu:a100`` -> ``a100``."""
    text = name.strip().lower()
    for prefix in ("gres/gpu:", "gpu:", "nvidia.com/", "amd.com/"):
        if text.startswith(prefix):
            text = text[len(prefix):]
    tokens = [t for t in re.split(r"[\s_\-]+", text) if t]
    kept = [t for t in tokens if t not in _VENDOR_WORDS and t not in _FORM_FACTORS]
    return "-".join(kept or tokens)


def split_request(request: str) -> list[str]:
    """The names of a GPU request listing acceptable types: ``"A10|A100-80GB"`` or ``"a10, a100"``."""
    return [s.strip() for s in request.replace("|", ",").split(",") if s.strip()]


def slurm_gres_type(canonical: str) -> str:
    """The gres.conf ``Type=`` of a canonical type (lower case, as Slurm sites write them: ``a100-80gb``)."""
    return canonical.lower()


def _family_and_memory(key: str) -> tuple[str, float | None]:
    """``a100-80gb`` -> (``a100``, 81920.0); ``a100`` -> (``a100``, None)."""
    parts = key.split("-")
    if len(parts) > 1:
        m = _MEMORY.match(parts[-1])
        if m:
            return "-".join(parts[:-1]), float(m.group(1)) * _MIB_PER_GB
    return key, None


class GpuTypeVocabulary:
    """Canonical GPU type names with their memory, and the aliases that reach them.

    Parameters
    ----------
    types : mapping of str to GpuType
        The canonical types (name -> type), e.g. an inventory's ``gpu_types``.
    aliases : mapping of str to str, optional
        More spellings (alias -> canonical name), compared case-insensitively after normalising.
        The built-in ones (``BUILTIN_ALIASES``) that point at one of ``types`` are always included.
    """

    def __init__(self, types: Mapping[str, GpuType], aliases: Mapping[str, str] | None = None) -> None:
        self.types: Mapping[str, GpuType] = MappingProxyType(dict(types))
        by_key: dict[str, str] = {}
        for alias, target in {**BUILTIN_ALIASES, **dict(aliases or {})}.items():
            if target not in self.types:
                if aliases and alias in aliases:
                    raise InputError(f"GPU type alias {alias!r} points to unknown type {target!r}; "
                                     f"known: {', '.join(self.known())}")
                continue
            by_key[normalise_gpu_name(alias)] = target
        for name in self.types:  # a canonical name is its own alias (and wins over a built-in one)
            by_key[normalise_gpu_name(name)] = name
        self._by_key = by_key
        families: dict[str, list[str]] = {}
        for name in self.types:
            family, _ = _family_and_memory(normalise_gpu_name(name))
            families.setdefault(family, []).append(name)
        for key, target in by_key.items():  # aliases name families too ("v100-32gb" -> family v100)
            family, _ = _family_and_memory(key)
            if target not in families.setdefault(family, []):
                families[family].append(target)
        self._families = {f: tuple(sorted(v, key=lambda n: (self.types[n].memory_mib, n))) for f, v in families.items()}

    def known(self) -> list[str]:
        """Canonical names, smallest memory first."""
        return sorted(self.types, key=lambda n: (self.types[n].memory_mib, n))

    def with_types(self, types: Mapping[str, GpuType], aliases: Mapping[str, str] | None = None) -> GpuTypeVocabulary:
        """This vocabulary restricted to ``types`` (an inventory's), with ``aliases`` added."""
        return GpuTypeVocabulary(types, aliases)

    def matches(self, name: str) -> tuple[str, ...]:
        """Every canonical type ``name`` may mean (empty when none; several for a family name)."""
        key = normalise_gpu_name(name)
        if not key:
            return ()
        exact = self._by_key.get(key)
        if exact is not None:
            return (exact,)
        family, memory = _family_and_memory(key)
        members = self._families.get(family, ())
        if memory is None:
            return members
        close = [n for n in members
                 if abs(self.types[n].memory_mib - memory) <= _MEMORY_TOLERANCE * max(memory, 1.0)]
        if not close:
            return ()
        return (min(close, key=lambda n: abs(self.types[n].memory_mib - memory)),)

    def canonical_or_none(self, name: str | None) -> str | None:
        """The one canonical type ``name`` means, or None (unknown, or a family of several types)."""
        if not name:
            return None
        found = self.matches(name)
        return found[0] if len(found) == 1 else None

    def resolve(self, name: str, *, what: str = "GPU type") -> tuple[str, ...]:
        """Every canonical type ``name`` means.

        Raises
        ------
        InputError
            Nothing matches; the message lists the known types.
        """
        found = self.matches(name)
        if not found:
            raise InputError(f"unknown {what} {name!r}; known types: {', '.join(self.known())} "
                             "(add it to the inventory's gpu_types, or an alias for it)")
        return found

    def resolve_request(self, request: str, *, what: str = "GPU type") -> tuple[str, ...]:
        """The canonical types a request (``"A10|a100-80gb"``) accepts, in the request's order, once each."""
        out: dict[str, None] = {}
        for name in split_request(request):
            out.update(dict.fromkeys(self.resolve(name, what=what)))
        return tuple(out)

    def canonicalise(self, values: Iterable[object]) -> list[object]:
        """Readers' tidy-up: each name replaced by its canonical type where it has exactly one, else kept."""
        cache: dict[str, object] = {}
        out: list[object] = []
        for v in values:
            if not isinstance(v, str):
                out.append(v)
                continue
            if v not in cache:
                parts = split_request(v)
                names = [self.canonical_or_none(p) or p for p in parts]
                cache[v] = "|".join(dict.fromkeys(names)) if names else v
            out.append(cache[v])
        return out


#: Every known type (``KNOWN_GPU_TYPES``) and the built-in aliases.
DEFAULT_VOCABULARY = GpuTypeVocabulary(KNOWN_GPU_TYPES)
