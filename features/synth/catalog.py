"""Who submits what: teams, users and recurring job families with their model descriptors.

Population
    ``T`` teams and ``U`` users grow with the square root of the trace size (a real cluster has
    hundreds of users, not one per thousand jobs). Team sizes and user activity are heavy-tailed
    (Zipf team weights, lognormal user activity), so a few teams and users submit most jobs.

Families
    A family is one recurring training program: a model from :data:`features.synth.zoo.MODEL_ZOO`
    with a fine-tuning method (LoRA/QLoRA likelier the bigger the model), precision, optimizer,
    micro-batch and sequence length, plus settings a job record never shows (activation
    checkpointing, FlashAttention, LoRA rank, allocator fragmentation, framework overhead, MFU,
    communication overlap). Its owner picked GPUs the way users do: for every GPU type the smallest
    power-of-two gang (and the lowest ZeRO stage) whose true peak memory at micro-batch 1 leaves 8 %
    headroom, then a type from the profile's mix weighted against big gangs, then the largest
    micro-batch (halving the one drawn) that still fits that gang, then an optional data-parallel
    scale-out. A config that fits nowhere falls back to checkpointing with micro-batch 1, then
    QLoRA, then a 2,048-token context. The family's descriptors are therefore a working config; individual runs then vary it
    (:func:`vary_runs`), and a run whose true peak exceeds its GPU ends OUT_OF_MEMORY.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from features.synth.hardware import GPU_NAMES, GPU_SPECS, gpu_array
from features.synth.memory_truth import METHODS, OPTIMIZERS, PRECISIONS, encode, peak_from_codes
from features.synth.profiles import TIERS, Profile
from features.synth.zoo import LOGIT_FRACTION, MODEL_ZOO, zoo_array

__all__ = ["Population", "Families", "draw_population", "draw_families", "vary_runs", "peak_of", "choose_rows"]

HEADROOM = 0.92
_V100 = GPU_NAMES.index("V100")
_QLORA = METHODS.index("qlora")
_TEAM_WORDS = ("nlp", "vision", "speech", "recsys", "llm-core", "alignment", "multimodal", "search", "ads",
               "robotics", "infra", "safety", "code", "bio", "health", "finance", "maps", "translation",
               "ocr", "video")
_BAND_EDGES = (1e9, 4e9, 20e9, 100e9)
_BANDS = ("<1B", "1-4B", "4-20B", "20-100B", ">100B")
_BATCHES = np.array([1, 2, 4, 8, 16, 32, 64], dtype=float)
_BATCH_BY_BAND = np.array([(0, 0, .05, .2, .3, .3, .15), (.05, .15, .3, .3, .15, .05, 0),
                           (.25, .3, .3, .15, 0, 0, 0), (.5, .3, .2, 0, 0, 0, 0), (.7, .3, 0, 0, 0, 0, 0)])
_SEQS = {"clm": (np.array([512, 1024, 2048, 4096, 8192.]),
                 np.array([(.3, .4, .2, .1, 0), (.1, .25, .35, .25, .05), (.05, .15, .35, .35, .1),
                           (0, .1, .3, .4, .2), (0, .1, .3, .4, .2)])),
         "mlm": (np.array([128, 256, 512.]), np.array([(.3, .3, .4)] * 5)),
         "seq2seq": (np.array([512, 1024.]), np.array([(.6, .4)] * 5)),
         "vision": (np.array([197, 257, 577.]), np.array([(.6, .2, .2)] * 5))}
#: Probability that one run changes its family's config, and how (what users edit between runs).
RUN_CHANGES = {"batch_x2": 0.045, "batch_half": 0.04, "seq_x2": 0.03, "other_gpu": 0.04,
               "gpus_half": 0.03, "gpus_x2": 0.03}


def _beta_with_mean(rng: np.random.Generator, mean: float, size: int, concentration: float) -> np.ndarray:
    """Beta draws with the given mean; larger ``concentration`` = less spread between individuals."""
    if mean <= 0:
        return np.zeros(size)
    mean = min(mean, 1 - 1e-6)
    return rng.beta(mean * concentration, (1 - mean) * concentration, size)


def choose_rows(rng: np.random.Generator, probs: np.ndarray) -> np.ndarray:
    """One categorical draw per row of ``probs`` (rows need not be normalised)."""
    cdf = np.cumsum(probs, axis=1)
    u = rng.random(probs.shape[0]) * cdf[:, -1]
    return np.minimum((u[:, None] >= cdf).sum(axis=1), probs.shape[1] - 1)


@dataclass(frozen=True)
class Population:
    """Teams and users. Arrays are indexed by user; ``team_names`` by team."""

    team_names: np.ndarray
    user_names: np.ndarray
    user_team: np.ndarray
    user_weight: np.ndarray
    user_cancel: np.ndarray
    user_default_limit: np.ndarray
    user_overestimate: np.ndarray


def draw_population(rng: np.random.Generator, n_jobs: int, profile: Profile) -> Population:
    """Teams and users for a trace of ``n_jobs`` jobs."""
    n_users = int(np.clip(round(30 * np.sqrt(n_jobs / 1000)), 8, 1500))
    n_teams = int(np.clip(round(n_users / 8), 3, 80))
    teams = np.array([_TEAM_WORDS[i % len(_TEAM_WORDS)] + ("" if i < len(_TEAM_WORDS) else f"-{i // len(_TEAM_WORDS)}")
                      for i in range(n_teams)], dtype=object)
    team_w = 1.0 / np.arange(1, n_teams + 1) ** 1.1
    user_team = rng.choice(n_teams, size=n_users, p=team_w / team_w.sum())
    return Population(
        team_names=teams,
        user_names=np.array([f"u{i:04d}" for i in range(n_users)], dtype=object),
        user_team=user_team,
        user_weight=rng.lognormal(0.0, 1.2, n_users),
        user_cancel=_beta_with_mean(rng, profile.cancel_share, n_users, concentration=12.0),
        user_default_limit=rng.random(n_users) < profile.default_limit_share,
        user_overestimate=rng.lognormal(np.log(profile.limit_overestimate[0]), profile.limit_overestimate[1], n_users),
    )


@dataclass
class Families:
    """Per-family arrays (index = family id). Descriptors first, hidden settings after.

    ``finetune``, ``precision`` and ``optimizer`` are integer codes into
    :data:`~features.synth.memory_truth.METHODS`, ``PRECISIONS`` and ``OPTIMIZERS``; ``gpu`` into
    :data:`~features.synth.hardware.GPU_NAMES`; ``tier`` into :data:`~features.synth.profiles.TIERS`.
    """

    user: np.ndarray
    tier: np.ndarray
    model: np.ndarray
    finetune: np.ndarray
    precision: np.ndarray
    optimizer: np.ndarray
    batch: np.ndarray
    seq: np.ndarray
    gpu: np.ndarray
    num_gpus: np.ndarray
    zero_stage: np.ndarray
    checkpointing: np.ndarray
    flash: np.ndarray
    fragmentation: np.ndarray
    overhead_mib: np.ndarray
    nccl_mib: np.ndarray
    lora_fraction: np.ndarray
    mfu: np.ndarray
    exposed_share: np.ndarray
    cpus_per_gpu: np.ndarray
    mem_per_gpu_mib: np.ndarray

    def __len__(self) -> int:
        return len(self.model)


_FP16, _BF16, _FP8 = (PRECISIONS.index(p) for p in ("fp16", "bf16", "fp8"))
_NO_BF16 = np.array([not GPU_SPECS[n].bf16 for n in GPU_NAMES])
_NO_FP8 = np.array([GPU_SPECS[n].tflops_fp8 is None for n in GPU_NAMES])


def _precision_for(precision: np.ndarray, gpu: np.ndarray) -> np.ndarray:
    """What a precision code becomes on a GPU type: no bf16 on V100, fp8 only on Ada/Hopper."""
    out = np.where((precision == _FP8) & _NO_FP8[gpu], _BF16, precision)
    return np.where(_NO_BF16[gpu] & ((out == _BF16) | (out == _FP8)), _FP16, out)


def _arch(model: np.ndarray) -> dict[str, np.ndarray]:
    """Shape arrays of each row's zoo model, named as :func:`peak_from_codes` expects."""
    return {"params": zoo_array("params")[model], "hidden": zoo_array("hidden")[model],
            "layers": zoo_array("layers")[model], "heads": zoo_array("heads")[model],
            "vocab": zoo_array("vocab")[model],
            "logit_fraction": np.array([LOGIT_FRACTION[k] for k in zoo_array("kind")])[model]}


