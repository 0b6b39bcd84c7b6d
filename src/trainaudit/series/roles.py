"""Which series plays which role: "the training loss", validation loss, grad norm, learning rate...

Frameworks name the same thing differently (``lm loss``, ``loss``, ``train/loss``,
``reduced_train_loss``, ``train_loss_step``). Names are normalised (lower case, ``/ - .``
and spaces to ``_``) and matched against an ordered list of exact names first, then a
keyword rule, so the most specific name wins. Per-rank copies (``name@rank3``) never take a role.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from trainaudit.model import EVAL_NAMES, EVAL_PREFIX, UNNAMED_VALUE, Run, Series

_SEP = re.compile(r"[\s/\-.]+")


def norm(name: str) -> str:
    return _SEP.sub("_", name.strip().lower()).strip("_")


# "va_rmse": LIBMF's (and LIBSVM-style tools') abbreviation of a validation set's metric
_VAL = re.compile(r"(^|_)(" + "|".join(EVAL_NAMES) + r")(_|$)|^va_")
# a loss of one player of a two-player game (a GAN's discriminator / generator or a WGAN's critic): it
# trades against the other player's loss, so it need not fall; "Loss_D" / "Loss_G" as PyTorch's DCGAN
# example prints them (https://github.com/pytorch/examples/blob/main/dcgan/main.py); "D_A", "G_B",
# "G_GAN", "D_real", "D_fake" as CycleGAN and pix2pix print theirs (the loss_names of
# https://github.com/junyanz/pytorch-CycleGAN-and-pix2pix/blob/master/models/cycle_gan_model.py and
# pix2pix_model.py)
_ADVERSARIAL = re.compile(r"(?:^|_)(?:d|g|disc|gen|discriminator|generator|critic)_loss(?:_|$)|"
                          r"(?:^|_)loss_(?:d|g|disc|gen|critic)(?:_|$)|^err_?[dg]$|^[dg]_(?:a|b|gan|real|fake)$")
# a peak counter (torch.cuda.max_memory_allocated: "the maximum GPU memory occupied by tensors ... since
# the beginning of this program", https://pytorch.org/docs/stable/generated/torch.cuda.max_memory_allocated.html;
# DeepSpeed's MaxMemAllocated): it can only rise, whatever the run does; AllenNLP's "cpu_memory_MB" is one too,
# the process's maximum resident set size (peak_cpu_memory in allennlp/common/util.py, from ru_maxrss)
_PEAK = re.compile(r"(?:^|_)(?:max|peak)|^cpu_memory_mb$")


def peak(name: str) -> bool:
    """Whether ``name`` is a running maximum (peak memory): a value that never decreases by definition."""
    return bool(_PEAK.search(norm(name)))


def validation(name: str) -> bool:
    """Whether ``name`` is an evaluation's metric (``val_loss``, ``eval/loss``, ``test acc``)."""
    return bool(_VAL.search(norm(name)))


# a score of the model's answers, higher is better: accuracy, ROUGE, BLEU, F1 (spaCy's "ENTS_F"), mAP, AUC,
# top-1, or a score named so (spaCy's "SCORE", "CATS_SCORE")
_SCORE = re.compile(r"acc|rouge|bleu|(?:^|_)f1(?:_|$)|_f$|(?:^|_)map(?:_|$)|(?:^|_)auc(?:_|$)|top1|(?:^|_)score(?:_|$)")


def score(name: str) -> bool:
    """Whether ``name`` is a score of the model's answers, higher being better (``val_acc``, ``eval/f1``)."""
    return bool(_SCORE.search(norm(name)))


# words of a metric's name that say which data set or how it was averaged, not which quantity it is
_SET_WORDS = frozenset({*EVAL_NAMES, "train", "training", "trn", "epoch", "step", "avg", "mean", "running"})


def same_quantity(a: str, b: str) -> bool:
    """Whether two metrics' names name the same quantity once the data set is set aside: "Validation Loss" and
    "Training Loss" do, "total_val_loss" and "total_loss" do, "val/box_loss" and "train/total_loss" do not (a
    component against the total)."""
    return {w for w in norm(a).split("_") if w not in _SET_WORDS} == {w for w in norm(b).split("_") if w not in _SET_WORDS}


