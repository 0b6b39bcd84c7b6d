"""Synth cases trained through the real HF ``Trainer`` and PyTorch Lightning ``Trainer``.

The other cases write framework-*style* files from our own loop; these run the frameworks
themselves (tiny models built from configs, generated data, CPU, no downloads) and keep what
they really wrote: the console (stdout and stderr as one stream, progress bars included, as a
``> stdout.log 2>&1`` redirect would), HF's ``trainer_state.json`` and Lightning's CSVLogger
``metrics.csv``. Labels are derived from those files, like every other case.

Registered in the catalogue only when ``transformers`` (with ``accelerate``) / ``lightning``
are importable; ``PYTHONPATH=tools python -m synth --list`` shows which library a case needs.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from synth.cases import Case, GroundTruthError, Truth, arr, healthy_truth, require, smooth
from synth.runlog import RunLog

K = 120  # the step the faults are injected at (1-based optimizer step)
STEPS = 200

HF_LIBS = ("transformers", "accelerate")
PL_LIBS = ("lightning",)


def libraries_present(libs: tuple[str, ...]) -> bool:
    """``find_spec`` only: listing the catalogue must not pay for importing transformers."""
    return all(importlib.util.find_spec(lib) is not None for lib in libs)


def needs(case: Case) -> str:
    """The library a framework case needs (for ``--list``)."""
    return "transformers" if "transformers" in case.tags else "lightning" if "lightning" in case.tags else ""


@contextlib.contextmanager
def _console(path: Path) -> Any:
    """stdout and stderr of the framework into one file (tqdm writes its bars to stderr, the
    HF log dicts and Lightning's messages to stdout)."""
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            yield
    finally:
        path.write_text(buf.getvalue(), encoding="utf-8")


def _not_direct() -> RunLog:
    raise RuntimeError("framework cases are run by synth.frameworks.run(case, out_dir)")


# --- HF Trainer ---------------------------------------------------------------------------------

SEQ = 16  # tokens per GPT-2 training sequence


def _gpt2(seed: int) -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    from synth import tasks

    tasks.setup(seed)
    cfg = GPT2Config(vocab_size=tasks.VOCAB, n_positions=SEQ, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return tasks.perturb(GPT2LMHeadModel(cfg))


def _lm_dataset(n: int, seed: int) -> Any:
    import torch

    from synth import tasks

    tokens = tasks.corpus(40_000, seed=7)
    start = torch.randint(0, len(tokens) - SEQ - 1, (n,), generator=torch.Generator().manual_seed(seed))
    seqs = tokens[start[:, None] + torch.arange(SEQ)]

    class Sequences(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return len(seqs)

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {"input_ids": seqs[i], "labels": seqs[i]}  # GPT-2 shifts the labels itself

    return Sequences()


def _mixture_dataset(n: int, seed: int) -> Any:
    import torch

    from synth import tasks

    data = tasks.mixture(n, seed)

    class Points(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return len(data.y)

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {"x": data.x[i], "labels": data.y[i]}

    return Points()


def _classifier(seed: int) -> Any:
    """An MLP the HF Trainer trains like any model returning ``{"loss", "logits"}``."""
    import torch
    from torch import nn

    from synth import tasks

    tasks.setup(seed)

    class Classifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = tasks.perturb(tasks.mlp(20, 64, 8))

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            logits = self.net(x)
            return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}

    return Classifier()


def _nan_collator(nan_at: int) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
    """HF's default collator, except that batch ``nan_at`` (1-based, = optimizer step without
    accumulation) gets one NaN feature: a corrupt record in the data."""
    import torch

    def nan(batch: dict[str, Any]) -> None:
        batch["x"][3, 5] = torch.nan

    return collator_at(nan_at, nan)


def collator_at(at: int, change: Callable[[dict[str, Any]], Any]) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
    """HF's default collator, except that batch ``at`` (1-based) is handed to ``change`` (which
    edits it in place, or returns a replacement)."""
    from transformers import default_data_collator

    made = 0

    def collate(features: list[dict[str, Any]]) -> dict[str, Any]:
        nonlocal made
        batch: dict[str, Any] = default_data_collator(features)
        made += 1
        if made == at:
            new = change(batch)
            batch = new if isinstance(new, dict) else batch
        return batch

    return collate


def _hf_train(case_dir: Path, model: Any, dataset: Any, *, seed: int, lr: float, batch: int = 32,
              scheduler: str = "constant", warmup: int = 0, factor: Callable[[int], float] | None = None,
              max_grad_norm: float = 1.0, callbacks: list[Any] | None = None,
              data_collator: Callable[[list[dict[str, Any]]], dict[str, Any]] | None = None,
              logging_steps: int = 1, steps: int = STEPS, eval_dataset: Any = None,
              eval_steps: int = 0) -> list[dict[str, Any]]:
    """Train ``steps`` steps logging every ``logging_steps`` (evaluating every ``eval_steps`` on
    ``eval_dataset`` when given); writes ``stdout.log`` and ``trainer_state.json``. ``factor(step)`` (1-based step) multiplies the lr through a
    ``LambdaLR`` handed to the Trainer (its scheduler steps once per optimizer step)."""
    import torch
    from transformers import Trainer, TrainingArguments

    from synth import tasks

    seed = tasks.seed(seed)  # the Trainer seeds torch itself, from this
    args = TrainingArguments(output_dir=str(case_dir / "hf-output"), max_steps=steps, per_device_train_batch_size=batch,
                             learning_rate=lr, lr_scheduler_type=scheduler, warmup_steps=warmup, logging_steps=logging_steps,
                             max_grad_norm=max_grad_norm, save_strategy="no", report_to=[], use_cpu=True, seed=seed,
                             data_seed=seed, dataloader_num_workers=0, disable_tqdm=False,
                             **({"eval_strategy": "steps", "eval_steps": eval_steps} if eval_dataset is not None else {}))
    optimizers: tuple[Any, Any] = (None, None)
    if factor is not None:
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
        optimizers = (opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda i: factor(i + 1)))
    with _console(case_dir / "stdout.log"):
        trainer = Trainer(model=model, args=args, train_dataset=dataset, optimizers=optimizers, callbacks=callbacks,
                          data_collator=data_collator, eval_dataset=eval_dataset)
        trainer.train()
    trainer.state.save_to_json(str(case_dir / "trainer_state.json"))
    with contextlib.suppress(OSError):  # nothing is saved there (save_strategy="no"); drop the empty folder
        (case_dir / "hf-output").rmdir()
    return [{"path": "stdout.log", "format": "hf", "metrics": ["loss", "grad_norm", "learning_rate", "epoch"]},
            {"path": "trainer_state.json", "format": "hf_trainer_state",
             "metrics": ["loss", "grad_norm", "learning_rate", "epoch"]}]


def hf_log(case_dir: Path) -> RunLog:
    """The run as ``trainer_state.json`` recorded it (``learning_rate`` as ``lr``)."""
    state = json.loads((case_dir / "trainer_state.json").read_text(encoding="utf-8"))
    log = RunLog(total_steps=int(state["max_steps"]))
    for entry in state["log_history"]:
        if "loss" in entry and "train_runtime" not in entry:
            log.log(int(entry["step"]), loss=entry["loss"], grad_norm=entry["grad_norm"], lr=entry["learning_rate"])
    return log


def run_hf_healthy(case_dir: Path, callbacks: list[Any] | None = None) -> tuple[RunLog, list[dict[str, Any]]]:
    files = _hf_train(case_dir, _gpt2(81), _lm_dataset(STEPS * 32, 81), seed=81, lr=3e-3, scheduler="cosine", warmup=20,
                      callbacks=callbacks)
    return hf_log(case_dir), files


def run_hf_lr_jump(case_dir: Path, callbacks: list[Any] | None = None) -> tuple[RunLog, list[dict[str, Any]]]:
    # The loss can only rise from its best (near the corpus entropy, 1.85) to about chance level
    # (ln 32 = 3.47) before the gradient norm explodes and that becomes the story: 4e-3 brings the
    # best down to 1.94, so the rise (1.65x) keeps a margin of 2 over the divergence rule's 1.3x.
    files = _hf_train(case_dir, _gpt2(82), _lm_dataset(STEPS * 32, 82), seed=82, lr=4e-3,
                      factor=lambda s: 1.0 if s < K else 50.0, callbacks=callbacks)
    return hf_log(case_dir), files


def run_hf_nan_batch(case_dir: Path, callbacks: list[Any] | None = None) -> tuple[RunLog, list[dict[str, Any]]]:
    files = _hf_train(case_dir, _classifier(83), _mixture_dataset(STEPS * 32, 83), seed=83, lr=1e-3,
                      data_collator=_nan_collator(K),
                      callbacks=callbacks)
    return hf_log(case_dir), files


def truth_hf_lr_jump(log: RunLog) -> Truth:
    s, lr = arr(log, "lr")
    _, loss = arr(log, "loss")
    require(float(lr[s == K][0]) / float(lr[s == K - 1][0]) >= 50, f"no lr jump at {K}")
    require(bool(np.isfinite(loss).all()), "loss became non-finite")
    pre = float(np.median(loss[(s >= K - 20) & (s < K)]))
    post = float(np.median(loss[(s > K) & (s <= K + 30)]))
    tail = float(np.median(loss[s > STEPS - 20]))
    require(post > 1.3 * pre and tail > 1.3 * pre, f"loss did not rise and stay up ({pre:.3f} -> {post:.3f}, {tail:.3f})")
    return Truth(K, (K, K + 5), K, {"lr_before": float(lr[s == K - 1][0]), "lr_after": float(lr[s == K][0]),
                                    "loss_before": pre, "loss_after": post, "loss_end": tail})


def truth_hf_hidden_nan(log: RunLog) -> Truth:
    """HF's ``logging_nan_inf_filter`` replaces a NaN loss by the mean of the interval's earlier
    losses (none with ``logging_steps=1``): the file shows loss 0.0 with ``grad_norm`` NaN."""
    s, g = arr(log, "grad_norm")
    _, loss = arr(log, "loss")
    require(bool(np.isfinite(g[s < K]).all()) and bool(np.isnan(g[s >= K]).all()), f"grad_norm not NaN exactly from {K}")
    require(bool(np.all(loss[s >= K] == 0.0)), f"logged loss is not the filtered 0.0 from {K}")
    require(bool(np.all(loss[s < K] > 0.0)), "a zero loss before the NaN batch")
    return Truth(K, (K, K), K, {"last_finite_loss": float(loss[s < K][-1]), "logged_loss_after": 0.0})


# --- PyTorch Lightning --------------------------------------------------------------------------


def _pl_module(net: Any, *, opt: str, lr: float, factor: Callable[[int], float] | None = None,
               log_grad_norm: bool = True, corrupt: Callable[[int, Any], Any] | None = None) -> Any:
    """``corrupt(step, x)`` (1-based optimizer step) rewrites a batch's inputs: a bad record."""
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.utilities import grad_norm
    from torch import nn

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def training_step(self, batch: Any, _idx: int) -> torch.Tensor:
            x, y = batch
            if corrupt is not None:
                x = corrupt(self.global_step + 1, x)
            loss = nn.functional.cross_entropy(self.net(x), y)
            self.log("train_loss", loss, prog_bar=True)
            return loss

        def validation_step(self, batch: Any, _idx: int) -> None:
            x, y = batch
            self.log("val_loss", nn.functional.cross_entropy(self.net(x), y), prog_bar=True)

        def on_before_optimizer_step(self, optimizer: Any) -> None:
            if log_grad_norm:  # the documented Lightning recipe: logs grad_2.0_norm_total
                self.log("grad_2.0_norm_total", grad_norm(self.net, norm_type=2)["grad_2.0_norm_total"])

        def configure_optimizers(self) -> Any:
            o = (torch.optim.Adam(self.parameters(), lr=lr) if opt == "adam"
                 else torch.optim.SGD(self.parameters(), lr=lr, momentum=0.9))
            if factor is None:
                return o
            sched = torch.optim.lr_scheduler.LambdaLR(o, lambda i: factor(i + 1))
            return {"optimizer": o, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    return Module()


def _pl_fit(case_dir: Path, module: Any, train: tuple[Any, Any], val: tuple[Any, Any] | None, *, epochs: int,
            batch: int, callbacks: list[Any] | None = None) -> list[dict[str, Any]]:
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.callbacks import LearningRateMonitor, TQDMProgressBar
    from lightning.pytorch.loggers import CSVLogger

    from synth import tasks

    ds = torch.utils.data.TensorDataset(*train)
    loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True,
                                         generator=torch.Generator().manual_seed(tasks.seed(1)))
    val_loader = (torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*val), batch_size=256)
                  if val is not None else None)
    with _console(case_dir / "stdout.log"):
        trainer = pl.Trainer(max_epochs=epochs, accelerator="cpu", devices=1, log_every_n_steps=1,
                             logger=CSVLogger(str(case_dir), name="", version=""), default_root_dir=str(case_dir),
                             callbacks=[TQDMProgressBar(refresh_rate=1), LearningRateMonitor(logging_interval="step"),
                                        *(callbacks or [])],
                             enable_checkpointing=False, enable_model_summary=False, deterministic=True,
                             num_sanity_val_steps=0 if val is None else 2, limit_val_batches=None if val else 0)
        trainer.fit(module, loader, val_loader)
    (case_dir / "hparams.yaml").unlink(missing_ok=True)  # empty: the module has no hyperparameters
    csv_metrics = ["epoch", "train_loss", f"lr-{type(trainer.optimizers[0]).__name__}", "grad_2.0_norm_total"]
    return [{"path": "stdout.log", "format": "lightning", "metrics": ["train_loss"]},
            {"path": "metrics.csv", "format": "lightning_csv",
             "metrics": csv_metrics + (["val_loss"] if val is not None else [])}]