def peak_of(model, finetune, precision, optimizer, batch, seq, gpu, num_gpus, zero_stage, checkpointing, flash,
            fragmentation, overhead_mib, nccl_mib, lora_fraction) -> np.ndarray:
    """True peak MiB per GPU of runs described by these arrays (precision/flash adapted to the GPU)."""
    codes = encode(_precision_for(np.asarray(precision), gpu), optimizer, finetune)
    n = np.asarray(num_gpus, dtype=float)
    return peak_from_codes(
        **_arch(model), codes=codes, batch_size=batch, seq_len=seq, num_gpus=n,
        zero_stage=np.where(n <= 1, 0, zero_stage), lora_fraction=lora_fraction, checkpointing=checkpointing,
        flash_attention=flash & (gpu != _V100), fragmentation=fragmentation,
        overhead_mib=overhead_mib + np.where(n > 1, nccl_mib, 0.0))


def _size(f: Families, rows: np.ndarray, max_gpus: int, gpu: np.ndarray | None = None
          ) -> tuple[np.ndarray, np.ndarray]:
    """Smallest power-of-two gang and its lowest ZeRO stage for families ``rows``.

    For every GPU type (columns in :data:`GPU_NAMES` order), or for the one type per row in ``gpu``
    (a single column). ``inf`` where no gang up to ``max_gpus`` fits.
    """
    caps = gpu_array("memory_mib") * HEADROOM
    gangs = 2 ** np.arange(int(np.log2(max_gpus)) + 1)
    types = [np.full(len(rows), k) for k in range(len(GPU_NAMES))] if gpu is None else [np.asarray(gpu)]
    need = np.full((len(rows), len(types)), np.inf)
    stage_at = np.zeros((len(rows), len(types)), dtype=int)
    arch = _arch(f.model[rows])
    fixed = dict(batch_size=f.batch[rows], seq_len=f.seq[rows], lora_fraction=f.lora_fraction[rows],
                 checkpointing=f.checkpointing[rows], fragmentation=f.fragmentation[rows])
    for col, types_k in enumerate(types):
        codes = encode(_precision_for(f.precision[rows], types_k), f.optimizer[rows], f.finetune[rows])
        flash = f.flash[rows] & (types_k != _V100)
        for n in gangs[::-1]:  # walk down so the smallest fitting gang wins
            fit_stage = np.full(len(rows), -1)
            overhead = f.overhead_mib[rows] + (f.nccl_mib[rows] if n > 1 else 0.0)
            for s in (3, 2, 0) if n > 1 else (0,):  # and the lowest fitting stage
                peak = peak_from_codes(**arch, **fixed, codes=codes, num_gpus=float(n), zero_stage=s,
                                       flash_attention=flash, overhead_mib=overhead)
                fit_stage = np.where(peak <= caps[types_k], s, fit_stage)
            ok = fit_stage >= 0
            need[ok, col] = n
            stage_at[ok, col] = fit_stage[ok]
    return need, stage_at