def adversarial(name: str) -> bool:
    """Whether ``name`` is one player's loss in a two-player game (see ``_ADVERSARIAL``): a loss that
    keeps trading against another, not an objective that must fall."""
    return bool(_ADVERSARIAL.search(norm(name)))


# role -> (exact normalised names in priority order, keyword predicate)
_EXACT: dict[str, list[str]] = {
    "loss": ["lm_loss", "loss", "train_loss", "train_lm_loss", "training_loss", "reduced_train_loss",
             "train_loss_step", "train_loss_epoch", "total_loss", "train_total_loss", "loss_step", "trainer_loss",
             "train_ce_loss", "ce_loss", "train_loss_avg", "xent", "train_xent", "nll", "nll_loss", "cross_entropy",
             "crossentropy", "cost", "train_cost", "ce", "objective",
             # llm.c's main.log: "s:%d trl:%.4f lr:%.6f norm:%.2f", "s:%d tel:%.4f" (llmc/logger.h)
             "trl",
             # a regression's objective when nothing is named "loss" (a Keras metric "mse" beside "loss" comes
             # after it); DeepLearnToolbox's nntrain prints "Mean squared error is 0.5"
             "mse", "train_mse", "mean_squared_error"],
    "val_loss": ["val_loss", "valid_loss", "validation_loss", "eval_loss", "val_lm_loss", "lm_loss_validation",
                 "validation_lm_loss", "val_loss_epoch", "test_loss", "dev_loss", "eval_lm_loss", "tel"],
    # a validation perplexity, exp of the validation loss, in logs that print no validation loss (OpenNMT-py's
    # "Validation perplexity: 13.9", Sockeye's perplexity-val)
    "val_ppl": ["valid_ppl", "val_ppl", "validation_perplexity", "val_perplexity", "valid_perplexity", "eval_ppl",
                "eval_perplexity", "dev_ppl", "dev_perplexity", "perplexity_val"],
    "grad_norm": ["grad_norm", "gnorm", "train_grad_norm", "global_grad_norm", "grad_norm_total",
                  "grad_norm_2_0_norm_total", "gradient_norm", "train_gnorm", "total_grad_norm"],
    "lr": ["learning_rate", "lr", "train_learning_rate", "train_lr", "lr_adam", "lr_adamw", "lr_sgd", "lr_0"],
    "loss_scale": ["loss_scale", "scaler_scale", "grad_scale", "train_loss_scale", "loss_scaler"],
    "skipped": ["number_of_skipped_iterations", "skipped", "skipped_iters", "skipped_steps"],
    "nan_iters": ["number_of_nan_iterations", "nan_iterations"],
    "step_time": ["elapsed_time_per_iteration_(ms)", "iteration_time", "step_time", "time_per_step",
                  "train_step_time", "iter_time", "batch_time", "time_ms", "ms_per_step", "step_time_s", "dt_ms",
                  "sec_step", "s_step", "s_it", "sec_it", "s_iter", "sec_iter", "ms_it", "ms_iter", "ms_step", "per_step_time", "batch_cost",
                  "avg_batch_cost", "ms_batch", "time", "dt"],
    "data_time": ["data_time", "data", "data_wait", "data_wait_time", "dataloader_time", "data_loading_time",
                  "data_ms", "time_data", "load_time", "reader_cost", "avg_reader_cost"],
    "throughput": ["throughput_per_gpu_(tflop_s_gpu)", "tokens_per_sec", "tokens_per_second", "tps", "wps",
                   "samples_per_sec", "samples_per_second", "train_samples_per_second", "currsamplespersec",
                   "samplespersec", "throughput", "tflops", "mfu", "it_s", "it_sec", "iter_s", "its_s", "speed",
                   "samples_s", "samples_sec", "tok_s", "tokens_s", "img_s", "images_sec", "ips", "steps_s",
                   # TensorFlow's StepCounterHook: "global_step/sec: 81.2"
                   "global_step_sec"],
    "memory": ["mem_allocated_bytes", "memory_allocated", "cuda_gb_allocated", "memallocated", "mem_allocated",
               "gpu_memory", "memory", "max_memory_allocated", "mem_max_allocated_bytes", "memory_reserved",
               "cuda_gb_reserved", "maxmemallocated", "gpu_mem", "rss_mb", "rss", "host_rss_mb", "rss_gb", "mem",
               "cpu_mem", "host_mem", "max_mem"],
    "val_acc": ["val_accuracy", "val_acc", "eval_accuracy", "validation_accuracy", "valid_accuracy", "val_top1"],
    "train_acc": ["accuracy", "acc", "train_accuracy", "train_acc", "top1"],
}


