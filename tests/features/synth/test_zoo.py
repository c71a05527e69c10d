"""Model zoo: realistic sizes and a shape rule consistent with the parameter count."""

from __future__ import annotations

import numpy as np
import pytest

from features.synth.zoo import LOGIT_FRACTION, MODEL_ZOO, transformer_shape


def test_zoo_spans_100m_to_405b_and_kinds_are_known():
    params = [m.params for m in MODEL_ZOO]
    assert min(params) >= 100e6 and max(params) == pytest.approx(405e9, rel=0.01)
    assert params == sorted(params)
    assert {m.kind for m in MODEL_ZOO} <= set(LOGIT_FRACTION)
    assert len({m.slug for m in MODEL_ZOO}) == len(MODEL_ZOO)


@pytest.mark.parametrize("arch", MODEL_ZOO, ids=lambda m: m.slug)
def test_published_shape_accounts_for_the_parameters(arch):
    """12 L h^2 (blocks) + V h (embeddings) is within a factor 1.6 of the published count (wide SwiGLU MLPs
    and encoder-decoder cross-attention add to it)."""
    approx = 12 * arch.layers * arch.hidden**2 + arch.vocab * arch.hidden
    assert 1 / 1.6 < approx / arch.params < 1.6


def test_shape_rule_is_consistent_and_increasing():
    p = np.geomspace(1e8, 4e11, 50)
    h, layers, heads = transformer_shape(p)
    np.testing.assert_allclose(12 * layers * h**2, p)
    for arr in (h, layers, heads):
        assert np.all(np.diff(arr) > 0)
    h7, l7, _ = transformer_shape(np.array([6.74e9]))
    assert 3500 < h7[0] < 4500 and 30 < l7[0] < 45  # Llama-2-7B: 4096, 32
