"""Load a model (``file.py:function`` or a saved module / state dict) and inspect it with torch.

Kinds of parameters: ``embedding`` (``nn.Embedding`` or a name with embed/wte/wpe/tok_emb),
``norm`` (normalisation layers, names with norm/ln_), ``head`` (names with head/classifier/
lm_head/fc_out/output), ``blocks`` (the rest inside repeated containers: layers/blocks/h/encoder/
decoder) and ``other``. One forward and backward pass on a sample batch checks gradient flow
(no, zero or non-finite gradients per parameter), dead ReLUs (units never positive over the
batch) and saturated tanh/sigmoid, and the peak memory of the step.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainaudit.errors import InputError
from trainaudit.inspect.result import Inspection, observed
from trainaudit.rules.inspection import (DeadReLU, EmbeddingHeavy, MixedParameterDtypes, NonFiniteGradients,
                                         SaturatedActivations, ZeroGradients)
from trainaudit.rules.monitor import FrozenParams, ParamsWithoutGrad

EMBED_RE = re.compile(r"(^|[._])(embed\w*|wte|wpe|tok_emb\w*|word_embeddings|position_embeddings)([._]|$)", re.I)
# Names come from state dicts too (a checkpoint from anyone), so these are linear forms of
# "(^|[._])\w*norm\w*([._]|$)": "_" is both a word character and a separator, and that form retries
# every "_" of a long name against every other. Here a run of word characters is entered once, at its
# first "_" unless it starts the name or follows a ".", and commits to its first "norm" (a later one
# could only end at the same places).
NORM_RE = re.compile(r"(?<!\w)(?:^|(?<=\.)|(?>[^\W_]*+_))(?>\w*?norm)(?:\w*?_|\w*+(?:\.|$))"
                     r"|(?:^|[._])(?:ln(?:\w*?_|\w*+(?:\.|$))|bn\d*+(?:[._]|$))", re.I)
HEAD_RE = re.compile(r"(?<!\w)(?:^|(?<=\.)|(?>[^\W_]*+_))(?>\w*?head)(?:\w*?_|\w*+(?:\.|$))"
                     r"|(?:^|[._])(?:classifier|fc_out|output|out_proj_final|score)(?:[._]|$)", re.I)
BLOCK_RE = re.compile(r"(^|[._])(layers?|blocks?|h|encoder|decoder|transformer)[._]\d+", re.I)
NORM_TYPES = (nn.LayerNorm, nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.GroupNorm)


def _import_file(path: Path) -> Any:
    name = f"_trainaudit_inspect_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InputError(f"{path}: cannot import (not a Python file)")
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(mod)
    except Exception as exc:  # the user's file: any error is an input problem
        raise InputError(f"{path}: importing failed: {type(exc).__name__}: {exc}") from None
    finally:
        sys.path.remove(str(path.parent))
    return mod


def call_spec(spec: str, what: str) -> Any:
    """``file.py:function`` -> the function's return value."""
    file, _, func = spec.rpartition(":")
    path = Path(file)
    if not file or not func or path.suffix != ".py":
        raise InputError(f"{spec}: expected FILE.py:FUNCTION for the {what}")
    if not path.is_file():
        raise InputError(f"{file}: file not found")
    mod = _import_file(path)
    fn = getattr(mod, func, None)
    if not callable(fn):
        raise InputError(f"{spec}: {path.name} has no function {func!r}")
    try:
        return fn()
    except Exception as exc:
        raise InputError(f"{spec}: calling {func}() failed: {type(exc).__name__}: {exc}") from None