def draw_families(rng: np.random.Generator, n_families: int, pop: Population, profile: Profile) -> Families:
    """Draw ``n_families`` families and size their GPU requests (see module docstring)."""
    nf = n_families
    user = rng.choice(len(pop.user_names), size=nf, p=pop.user_weight / pop.user_weight.sum())
    tier_w = np.array([profile.tier_mix[t] for t in TIERS])
    tier = rng.choice(len(TIERS), size=nf, p=tier_w / tier_w.sum())
    mw = np.asarray(profile.model_weights, dtype=float)
    model = rng.choice(len(MODEL_ZOO), size=nf, p=mw / mw.sum())
    params = zoo_array("params")[model]
    kind = zoo_array("kind")[model]
    band = np.searchsorted(np.array(_BAND_EDGES), params, side="right")
    ft_table = np.array([profile.finetune_by_size[b] for b in _BANDS])
    finetune = np.where(kind == "vision", 0, choose_rows(rng, ft_table[band]))  # METHODS codes
    full = finetune == 0
    prec = np.array([PRECISIONS.index(p) for p in ("bf16", "fp16", "fp32", "fp8")])[choose_rows(rng, np.where(
        (full & (params < 1e9))[:, None], [.45, .2, .25, .1], np.where(full[:, None], [.7, .15, 0, .15],
                                                                         [.85, .15, 0, 0])))]
    opt = np.array([OPTIMIZERS.index(o) for o in ("adamw", "adamw_8bit", "sgd", "adafactor")])[choose_rows(rng, np.where(
        (kind == "vision")[:, None], [.4, 0, .55, .05], np.where(full[:, None], [.72, .1, .08, .1],
                                                                 [.6, .35, 0, .05])))]
    batch = _BATCHES[choose_rows(rng, _BATCH_BY_BAND[band])]
    seq = np.zeros(nf)
    for k, (values, table) in _SEQS.items():
        m = kind == k
        seq[m] = values[choose_rows(rng, table[band[m]])]
    ckpt_p = np.where(params < 1e9, 0.1, np.where(params < 10e9, 0.5, 0.85))
    ckpt_p = np.where(finetune == _QLORA, 0.9, ckpt_p)
    fam = Families(
        user=user, tier=tier, model=model, finetune=finetune, precision=prec, optimizer=opt, batch=batch, seq=seq,
        gpu=np.zeros(nf, dtype=int), num_gpus=np.ones(nf), zero_stage=np.zeros(nf, dtype=int),
        checkpointing=rng.random(nf) < ckpt_p,
        flash=rng.random(nf) < np.where(kind == "clm", 0.75, 0.4),
        fragmentation=rng.uniform(1.05, 1.20, nf),
        overhead_mib=450.0 + rng.lognormal(np.log(300.0), 0.6, nf),
        nccl_mib=rng.uniform(300.0, 900.0, nf),
        lora_fraction=np.exp(rng.uniform(np.log(0.001), np.log(0.03), nf)),
        mfu=rng.uniform(0.25, 0.55, nf) * np.where(finetune == _QLORA, 0.6, 1.0),
        exposed_share=rng.uniform(0.3, 1.0, nf),
        cpus_per_gpu=np.array([4, 8, 12, 16.])[rng.choice(4, nf, p=[.2, .4, .25, .15])],
        mem_per_gpu_mib=1024.0 * np.array([32, 64, 96, 128.])[rng.choice(4, nf, p=[.2, .4, .25, .15])],
    )
    # GPU type and gang follow from the model states (micro-batch 1); the micro-batch is then cut
    # until it fits on that gang, as users trade micro-batch for gradient accumulation.
    drawn_batch = fam.batch.copy()
    fam.batch[:] = 1.0
    need, stage_at = _size(fam, np.arange(nf), profile.max_gpus)
    for fallback in ("checkpointing", "qlora", "short_context"):  # owners change configs that fit nowhere
        stuck = np.flatnonzero(~np.isfinite(need).any(axis=1))
        if not len(stuck):
            break
        fam.checkpointing[stuck] = True
        drawn_batch[stuck] = 1.0
        if fallback in ("qlora", "short_context"):
            fam.finetune[stuck] = _QLORA
            fam.optimizer[stuck] = OPTIMIZERS.index("adamw_8bit")
        if fallback == "short_context":
            fam.seq[stuck] = np.minimum(fam.seq[stuck], 2048.0)
        need[stuck], stage_at[stuck] = _size(fam, stuck, profile.max_gpus)
    if not np.isfinite(need).any(axis=1).all():
        raise RuntimeError("synthetic family sizing left a model that fits no GPU; check the profile")
    mix = np.array([profile.gpu_mix.get(n, 0.0) for n in GPU_NAMES])
    weights = np.where(np.isfinite(need), mix[None, :] * np.where(np.isfinite(need), need, 1.0) ** -0.7, 0.0)
    fam.gpu = choose_rows(rng, weights)
    rows = np.arange(nf)
    min_gang = need[rows, fam.gpu]
    fam.batch = drawn_batch
    check = np.flatnonzero(fam.batch > 1)
    while len(check):
        gang, _stage = _size(fam, check, profile.max_gpus, gpu=fam.gpu[check])
        check = check[gang[:, 0] > min_gang[check]]
        fam.batch[check] /= 2.0
        check = check[fam.batch[check] > 1]
    gang, stage = _size(fam, rows, profile.max_gpus, gpu=fam.gpu)
    if not np.array_equal(gang[:, 0], min_gang):
        raise RuntimeError("synthetic family sizing: micro-batch 1 no longer fits its gang")
    fam.precision = _precision_for(fam.precision, fam.gpu)
    fam.flash = fam.flash & (fam.gpu != _V100)
    factors = np.array(list(profile.scale_out), dtype=float)
    sw = np.array(list(profile.scale_out.values()), dtype=float)
    scale = np.where(tier == TIERS.index("debug"), 1.0, factors[rng.choice(len(factors), nf, p=sw / sw.sum())])
    fam.num_gpus = np.minimum(min_gang * scale, profile.max_gpus)
    _settle_stage(fam, min_gang, stage[:, 0])
    return fam