def pl_log(case_dir: Path) -> RunLog:
    """The run as CSVLogger wrote it, steps made 1-based (the CSV ``step`` counts optimizer steps
    done before the batch): ``train_loss`` as ``loss``, ``lr-*`` as ``lr``, ``grad_2.0_norm_total``
    as ``grad_norm``; validation rows go to ``evals``."""
    rows: dict[int, dict[str, float]] = {}
    log = RunLog()
    with (case_dir / "metrics.csv").open(encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            step = int(row["step"]) + 1
            if row.get("val_loss"):
                log.log_eval(step, val_loss=float(row["val_loss"]), epoch=float(row["epoch"]))
            for key, value in row.items():
                if not value or key in ("step", "val_loss"):
                    continue
                name = "loss" if key == "train_loss" else "lr" if key.startswith("lr-") else (
                    "grad_norm" if key == "grad_2.0_norm_total" else key)
                rows.setdefault(step, {})[name] = float(value)
    for step in sorted(rows):
        if "loss" in rows[step]:
            log.log(step, **rows[step])
    log.total_steps = max(rows) if rows else 0
    return log


def run_pl_healthy(case_dir: Path, callbacks: list[Any] | None = None, seed: int = 91,
                   lr: float = 1e-3) -> tuple[RunLog, list[dict[str, Any]]]:
    from synth import tasks

    tasks.setup(seed)
    data, val = tasks.mixture(4096, seed), tasks.mixture(1024, seed + 1)
    module = _pl_module(tasks.perturb(tasks.mlp(20, 64, data.num_classes)), opt="adam", lr=lr)
    files = _pl_fit(case_dir, module, (data.x, data.y), (val.x, val.y), epochs=3, batch=64, callbacks=callbacks)
    return pl_log(case_dir), files


def run_pl_classifier(case_dir: Path, seed: int, lr: float, corrupt: Callable[[int, Any], Any] | None = None,
                      epochs: int = 3) -> tuple[RunLog, list[dict[str, Any]]]:
    """:func:`run_pl_healthy` with another lr and a batch rewrite (``corrupt``)."""
    from synth import tasks

    tasks.setup(seed)
    data, val = tasks.mixture(4096, seed), tasks.mixture(1024, seed + 1)
    module = _pl_module(tasks.perturb(tasks.mlp(20, 64, data.num_classes)), opt="adam", lr=lr, corrupt=corrupt)
    files = _pl_fit(case_dir, module, (data.x, data.y), (val.x, val.y), epochs=epochs, batch=64)
    return pl_log(case_dir), files


def run_pl_nan_after_lr_jump(case_dir: Path, callbacks: list[Any] | None = None,
                             seed: int = 93) -> tuple[RunLog, list[dict[str, Any]]]:
    import torch

    from synth import tasks

    gen = tasks.setup(seed)
    tokens = tasks.corpus(40_000, seed=7)
    pairs = [tasks.lm_batch(tokens, gen, 64) for _ in range(STEPS)]
    x, y = torch.cat([p[0] for p in pairs]), torch.cat([p[1] for p in pairs])
    # SGD+momentum without clipping; the lr jumps x1000 at step K through the LambdaLR schedule
    module = _pl_module(tasks.perturb(tasks.MlpLM(act="relu")), opt="sgdm", lr=0.05,
                        factor=lambda s: 1.0 if s < K else 1000.0)
    files = _pl_fit(case_dir, module, (x, y), None, epochs=1, batch=64, callbacks=callbacks)
    return pl_log(case_dir), files


def run_pl_overfit(case_dir: Path, callbacks: list[Any] | None = None, seed: int = 94) -> tuple[RunLog, list[dict[str, Any]]]:
    from synth import tasks

    tasks.setup(seed)
    data = tasks.mixture(64, seed, label_noise=0.3)  # a tiny, noisy training set
    val = tasks.mixture(1024, seed + 1)
    module = _pl_module(tasks.perturb(tasks.mlp(20, 256, data.num_classes)), opt="adam", lr=3e-3)
    files = _pl_fit(case_dir, module, (data.x, data.y), (val.x, val.y), epochs=50, batch=16, callbacks=callbacks)
    return pl_log(case_dir), files


def truth_pl_nan_after_lr_jump(log: RunLog) -> Truth:
    s, lr = arr(log, "lr")
    _, loss = arr(log, "loss")
    require(float(lr[s == K][0]) / float(lr[s == K - 1][0]) >= 100, f"no lr jump at step {K}")
    nan_steps = s[~np.isfinite(loss)]
    require(len(nan_steps) > 0, "loss never became NaN")
    first = int(nan_steps[0])
    require(K < first <= K + 10, f"first NaN at {first}, not within 10 steps after the lr jump at {K}")
    require(bool(np.isfinite(loss[s < first]).all()), "a non-finite loss before the first NaN")
    # metrics.csv numbers steps from 0: K in the CSV's own numbering is K - 1
    return Truth(K, (K - 1, first), K, {"first_nan_step": first, "lr_before": float(lr[s == K - 1][0]),
                                        "lr_after": float(lr[s == K][0]),
                                        "metrics_csv_step_of_fault": K - 1})


def truth_overfit(log: RunLog) -> Truth:
    s = np.array([int(e["step"]) for e in log.evals])
    v = np.array([e["val_loss"] for e in log.evals])
    sm = smooth(v, 3)
    j = int(np.argmin(sm))
    require(len(v) - 1 - j >= 5, "validation loss has no rising tail")
    vmin = float(v[max(0, j - 1): j + 2].min())
    rise = float(np.median(v[-3:])) / vmin - 1
    require(rise >= 0.3, f"validation loss rose only {rise:.0%} above its minimum")
    ts, loss = arr(log, "loss")
    at_min = float(np.median(loss[(ts > s[j] - 8) & (ts <= s[j])]))
    end = float(np.median(loss[-8:]))
    require(end < 0.7 * at_min, "training loss did not keep falling after the validation minimum")
    first = int(s[j + 1])
    per = int(s[1] - s[0])  # steps per epoch
    # in metrics.csv numbering (0-based): the first rising validation point, +- two epochs
    return Truth(first - 1, (first - 1 - 2 * per, first - 1 + 2 * per), None,
                 {"val_min": vmin, "val_min_step_csv": int(s[j]) - 1, "val_end": float(np.median(v[-3:])),
                  "rise": rise, "steps_per_epoch": per, "epochs": len(v), "loss_at_val_min": at_min, "loss_end": end,
                  "step_base": "metrics.csv step (0-based)",
                  "definition": "first validation point after the minimum of the rolling median (3) of val_loss"})


# --- registry -----------------------------------------------------------------------------------

Runner = Callable[..., tuple[RunLog, list[dict[str, Any]]]]  # (case_dir, callbacks=None)

RUNNERS: dict[str, Runner] = {
    "hf-trainer-healthy": run_hf_healthy,
    "hf-trainer-lr-jump": run_hf_lr_jump,
    "hf-trainer-nan-batch": run_hf_nan_batch,
    "lightning-healthy": run_pl_healthy,
    "lightning-nan-after-lr-jump": run_pl_nan_after_lr_jump,
    "lightning-overfit": run_pl_overfit,
}


def cases() -> list[Case]:
    """The framework cases whose libraries are installed."""
    out: list[Case] = []
    if libraries_present(HF_LIBS):
        tags = ("framework", "transformers")
        out += [
            Case("hf-trainer-healthy", "healthy", "hf-trainer",
                 "Tiny GPT-2 (2 layers, 32 dims, vocab 32, from a config) through the real HF Trainer: AdamW, "
                 "20-step warm-up then cosine, logging_steps=1; stdout and trainer_state.json as written.",
                 _not_direct, healthy_truth, tags=tags),
            Case("hf-trainer-lr-jump", "divergence", "hf-trainer",
                 f"Tiny GPT-2 through the HF Trainer; a LambdaLR schedule multiplies the lr by 50 at step {K} "
                 "(4e-3 -> 0.2): the loss jumps from near the corpus entropy to near chance level and stays up, "
                 "finite.",
                 _not_direct, truth_hf_lr_jump, tags=tags),
            Case("hf-trainer-nan-batch", "nan_inf", "hf-trainer",
                 f"MLP classifier through the HF Trainer; the batch of step {K} carries one NaN feature. HF's "
                 "logging_nan_inf_filter logs loss 0.0 with grad_norm nan from there (hidden NaN).",
                 _not_direct, truth_hf_hidden_nan, tags=tags),
        ]
    if libraries_present(PL_LIBS):
        tags = ("framework", "lightning")
        out += [
            Case("lightning-healthy", "healthy", "lightning",
                 "MLP classifier through the real Lightning Trainer (3 epochs, validation each epoch): TQDM "
                 "progress bar on the console and CSVLogger metrics.csv as written.",
                 _not_direct, healthy_truth, tags=tags),
            Case("lightning-nan-after-lr-jump", "nan_inf", "lightning",
                 f"MLP language model through Lightning, SGD+momentum without clipping; the LambdaLR schedule "
                 f"jumps the lr x1000 at step {K}: the loss blows up and is NaN a few steps later.",
                 _not_direct, truth_pl_nan_after_lr_jump, also_acceptable=("divergence",), tags=tags),
            Case("lightning-overfit", "overfitting", "lightning",
                 "Wide MLP on 64 noisy training points for 50 epochs through Lightning: val_loss reaches its "
                 "minimum early, then rises while train_loss keeps falling. Steps in metrics.csv numbering.",
                 _not_direct, truth_overfit, tags=tags),
        ]
    return out


def run(case: Case, out_dir: Path) -> tuple[list[dict[str, Any]], Truth]:
    """Train ``case`` through its framework into ``out_dir/<case>/``; returns (files, truth)."""
    case_dir = out_dir / case.name
    case_dir.mkdir(parents=True, exist_ok=True)
    log, files = RUNNERS[case.name](case_dir)
    try:
        truth = case.truth(log)
    except GroundTruthError as exc:
        raise GroundTruthError(f"case {case.name}: {exc}") from None
    return files, truth


__all__ = ["RUNNERS", "cases", "libraries_present", "needs", "run"]