def load_target(spec: str, *, unsafe_load: bool = False) -> nn.Module | dict[str, torch.Tensor]:
    """A module from ``file.py:function``, or what a saved file holds (a module or a state dict)."""
    if ":" in spec and spec.rpartition(":")[0].endswith(".py"):
        obj = call_spec(spec, "model")
        if not isinstance(obj, nn.Module):
            raise InputError(f"{spec}: returned {type(obj).__name__}, not a torch.nn.Module")
        return obj
    path = Path(spec)
    if not path.exists():
        raise InputError(f"{spec}: file not found")
    if path.is_dir():
        raise InputError(f"{spec}: is a directory (expected FILE.py:FUNCTION, a saved module or a state dict)")
    if path.suffix == ".safetensors":
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise InputError(f"{spec}: reading .safetensors needs the safetensors package") from None
        return dict(load_file(str(path)))
    try:
        obj = torch.load(path, map_location="cpu", weights_only=not unsafe_load)
    except Exception as exc:
        if not unsafe_load and "weights_only" in str(exc):
            raise InputError(f"{spec}: holds pickled Python objects (a whole module); pass --unsafe-load to unpickle "
                             "it, which runs code from the file") from None
        raise InputError(f"{spec}: not a torch file ({type(exc).__name__})") from None
    if isinstance(obj, nn.Module):
        return obj
    if isinstance(obj, dict):
        sd = obj.get("state_dict", obj.get("model", obj)) if not all(isinstance(v, torch.Tensor) for v in obj.values()) else obj
        tensors = {k: v for k, v in sd.items() if isinstance(v, torch.Tensor)} if isinstance(sd, dict) else {}
        if tensors:
            return tensors
    raise InputError(f"{spec}: holds {type(obj).__name__}, neither a module nor a state dict of tensors")


def kind_of(name: str, module: nn.Module | None) -> str:
    if isinstance(module, nn.Embedding) or EMBED_RE.search(name):
        return "embedding"
    if isinstance(module, NORM_TYPES) or type(module).__name__.lower().endswith("norm") or NORM_RE.search(name):
        return "norm"
    if BLOCK_RE.search(name):
        return "blocks"
    if HEAD_RE.search(name):
        return "head"
    return "other"


def inspect_params(target: nn.Module | dict[str, torch.Tensor], label: str) -> Inspection:
    ins = Inspection(label)
    if isinstance(target, nn.Module):
        owner = {}
        for mname, mod in target.named_modules():
            for pname, _ in mod.named_parameters(recurse=False):
                owner[f"{mname}.{pname}" if mname else pname] = mod
        params: list[tuple[str, torch.Tensor, nn.Module | None, bool]] = [
            (n, p, owner.get(n), p.requires_grad) for n, p in target.named_parameters()]
    else:
        params = [(n, t, None, True) for n, t in target.items() if t.is_floating_point()]
    frozen: list[str] = []
    for name, p, mod, trainable in params:
        n = p.numel()
        ins.total_params += n
        if trainable:
            ins.trainable_params += n
        else:
            frozen.append(name)
        dt = str(p.dtype).removeprefix("torch.")
        ins.dtypes[dt] = ins.dtypes.get(dt, 0) + n
        k = kind_of(name, mod)
        ins.by_kind[k] = ins.by_kind.get(k, 0) + n
        top = name.split(".")[0] if "." in name else "(root)"
        ins.by_module[top] = ins.by_module.get(top, 0) + n
    emb = ins.share("embedding")
    if emb > EmbeddingHeavy.Params().share:
        ins.findings.append(observed(EmbeddingHeavy, f"embeddings hold {emb:.0%} of the parameters: most of the model "
                                     "is a lookup table (for a small model: a smaller vocabulary, tied input/output "
                                     "embeddings, or a larger hidden size / more layers)", value=round(emb, 4)))
    if frozen and isinstance(target, nn.Module):
        share = 1 - ins.trainable_params / ins.total_params
        ins.findings.append(observed(FrozenParams, f"{share:.0%} of the parameters are frozen (requires_grad=False)",
                                     severity=FrozenParams().severity_for(share), where=frozen[:20],
                                     value=round(share, 4)))
    if len(ins.dtypes) > 1:
        ins.findings.append(observed(MixedParameterDtypes, "parameters in several dtypes: " +
                                     ", ".join(f"{k} {v}" for k, v in ins.dtypes.items())))
    return ins


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return math.nan


def _loss(out: Any, target: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor) and out.ndim == 0:
        return out
    loss = getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        out = out[0]
    if not isinstance(out, torch.Tensor):
        raise InputError(f"the model returned {type(out).__name__}; cannot form a loss from it")
    if target is None:
        return out.float().pow(2).mean()
    if not target.is_floating_point() and out.ndim >= 2:
        return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]).float(), target.reshape(-1))
    return nn.functional.mse_loss(out.float(), target.float().reshape(out.shape))


