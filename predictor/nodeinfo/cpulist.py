"""Linux CPU lists (``0-15,128-143``) and CPU masks, the two notations GPU tools and schedulers use.

``nvidia-smi topo -m``, ``/sys/devices/system/node/node*/cpulist``, ``taskset -c`` and kubelet's
``reservedSystemCPUs`` use lists; NVML (``nvmlDeviceGetCpuAffinity``) returns 64-bit mask words and
Slurm's ``--cpu-bind=mask_cpu:`` takes hexadecimal masks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["parse_cpulist", "format_cpulist", "cpus_from_mask_words", "cpumask_hex"]


def parse_cpulist(text: str) -> tuple[int, ...]:
    """Parse a CPU list such as ``"0-3,8,10-11"`` into sorted unique CPU ids.

    Raises
    ------
    ValueError
        Naming the offending item when a part is not ``N`` or ``N-M`` with ``N <= M``.
    """
    cpus: set[int] = set()
    text = str(text).strip()
    if not text:
        return ()
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            start = int(lo)
            end = int(hi) if sep else start
        except ValueError:
            raise ValueError(f"CPU list {text!r}: {part!r} is not a number or a range N-M") from None
        if start < 0 or end < start:
            raise ValueError(f"CPU list {text!r}: bad range {part!r}")
        cpus.update(range(start, end + 1))
    return tuple(sorted(cpus))


def format_cpulist(cpus: Iterable[int]) -> str:
    """Format CPU ids as the shortest list of ranges, e.g. ``(0, 1, 2, 5)`` -> ``"0-2,5"``."""
    ordered = sorted(set(int(c) for c in cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def cpus_from_mask_words(words: Sequence[int], word_bits: int = 64) -> tuple[int, ...]:
    """CPU ids set in an NVML affinity mask (word 0 holds CPUs 0..63, word 1 CPUs 64..127, ...)."""
    cpus = []
    for w, word in enumerate(words):
        word = int(word)
        for bit in range(word_bits):
            if word >> bit & 1:
                cpus.append(w * word_bits + bit)
    return tuple(cpus)


def cpumask_hex(cpus: Iterable[int]) -> str:
    """A hexadecimal CPU mask, e.g. ``(0, 1, 4)`` -> ``"0x13"`` (Slurm ``mask_cpu`` notation)."""
    mask = 0
    for c in cpus:
        mask |= 1 << int(c)
    return hex(mask)
