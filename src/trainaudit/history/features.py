"""What a Megatron-LM functional test exercises, and what a changed file belongs to.

A test is described by its ``model_config.yaml`` (``MODEL_ARGS``, ``ENV_VARS``, ``TEST_TYPE``,
``MODE``) and its folder (``tests/functional_tests/test_cases/<model>/<case>``); a file by its path
in the repository (``megatron/core/transformer/moe/router.py``). Both map to the same feature tags,
so a commit can be scored by how much of what it touched the failing test runs:

- a file whose feature the test uses (MoE code for a MoE test) is on the test's path;
- generic training code (the transformer layers, the training loop, optimizer, distributed data
  parallel, parallel state) runs in every training test;
- a file whose feature the test does not use (inference engines for a training test, RL for a
  plain GPT test, T5 model code for a GPT test) does not.

The path layout is Megatron-LM's (megatron/core/..., megatron/training/..., pretrain_*.py,
examples/...); the argument names are those of megatron/training/arguments.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Any

# feature -> path pattern (searched in the repository-relative path, lower case)
PATH_FEATURES: dict[str, str] = {
    "moe": r"/moe/|moe_|_moe|token_dispatcher|router|experts?\.py|grouped_gemm|expert",
    "mla": r"multi_latent_attention|/mla|mla_",
    "mtp": r"multi_token_prediction|/mtp|mtp_",
    "hybrid": r"/ssm/|mamba|hybrid|nemotron",
    "fsdp": r"fsdp|fully_sharded",
    "fp8": r"fp8|float8|fp4|quantiz",
    "cudagraph": r"cuda_graph|cudagraph",
    "te": r"transformer_engine|(^|/)te_",
    "multimodal": r"multimodal|vision|llava|mimo|clip_vit|/clip/|(^|/|_)radio|siglip|/vlm",
    "t5": r"/t5|t5_|pretrain_t5",
    "bert": r"/bert|bert_|pretrain_bert",
    "gpt": r"models/gpt|pretrain_gpt|gpt_",
    "rl": r"megatron/rl/|rl_utils|grpo|/rl/",
    "inference": r"/inference/|text_generation|inference_|_inference|/engines/|dynamic_context|static_context",
    "context_parallel": r"context_parallel|cp_utils|ring_attention|/cp_",
    "pipeline_parallel": r"pipeline_parallel|/schedules|p2p_communication",
    "tensor_parallel": r"tensor_parallel",
    "checkpointing": r"dist_checkpointing|checkpointing\.py|/checkpoint",
    "data": r"/datasets?/|tokeniz|data_samplers|/data/",
    "muon": r"muon|emerging_optimizers",
    "recompute": r"recompute",
    "offload": r"offload",
    "post_training": r"post_training|modelopt|/export/|distill",
}
_PATH_RE = {k: re.compile(v) for k, v in PATH_FEATURES.items()}

# Code every training test runs (the transformer stack, the training loop, the optimizer, gradient
# reduction, parallel state): on the path of any test.
GENERIC_TRAINING = re.compile(
    r"^megatron/core/(transformer/(?!moe/)|models/common/|fusions/|optimizer/|distributed/|parallel_state|"
    r"tensor_parallel/|pipeline_parallel/|utils\.py|process_groups|num_microbatches|rerun_state)|"
    r"^megatron/training/(training|utils|initialize|global_vars|checkpointing|yaml_arguments)\.py|"
    r"^megatron/core/(optimizer_param_scheduler|packed_seq_params)\.py")
ARGUMENTS = re.compile(r"^megatron/training/arguments\.py$|^megatron/core/transformer/transformer_config\.py$|"
                       r"^megatron/core/model_parallel_config\.py$")
CODE_SUFFIX = re.compile(r"\.(py|cu|cuh|cpp|cc|c|h|hpp|pyx)$")
NOT_RUN = re.compile(r"^(tests?|docs?|\.github|\.gitlab|tools|scripts|benchmarks?)/|/tests?/|^examples/(?!multimodal|mimo)")


# feature -> the words a commit message uses for it
MESSAGE_FEATURES: dict[str, str] = {
    "moe": r"\bmoe\b|\bexperts?\b|\brouter\b|token dispatch", "mla": r"\bmla\b|latent attention",
    "mtp": r"\bmtp\b|multi[- ]token", "hybrid": r"\bmamba\b|\bhybrid\b|\bssm\b|nemotron", "fsdp": r"fsdp",
    "fp8": r"\bfp8\b|\bfp4\b", "cudagraph": r"cuda ?graph", "multimodal": r"llava|multimodal|\bvision\b|\bvlm\b|mimo|\bmm\b",
    "t5": r"\bt5\b", "bert": r"\bbert\b", "rl": r"\brl\b|grpo", "inference": r"inference",
    "context_parallel": r"context.parallel", "muon": r"muon", "offload": r"offload", "recompute": r"recompute",
}
_MESSAGE_RE = {k: re.compile(v, re.I) for k, v in MESSAGE_FEATURES.items()}


# feature -> what names it among a config's MODEL_ARGS (names and values, lower case)
_ARG_FEATURES: dict[str, re.Pattern[str]] = {k: re.compile(v) for k, v in {
    "moe": r"--moe-|--num-experts", "mla": r"--multi-latent-attention|--q-lora-rank|--kv-lora-rank",
    "mtp": r"--mtp-", "hybrid": r"--hybrid|--mamba|mamba|hybrid", "fsdp": r"fsdp|--data-parallel-sharding-strategy",
    "fp8": r"--fp8|--fp4", "cudagraph": r"cuda-graph|cudagraph", "muon": r"muon", "recompute": r"--recompute",
    "offload": r"offload", "multimodal": r"vision|--img-|llava|siglip|mimo|radio_",
    "te": r"transformer_engine|--transformer-impl transformer_engine", "rl": r"--perform-rl-step|--rl-|grpo"}.items()}


def message_features(text: str) -> set[str]:
    return {k for k, rx in _MESSAGE_RE.items() if rx.search(text)}


@lru_cache(maxsize=8192)
def path_features(path: str) -> frozenset[str]:
    """Feature tags of a file path. Cached: a range touches the same files again and again, and
    every commit is classified for each explanation the audit ranks it for."""
    p = path.lower()
    return frozenset(k for k, rx in _PATH_RE.items() if rx.search(p))


def is_code(path: str) -> bool:
    return bool(CODE_SUFFIX.search(path)) and not NOT_RUN.search(path)


def _int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


def test_features(test_dir: str | None, config: Mapping[str, Any] | None) -> set[str]:
    """Feature tags of a functional test from its folder and its ``model_config.yaml`` mapping."""
    feats: set[str] = set()
    parts = PurePosixPath(test_dir).parts if test_dir else ()
    name = "/".join(parts[-2:]).lower() if parts else ""
    feats |= path_features("/" + name)
    cfg = config or {}
    args = cfg.get("MODEL_ARGS") or {}
    env = cfg.get("ENV_VARS") or {}
    if not isinstance(args, Mapping):
        args = {}
    if not isinstance(env, Mapping):
        env = {}
    keys = {str(k).lower() for k in args}
    text = " ".join(f"{k} {v}" for k, v in args.items()).lower()
    feats.update(feat for feat, rx in _ARG_FEATURES.items() if rx.search(text))
    if _int(args.get("--context-parallel-size")) > 1:
        feats.add("context_parallel")
    if _int(args.get("--pipeline-model-parallel-size")) > 1:
        feats.add("pipeline_parallel")
    if _int(args.get("--tensor-model-parallel-size")) > 1 or "--sequence-parallel" in keys:
        feats.add("tensor_parallel")
    if _int(args.get("--expert-model-parallel-size")) > 1 or _int(args.get("--num-experts")) > 0:
        feats.add("moe")
    mode = str(cfg.get("MODE", "pretraining")).lower()
    if mode == "rl":
        feats.add("rl")
    elif mode == "inference":
        feats.add("inference")
    if str(cfg.get("TEST_TYPE", "")).lower() in ("ckpt-resume", "frozen-resume", "frozen-start") or \
            any(k in keys for k in ("--save", "--load", "--ckpt-format")):
        feats.add("checkpointing")
    if "_te_" in name or "transformer_engine" in str(args.get("--transformer-impl", "transformer_engine")):
        feats.add("te")
    feats.add("data")
    if not feats & {"t5", "bert", "multimodal", "hybrid", "rl"}:
        feats.add("gpt")
    if any(str(k).startswith("NCCL") for k in env):
        feats.add("nccl_env")
    return feats


# MODEL_ARGS that define what a test trains (its data, tokenizer, model shape, batch and length):
# a change to one of them makes the golden describe another test.
DEFINING_ARGS = re.compile(
    r"^--(data-path|train-data-path|valid-data-path|split|vocab-file|merge-file|vocab-size|tokenizer-[\w-]+|"
    r"num-layers|hidden-size|ffn-hidden-size|num-attention-heads|num-query-groups|seq-length|"
    r"max-position-embeddings|global-batch-size|micro-batch-size|train-iters|train-samples|seed|lr|min-lr|"
    r"lr-warmup-[\w-]+|lr-decay-[\w-]+|init-method-std|num-experts|moe-router-topk|hybrid-layer-pattern|"
    r"spec|mock-data|data-cache-path|blend[\w-]*)$")


def changed_args(good: Mapping[str, Any] | None, bad: Mapping[str, Any] | None) -> dict[str, tuple[Any, Any]]:
    """``MODEL_ARGS`` and ``ENV_VARS`` entries that differ between two config mappings
    (name -> (value at good, value at bad); None when absent); ``TEST_TYPE`` and ``METRICS`` too."""
    out: dict[str, tuple[Any, Any]] = {}
    g, b = good or {}, bad or {}
    for section in ("MODEL_ARGS", "ENV_VARS"):
        gs, bs = g.get(section) or {}, b.get(section) or {}
        if not isinstance(gs, Mapping) or not isinstance(bs, Mapping):
            continue
        for k in sorted(set(gs) | set(bs), key=str):
            if gs.get(k) != bs.get(k):
                out[str(k)] = (gs.get(k), bs.get(k))
    for k in ("TEST_TYPE", "METRICS", "MODE"):
        if g.get(k) != b.get(k):
            out[k] = (g.get(k), b.get(k))
    return out


def defining(changes: Mapping[str, tuple[Any, Any]]) -> list[str]:
    return [k for k in changes if DEFINING_ARGS.match(k)]