_COUNTS = ("iterations", "timesteps", "steps", "updates", "epochs", "batches")
# Composer's timestamp, logged as "Train time/batch: 100", counts the units trained so far (and within the
# epoch), no duration (https://docs.mosaicml.com/projects/composer/en/stable/api_reference/generated/composer.core.Timestamp.html)
_TIME_COUNT = re.compile(r"^(?:train_)?time_(?:epoch|batch|sample|token)(?:_in_epoch)?$")
# an error metric evaluated on one of a run's data sets, round after round: XGBoost's "train-rmse" /
# "eval-logloss" / "validation_0-mlogloss"
# (https://xgboost.readthedocs.io/en/stable/parameter.html#learning-task-parameters), LightGBM's
# "training's l2" / "valid_0's binary_logloss", LIBMF's "tr_rmse" / "va_rmse" (https://github.com/cjlin1/libmf,
# mf.cpp); lower is better, as for a loss
_SET_ERROR = re.compile(r"^(?:train|training|tr|eval|valid|validation|va|test)(?:_\d+)?(?:'s)?_"
                        r"(?:binary_|multi_)?(?:rmse|rmsle|rmspe|mae|mape|logloss|mlogloss|error|merror|l1|l2|gkl)$")


def _keyword(role: str, n: str) -> bool:
    is_val = bool(_VAL.search(n))
    error = bool(_SET_ERROR.match(n))
    if role == "loss":
        return (("loss" in n or "entropy" in n or n == UNNAMED_VALUE or error) and not is_val
                and "scale" not in n and "balanc" not in n and "aux" not in n)
    if role == "val_loss":  # "entropy": Marian's validation "cross-entropy", as the training loss's role reads it
        return ("loss" in n or "entropy" in n or error) and is_val
    if role == "val_ppl":
        return ("ppl" in n.split("_") or "perplexity" in n) and is_val
    if role == "grad_norm":
        return ("grad" in n and "norm" in n) and not is_val
    if role == "lr":
        return n.startswith("lr_") or n.endswith("_lr") or "learning_rate" in n
    if role == "loss_scale":
        return "loss_scale" in n or n.endswith("scaler_scale")
    if role == "step_time":
        # a count is no time: Stable-Baselines3's time/iterations and time/total_timesteps count
        return ("time" in n and any(k in n for k in ("iter", "step", "batch", "delta", "epoch", "per"))
                and not is_val and "data" not in n and ("per" in n or not n.endswith(_COUNTS))
                and not _TIME_COUNT.match(n))
    if role == "throughput":
        # fps: environment steps per second in RL loggers (Stable-Baselines3's time/fps); an evaluation's
        # speed (the HF Trainer's eval_steps_per_second) is not the training's
        return (any(k in n for k in ("per_sec", "per_second", "tflop", "throughput", "tokens_s", "speed", "samples_s",
                                     "it_s", "it_sec")) or n == "fps" or n.endswith("_fps")) and not is_val
    if role == "memory":
        # a word that starts with "mem" (mem, MemAllocated) with a unit or a kind of memory anywhere else in
        # the name; "member_count" holds "mb" only inside the word
        words = n.split("_")
        at = next((i for i, w in enumerate(words) if w.startswith("mem")), None)
        rest = [] if at is None else [words[at][3:], *words[:at], *words[at + 1:]]
        return (any(k in w for w in rest for k in ("alloc", "reserved", "used", "gb", "mb", "bytes", "current", "peak",
                                                   "usage")) or "memory" in n
                or "rss" in words)  # rss_mb, train/rss_mb (TensorBoard tags carry prefixes)
    if role == "val_acc":
        return ("acc" in n) and is_val
    return False


ROLES: tuple[str, ...] = tuple(_EXACT)