def gradient_flow(model: nn.Module, batch: Any, ins: Inspection) -> None:
    """One forward and backward pass: per-parameter gradient state, activation health, peak memory.
    ``batch``: inputs, or ``(inputs, target)`` (a tuple/list of two), or a dict of keyword inputs."""
    stats: dict[str, dict[str, float]] = {}
    handles = []
    mem = [_rss_mb()]
    base = mem[0]

    def act_hook(name: str, kind: str):  # type: ignore[no-untyped-def]
        def hook(_m: nn.Module, _i: Any, out: Any) -> None:
            mem.append(_rss_mb())
            if not isinstance(out, torch.Tensor) or out.ndim == 0:
                return
            o = out.detach().float()
            units = o.reshape(-1, o.shape[-1]) if o.ndim >= 2 else o.reshape(1, -1)
            if kind == "relu":
                dead = float((units <= 0).all(dim=0).float().mean())
                stats[name] = {"kind": 0.0, "dead_share": dead}
            elif kind == "tanh":
                stats[name] = {"kind": 1.0, "saturated_share": float((o.abs() > 0.99).float().mean())}
            else:
                stats[name] = {"kind": 2.0, "saturated_share": float(((o < 0.01) | (o > 0.99)).float().mean())}
        return hook

    for name, mod in model.named_modules():
        kind = ("relu" if isinstance(mod, (nn.ReLU, nn.ReLU6)) else "tanh" if isinstance(mod, nn.Tanh)
                else "sigmoid" if isinstance(mod, nn.Sigmoid) else None)
        if kind:
            handles.append(mod.register_forward_hook(act_hook(name, kind)))
        elif not any(True for _ in mod.children()):
            handles.append(mod.register_forward_hook(lambda *_a: mem.append(_rss_mb())))
    cuda = torch.cuda.is_available() and any(p.is_cuda for p in model.parameters())
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    model.train()
    model.zero_grad(set_to_none=True)
    inputs, target = (batch[0], batch[1]) if isinstance(batch, (tuple, list)) and len(batch) == 2 else (batch, None)
    try:
        out = model(**inputs) if isinstance(inputs, dict) else model(inputs)
        loss = _loss(out, target)
        loss.backward()
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"forward/backward on the sample batch failed: {type(exc).__name__}: {exc}") from None
    finally:
        for h in handles:
            h.remove()
    mem.append(_rss_mb())
    ins.loss = float(loss.detach())
    if cuda:
        ins.peak_mem_mb, ins.peak_mem_kind = torch.cuda.max_memory_allocated() / 2**20, "cuda max allocated"
    else:
        ins.peak_mem_mb, ins.peak_mem_kind = max(mem) - base, "process RSS growth, sampled at every module"
    nograd, zero, bad = [], [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.grad is None:
            nograd.append(name)
            continue
        g = p.grad.detach()
        norm = float(torch.linalg.vector_norm(g.float()))
        ins.grad_norms[name] = norm
        if not math.isfinite(norm):
            bad.append(name)
        elif norm == 0.0:
            zero.append(name)
    if bad:
        ins.findings.append(observed(NonFiniteGradients, f"{len(bad)} parameters have NaN/Inf gradients", where=bad))
    if nograd:
        ins.findings.append(observed(ParamsWithoutGrad, f"{len(nograd)} trainable parameters got no gradient (unused "
                                     "in the forward, or the graph is detached)", where=nograd))
    if zero:
        ins.findings.append(observed(ZeroGradients, f"{len(zero)} parameters have exactly zero gradient", where=zero))
    ins.activations = stats
    dead = [(n, s["dead_share"]) for n, s in stats.items() if s.get("dead_share", 0) > DeadReLU.Params().share]
    for n, share in dead:
        ins.findings.append(observed(DeadReLU, f"{n}: {share:.0%} of the units are never active on the sample batch "
                                     "(dead ReLU)", where=[n], module=n, value=round(share, 4)))
    for n, s in stats.items():
        if s.get("saturated_share", 0) > SaturatedActivations.Params().share:
            ins.findings.append(observed(SaturatedActivations, f"{n}: {s['saturated_share']:.0%} of the outputs are "
                                         "saturated (gradients vanish there)", where=[n], module=n,
                                         value=round(s["saturated_share"], 4)))


def inspect_target(spec: str, sample_batch: str | None = None, *, unsafe_load: bool = False) -> Inspection:
    target = load_target(spec, unsafe_load=unsafe_load)
    ins = inspect_params(target, spec)
    if sample_batch is not None:
        if not isinstance(target, nn.Module):
            raise InputError(f"{spec}: a state dict has no forward; --sample-batch needs FILE.py:FUNCTION or a saved module")
        gradient_flow(target, call_spec(sample_batch, "sample batch"), ins)
    return ins
