"""Job names: stems, suffix habits and run counters."""

from __future__ import annotations

import re

import numpy as np

from features.synth.memory_truth import METHODS
from features.synth.naming import TEMPLATES, _run_index, family_stems, job_names
from features.synth.zoo import MODEL_ZOO


def test_run_index_counts_in_submission_order():
    fam = np.array([2, 0, 2, 2, 0])
    ts = np.array([30.0, 5.0, 10.0, 20.0, 1.0])
    assert _run_index(fam, ts).tolist() == [3, 2, 1, 2, 1]


def test_stems_start_with_the_model_and_every_template_renders():
    rng = np.random.default_rng(0)
    model = np.arange(len(MODEL_ZOO))
    finetune = np.full(len(model), METHODS.index("lora"))
    stems, _ = family_stems(rng, model, finetune)
    for m, stem in zip(MODEL_ZOO, stems, strict=True):
        assert stem.startswith(m.slug + "-")
    n_fam = len(TEMPLATES)
    template = np.arange(n_fam)
    fam = np.repeat(np.arange(n_fam), 2)
    ts = np.full(len(fam), 1_735_741_500.0)  # 2025-01-01T14:25:00Z
    names = job_names(rng, stems[:n_fam], template, fam, np.ones(len(fam), dtype=bool), ts).to_pylist()
    patterns = {"date_run": r"-2025-01-01-run[12]$", "version": r"-v[12]$", "seed": r"-seed\d$",
                "timestamp": r"-20250101-1425$", "plain": r"[a-z]$"}
    for i, name in enumerate(TEMPLATES):
        for j in (2 * i, 2 * i + 1):
            assert names[j].startswith(stems[i]) and re.search(patterns[name], names[j]), (name, names[j])
    oneoff = job_names(rng, stems, template, np.array([0]), np.array([False]), ts[:1]).to_pylist()[0]
    assert re.fullmatch(r"[a-z]+-" + re.escape(stems[0]) + r"-\d+", oneoff)
