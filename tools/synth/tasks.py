"""Synthetic data and tiny models. Everything is generated from a seed: no downloads.

torch is imported lazily by the callers (``cases.py`` imports this module inside functions), so
``import trainaudit`` never needs torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

VOCAB = 32  # tokens of the generated "language"
CONTEXT = 4  # tokens the MLP language model sees


@dataclass(frozen=True, slots=True)
class Variant:
    """A perturbation of every run, for the robustness check (``python -m synth.margins``): another
    seed for the initial weights and the batch order, another thread count (another order of the
    floating-point sums), and a relative noise on the initial weights. A case whose label only
    holds for one of these is on a knife edge: another CPU's rounding can tip it. The default
    changes nothing."""

    seed_offset: int = 0
    threads: int = 1
    init_noise: float = 0.0

    def __str__(self) -> str:
        return f"seed+{self.seed_offset} threads={self.threads} init_noise={self.init_noise:g}"


_variant = Variant()


def use_variant(variant: Variant) -> None:
    """Apply ``variant`` to every run set up from now on (``Variant()`` restores the default)."""
    global _variant
    _variant = variant


def seed(value: int) -> int:
    """The seed a run uses for ``value``: the case's own seed, moved by the variant's offset."""
    return value + 1009 * _variant.seed_offset


def setup(case_seed: int) -> torch.Generator:
    """One thread, deterministic kernels, fixed seeds; returns the generator batches draw from."""
    torch.set_num_threads(_variant.threads)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed(case_seed))
    return torch.Generator().manual_seed(seed(case_seed))


def perturb(model: nn.Module) -> nn.Module:
    """Multiply every initial weight by (1 + init_noise * N(0, 1)), from a generator of its own
    (the run's other random draws are unchanged); a no-op for the default variant."""
    if _variant.init_noise:
        gen = torch.Generator().manual_seed(seed(4242))
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1 + _variant.init_noise * torch.randn(p.shape, generator=gen))
    return model


# --- classification on a gaussian mixture -------------------------------------------------------


@dataclass(slots=True)
class Mixture:
    x: torch.Tensor
    y: torch.Tensor
    num_classes: int

    def batch(self, gen: torch.Generator, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.randint(0, len(self.y), (size,), generator=gen)
        return self.x[idx], self.y[idx]


def mixture(n: int, seed: int, num_classes: int = 8, dim: int = 20, spread: float = 1.6,
            label_noise: float = 0.0) -> Mixture:
    """``n`` points around ``num_classes`` fixed centres (the centres depend only on the class
    count and dim, so train and validation sets from different seeds share them)."""
    centres = np.random.default_rng(1234).normal(0.0, 1.0, (num_classes, dim))
    rng = np.random.default_rng(seed)
    y = rng.integers(0, num_classes, n)
    x = centres[y] + rng.normal(0.0, spread, (n, dim))
    if label_noise > 0:
        flip = rng.random(n) < label_noise
        y = np.where(flip, rng.integers(0, num_classes, n), y)
    return Mixture(torch.tensor(x, dtype=torch.float32), torch.tensor(y), num_classes)


def mlp(dim: int, hidden: int, out: int, depth: int = 2, act: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    layers: list[nn.Module] = []
    width = dim
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), act()]
        width = hidden
    layers.append(nn.Linear(width, out))
    return nn.Sequential(*layers)


# --- a generated language for the tiny language models ------------------------------------------


def corpus(n_tokens: int, seed: int = 7) -> torch.Tensor:
    """Tokens from a fixed random first-order Markov chain with a few likely successors per token:
    learnable (entropy well below ln(VOCAB)) but not trivial. ``seed`` only changes the sample,
    so train and validation text share one "language"."""
    table = np.random.default_rng(2024).dirichlet(np.full(VOCAB, 0.1), size=VOCAB)
    cdf = np.cumsum(table, axis=-1)
    u = np.random.default_rng(seed).random(n_tokens)
    out = np.empty(n_tokens, dtype=np.int64)
    out[0] = 0
    for i in range(1, n_tokens):
        out[i] = min(int(np.searchsorted(cdf[out[i - 1]], u[i])), VOCAB - 1)
    return torch.from_numpy(out)


def corpus_entropy() -> float:
    """Entropy rate (nats/token) of the chain: the loss a perfect model reaches."""
    table = np.random.default_rng(2024).dirichlet(np.full(VOCAB, 0.1), size=VOCAB)
    # stationary distribution: left eigenvector of the transition matrix for eigenvalue 1
    w, v = np.linalg.eig(table.T)
    pi = np.real(v[:, np.argmin(np.abs(w - 1))])
    pi = pi / pi.sum()
    return float(-(pi[:, None] * table * np.log(np.clip(table, 1e-300, None))).sum())


class MlpLM(nn.Module):
    """Bengio-style language model: embed the last CONTEXT tokens, one hidden layer, logits."""

    def __init__(self, emb: int = 16, hidden: int = 128, act: str = "tanh") -> None:
        super().__init__()
        self.act = torch.relu if act == "relu" else torch.tanh
        self.emb = nn.Embedding(VOCAB, emb)
        self.hidden = nn.Linear(CONTEXT * emb, hidden)
        self.out = nn.Linear(hidden, VOCAB)

    def forward(self, ctx: torch.Tensor) -> torch.Tensor:
        h = self.act(self.hidden(self.emb(ctx).flatten(1)))
        return self.out(h)


def lm_batch(tokens: torch.Tensor, gen: torch.Generator, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    start = torch.randint(0, len(tokens) - CONTEXT - 1, (size,), generator=gen)
    idx = start[:, None] + torch.arange(CONTEXT + 1)
    window = tokens[idx]
    return window[:, :CONTEXT], window[:, CONTEXT]


class RnnLM(nn.Module):
    """A vanilla tanh RNN language model (no gating: the classic exploding-gradient model)."""

    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 16)
        self.rnn = nn.RNN(16, hidden, batch_first=True, nonlinearity="tanh")
        self.out = nn.Linear(hidden, VOCAB)

    def forward(self, seq: torch.Tensor) -> torch.Tensor:
        h, _ = self.rnn(self.emb(seq))
        return self.out(h)


def seq_batch(tokens: torch.Tensor, gen: torch.Generator, size: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    start = torch.randint(0, len(tokens) - length - 1, (size,), generator=gen)
    idx = start[:, None] + torch.arange(length + 1)
    window = tokens[idx]
    return window[:, :-1], window[:, 1:]


LN_VOCAB = math.log(VOCAB)
