"""Real HF Trainer runs on CPU for the run-vs-run tests, written as HF's example scripts leave them:
transformers logging at info on the console (``***** Running training *****``), the
``TrainingArguments`` printed (``run_clm.py``: ``logger.info(f"Training/evaluation parameters
{training_args}")``), the tqdm bar and log dicts, and ``trainer_state.json`` when training ends. A
crash leaves the console up to its traceback and no ``trainer_state.json``.

The model and data are the synth classifier's (an MLP on Gaussian blobs, ``tools/synth``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

from synth import frameworks

DATASET = 200 * 32  # every run draws from the same examples, whatever its length


@dataclass(frozen=True)
class Spec:
    steps: int = 200
    lr: float = 1e-3
    seed: int = 1
    crash_at: int | None = None  # a callback raises at the end of this optimizer step


def train(out: Path, spec: Spec) -> Path:
    import transformers
    from transformers import Trainer, TrainerCallback, TrainingArguments

    out.mkdir(parents=True, exist_ok=True)
    callbacks = []
    if spec.crash_at is not None:
        crash_at = spec.crash_at

        class Crash(TrainerCallback):  # type: ignore[misc]
            def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
                if state.global_step == crash_at:
                    raise RuntimeError("DataLoader worker (pid 4242) is killed by signal: Bus error.")

        callbacks.append(Crash())
    console = io.StringIO()
    with contextlib.redirect_stdout(console), contextlib.redirect_stderr(console):
        handler = logging.StreamHandler(sys.stdout)
        transformers.logging.disable_default_handler()
        transformers.logging.add_handler(handler)
        transformers.logging.set_verbosity_info()
        try:
            args = TrainingArguments(output_dir=str(out / "hf-output"), max_steps=spec.steps,
                                     per_device_train_batch_size=32, learning_rate=spec.lr,
                                     lr_scheduler_type="constant_with_warmup", warmup_steps=10, logging_steps=1,
                                     eval_strategy="steps", eval_steps=20, save_strategy="no", report_to=[],
                                     use_cpu=True, seed=spec.seed, dataloader_num_workers=0, disable_tqdm=False)
            print(f"Training/evaluation parameters {args}")
            trainer = Trainer(model=frameworks._classifier(spec.seed), args=args,
                              train_dataset=frameworks._mixture_dataset(DATASET, 7),
                              eval_dataset=frameworks._mixture_dataset(256, 99), callbacks=callbacks)
            try:
                trainer.train()
                trainer.state.save_to_json(str(out / "trainer_state.json"))
            except RuntimeError:
                print(traceback.format_exc(), end="")
        finally:
            transformers.logging.remove_handler(handler)
            transformers.logging.enable_default_handler()
            transformers.logging.set_verbosity_warning()
    (out / "stdout.log").write_text(console.getvalue(), encoding="utf-8")
    with contextlib.suppress(OSError):
        (out / "hf-output").rmdir()
    return out


class _Stdout:
    """A stream that writes to whatever ``sys.stdout`` is at the time (the run's captured console)."""

    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()


def train_lightning(out: Path, epochs: int) -> Path:
    """The synth Lightning classifier (``frameworks.run_pl_classifier``) for ``epochs`` epochs, with
    Lightning's own info messages on its console as ``python train.py > stdout.log 2>&1`` keeps them
    (``Trainer.fit`` stopped: ``max_epochs=N`` reached.)."""
    out.mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger("lightning.pytorch")
    handler = logging.StreamHandler(_Stdout())  # type: ignore[arg-type]
    logger.addHandler(handler)
    try:
        frameworks.run_pl_classifier(out, 95, 1e-3, epochs=epochs)
    finally:
        logger.removeHandler(handler)
    return out