def _settle_stage(f: Families, min_gpus: np.ndarray, stage_at_min: np.ndarray) -> None:
    """Lowest ZeRO stage that fits the family's final (scaled-out) gang, in place.

    A scale-out that fits at no stage (multi-GPU jobs also hold NCCL buffers) is undone.
    """
    caps = gpu_array("memory_mib")[f.gpu] * HEADROOM
    best = np.full(len(f), -1)
    for s in (3, 2, 0):
        peak = peak_of(f.model, f.finetune, f.precision, f.optimizer, f.batch, f.seq, f.gpu, f.num_gpus,
                       np.full(len(f), s), f.checkpointing, f.flash, f.fragmentation, f.overhead_mib,
                       f.nccl_mib, f.lora_fraction)
        best = np.where(peak <= caps, s, best)
    undo = (best < 0) | (f.num_gpus <= min_gpus)
    f.num_gpus = np.where(undo, min_gpus, f.num_gpus)
    f.zero_stage = np.where(f.num_gpus <= 1, 0, np.where(undo, stage_at_min, best))


@dataclass
class Runs:
    """Per-run config after the run's own changes (index = job)."""

    batch: np.ndarray
    seq: np.ndarray
    gpu: np.ndarray
    num_gpus: np.ndarray
    precision: np.ndarray
    flash: np.ndarray
    peak_mib: np.ndarray