@dataclass(slots=True)
class Roles:
    """Role -> series name chosen for it; ``ranks`` lists per-rank copies of step time."""

    names: dict[str, str] = field(default_factory=dict)
    layer_grad_norms: list[str] = field(default_factory=list)
    memory: list[str] = field(default_factory=list)  # every memory-like series, the role's first

    def get(self, run: Run, role: str) -> Series | None:
        name = self.names.get(role)
        return run.series.get(name) if name else None


def elapsed_clock(s: Series, min_points: int = 5) -> bool:
    """Whether ``s`` is a clock that runs through the run (Ultralytics' results.csv ``time``, a
    "train_time:418178ms"), not a time per step: it goes forward from one logged point to the next (a
    reset, as a per-epoch clock or a resumed run makes, aside) and grows about as the step does. A step
    time that grows (a slowdown) grows far slower than the step; a running average does not grow."""
    f = s.finite()
    f = f.take((f.values > 0) & (f.steps > 0))  # the clock's start (0 at step 0) says nothing of its pace
    if len(f) < min_points:
        return False
    dv, ds = np.diff(f.values), np.diff(f.steps)
    forward = int(np.sum((ds > 0) & (dv > 0)))
    # paced from its second point when it has more than it needs: the first may hold only the set-up
    # (StyleGAN's "tick 0 ... time 45s", then 293 s a tick)
    a = 1 if len(f) > min_points else 0
    span = (float(f.values[-1]) / float(f.values[a])) / (float(f.steps[-1]) / float(f.steps[a]))
    return forward >= max(min_points - 1, 0.9 * dv.size) and 0.5 <= span <= 2


def find_roles(run: Run) -> Roles:
    normed = {name: norm(name) for name in run.series if "@rank" not in name and len(run.series[name])
              and not (norm(name) in _EXACT["step_time"] and elapsed_clock(run.series[name]))}
    roles = Roles()
    taken: set[str] = set()
    # a GAN's training loss is a player's (which need not fall): the other losses it prints are terms
    # of a player's (GauGAN's feat_loss, vgg_loss, kl_loss), not an objective of their own
    game = any(adversarial(name) for name in normed)
    for role, exact in _EXACT.items():
        pick = None
        by_norm: dict[str, str] = {}
        for name, n in normed.items():
            by_norm.setdefault(n, name)
        # a series of one point (an end-of-training summary such as HF's train_samples_per_second)
        # takes a role only when no series of that role has more
        for cand in sorted(exact, key=lambda c: c in by_norm and len(run.series[by_norm[c]]) < 2):
            if cand in by_norm and by_norm[cand] not in taken:
                pick = by_norm[cand]
                break
        if pick is None or len(run.series[pick]) < 2:
            # (an exact name with one point, an end-of-epoch summary such as "Training Loss: 3.1356", yields to
            # a series of the role with more: GNMT's per-iteration "Loss/tok")
            # the validation counterpart of the training loss first (YOLOv3's "total_val_loss" beside
            # "total_loss", not its "conf_val_loss" component), then the shortest name
            train = roles.names.get("loss") if role == "val_loss" else None
            hits = sorted((name for name, n in normed.items() if name not in taken and _keyword(role, n)
                           and (pick is None or len(run.series[name]) >= 2)
                           and not (game and role == "loss" and not adversarial(name))),
                          key=lambda s: (train is None or not same_quantity(s, train), len(s), s))
            pick = hits[0] if hits else pick
        if pick is not None:
            roles.names[role] = pick
            taken.add(pick)
    val = roles.names.get("val_loss")
    if "loss" not in roles.names and val is not None and val.startswith(EVAL_PREFIX):
        # a log of evaluation lines only (Caffe's "Test net output #2: loss = 87.3", "eval epoch: 1, loss:
        # 119.7"): a loss read under an evaluation's heading is the only loss there is, so it is the loss
        roles.names["loss"] = roles.names.pop("val_loss")
    gn = roles.names.get("grad_norm")
    roles.layer_grad_norms = sorted(name for name, n in normed.items()
                                    if name != gn and "grad" in n and "norm" in n and not _VAL.search(n))
    mem = roles.names.get("memory")
    roles.memory = ([mem] if mem else []) + sorted(
        (name for name, n in normed.items() if name != mem and name not in taken and
         (n in _EXACT["memory"] or _keyword("memory", n)) and "total" not in n and "avail" not in n
         and "free" not in n and "percent" not in n), key=lambda x: (len(x), x))
    return roles
