"""``trainaudit inspect`` on real tiny torch models written to a file, as a user would."""

from __future__ import annotations

import json
from pathlib import Path

import torch

import pytest

from shared_data import run_cli
from trainaudit.errors import InputError
from trainaudit.inspect.model import inspect_target


def _ins(*args: str, **kw: object) -> dict:
    """In process (torch is already imported; a CLI subprocess per case would cost seconds each)."""
    return inspect_target(*args, **kw).to_dict()  # type: ignore[arg-type]

MODEL_PY = '''
import torch
from torch import nn

class TinyLM(nn.Module):
    """A small language model whose embedding table dominates: vocab 4000 x 64."""
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(4000, 64)
        self.layers = nn.ModuleList([nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64)) for _ in range(2)])
        self.norm = nn.LayerNorm(64)
        self.head = nn.Linear(64, 50)
    def forward(self, x):
        h = self.embed(x).mean(1)
        for layer in self.layers:
            h = h + layer(h)
        return self.head(self.norm(h))

def build_model():
    torch.manual_seed(0)
    return TinyLM()

def build_dead():
    m = build_model()
    with torch.no_grad():
        m.layers[1][0].bias.fill_(-100.0)   # every unit of this ReLU is off for any input
    return m

def build_saturated():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))

def big_inputs():
    torch.manual_seed(1)
    return torch.randn(32, 8) * 1000, torch.randint(0, 3, (32,))

def sample_batch():
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 4000, (16, 6), generator=g), torch.randint(0, 50, (16,), generator=g)
'''

EMB, BLOCK, NORM, HEAD = 4000 * 64, 2 * (64 * 128 + 128 + 128 * 64 + 64), 2 * 64, 64 * 50 + 50


def _write(tmp: Path) -> Path:
    p = tmp / "model.py"
    p.write_text(MODEL_PY)
    return p


def test_parameter_shares_and_embedding_imbalance(tmp_path: Path) -> None:
    p = _write(tmp_path)
    res = run_cli("inspect", f"{p}:build_model", "--json")
    assert res.returncode == 1, res.stderr  # the imbalance is a finding above info
    ins = json.loads(res.stdout)
    total = EMB + BLOCK + NORM + HEAD
    assert ins["total_params"] == total == ins["trainable_params"]
    assert ins["by_kind"] == {"embedding": EMB, "blocks": BLOCK, "norm": NORM, "head": HEAD}
    assert ins["dtypes"] == {"float32": total}
    imb = [f for f in ins["findings"] if f["rule"] == "INS301"]
    assert len(imb) == 1 and imb[0]["data"]["value"] == round(EMB / total, 4)  # 0.9 of the parameters
    text = run_cli("inspect", f"{p}:build_model").stdout
    assert f"embeddings hold {EMB / total:.0%} of the parameters" in text


def test_sample_batch_gradient_flow_finds_the_dead_relu(tmp_path: Path) -> None:
    p = _write(tmp_path)
    ins = _ins(f"{p}:build_dead", f"{p}:sample_batch")
    checks = {f["rule"]: f["data"] for f in ins["findings"]}
    assert checks["INS202"]["where"] == ["layers.1.1"] and checks["INS202"]["value"] == 1.0
    # the dead ReLU cuts the gradient of the layer in front of it and of the weight behind it
    assert checks["INS201"]["where"] == ["layers.1.0.weight", "layers.1.0.bias", "layers.1.2.weight"]
    assert ins["activations"]["layers.0.1"]["dead_share"] < 0.5
    assert ins["loss"] > 0 and ins["peak_mem_mb"] is not None
    healthy = _ins(f"{p}:build_model", f"{p}:sample_batch")
    assert not [f for f in healthy["findings"] if f["rule"] in ("INS202", "INS201", "MON202")]


def test_saturated_tanh_and_fail_on(tmp_path: Path) -> None:
    p = _write(tmp_path)
    res = run_cli("inspect", f"{p}:build_saturated", "--sample-batch", f"{p}:big_inputs", "--fail-on", "medium")
    assert res.returncode == 1
    assert "INS203 [medium] 1: " in res.stdout and "saturated" in res.stdout


def test_state_dict_frozen_and_dtype_mix(tmp_path: Path) -> None:
    p = _write(tmp_path)
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("inspect_model_fixture", p)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["inspect_model_fixture"] = mod  # so a whole module can be pickled and unpickled
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    model = mod.build_model()
    model.head.to(torch.float64)
    torch.save(model.state_dict(), tmp_path / "sd.pt")
    ins = _ins(str(tmp_path / "sd.pt"))
    assert ins["dtypes"] == {"float32": EMB + BLOCK + NORM, "float64": HEAD}
    assert any(f["rule"] == "INS302" and f["severity"] == "low" for f in ins["findings"])
    # a whole pickled module needs an explicit opt-in
    torch.save(model, tmp_path / "whole.pt")
    with pytest.raises(InputError, match="--unsafe-load"):
        _ins(str(tmp_path / "whole.pt"))
    for prm in model.embed.parameters():
        prm.requires_grad_(False)
    torch.save(model, tmp_path / "whole.pt")
    ok = _ins(str(tmp_path / "whole.pt"), unsafe_load=True)
    frozen = next(f for f in ok["findings"] if f["rule"] == "MON203")
    # 90 % frozen: medium, as the live monitor rates it
    assert frozen["data"]["where"] == ["embed.weight"] and frozen["severity"] == "medium" and ok["trainable_params"] == BLOCK + NORM + HEAD


def test_bad_inputs(tmp_path: Path) -> None:
    p = _write(tmp_path)
    for spec, what in ((f"{p}:nope", "has no function"), (str(tmp_path / "missing.py") + ":f", "not found"),
                       (str(tmp_path), "is a directory")):
        with pytest.raises(InputError, match=what):
            _ins(spec)
    res = run_cli("inspect", f"{p}:nope")  # the CLI: one line, exit 2
    assert res.returncode == 2 and "has no function" in res.stderr and res.stderr.count("\n") == 1, res.stderr