def vary_runs(rng: np.random.Generator, fam: Families, fam_of_job: np.ndarray, profile: Profile) -> Runs:
    """Per-run configs: the family's, with occasional user edits (:data:`RUN_CHANGES`), and their true peak.

    A run's true peak also carries a small data-dependent jitter (log-sd 2 %: padding, dynamic shapes).
    """
    n = len(fam_of_job)
    j = fam_of_job
    batch, seq, gpus, gpu = fam.batch[j].copy(), fam.seq[j].copy(), fam.num_gpus[j].copy(), fam.gpu[j].copy()
    u = rng.random((6, n))
    batch = np.where(u[0] < RUN_CHANGES["batch_x2"], batch * 2, batch)
    batch = np.where((u[1] < RUN_CHANGES["batch_half"]) & (batch >= 2), batch / 2, batch)
    long_ctx = np.isin(zoo_array("kind")[fam.model[j]], ("clm", "seq2seq"))
    seq = np.where((u[2] < RUN_CHANGES["seq_x2"]) & long_ctx & (seq < 32768), seq * 2, seq)
    mix = np.array([profile.gpu_mix.get(x, 0.0) for x in GPU_NAMES])
    gpu = np.where(u[3] < RUN_CHANGES["other_gpu"], rng.choice(len(GPU_NAMES), n, p=mix / mix.sum()), gpu)
    gpus = np.where((u[4] < RUN_CHANGES["gpus_half"]) & (gpus >= 2), gpus / 2, gpus)
    gpus = np.where(u[5] < RUN_CHANGES["gpus_x2"], np.minimum(gpus * 2, profile.max_gpus), gpus)
    precision = _precision_for(fam.precision[j], gpu)
    flash = fam.flash[j] & (gpu != _V100)
    peak = peak_of(fam.model[j], fam.finetune[j], precision, fam.optimizer[j], batch, seq, gpu, gpus,
                   fam.zero_stage[j], fam.checkpointing[j], flash, fam.fragmentation[j], fam.overhead_mib[j],
                   fam.nccl_mib[j], fam.lora_fraction[j])
    peak = peak * np.exp(rng.normal(0.0, 0.02, n))
    return Runs(batch=batch, seq=seq, gpu=gpu, num_gpus=gpus, precision=precision, flash=flash, peak_mib=peak)
