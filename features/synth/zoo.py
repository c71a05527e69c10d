"""The model zoo: real architectures from 110 M to 405 B parameters that synthetic jobs train.

Shapes are from the models' published configs (Hugging Face ``config.json``): hidden size ``h``,
layers ``L``, attention heads ``a``, vocabulary (or class count) ``V``. ``kind`` says how many
positions produce logits: a causal LM (``clm``) scores every token, a masked LM (``mlm``) the ~15 %
masked tokens, an encoder-decoder (``seq2seq``) its decoder quarter here, a vision transformer
(``vision``) one class token. Llama-family models use grouped-query attention and SwiGLU MLPs; the
activation formula (see :mod:`features.synth.memory_truth`) treats every model as GPT-style, which
is the documented approximation the memory truth shares with the analytic estimator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ModelArch", "MODEL_ZOO", "LOGIT_FRACTION", "zoo_array", "transformer_shape"]

#: Share of sequence positions whose logits are materialised, per model kind.
LOGIT_FRACTION: dict[str, float] = {"clm": 1.0, "mlm": 0.15, "seq2seq": 0.25, "vision": 0.0}


@dataclass(frozen=True, slots=True)
class ModelArch:
    """One architecture: name slug used in job names, parameter count and transformer shape."""

    slug: str
    params: float
    hidden: int
    layers: int
    heads: int
    vocab: int
    kind: str


MODEL_ZOO: tuple[ModelArch, ...] = (
    ModelArch("bert-base", 110e6, 768, 12, 12, 30_522, "mlm"),
    ModelArch("gpt2", 124e6, 768, 12, 12, 50_257, "clm"),
    ModelArch("vit-l", 304e6, 1024, 24, 16, 1_000, "vision"),
    ModelArch("bert-large", 340e6, 1024, 24, 16, 30_522, "mlm"),
    ModelArch("gpt2-medium", 355e6, 1024, 24, 16, 50_257, "clm"),
    ModelArch("vit-h", 632e6, 1280, 32, 16, 1_000, "vision"),
    ModelArch("t5-large", 738e6, 1024, 48, 16, 32_128, "seq2seq"),
    ModelArch("gpt2-large", 774e6, 1280, 36, 20, 50_257, "clm"),
    ModelArch("llama3.2-1b", 1.24e9, 2048, 16, 32, 128_256, "clm"),
    ModelArch("qwen2.5-1.5b", 1.54e9, 1536, 28, 12, 151_936, "clm"),
    ModelArch("gpt2-xl", 1.56e9, 1600, 48, 25, 50_257, "clm"),
    ModelArch("llama3.2-3b", 3.21e9, 3072, 28, 24, 128_256, "clm"),
    ModelArch("phi3-mini", 3.82e9, 3072, 32, 32, 32_064, "clm"),
    ModelArch("llama2-7b", 6.74e9, 4096, 32, 32, 32_000, "clm"),
    ModelArch("mistral-7b", 7.24e9, 4096, 32, 32, 32_000, "clm"),
    ModelArch("llama3.1-8b", 8.03e9, 4096, 32, 32, 128_256, "clm"),
    ModelArch("llama2-13b", 13.0e9, 5120, 40, 40, 32_000, "clm"),
    ModelArch("qwen2.5-14b", 14.8e9, 5120, 48, 40, 152_064, "clm"),
    ModelArch("qwen2.5-32b", 32.8e9, 5120, 64, 40, 152_064, "clm"),
    ModelArch("llama2-70b", 69.0e9, 8192, 80, 64, 32_000, "clm"),
    ModelArch("llama3.1-70b", 70.6e9, 8192, 80, 64, 128_256, "clm"),
    ModelArch("llama3.1-405b", 405.9e9, 16_384, 126, 128, 128_256, "clm"),
)


def zoo_array(attr: str) -> np.ndarray:
    """One attribute of every zoo model, indexed by zoo position."""
    values = [getattr(m, attr) for m in MODEL_ZOO]
    if attr == "kind":
        return np.array(values, dtype=object)
    if attr == "slug":
        return np.array(values, dtype=object)
    return np.array(values, dtype=float)


def transformer_shape(params: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hidden size, layer count and head count implied by a parameter count alone.

    A GPT-style block holds ~``12 h^2`` parameters (Kaplan et al., 2020, Eq. 2.1 with
    ``d_ff = 4h``), so ``P ~= 12 L h^2``. Published models keep ``h / L`` near 100 (Llama-2-7B:
    4096/32 = 128, Llama-2-70B: 8192/80 = 102, Llama-3.1-405B: 16384/126 = 130, BERT-base: 64),
    which gives ``h = (100 P / 12)^(1/3)``, ``L = h / 100`` and ``a = h / 128``. They are kept
    continuous (not rounded to whole layers or multiples of 64) so that everything computed from them
    is smooth and strictly increasing in ``P``; this is an estimator's shape, not a real model's.

    Parameters
    ----------
    params : ndarray of shape (n,)
        Parameter counts (positive).

    Returns
    -------
    hidden, layers, heads : ndarray of float, shape (n,)
    """
    p = np.asarray(params, dtype=float)
    hidden = np.cbrt(100.0 * p / 12.0)
    return hidden, hidden / 100.0, hidden / 128.0
