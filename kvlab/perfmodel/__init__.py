"""Physical model of long-context serving: catalogs, roofline prefill/decode under TP and DCP, memory, calibration."""

from kvlab.perfmodel.calibrate import Fit, calibrate, crossover_from_fit, published_fit
from kvlab.catalog import GPU, CatalogError, Model, gpu, load_gpus, load_models, model
from kvlab.perfmodel.frames import achieved_fraction, predict_frame, predict_like
from kvlab.perfmodel.roofline import (
    BOUND,
    Assumptions,
    Config,
    Memory,
    Params,
    Prediction,
    Step,
    Workload,
    batch_time,
    crossover_context,
    decode_step,
    kv_split,
    memory,
    prefill_time_s,
)

__all__ = [
    "BOUND", "GPU", "Assumptions", "CatalogError", "Config", "Fit", "Memory", "Model", "Params", "Prediction",
    "Step", "Workload", "achieved_fraction", "batch_time", "calibrate", "crossover_context", "crossover_from_fit",
    "decode_step", "gpu", "kv_split", "load_gpus", "load_models", "memory", "model", "predict_frame",
    "predict_like", "prefill_time_s", "published_fit",
]  # fmt: skip
