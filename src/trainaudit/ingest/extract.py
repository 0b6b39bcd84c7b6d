"""Numbers from any text log: step counters and metric pairs in every common spelling.

Used for text that no specific reader claims, and for what a specific reader leaves unread.
One physical line at a time (:func:`parse_line`), then per file (:class:`Extractor`): which key is
the step counter is decided from the data (a known counter name whose values are integral and
mostly increasing), so ``s:9465`` counts as a step when it behaves like one.

A line is read in three stages, each linear in its length:

1. the *preamble* is dropped: timestamps, log levels, logger names, glog's
   ``I0305 10:11:12.123456  4242 solver.cpp:218]`` (PID and source line), horovod's
   ``[1,0]<stdout>:``, Markdown quote marks. Those numbers are never metrics;
2. the rest is cut into tokens by one regular expression whose alternatives are anchored and
   bounded (dates, clock times and version strings are tokens of their own, so they never
   become values);
3. a small state machine turns tokens into ``key -> value`` pairs (``k: v``, ``k = v``,
   ``k=v``, ``k v``, ``'k': v``, ``"k": v``, ``Epoch[3]``, ``iter 100/500``,
   ``tensor(2.3, device='cuda:0')``, ``[2526.27]``), unit-keyed speeds (``512.1 samples/sec``,
   ``43.2it/s``, ``0.512 sec/step``) and the bare numbers of table rows.

Tables (Markdown, ASCII or whitespace-aligned, with or without a header) are rows of bare numbers:
their columns take the header's names, or ``col1``, ``col2`` ... without one.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
import re
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from trainaudit.model import EVAL_NAMES, EVAL_PREFIX, UNNAMED, UNNAMED_VALUE, column_name

# -- stage 1: preambles ------------------------------------------------------------------------
_LEVEL = r"(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL|TRACE|NOTICE)"
_PREAMBLES = [
    # glog / absl: I0305 10:11:12.123456  4242 solver.cpp:218]
    # (the thread id is a 15-digit pthread id in TensorFlow's logs: "I0912 11:40:27.956218 139735407601536")
    re.compile(r"[IWEF]\d{4} \d\d:\d\d:\d\d(?:\.\d+)? {1,8}\d{1,20} [\w.\-/]{1,200}:\d{1,8}\] ?"),
    # the same with the year and the logger's name: DINOv2's "I20250119 10:05:11 90 dinov2 helpers.py:102] "
    # (dinov2/logging/__init__.py: "%(levelname).1s%(asctime)s %(process)s %(name)s %(filename)s:%(lineno)s] ")
    re.compile(r"[IWEF]\d{8} \d\d:\d\d:\d\d(?:\.\d+)? {1,8}\d{1,20} (?:[\w.\-]{1,120} )?[\w.\-/]{1,200}:\d{1,8}\] ?"),
    # PyTorch profiler's (kineto's) logger: "STAGE:2025-04-07 10:29:46 22264:22264 ActivityProfilerController.cpp:314]"
    # (a tag, the time, pid:tid, the source location; https://github.com/pytorch/kineto, libkineto/src)
    re.compile(r"[A-Z]{1,10}:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d{1,10}:\d{1,10} [\w.\-/]{1,200}:\d{1,8}\] ?"),
    # ISO-like dates with an optional time: 2020-03-02 11:02:10,551 / [2018-11-26 14:47:26,759 INFO]
    re.compile(r"\[?\d{4}[-/.]\d\d[-/.]\d\d(?:[ T_]\d\d:\d\d(?::\d\d)?(?:[.,:]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?)?"
               r"(?: [\w.\-]{1,120}(?=\]))?(?: {1,4}" + _LEVEL + r")?\]? ?[:|,-]? ?"),
    # syslog (RFC 3164): "Oct 12 10:11:12 host kernel: ", "Oct 12 10:11:13 host sshd[4242]: "
    re.compile(r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d \d\d:\d\d:\d\d [\w.\-]{1,120} "
               r"[\w.\-/]{1,120}(?:\[\d{1,10}\])?: ?"),
    # a day and a month's name with a clock: RecBole's logger ("27 Nov 14:49", datefmt "%d %b %H:%M",
    # https://github.com/RUCAIBox/RecBole/blob/master/recbole/utils/logger.py), "Nov 27 2022 14:49:09"
    re.compile(r"(?:\d{1,2} (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)|(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep"
               r"|Oct|Nov|Dec) [ \d]\d)(?: \d{4})? \d\d:\d\d(?::\d\d(?:[.,]\d{1,9})?)? ?"),
    # qlib's logger: "[%(process)s:%(threadName)s](%(asctime)s) %(levelname)s - %(name)s - [%(filename)s:%(lineno)d] "
    # (https://github.com/microsoft/qlib/blob/main/qlib/config.py, logging_config)
    re.compile(r"\[\d{1,10}:[\w\-]{1,60}\]\(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d{1,9})?\) ?(?:" + _LEVEL +
               r" - [\w.\-]{1,120} - )?"),
    # OLMo's logger after its time: "agile-bird-purrs-fin-03:0\tolmo.train:990\tINFO\t", the host and local rank,
    # then the logger and line (olmo/util.py: "%(asctime)s\t%(hostname)s:%(local_rank)s\t%(name)s:%(lineno)s\t...")
    re.compile(r"[\w.\-]{1,120}:\d{1,5}\s{1,8}[\w.]{1,120}:\d{1,8}\s{1,8}(?=" + _LEVEL + r"\b)"),
    # C's ctime(): "Sun Jan 31 00:02:53 2021"
    re.compile(r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d "
               r"\d\d:\d\d:\d\d \d{4} ?"),
    # detectron2 / fvcore's logger: [02/10 22:55:41 d2.engine.train_loop]:
    re.compile(r"\[\d\d/\d\d \d\d:\d\d:\d\d(?: [\w.\-]{1,120})?\]:? ?"),
    # 08/11/20 13:38:30, 11/26/2018 14:47
    re.compile(r"\d\d/\d\d/\d{2,4} \d\d:\d\d(?::\d\d)? ?-? ?"),
    # a leading clock time or elapsed time: [12:01:33], 1 day, 22:12:26 -, [  +0.000316]
    re.compile(r"\[?(?:\d{1,4} days?, )?\d{1,3}:\d\d:\d\d(?:[.,]\d{1,9})?\]? ?-? ?"),
    re.compile(r"\[ {0,12}\+?\d{1,9}\.\d{1,9}\] ?"),
    # INFO:root: / INFO:tensorflow: / WARNING:absl:
    re.compile(_LEVEL + r":[\w.]{1,80}:"),
    # log levels, alone or bracketed: INFO  | [INFO] | INFO -
    re.compile(r"\[?" + _LEVEL + r"\]? {0,8}(?:[-:|] ?)?"),
    # logger locations: (trainer:581), [logging.py:60:log_dist], mod.func:train:86 -, and with the level
    # inside: [trainer.py:150 - INFO ] ("[%(filename)s:%(lineno)s - %(levelname)s ]")
    # (and OLMo's rich handler, "[olmo.train:729, rank=0]")
    re.compile(r"[(\[][\w.\-/]{1,120}(?::\w{1,60}){0,2}:\d{1,8}(?::\w{1,60})?(?: - " + _LEVEL + r" ?|, rank=\d{1,6})?"
               r"[)\]] ?[-:]? ?"),
    re.compile(r"\| ?[\w.]{1,120}(?::\w{1,60}){1,2}:\d{1,8} ?- ?"),
    # Swin-Transformer's logger.py: "[%(asctime)s %(name)s] (%(filename)s %(lineno)d): %(levelname)s"
    re.compile(r"\([\w.\-/]{1,120}\.py \d{1,8}\):? ?"),
    # pycls's logger (and SlowFast's): "[%(filename)s: %(lineno)3d]: %(message)s", the line number padded
    # (https://github.com/facebookresearch/pycls/blob/main/pycls/core/logging.py)
    re.compile(r"\[[\w.\-/]{1,120}\.py: {1,4}\d{1,8}\]:? ?"),
    re.compile(r"\[\d{1,5},\d{1,5}\]<std(?:out|err)>: ?"),  # mpirun / horovod rank tags
    re.compile(r"DLL "),  # NVIDIA dllogger
    re.compile(r"> ?"),  # Markdown quote
    # [deepspeed], [user], [R0]; ESPnet's "[host:rank/world]" (espnet2/tasks/abs_task.py); not an evaluation's
    # tag, which says whose the line's metrics are (Marian's "[valid] Ep. 2 : Up. 40000 : perplexity : 6.0992")
    re.compile(r"\[(?!(?i:" + "|".join(EVAL_NAMES) + r")\])(?:[A-Za-z_][\w.\-]{0,40}(?::\d{1,5}/\d{1,5})?|R\d{1,4}"
               r"|rank ?\d{1,5})\] ?"),
    re.compile(r"[|\- ] "),  # separators left between preamble fields
]
_MAX_PREAMBLES = 8


def strip_preamble(text: str) -> str:
    pos = 0
    for _ in range(_MAX_PREAMBLES):
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        for pat in _PREAMBLES:
            m = pat.match(text, pos)
            if m is not None and m.end() > pos:
                pos = m.end()
                break
        else:
            break
    return text[pos:]


# -- stage 2: tokens ---------------------------------------------------------------------------
_NUMBER = r"[-+]?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d*)?(?:[eE][-+]?\d+)?|[-+]?\.\d+(?:[eE][-+]?\d+)?"
_TOKEN_RE = re.compile(
    r"(?P<date>\d{4}[-/]\d\d[-/]\d\d(?:[ T_]\d\d:\d\d(?::\d\d)?(?:[.,]\d+)?)?)"
    r"|(?P<clock>\d{1,4}:\d\d(?::\d\d)?(?:[.,]\d+)?)"
    r"|(?P<ver>v?\d+\.\d+\.\d+[\w.+\-]*)"
    r"|(?P<tensor>tensor\()"
    r"|(?P<special>(?i:[-+]?(?:nan|inf(?:inity)?)(?:\(ind\))?)(?![A-Za-z0-9_])|[-+]?1\.#(?:INF|IND|QNAN)\d*)"
    r"|(?P<num>" + _NUMBER + r")(?P<unit>%|[A-Za-z]{1,5}(?:/[A-Za-z]{1,7})?(?![\w/]))?"
    # words join with "-", "/" and ":" when a letter follows ("lr-SGD", "train/loss", "grad_norm:p2"),
    # and take a ":N" device index before a value ("mem_usage:cuda:0 67.8GB")
    # and take a call's device index: "torch.cuda.memory_reserved(1) 608174080"
    # ("train/loss:nan" is a key and its value, "step:2 - lr:..." a key and its value before a " - " separator)
    # and keep a possessive "'s" ("training's binary_logloss: 0.71  valid_1's binary_logloss: 0.71", LightGBM's
    # lightgbm/callback.py log_evaluation): read as a quote, it would swallow the text up to the next one
    r"|(?P<word>[A-Za-z_][\w.@]*(?:(?:[-/]|:(?!(?i:nan|inf)(?![\w.@])))[A-Za-z_][\w.@]*)*(?:'s(?![\w']))?"
    r"(?::\d{1,3}(?= [-+]?[.\d])|\(\d{1,3}\)|-\d{1,3}(?= [A-Za-z]))?)"
    r"|(?P<str>'[^'\n]{1,120}'|\"[^\"\n]{1,120}\")"
    r"|(?P<space>[ \t]+)"
    r"|(?P<sep>.)"
)

_SPECIAL = {"nan": math.nan, "inf": math.inf, "infinity": math.inf}

# unit words that make a bare number a speed or a duration ("512.1 samples/sec", "0.5 sec/step")
SPEED_UNITS = frozenset({
    "it/s", "its/s", "iter/s", "iters/s", "s/it", "sec/it", "s/iter", "sec/iter", "samples/sec", "samples/s",
    "sample/s", "samples/second", "tokens/sec", "tokens/s", "tok/s", "toks/s", "img/s", "imgs/s", "images/sec",
    "images/s", "sec/step", "s/step", "steps/s", "step/s", "batches/s", "seq/s", "sequences/s", "wps", "ex/s",
    # a hand-written loop's time per step after its number ("| 45.3 ms/it |"; DLRM's "53.58 ms/it")
    "ms/it", "ms/iter", "ms/step", "ms/batch",
})
# keys that count something (a step) rather than measure it
COUNTER_KEYS = {
    "global step": 0, "global_step": 0, "globalstep": 0, "step": 1, "steps": 1, "train step": 1, "train_step": 1,
    "iteration": 2, "iter": 2, "iters": 2, "it": 3, "update": 2, "updates": 2, "num_updates": 2, "s": 4, "i": 5,
    "batch": 6, "sample": 6, "samples": 6, "epoch": 7, "ep": 7, "e": 8,
    # a reinforcement-learning loop's unit of progress ("***** Episode 31455, Mean R = 28911.0 *****")
    "episode": 6, "episodes": 6,
    # stable-baselines3 dumps its logger at the environment steps done so far (logger.dump(step=num_timesteps))
    "total_timesteps": 1, "num_timesteps": 1,
    # Ray Tune's result of one report (ray/tune/result.py: TRAINING_ITERATION, TIMESTEPS_TOTAL)
    "training_iteration": 2, "timesteps_total": 1,
    # "Epoch 0/7 itr 26/3489:" (the trainers of mks0601's I2L-MeshNet, Pose2Pose, Hand4Whole: main/base.py)
    "itr": 2,
    # k2-fsa's icefall-style trainers (ZipVoice's train_zipvoice.py): "Epoch 1, batch 3849, global_batch_idx: 3850",
    # the batch counted within the epoch, the index the whole run
    "global_batch_idx": 0,
}
# keys whose number is an identifier or a size, never a metric of the run
_IGNORED_KEYS = frozenset({
    "pid", "tid", "port", "line", "version", "ver", "node", "host", "seed", "id", "job", "job_id", "jobid", "uid",
    "gid", "pid=", "rank", "local_rank", "world_size", "gpu", "gpus", "device", "cuda", "worker", "workers",
    "num_workers", "dim", "size", "shape", "#", "sent", "pred", "gold", "layer", "layers", "block", "head", "class",
    "example", "python", "pytorch", "torch", "transformers", "tensorflow", "cudnn", "nccl", "eta",
})
# a key naming an index that qualifies the pairs after it on the line ("Layer 1: mean |grad| = ...")
_QUALIFIERS = frozenset({"layer", "block", "head", "stage", "level", "module", "group"})
MAX_KEY_WORDS = 6
# units printed in parentheses after a key: "elapsed time per iteration (ms)", "memory (MB)"
_KEY_UNITS = frozenset({"ms", "s", "sec", "secs", "seconds", "mb", "mib", "gb", "gib", "kb", "kib", "bytes", "b",
                        "tflops", "tokens", "samples"})
# tqdm prints "s/it" once an iteration takes longer than a second: one series, in iterations/s
_INVERSE_SPEED = {"s/it": "it/s", "sec/it": "it/s", "s/iter": "iter/s", "sec/iter": "iter/s"}


# the keys a speed pair takes (:func:`speed_pair`), lower case
RATE_KEYS = frozenset(_INVERSE_SPEED.get(u, u) for u in SPEED_UNITS)


_PAREN_DURATIONS = {"s": "time", "sec": "time", "ms": "time (ms)"}


def speed_pair(unit: str, v: float) -> Pair:
    inv = _INVERSE_SPEED.get(unit.lower())
    if inv is not None:
        return Pair(inv, 1.0 / v if v else math.inf, inv)
    return Pair(unit, v, unit)
# what a metric name without ':' or '=' before its value contains
_METRIC_PARTS = ("loss", "acc", "data", "lr", "ppl", "perplex", "norm", "time", "err", "score", "bleu", "f1", "map", "auc",
                 "reward", "kl", "entropy", "grad", "token", "tps", "wps", "mfu", "mem", "prec", "recall", "iou",
                 "psnr", "ssim", "dice", "cost", "xent", "nll", "ce", "speed", "throughput", "scale", "rate", "value",
                 "mse", "mae",
                 # memory by name: "rss 442.8 MB", "maxrss", "alloc 1.2 GB", "reserved", "vram"
                 "rss", "alloc", "reserv", "vram")


# the words of a duration after its number ("Took 62.275 seconds.")
_TIME_UNITS = frozenset({"ms", "s", "sec", "secs", "second", "seconds", "min", "mins", "minute", "minutes", "h",
                         "hour", "hours"})

# a data split naming the number after it: build-nanogpt's "55899 train 2.947076", qlib's "train nan, valid nan"
# (a loss or a score: which one, the word does not say)
_SPLITS = frozenset({"train", "training", *EVAL_NAMES})


def _metric_word(word: str) -> bool:
    w = word.lower()
    return any(c in w for c in "_/.@") or any(p in w for p in _METRIC_PARTS)


def number(text: str) -> float | None:
    t = text.replace(",", "") if "," in text else text
    try:
        return float(t)
    except ValueError:
        low = t.lower().lstrip("+")
        neg = low.startswith("-")
        low = low.lstrip("-").removesuffix("(ind)")
        if low in _SPECIAL:
            v = _SPECIAL[low]
            return -v if neg else v
        if low.startswith("1.#"):
            return math.inf if "inf" in low else math.nan
    return None


@dataclass(slots=True)
class Pair:
    key: str
    value: float
    unit: str = ""
    total: float | None = None  # "iter 100/500": 500


@dataclass(slots=True)
class Parsed:
    """What one line holds: keyed pairs, and the bare numbers (a table row) when there is no key."""

    pairs: list[Pair] = field(default_factory=list)
    bare: list[float] = field(default_factory=list)
    words: list[str] = field(default_factory=list)  # a header row: words only, no number
    cells: int = 0  # cells of a separated row (``|`` or runs of 2+ spaces)


def _clean_key(words: list[str]) -> str:
    # a long phrase keeps its subject: "layers.0.0.weight has gradient mean of" -> "layers.0.0.weight gradient mean of"
    kept = words if len(words) <= MAX_KEY_WORDS else [words[0], *words[-(MAX_KEY_WORDS - 1):]]
    return " ".join(kept).strip(" -_.:'\"")


def _tokens(body: str) -> Iterator[tuple[str, str, str]]:
    for m in _TOKEN_RE.finditer(body):
        kind = m.lastgroup or "sep"
        if kind in ("num", "unit"):  # lastgroup names the unit when a number carries one
            yield "num", m.group("num"), m.group("unit") or ""
        else:
            yield kind, m.group(kind), ""


# a line that opens with an evaluation's name: its metrics are the evaluation's ("Validation: loss = 2.1",
# "eval epoch: 1, loss: 119.7", "Test set: Average loss: 0.28", "Validating, loss=766.1"); a key that
# itself starts with the word ("val_loss: 0.5", "test 0.91") is read as it is
_EVAL_WORDS = r"(?:" + "|".join(("validating", "validate", "evaluating", "evaluate", *EVAL_NAMES)) + ")"
_EVAL_TOPIC_RE = re.compile(r"\W{0,4}" + _EVAL_WORDS + r"(?![\w.@/-])(?! ?[:=]? ?[-+]?\.?\d)", re.I)
_ESTIMATOR_EVAL = "Saving dict for global step "
_EVAL_KEY_RE = re.compile(r"(?:^|[\s_/.-])" + _EVAL_WORDS + r"(?:$|[\s_/.-])", re.I)
# "Train 95, loss: 1.40, train acc: 0.95" / "Test 95, loss: 1.43, test acc: 0.93": the phase, then the
# epoch (the training scripts of https://github.com/antao97/dgcnn.pytorch)
_PHASE_COUNTER_RE = re.compile(r"(train|training|" + _EVAL_WORDS + r") (\d{1,9})[,:] (?=[A-Za-z])", re.I)
_COUNTER_VALUE_RE = re.compile(r"\s{0,12}\d{1,12} ?/ {0,12}\d{1,12}: {1,4}[-+]?(?:\d|\.\d)")
# a heading that names the loss before the values of each data set ("Loss(time/mini-batch) - Epoch 1: train
# = ... | dev = ...", https://github.com/funcwj/uPIT-for-speech-separation)
_PHASE_KEYS = frozenset({"train", "training", *EVAL_NAMES})
_LOSS_HEAD_RE = re.compile(r"\bloss\b[^:=|]{0,80}: {0,4}(?:" + "|".join(sorted(_PHASE_KEYS, key=lambda w: (-len(w), w)))
                           + ") {0,4}=", re.I)
# Marian's "Ep. 2 : Up. 116760 : Sen. 6962176 : Cost 111.24": the epoch, the updates done, the sentences
# seen (src/training/scheduler.h, https://github.com/marian-nmt/marian-dev)
_MARIAN_RE = re.compile(r"Ep\. (\d{1,9}) : Up\. (\d{1,12}) : (?:Sen\. [\d,]{1,20} : )?")
# timm's train.py: "Train: 1 [ 100/200 ( 50%)]  Loss: 185. (2.77)  Time: ..." (the epoch, the update of the
# epoch) and its validate(): "Test: [   7/7]  Time: ...  Loss: 0.936 (0.936)  Acc@1: ..." (the batch of the
# evaluation, no step of training: the evaluation is at the last step read),
# https://github.com/huggingface/pytorch-image-models/blob/main/train.py
_TIMM_RE = re.compile(r"(Train|Test|Validation|Eval): (?:(\d{1,9}) )?\[ {0,12}(\d{1,12})/(\d{1,12})(?: \( {0,3}\d{1,3}%\))?\] {1,4}")
_PAREN_MEAN_RE = re.compile(r" {1,4}\([^()]{0,80}\)")
# darknet's detector loop (YOLO): "174: 933.341797, 780.749146 avg loss, 0.000000 rate, 3.172139 seconds, ..."
# (src/detector.c, https://github.com/pjreddie/darknet and https://github.com/AlexeyAB/darknet print
# "%d: %f, %f avg[ loss], %f rate, %lf seconds, %d images"): the batch, the loss, its running average,
# the learning rate and the step time, each unnamed or named after its value
_NUM_OR_NAN = r"(-?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|nan|inf))"
_DARKNET_RE = re.compile(r"(\d{1,12}): " + _NUM_OR_NAN + ", " + _NUM_OR_NAN + r" avg(?: loss)?, " + _NUM_OR_NAN +
                         r" rate, (\d+(?:\.\d*)?) seconds")
_ABS_RE = re.compile(r"\|(\w{1,40})\|")  # "mean |grad|": an absolute value, not table cells
# ESPnet2's trainer: "1epoch:train:683-1364batch: loss=..." (the batches of the epoch since the last
# report, https://github.com/espnet/espnet/blob/master/espnet2/train/trainer.py): epoch 1, batch 1364
_ESPNET_RE = re.compile(r"(\d{1,9})epoch:train:\d{1,12}-(\d{1,12})batch: ?")
# a command line's option ("--learning_rate 9.65e-6", "--iters=100"; "--" before a letter, after a blank)
_CLI_OPTION_RE = re.compile(r"(?<!\S)--[A-Za-z][\w-]{0,60}(?=[ =]|$)")
# a Python augmented assignment: the source line that the warnings module prints under a warning
# ("run.py:198: UserWarning: ...\n  t_loss += loss.data[0]", warnings.formatwarning,
# https://docs.python.org/3/library/warnings.html#warnings.formatwarning); no log prints "+=" after a name
_AUGMENTED_RE = re.compile(r"[A-Za-z_][\w.]{0,120}(?:\[[^\]\n]{0,40}\]){0,3} ?(?:\*\*|//|>>|<<|[-+*/%@&|^])= ")
# MLPerf's logger (https://github.com/mlcommons/logging, mlperf_logging/mllog): one JSON object a line,
# ':::MLLOG {"namespace": "", "time_ms": ..., "event_type": "POINT_IN_TIME", "key": "eval_accuracy",
# "value": 0.241, "metadata": {"file": "train.py", "lineno": 562, "epoch_num": 4}}': the key names the
# value; the epoch (or step, or samples) in the metadata is its counter; the rest is no metric
_MLLOG_KEY_RE = re.compile(r'"key": "([\w.\-]{1,80})", "value": ([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|NaN|-?Infinity)[,}]')
_MLLOG_AT_RE = re.compile(r'"(epoch_num|step_num|samples_count)": (\d{1,15})[,}]')


def _mllog(body: str) -> str:
    """An MLPerf log line as the pairs it holds: "epoch 4, eval_accuracy 0.241" (empty without a number)."""
    m = _MLLOG_KEY_RE.search(body, 0, 2000)
    if m is None:
        return ""
    at = _MLLOG_AT_RE.search(body, m.end(), m.end() + 1000)
    counter = "" if at is None else f"{'epoch' if at.group(1) == 'epoch_num' else at.group(1)} {at.group(2)}, "
    return f"{counter}{m.group(1)} {m.group(2).replace('Infinity', 'inf')}"


_GLUED_COUNTER_RE = re.compile(r"(?i)(epoch|iteration|iter|step)(\d{1,9}):? ?")
# a counter printed as a JSON string, "N/M": pycls's and SlowFast's json_stats ("epoch": "1/100", "iter": "10/625",
# https://github.com/facebookresearch/pycls/blob/main/pycls/core/meters.py)
_STR_COUNTER_RE = re.compile(r"[\"'](\d{1,12})/(\d{1,12})[\"']")


def parse_line(text: str) -> Parsed:
    """The pairs and bare numbers of one cleaned line (launcher prefixes already removed): from
    the plan of the line's shape when one is cached (:class:`ShapeCache`), else read in full."""
    return SHAPES.parse(text)


def parse_line_full(text: str, asked: list[int] | None = None) -> Parsed:
    """:func:`parse_line` without the cache: every stage, every time (the reference). ``asked``
    collects the indices of the tokens whose value (not only its spelling) chose a branch."""
    body = strip_preamble(text)
    out = Parsed()
    if not body:
        return out
    if "|" in body and _ABS_RE.search(body):
        body = _ABS_RE.sub(r"abs_\1", body)
    if "epoch:train:" in body and (m := _ESPNET_RE.match(body)) is not None:
        body = f"epoch {m.group(1)} batch {m.group(2)}, {body[m.end():]}"
    if " rate, " in body and (m := _DARKNET_RE.match(body)) is not None:
        body = (f"iteration {m.group(1)}, loss {m.group(2)}, avg loss {m.group(3)}, lr {m.group(4)}, "
                f"time {m.group(5)}s{body[m.end():]}")
    if "Up. " in body and (m := _MARIAN_RE.search(body)) is not None:
        body = f"{body[:m.start()]}epoch {m.group(1)}, update {m.group(2)}, {body[m.end():]}"
    if ": " in body and "[" in body and (m := _TIMM_RE.match(body)) is not None:
        phase, epoch = m.group(1), m.group(2)
        # each value is followed by its running mean in parentheses: the value is the step's
        rest = _PAREN_MEAN_RE.sub("", body[m.end():])
        if epoch is not None and phase == "Train":
            body = f"epoch {epoch}, batch {m.group(3)}/{m.group(4)}, {rest}"
        elif epoch is None and phase != "Train":
            body = f"{phase.lower()}: {rest}"
    if (m := _PHASE_COUNTER_RE.match(body)) is not None:
        body = f"{m.group(1)}: epoch {m.group(2)}, {body[m.end():]}"
    if body.startswith(":::MLLOG "):
        body = _mllog(body)
    if (m := _GLUED_COUNTER_RE.fullmatch(body)) is not None:
        body = f"{m.group(1)} {m.group(2)}"  # qlib's heading "Epoch0:" (the counter and its number as one word)
    if _AUGMENTED_RE.match(body):
        return out  # a line of code, not a record: "  t_loss += loss.data[0]" (a warning's source line)
    if " --" in body and len(_CLI_OPTION_RE.findall(body, 0, 4000)) >= 2:
        return out  # a command line: "--model meta-llama/Llama-3.2-3B --iters 100" sets the run up, it measures nothing
    toks = _join_durations(list(_tokens(body)))
    words: list[str] = []  # the key being read
    qualifier = ""
    last: Pair | None = None  # the pair a following "/ N" or "(...)" belongs to
    assign = False  # a ':' or '=' was seen after the key words
    depth_after_value = 0  # inside "(...)" right after a value: only unit-keyed speeds count there
    slash_pending = False
    n = len(toks)
    i = 0
    row_words: list[str] = []
    leading: list[float] = []  # bare numbers before the first pair
    leading_at: list[int] = []  # their tokens
    at_metric = ""  # "loss at step N: v": the metric whose value follows the step
    pipe_key: list[str] = []  # "| mean_reward | -157 |": the cell before the value
    head = body[:body.find(":")] if ":" in body else ""
    topic_mem = bool(head) and ("memory" in head.lower() or head.lower().startswith("mem "))
    # (or TensorFlow Estimator's evaluation summary, "Saving dict for global step 200: accuracy = 0.41, loss =
    # 2.77", which estimator.py logs after each evaluation)
    topic_eval = _EVAL_TOPIC_RE.match(body) is not None or body.startswith(_ESTIMATOR_EVAL)
    topic_loss = _LOSS_HEAD_RE.search(body) is not None
    has_number = False
    while i < n:
        kind, val, unit = toks[i]
        i += 1
        if kind == "space":
            continue
        if kind == "clock" and assign and words and any(w.lower() in _DURATION_WORDS for w in words):
            # "time delta: 0:00:01.074783", "took: 1:02": a duration, in seconds
            secs = seconds(val)
            if secs is not None:
                last = Pair(qualifier + _clean_key(words), secs, "s")
                out.pairs.append(last)
                words, assign = [], False
                continue
        if kind in ("date", "clock", "ver"):
            words, assign, last, slash_pending = [], False, None, False
            row_words.append(val)
            continue
        if kind == "str" and words and assign and counter_rank(words[-1]) is not None and \
                (m := _STR_COUNTER_RE.fullmatch(val)) is not None:
            last = Pair(_clean_key(words), float(m.group(1)), "", float(m.group(2)))  # "iter": "10/625"
            out.pairs.append(last)
            words, assign = [], False
            continue
        if kind == "str" and not _next_is(toks, i, ":=") and number(val[1:-1]) is not None:
            kind, val = "num", val[1:-1]  # 'loss': '24.061707', "grad_norm": "nan"
        if kind == "word" or (kind == "str" and _next_is(toks, i, ":=")):
            w = val.strip("'\"")
            row_words.append(w)
            if depth_after_value:
                continue
            if not words and w.endswith(".") and w[:-1].lower() in _TIME_UNITS and _prev(toks, i - 1)[0] == "num":
                # "epoch 1/10. Took 62.275 seconds. Mean squared error is 0.50315" (DeepLearnToolbox's
                # nntrain): a duration that ends its sentence, not the first word of the next key
                continue
            if last is not None and not words and w.lower() in SPEED_UNITS | {"ms", "s", "sec", "seconds"} \
                    and not last.unit and not _next_is(toks, i, ":="):
                # "Speed: 512.1 samples/sec"; but "completed step: 1, seconds: 0.631" names a value
                last.unit = w
                continue
            if w.lower() in ("is", "was") and words and not assign and _next_kind(toks, i) in ("num", "special") and \
                    any(_metric_word(x) for x in words):
                # "avg loss so far is 0.0236", "val loss is 0.0307": the verb says what a ':' would
                assign = True
                words = words[:-2] if len(words) > 2 and [x.lower() for x in words[-2:]] == ["so", "far"] else words
                continue
            if assign and words:
                words = []  # "key: text value" is not a number pair
                assign = False
            words.append(w)
            last = None
            continue
        if kind in ("num", "special"):
            has_number = True
            v = number(val)
            if v is None:
                continue
            if at_metric and not words and last is not None and counter_rank(last.key) is not None:
                # "discriminator loss at step 6000: 0.692087": the value of the metric named before
                out.pairs.append(Pair(at_metric, v, unit))
                at_metric = ""
                continue
            if slash_pending and last is not None and last.total is None and not depth_after_value:
                last.total = v
                slash_pending = False
                continue
            slash_pending = False
            if _next_word(toks, i).lower() in ("day", "days"):
                words, assign, last = [], False, None  # "eta: 1 day, 23:12:04"
                continue
            if depth_after_value:
                if unit.lower() in SPEED_UNITS or _next_word(toks, i).lower() in SPEED_UNITS:
                    out.pairs.append(speed_pair(unit or _next_word(toks, i), v))
                elif unit in _PAREN_DURATIONS and not words:
                    # a bare duration in parentheses after a value: NiftyNet's "Training iter 3211, loss=0.455
                    # (1.349622s)" is the iteration's time (not the value's running mean, which has no unit)
                    out.pairs.append(Pair(_PAREN_DURATIONS[unit], v, unit))
                continue
            if words and words[-1] == "#":
                if len(words) < 2 or counter_rank(words[-2]) is None:
                    words = []  # "#0": an index, not a value
                    continue
                words = words[:-1]  # "step#: 0" (dlib's dnn_trainer), "Epoch #3": the counter named before it
            if asked is not None and words and words[-1].lower() in _QUALIFIERS:
                asked.append(i - 1)
            if words and words[-1].lower() in _QUALIFIERS and math.isfinite(v) and v == int(v) and \
                    _next_is(toks, i, ":"):
                qualifier = f"{words[-1]} {int(v)} "  # "Layer 3: ..." names what follows
                words, assign, last = [], False, None
                continue
            if words and unit == "%" and _next_is(toks, i, "|") and "%|" in text and _TQDM_RE.search(text):
                # tqdm's percentage before its bar ("steps:  5%|██  | 891/17824 [..."): the bar's
                # description is no key of it (kohya-ss/sd-scripts#304 prints "steps:")
                words, assign, last = [], False, None
                continue
            phase_counter = len(words) == 1 and words[0].lower() in _PHASE_KEYS and _next_is(toks, i, "/")
            if asked is not None and phase_counter:
                asked.append(i - 1)
            if phase_counter and math.isfinite(v) and v == int(v) and v >= 0:
                # "Training  [     40/5000000]": the phase's own counter, as the MetricLogger of DINO and
                # DINOv2 prints it (https://github.com/facebookresearch/dinov2, dinov2/logging/helpers.py)
                last = Pair("iter", v)
                out.pairs.append(last)
                words, assign = [], False
                continue
            if not words and pipe_key:
                words, assign, pipe_key = pipe_key, True, []  # the value cell of a "| key | value |" row
            if words and (assign or counter_rank(words[-1]) is not None or
                          (len(words) <= 2 and (_metric_word(words[-1]) or unit == "%")) or
                          any("grad" in w.lower() for w in words) or
                          (len(words) == 1 and words[0].lower() in _SPLITS)):
                # without ':' or '=' a key must read as a metric ("loss 2.3", "val_acc 0.91"): other
                # word-number pairs are prose ("Tried to allocate 20.00 MiB", "exits with code 1")
                key = _clean_key(words)
                if len(words) >= 3 and words[-2].lower() in ("at", "@") and counter_rank(words[-1]) is not None:
                    at_metric = _clean_key(words[:-2])  # the metric; this number is its step
                    key = words[-1]
                low = key.lower()
                if asked is not None and _next_is(toks, i, ":"):
                    asked.append(i - 1)
                if low in _IGNORED_KEYS or low.split(" ")[-1] in _IGNORED_KEYS or \
                        (_next_is(toks, i, ":") and math.isfinite(v) and v == int(v) and counter_rank(key) is None
                         and not unit):
                    # an identifier ("GPU:0:", "rank 3:"), not a value
                    words, assign, last, at_metric = [], False, None, ""
                    continue
                last = Pair(qualifier + key, v, unit)
                out.pairs.append(last)
                words, assign = [], False
                continue
            if words:
                words, assign, last = [], False, None
                continue
            u, past_unit = (unit, i) if unit else _word_at(toks, i)
            if u.lower() in SPEED_UNITS:
                last = speed_pair(u, v)
                out.pairs.append(last)
                i = past_unit  # the unit is read: "8526.1 samples/s 0.0150 s/it" has no key "samples/s" for 0.0150
                continue
            if asked is not None and (_next_is(toks, i, "/") or (out.pairs and _prev_is(toks, i - 1, "[") and
                                      counter_rank(out.pairs[-1].key) == COUNTER_KEYS["epoch"])):
                asked.append(i - 1)  # the two counters below
            if out.pairs and counter_rank(out.pairs[-1].key) == COUNTER_KEYS["epoch"] and _prev_is(toks, i - 1, "[") \
                    and math.isfinite(v) and v == int(v) and v >= 0 and not _next_is(toks, i, "/"):
                last = Pair("batch", v)  # "Epoch: [163][50]": the iteration inside the epoch
                out.pairs.append(last)
                continue
            if _next_is(toks, i, "/") and _over_number(toks, i) and math.isfinite(v) and v == int(v) and v >= 0:
                # a bare "N/M" counter: the batch of an epoch ("Epoch: [0][14/5005]") or a position
                # (not a rate: timm's "199.00/s" is a bare number whatever its digits)
                inner = "batch" if out.pairs and counter_rank(out.pairs[-1].key) == COUNTER_KEYS["epoch"] else "iter"
                if len(out.pairs) == 1 and last is out.pairs[0] and last.value == int(last.value) \
                        and _after_bracketed_counter(toks, i - 1):
                    # "[0/20][10/32]\tLoss_D: ...", "Train: [0/300][4050/5004]": two bracketed counters
                    # in a row, the outer one is the epoch (https://github.com/pytorch/examples/blob/main/
                    # dcgan/main.py, https://github.com/microsoft/Swin-Transformer/blob/main/main.py)
                    out.pairs[0] = Pair("epoch", last.value, last.unit, last.total)
                    inner = "batch"
                last = Pair(inner, v)
                out.pairs.append(last)
                continue
            out.bare.append(v)
            if not out.pairs and not unit and len(out.bare) == len(leading) + 1:
                leading.append(v)
                leading_at.append(i - 1)
            last = None
            continue
        if kind == "tensor":
            continue  # tensor(2.3, device='cuda:0'): the number that follows is the value
        # separators
        if val in ":=":
            if words:
                assign = True
            continue
        if val == "/":
            if last is not None and not depth_after_value:
                slash_pending = True
            continue
        if val == "#":
            words = [*words, "#"]
            continue
        if val == "(":
            # "Ep 1 (Step 000005): ...": a counter inside the parentheses after another counter is the
            # finer step, read as a pair of its own
            nested = last is not None and counter_rank(last.key) is not None and counter_rank(_next_word(toks, i)) is not None
            if last is not None and counter_rank(last.key) == COUNTER_KEYS["epoch"] and _counter_in_parens(toks, i):
                # "Epoch:[0/19](100/24681) loss:5.251": the batch of the epoch, in parentheses (the training
                # scripts of https://github.com/jingyaogong/minimind print it so)
                continue
            if last is not None and not words and not nested:
                depth_after_value += 1
            elif words and i + 1 < n and toks[i][0] == "word" and toks[i][1].lower() in _KEY_UNITS and \
                    toks[i + 1][1] == ")":
                words = [*words, f"({toks[i][1]})"]  # "memory (MB) 1497": the key's unit
                assign = True
                i += 2
            continue
        if val == ")":
            if depth_after_value:
                depth_after_value -= 1
                if not depth_after_value:
                    last = None
            continue
        if val in "[]":
            continue  # Epoch[3], loss: [2526.27], [epoch 3][iter 100/500]
        if val == "|":
            pipe_key = words if words and _next_number(toks, i) else []
        if val in ",;|{}<>":
            words, assign = [], False
            if val != ",":
                last = None
            out.cells += val == "|"
            continue
        if val in "'\"":
            continue
        words, assign, last = [], False, None
    if not has_number and len(row_words) >= 2:
        out.words = row_words
    if out.pairs and topic_mem:
        # "Memory info of GPU:0: current: 0.18, peak: 2.55": the keys are memory figures
        out.pairs = [p if "mem" in p.key.lower() or counter_rank(p.key) is not None else
                     Pair(f"mem {p.key}", p.value, p.unit, p.total) for p in out.pairs]
    if len(out.pairs) == 1 and len(out.bare) == 1 and out.pairs[0].total is not None and \
            _COUNTER_VALUE_RE.match(body) is not None:
        # "  10000/ 200000: 2.0322": the step of the run's length, then its one value (the makemore lectures'
        # training loops print their loss so, https://github.com/karpathy/nn-zero-to-hero)
        out.pairs.append(Pair(UNNAMED_VALUE, out.bare.pop()))
    if out.pairs and topic_loss:
        # "Loss(time/mini-batch) - Epoch  1: train = 0.52(1581.14s/2500) | dev = 0.61(...)": the heading
        # names the quantity, the keys only the data set
        out.pairs = [Pair(f"{p.key} loss", p.value, p.unit, p.total) if p.key.lower() in _PHASE_KEYS else p
                     for p in out.pairs]
    if out.pairs and topic_eval:
        # "Validation: loss = 2.1", "Test set: Average loss: 0.28", "Evaluation result for step 435000:
        # loss = ..." (OpenNMT-tf's evaluator, opennmt/evaluation.py): the line's metrics are the
        # evaluation's, whatever their own names say
        out.pairs = [p if counter_rank(p.key) is not None or p.unit in SPEED_UNITS or _EVAL_KEY_RE.search(p.key)
                     else Pair(EVAL_PREFIX + p.key, p.value, p.unit, p.total) for p in out.pairs]
    if asked is not None and out.pairs and out.bare and leading:
        asked.extend(leading_at)
    if out.pairs and out.bare and leading and all(math.isfinite(b) and b == int(b) and b >= 0 for b in leading):
        # "40 | loss 6.69 | lr 3e-4", "[  0]     240 || B: 4.553": integers before the first key count steps
        names = ["epoch", "step"] if len(leading) == 2 else ["step"] if len(leading) == 1 else []
        # a leading integer followed by a counter's name is that counter ("000 epoch training, loss=nan":
        # the epoch, not the step its lines of "000 epoch, 02000 iter, ..." count)
        after = [_next_word(toks, at + 1) for at in leading_at]
        names = [w.lower() if counter_rank(w) is not None else name for name, w in zip(names, after)]
        out.pairs[:0] = [Pair(k, v) for k, v in zip(names, leading)]
        out.bare = out.bare[len(leading):] if names else out.bare
    return out


# -- the same parse for lines of the same shape ---------------------------------------------------
# A training log prints a few line shapes millions of times with other digits. Every pattern of
# the three stages treats the ASCII digits alike (``\d``, ``\w``, ``[ \d]``; the one literal digit,
# ``1.#INF``, is kept out below), so lines that differ only in their digits are cut at the same
# places into the same tokens, and parse_line takes the same branches on them except where it
# looks at a value (integral? finite? negative? zero?). The shape of a line is its text with
# every digit a ``0``, plus those four facts about each of its numbers; a plan says which number
# (or clock time, or speed inverted) each output value is, and is read off one full parse.
_ZEROS = str.maketrans("123456789", "000000000")
_ZERO_BYTES = bytes.maketrans(b"123456789", b"000000000")  # the shape key: bytes.translate is ~10x str's
_WORD_DIGIT_RE = re.compile(r"[0-9]")


def _facts(v: float) -> int:
    """What parse_line may ask of a value: finite, integral, not negative, zero."""
    if not math.isfinite(v):
        return 0
    return 1 | (2 if v == int(v) else 0) | (4 if v >= 0 else 0) | (8 if v == 0 else 0)


def facts_of(v: NDArray[np.float64]) -> NDArray[np.int64]:
    """:func:`_facts` of every value of an array."""
    fin = np.isfinite(v)
    with np.errstate(invalid="ignore"):
        out = fin.astype(np.int64)
        out |= (fin & (v == np.trunc(v))) * 2
        out |= (fin & (v >= 0)) * 4
        out |= (fin & (v == 0)) * 8
    return out


def _same_float(a: float, b: float) -> bool:
    return struct.pack("<d", a) == struct.pack("<d", b)  # bitwise: -0.0 is not 0.0, NaN signs differ


def _same_parsed(a: Parsed, b: Parsed) -> bool:
    def same(x: float | None, y: float | None) -> bool:
        return x is y if x is None or y is None else _same_float(x, y)

    return (len(a.pairs) == len(b.pairs) and len(a.bare) == len(b.bare) and a.words == b.words and a.cells == b.cells
            and all(p.key == q.key and p.unit == q.unit and same(p.value, q.value) and same(p.total, q.total)
                    for p, q in zip(a.pairs, b.pairs))
            and all(same(x, y) for x, y in zip(a.bare, b.bare)))


@dataclass(frozen=True, slots=True)
class _Plan:
    """How to read a line of one shape: ``spans`` are the numbers it reads (text offsets); a value source is ``(how, i)``: ``how`` 0 the number
    ``spans[i]``, 1 its inverse (an ``s/it`` speed), 2 the clock time ``clocks[i]`` in seconds."""

    spans: tuple[tuple[int, int], ...]
    checks: tuple[tuple[int, int], ...]  # (number, its facts) for the numbers that chose a branch
    clocks: tuple[tuple[int, int], ...]
    pairs: tuple[tuple[str, tuple[int, int], str, tuple[int, int] | None], ...]
    bare: tuple[tuple[int, int], ...]
    words: tuple[str, ...]
    cells: int


def _numbers(text: str, spans: tuple[tuple[int, int], ...]) -> list[float] | None:
    out: list[float] = []
    for a, b in spans:
        v = number(text[a:b])
        if v is None:
            return None
        out.append(v)
    return out


def _number_tokens(text: str) -> tuple[list[tuple[int, int]], dict[int, int], list[tuple[int, int]]] | None:
    """The numbers of a line as the tokenizer cuts them: their spans, token index -> index in the
    spans, and the clock times' spans; the same for every line of the shape. None where the
    tokens depend on the digits otherwise (a metric word "f1") or the offsets would move."""
    if ".#" in text:
        return None  # "1.#INF": the tokenizer's one literal digit
    body = strip_preamble(text)
    if ("|" in body and _ABS_RE.search(body)) or ("epoch:train:" in body and _ESPNET_RE.match(body)):
        return None  # the body is rewritten: offsets would move
    off = len(text) - len(body)
    spans: list[tuple[int, int]] = []
    span_of: dict[int, int] = {}
    clocks: list[tuple[int, int]] = []
    for j, m in enumerate(_TOKEN_RE.finditer(body)):
        kind = m.lastgroup or "sep"
        span = None
        if kind in ("num", "unit"):
            span = (off + m.start("num"), off + m.end("num"))
        elif kind == "special":
            span = (off + m.start(), off + m.end())
        elif kind == "clock":
            clocks.append((off + m.start(), off + m.end()))
        elif kind == "str" and number(m.group()[1:-1]) is not None:
            span = (off + m.start() + 1, off + m.end() - 1)  # '24.061707', "nan"
        elif kind in ("word", "str") and "f0" in m.group().lower().translate(_ZEROS):
            return None  # "f1" is a metric word, "f2" is not (_METRIC_PARTS)
        if span is not None:
            span_of[j] = len(spans)
            spans.append(span)
    return spans, span_of, clocks


def make_plan(text: str, parsed: Parsed, asked: list[int]) -> _Plan | None:
    """The plan of ``text``'s shape, read off its full parse (``asked``: the tokens whose value
    chose a branch), or None when a value cannot be traced to exactly one source or the output
    depends on digits in other ways (keys, words)."""
    got = _number_tokens(text)
    if got is None or _has_duration(text):
        return None  # (a duration of several parts is one value read from several numbers: no plan reads it)
    spans, span_of, clocks = got
    vals = _numbers(text, tuple(spans))
    if vals is None or any(j not in span_of for j in asked):
        return None
    cands: list[tuple[tuple[int, int], float]] = []
    for i, v in enumerate(vals):
        cands.append(((0, i), v))
        cands.append(((1, i), 1.0 / v if v else math.inf))
    for i, (a, b) in enumerate(clocks):
        secs = seconds(text[a:b])
        if secs is not None:
            cands.append(((2, i), secs))

    def source(x: float) -> tuple[int, int] | None:
        found = [src for src, c in cands if _same_float(x, c)]
        return found[0] if len(found) == 1 else None

    pairs = []
    for pr in parsed.pairs:
        if _WORD_DIGIT_RE.search(pr.key) or _WORD_DIGIT_RE.search(pr.unit):
            return None  # "Layer 3 ...", "col2": a number in the key
        src = source(pr.value)
        tot = None if pr.total is None else source(pr.total)
        if src is None or (pr.total is not None and tot is None):
            return None
        pairs.append((pr.key, src, pr.unit, tot))
    bare = []
    for x in parsed.bare:
        src = source(x)
        if src is None:
            return None
        bare.append(src)
    if any(_WORD_DIGIT_RE.search(w) for w in parsed.words):
        return None
    # Keep only the numbers the plan reads or checks, renumbered.
    used = sorted({span_of[j] for j in asked} | {i for how, i in [*(p[1] for p in pairs), *bare,
                                                                   *(p[3] for p in pairs if p[3] is not None)]
                                                  if how < 2})
    new = {old: k for k, old in enumerate(used)}

    def renum(src: tuple[int, int]) -> tuple[int, int]:
        return src if src[0] == 2 else (src[0], new[src[1]])

    checks = tuple(sorted({(new[span_of[j]], _facts(vals[span_of[j]])) for j in asked}))
    return _Plan(tuple(spans[i] for i in used), checks, tuple(clocks),
                 tuple((k, renum(src), u, None if t is None else renum(t)) for k, src, u, t in pairs),
                 tuple(renum(b) for b in bare), tuple(parsed.words), parsed.cells)


def _value(src: tuple[int, int], vals: list[float], clocks: list[float | None]) -> float:
    how, i = src
    if how == 0:
        return vals[i]
    if how == 1:
        return 1.0 / vals[i] if vals[i] else math.inf
    c = clocks[i]
    assert c is not None  # a clock the plan reads parsed when the plan was made: it has the same digits
    return c


class ShapeCache:
    """Plans by line shape, bounded: at most ``max_shapes`` shapes of lines of at most ``max_len``
    characters (then it starts afresh), a shape planned only on its second sighting and given up
    after ``max_tries`` lines that gave no plan, so a log of ever new shapes costs a dictionary
    lookup a line and never grows memory."""

    def __init__(self, max_shapes: int = 4096, max_tries: int = 4, max_len: int = 1024) -> None:
        # longer lines are parsed in full: the keys stay under max_shapes * max_len * 4 bytes (UTF-8)
        self.max_shapes, self.max_tries, self.max_len = max_shapes, max_tries, max_len
        self.plans: dict[bytes, _Plan | int] = {}  # shape -> plan, or the number of lines tried

    def parse(self, text: str) -> Parsed:
        if len(text) > self.max_len:
            return parse_line_full(text)
        shape = text.encode("utf-8", "surrogatepass").translate(_ZERO_BYTES)
        got = self.plans.get(shape)
        if isinstance(got, _Plan):
            out = self._apply(got, text)
            if out is not None:
                return out
        tries = 0 if got is None or isinstance(got, _Plan) else got
        if isinstance(got, _Plan) or tries == 0 or tries > self.max_tries:
            # the first sighting, a shape given up, or a value that took another branch this time
            # (the plan stays for the usual case)
            parsed = parse_line_full(text)
            if got is None:
                if len(self.plans) >= self.max_shapes:
                    self.plans.clear()
                self.plans[shape] = 1
            return parsed
        asked: list[int] = []
        parsed = parse_line_full(text, asked)
        plan = make_plan(text, parsed, asked)
        if plan is None:
            plan = self._plan_from_other_digits(text, parsed)
        self.plans[shape] = plan if plan is not None else tries + 1
        return parsed

    @staticmethod
    def _plan_from_other_digits(text: str, parsed: Parsed) -> _Plan | None:
        """Where two numbers of the line print the same value (Caffe's ``loss = 2.3 (* 1 = 2.3 loss)``)
        the values do not say which is which: a copy of the line with other digits is of the same
        shape, and its plan holds for the line if it reads the line as its full parse did."""
        rng = random.Random(len(text))
        for _ in range(2):
            other = "".join(rng.choice("123456789") if "0" <= c <= "9" else c for c in text)
            asked: list[int] = []
            plan = make_plan(other, parse_line_full(other, asked), asked)
            if plan is not None:
                got = ShapeCache._apply(plan, text)
                if got is not None and _same_parsed(got, parsed):
                    return plan
        return None

    @staticmethod
    def _apply(plan: _Plan, text: str) -> Parsed | None:
        vals: list[float] = []
        for a, b in plan.spans:
            t = text[a:b]
            try:
                vals.append(float(t))  # number()'s first step, without its call
            except ValueError:
                v = number(t)
                if v is None:
                    return None
                vals.append(v)
        for i, f in plan.checks:
            if _facts(vals[i]) != f:
                return None  # another branch of parse_line may apply: the full parse decides
        clocks = [seconds(text[a:b]) for a, b in plan.clocks]
        out = Parsed(bare=[_value(src, vals, clocks) for src in plan.bare], words=list(plan.words), cells=plan.cells)
        out.pairs = [Pair(key, _value(src, vals, clocks), unit, None if tot is None else _value(tot, vals, clocks))
                     for key, src, unit, tot in plan.pairs]
        return out


SHAPES = ShapeCache()

_DURATION_WORDS = frozenset({"delta", "elapsed", "duration", "took", "epoch_time", "iter_time", "step_time"})


def seconds(clock: str) -> float | None:
    """``h:mm:ss.f`` / ``m:ss`` as seconds."""
    try:
        parts = [float(x) for x in clock.replace(",", ".").split(":")]
    except ValueError:
        return None
    secs = 0.0
    for x in parts:
        secs = secs * 60 + x
    return secs


# the parts of a duration written "1h 02m 23s", "13m 25s", "2d 03h 10m" (StyleGAN's training loop:
# dnnlib.util.format_time), largest first
_DURATION_PARTS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def _join_durations(toks: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The tokens with each duration of two or more parts ("1h 02m 23s") as one number of seconds (unit
    "s"): read part by part, its first part alone would be the value (1, for an hour and two minutes)."""
    out: list[tuple[str, str, str]] = []
    i = 0
    while i < len(toks):
        kind, val, unit = toks[i]
        if kind != "num" or unit not in _DURATION_PARTS or not val.isdigit():
            out.append(toks[i])
            i += 1
            continue
        total, last, j, end = float(int(val) * _DURATION_PARTS[unit]), _DURATION_PARTS[unit], i + 1, i + 1
        while j + 1 < len(toks) and toks[j] == ("space", " ", "") and toks[j + 1][0] == "num" and \
                toks[j + 1][1].replace(".", "", 1).isdigit() and _DURATION_PARTS.get(toks[j + 1][2], last) < last:
            last = _DURATION_PARTS[toks[j + 1][2]]
            total += float(toks[j + 1][1]) * last
            j += 2
            end = j
        out.append(("num", repr(total), "s") if end > i + 1 else toks[i])
        i = end
    return out


def _has_duration(text: str) -> bool:
    """Whether :func:`_join_durations` joins numbers of ``text`` (asked once per line shape, when it is planned)."""
    toks = list(_tokens(text))
    return len(_join_durations(toks)) < len(toks)


def _next_is(toks: list[tuple[str, str, str]], i: int, chars: str) -> bool:
    while i < len(toks) and toks[i][0] == "space":
        i += 1
    return i < len(toks) and toks[i][0] == "sep" and toks[i][1] in chars


def _prev(toks: list[tuple[str, str, str]], i: int) -> tuple[str, str, str]:
    """The token before index ``i`` (spaces skipped; an empty one at the start)."""
    j = i - 1
    while j >= 0 and toks[j][0] == "space":
        j -= 1
    return toks[j] if j >= 0 else ("", "", "")


def _prev_is(toks: list[tuple[str, str, str]], i: int, chars: str) -> bool:
    """The token before index ``i`` (spaces skipped) is one of the separators ``chars``."""
    kind, val, _ = _prev(toks, i)
    return kind == "sep" and val in chars


def _sequence(toks: list[tuple[str, str, str]], i: int, want: tuple[str, ...], step: int) -> list[int] | None:
    """The indices of the tokens from ``i`` on (``step`` 1: forwards, -1: backwards; spaces skipped) when they are
    ``want`` in that order ("num": a number, else that separator), or None."""
    got: list[int] = []
    j = i
    for w in want:
        while 0 <= j < len(toks) and toks[j][0] == "space":
            j += step
        if not 0 <= j < len(toks) or (toks[j][0] != "num" if w == "num" else toks[j][:2] != ("sep", w)):
            return None
        got.append(j)
        j += step
    return got


def _after_bracketed_counter(toks: list[tuple[str, str, str]], i: int) -> bool:
    """The tokens before index ``i`` are a bracketed counter and an opening bracket: "[0/20][" """
    return _sequence(toks, i - 1, ("[", "]", "num", "/", "num", "["), -1) is not None


def _counter_in_parens(toks: list[tuple[str, str, str]], i: int) -> bool:
    """The tokens from index ``i`` (after an opening parenthesis) are "N/M)", a whole-number counter."""
    got = _sequence(toks, i, ("num", "/", "num", ")"), 1)
    return got is not None and all(toks[j][1].isdigit() and not toks[j][2] for j in (got[0], got[2]))


def _over_number(toks: list[tuple[str, str, str]], i: int) -> bool:
    """Whether the "/" at ``i`` or after the spaces there is followed by a number ("14/5005", not "199.00/s")."""
    while i < len(toks) and toks[i][0] == "space":
        i += 1
    return _next_number(toks, i + 1)


def _next_number(toks: list[tuple[str, str, str]], i: int) -> bool:
    while i < len(toks) and toks[i][0] == "space":
        i += 1
    return i < len(toks) and toks[i][0] in ("num", "special")


def _next_kind(toks: list[tuple[str, str, str]], i: int) -> str:
    """The kind of the token at ``i`` or after the spaces there ("" at the end)."""
    while i < len(toks) and toks[i][0] == "space":
        i += 1
    return toks[i][0] if i < len(toks) else ""


def _next_word(toks: list[tuple[str, str, str]], i: int) -> str:
    return _word_at(toks, i)[0]


def _word_at(toks: list[tuple[str, str, str]], i: int) -> tuple[str, int]:
    """The word at ``i`` (after one space; "samples/s" of word and "/" tokens) and the index after it."""
    j = i
    if j < len(toks) and toks[j][0] == "space":
        j += 1
    parts: list[str] = []
    while j < len(toks) and toks[j][0] in ("word", "sep") and len(parts) < 3:
        if toks[j][0] == "sep" and toks[j][1] != "/":
            break
        parts.append(toks[j][1])
        j += 1
    return "".join(parts), j


# -- stage 3: a file ---------------------------------------------------------------------------
# tqdm: " 45%|████▌     | 450/1000 [00:10<00:12, 43.2it/s, loss=0.5]"
_TQDM_RE = re.compile(r"(\d{1,12})/(\d{1,12}) \[\d{1,4}:\d\d")


# the progress bars of a run's set-up, before training: huggingface_hub's snapshot_download ("Fetching 11
# files"), downloads, transformers' "Loading checkpoint shards", the datasets library's "Map", "Filter",
# "Generating train split" (https://github.com/huggingface/huggingface_hub, /transformers, /datasets)
_SETUP_BAR_RE = re.compile(
    r"\s{0,8}(?:Fetching \d{1,9} files|Downloading|Loading checkpoint shards|Loading dataset shards|Map|Filter|"
    r"Generating \w{1,40} split|Resolving data files|Running tokenizer|Tokeniz\w{0,10}|Computing checksums|"
    r"Extracting data files|Creating parquet|Saving the dataset|Casting the dataset|Flattening the indices|Uploading)"
    r"\b[^|\n]{0,160}?: {0,4}\d{1,3}%\|", re.I)


@dataclass(slots=True)
class Record:
    """The metrics of one line, with the counters it printed."""

    line: int
    rank: int | None
    metrics: dict[str, float]
    counters: dict[str, float]
    totals: dict[str, float]


# counter_rank from here on: a counter around the step (a batch of an epoch, an epoch), not the step itself
OUTER_RANK = COUNTER_KEYS["batch"]


@functools.lru_cache(maxsize=4096)  # a pure function of a key, asked several times a line; bounded
def counter_rank(key: str) -> int | None:
    """A known step-counter name's priority (lower wins), or None."""
    k = key.lower().strip()
    if k in COUNTER_KEYS:
        return COUNTER_KEYS[k]
    words = k.split(" ")
    if words[-1] not in ("step", "iteration", "iter", "it", "epoch", "batch", "update", "sample"):
        return None
    # "time this epoch", "loss per step": a measurement of the step, not the counter
    return None if any(_metric_word(w) for w in words[:-1]) else COUNTER_KEYS.get(words[-1])


class Table:
    """Column names for rows of bare numbers: the last header row seen, if its width matches."""

    def __init__(self) -> None:
        self.header: list[str] = []

    def names(self, n: int) -> list[str]:
        if len(self.header) == n:
            return self.header
        return [column_name(k) for k in range(1, n + 1)]


_WIDE_GAP_RE = re.compile(r"\s{2,}|\t")


def _cells(body: str) -> list[str]:
    """A header row's column names when its cells are delimited ("| Step | Training Loss |", or
    runs of spaces): a name can then have several words. Empty when the row has no delimiters."""
    body = body.strip()
    if "|" in body:
        cells = body.strip("|").split("|")
    elif _WIDE_GAP_RE.search(body):
        cells = _WIDE_GAP_RE.split(body)
    else:
        return []
    return [c for c in (c.strip() for c in cells) if c and not set(c) <= set("-=:+ ")]


@dataclass(frozen=True, slots=True)
class RecordLayout:
    """Where a line's values go in its record: ``(key, slot)`` pairs, a slot indexing the line's
    values (:func:`line_values`). Lines of one shape read under one table header share it."""

    metrics: tuple[tuple[str, int], ...]
    counters: tuple[tuple[str, int], ...]
    totals: tuple[tuple[str, int], ...]


def line_values(p: Parsed, text: str) -> tuple[list[float], re.Match[str] | None]:
    """The values a record may take from a line, by slot: the pairs' values, their totals (NaN
    where a pair has none), the bare numbers, then a progress bar's position and length; with the
    progress bar's match."""
    vals = [pr.value for pr in p.pairs]
    vals += [math.nan if pr.total is None else pr.total for pr in p.pairs]
    vals += p.bare
    m = _TQDM_RE.search(text) if " [" in text else None  # the pattern needs " [": most lines have none
    if m and ("it/s" in text or "s/it" in text or "%|" in text):
        vals += [float(m.group(1)), float(m.group(2))]
    else:
        m = None
    return vals, m


def uses_header(p: Parsed) -> bool:
    """Whether :func:`record_layout` of the line reads the table's header."""
    return bool((len(p.pairs) == 1 and p.bare) or (not p.pairs and len(p.bare) >= 2))


# a table cell that stands for a value not logged yet: the HF Trainer's model card writes "No log" for the
# training loss of an evaluation before the first logging step (transformers/modelcard.py, parse_log_history)
_MISSING_CELLS = frozenset({"no log"})
_ENDS_IN_CLOCK_RE = re.compile(r"(?<![\d:])\d{1,3}:\d\d(?::\d\d)?\s*$")


def record_layout(p: Parsed, text: str, table: Table, vals: list[float], tqdm: bool) -> RecordLayout | None:
    """The layout of one line's record (None: no number that means something). A header row
    (words only) sets the table's header instead."""
    if p.words and not p.pairs:
        header = _cells(strip_preamble(text)) or [w for w in p.words if w not in ("|", "-")]
        if 2 <= len(header) <= 40 and not all(set(w) <= set("-=:+|") for w in header):
            table.header = header
        return None
    metrics: dict[str, int] = {}
    counters: dict[str, int] = {}
    totals: dict[str, int] = {}
    n_pairs = len(p.pairs)
    bare = list(range(2 * n_pairs, 2 * n_pairs + len(p.bare)))  # slots of the bare numbers
    pairs = list(range(n_pairs))
    skipped = 0  # header columns the row leaves empty
    if n_pairs == 1 and p.pairs[0].key.lower() in _MISSING_CELLS and len(table.header) == 2 + len(bare):
        # the first cell holds no number ("No log | 1.0 | 272 | 0.6162"): the pair's value is the next column's
        bare, pairs, skipped = [0, *bare], [], 1
    elif n_pairs == 1 and bare and table.header and len(table.header) == 1 + len(bare):
        # a labelled row under a header ("free -g": "Mem:  65  1  19  0  44  63")
        label = p.pairs[0].key
        bare = [0, *bare]
        pairs = []
        for name, i in zip(table.header, bare):
            metrics[f"{label} {name}"] = i
    if tqdm:
        n = len(vals)
        counters["progress"] = n - 2
        totals["progress"] = n - 1
    for i in pairs:
        pr = p.pairs[i]
        if counter_rank(pr.key) is not None and math.isfinite(pr.value) and pr.value >= 0:
            counters.setdefault(pr.key.lower(), i)
            if pr.total is not None:
                totals[pr.key.lower()] = n_pairs + i
            continue
        metrics[pr.key] = i
    if not tqdm and not metrics and counters and len(bare) == 1 and not table.header:
        # one number after the counters and no name ("epoch 3: 93.90"): a value of the run, of unknown meaning
        metrics[UNNAMED] = bare[0]
    elif not tqdm and not metrics and counters and len(bare) >= 2 and p.cells and not table.header:
        # a delimited row without a header, its counters first ("1 | 104/ 180 | 67.79 | 60.75 | -16.18"):
        # values of unknown meaning, named by their column as a headerless table's are
        for k, i in enumerate(bare):
            metrics[column_name(n_pairs + 1 + k)] = i
    if not pairs and len(bare) >= 2 and not metrics:
        first = vals[bare[0]]
        if table.header and len(table.header) == len(bare) + skipped:
            names = table.header[skipped:]
        elif len(table.header) == len(bare) + 1 and table.header[-1].lower() in ("time", "elapsed", "duration") \
                and _ENDS_IN_CLOCK_RE.search(text):
            names = table.header[:-1]  # fastai's "epoch train_loss valid_loss accuracy time": 00:02 is no number
        elif math.isfinite(first) and first == int(first) and first >= 0:
            # a headerless row led by an integer: "76930 2.6496577" is a step and its value(s)
            names = ["step", *([UNNAMED_VALUE] if len(bare) == 2 else [column_name(k) for k in range(2, len(bare) + 1)])]
        else:
            names = table.names(len(bare))
        for name, i in zip(names, bare):
            if counter_rank(name) is not None and math.isfinite(vals[i]):
                counters[name.lower()] = i
            else:
                metrics[name] = i
    if not metrics and not counters:
        return None
    if tqdm and _SETUP_BAR_RE.match(strip_preamble(text)):
        return None  # the set-up's bar (a download, a dataset's map): its rate is no training step's
    if tqdm and not metrics and not any(k != "progress" for k in counters):
        return None  # a bare progress bar: no metric
    return RecordLayout(tuple(metrics.items()), tuple(counters.items()), tuple(totals.items()))


def record_of(text: str, no: int, rank: int | None, table: Table) -> Record | None:
    """One line's record (None: no number that means something)."""
    p = parse_line(text)
    vals, tqdm = line_values(p, text)
    lay = record_layout(p, text, table, vals, tqdm is not None)
    if lay is None:
        return None
    return Record(no, rank, {k: vals[i] for k, i in lay.metrics}, {k: vals[i] for k, i in lay.counters},
                  {k: vals[i] for k, i in lay.totals})


NAN_SOURCE = (3, 0)  # a value source: no number (a pair without a total)


@dataclass(frozen=True, slots=True)
class LineShape:
    """How to read every line of one shape (its text with every digit a ``0``) whose numbers
    have the same facts (integral? finite? negative? zero?) as ``text``'s, without parsing it.
    The line's values (:func:`line_values`) come from its numbers (:func:`number_spans`) through
    ``sources`` (``(0, i)``: number ``i``; ``(1, i)``: its inverse; :data:`NAN_SOURCE`), and its
    record follows :meth:`layout`, for values that have ``facts`` too: other facts may take
    another branch of :func:`parse_line_full` or :func:`record_layout`."""

    text: str
    parsed: Parsed
    values: tuple[float, ...]
    sources: tuple[tuple[int, int], ...]
    facts: tuple[int, ...]  # of each value
    tqdm: bool

    @property
    def header_row(self) -> bool:
        """Words only: the line may set the table's header and has no record."""
        return bool(self.parsed.words and not self.parsed.pairs)

    @property
    def uses_header(self) -> bool:
        return uses_header(self.parsed)

    def layout(self, header: list[str]) -> tuple[RecordLayout | None, list[str]]:
        """The record's layout under the table ``header``, and the header after the line (a
        header row sets it)."""
        table = Table()
        table.header = header
        return record_layout(self.parsed, self.text, table, list(self.values), self.tqdm), table.header


def number_spans(text: str) -> list[tuple[int, int]] | None:
    """Where a line's numbers are (offsets), as the tokenizer cuts them, then a progress bar's two
    numbers if the tokenizer cut them otherwise; the same places for every line of the shape.
    None where the line's tokens depend on its digits otherwise."""
    got = _number_tokens(text)
    if got is None:
        return None
    spans = got[0]
    _, tqdm = line_values(Parsed(), text)
    if tqdm is not None:
        spans += [sp for sp in (tqdm.span(1), tqdm.span(2)) if sp not in spans]
    return spans


def line_shape(text: str, spans: list[tuple[int, int]]) -> LineShape | None:
    """The :class:`LineShape` of ``text`` (``spans``: its :func:`number_spans`), or None where its
    lines must be read one by one (no plan, a clock time as a value, digits in a header row)."""
    if len(text) > SHAPES.max_len:
        return None
    asked: list[int] = []
    parsed = parse_line_full(text, asked)
    plan = make_plan(text, parsed, asked) or ShapeCache._plan_from_other_digits(text, parsed)
    if plan is None:
        return None
    if parsed.words and not parsed.pairs and _WORD_DIGIT_RE.search(text):
        return None  # the header it sets would change with the digits
    vals, tqdm = line_values(parsed, text)
    at = {sp: i for i, sp in enumerate(spans)}
    if any(sp not in at for sp in plan.spans):
        return None

    def where(src: tuple[int, int]) -> tuple[int, int]:
        how, i = src
        return src if how >= 2 else (how, at[plan.spans[i]])

    sources = [where(src) for _, src, _, _ in plan.pairs]
    sources += [NAN_SOURCE if tot is None else where(tot) for _, _, _, tot in plan.pairs]
    sources += [where(src) for src in plan.bare]
    if tqdm is not None:
        sources += [(0, at[tqdm.span(1)]), (0, at[tqdm.span(2)])]
    if any(how == 2 for how, _ in sources):
        return None  # a clock time read as seconds: not a number of the line
    nums = _numbers(text, tuple(spans))
    if nums is None or len(sources) != len(vals):
        return None
    for (how, i), v in zip(sources, vals):
        got = math.nan if how == 3 else nums[i] if how == 0 else (1.0 / nums[i] if nums[i] else math.inf)
        if not _same_float(got, v) and not (math.isnan(got) and math.isnan(v)):
            return None
    return LineShape(text, parsed, tuple(vals), tuple(sources), tuple(_facts(v) for v in vals), tqdm is not None)


def _alt_counter(counters: Iterable[tuple[str, bool]]) -> str | None:
    """The counter that stands for the step counter on a line without it: the best-ranked
    integral counter of the step's kind (``(key, integral)`` pairs in the record's order)."""
    return min((k for k, integral in counters if (counter_rank(k) or 9) <= 5 and integral),
               key=lambda k: counter_rank(k) or 9, default=None)


@dataclass(frozen=True, slots=True)
class _RowPlan:
    """What placing a record of one layout does, for a given step counter (:meth:`Extractor.place_many`)."""

    step: int | None  # the slot of the step counter (or the counter standing for it)
    outer: tuple[tuple[str, int], ...]  # counters around the step (epoch), in the record's order
    others: tuple[tuple[str, int], ...]  # the other counters, for the step's text
    metrics: bool


TEXTS_MAX = 200_000


@dataclass(slots=True)
class _Step:
    key: str | None  # the counter the step comes from (None: the record's index)
    integral: bool
    swap_total: bool = False  # the counter's "N/M" total is the step (wenet's "Batch epoch/batch")
    total: int | None = None  # the one "N/M" total the counter printed with it ("Step 380000/1000000")


class Extractor:
    """A file's records -> series. The first ``decide_after`` records are kept to decide which
    counter is the step; after that, records stream through.

    The step of a record is its counter's value when the counter is integral and only grows (a
    restart that goes back is kept as the log prints it). A counter that restarts while an outer
    one grows (``Epoch[3] Batch[40]``, ``[epoch 3][iter 100/500]``, or an epoch heading on a line of its
    own above ``Iter: [000/3877]``) becomes a running step, and the
    step as printed (``epoch 3 batch 40``) is kept as the step's text. Without any counter, the
    step is the record's number, with the epoch as text when there is one.
    """

    decide_after = 2000

    def __init__(self) -> None:
        self.table = Table()
        self.pending: list[Record] = []
        self.step: _Step | None = None
        self.last_counter: dict[int | None, float] = {}  # per launcher rank: ranks interleave
        self.last_step: int | None = None
        self.offset = 0
        self.index = 0
        self.outer: dict[str, float] = {}
        self.step_outer: dict[str, float] = {}  # the outer counters as the step counter's lines last printed them
        self.outer_at_step: dict[str, float] = {}  # the outer counters as they stood at the step counter's last line
        self.texts: dict[int, str] = {}
        self.emitted: list[tuple[int, Record]] = []
        self.block: Record | None = None  # the vertical key/value table being read (_block_row)
        self.block_section = ""
        self.vertical = False  # such a table was read: its rows are one record, never placed in bulk
        self.block_sections: list[str] = []  # the nested keys open in a Ray Tune result block (_result_row)
        self.in_result = False  # reading the "  key: value" lines of a "Result for <trial>:" block
        self.in_object = False  # reading the '"key": value,' lines of a pretty-printed JSON object (_object_row)
        self.nested = 0  # how deep inside such an object's nested objects and arrays the line is
        self.bar_total: dict[str, float] = {}  # a rate's key -> the longest progress bar that printed it so far

    def feed(self, text: str, no: int, rank: int | None) -> list[tuple[int, Record]]:
        if ("|" in text or "\u2502" in text) and self._block_row(text, no, rank):
            return []
        done: list[tuple[int, Record]] = []
        if self.in_result or text.startswith("Result for "):
            # the next trial result right after the last one's lines closes it
            if self.in_result and text.startswith("Result for "):
                done = self._feed_block()
            if self._result_row(text, no, rank):
                return done
        if self.in_object or text.lstrip().startswith(("{", "}")):
            placed = self._object_row(text, no, rank)
            if placed is not None:
                return done + placed
        out = done + (self._feed_block() if self.block is not None else [])
        rec = record_of(text, no, rank, self.table)
        if rec is None or not self.main_bar(rec):
            return out
        return out + self._feed(rec)

    # A log shows several tqdm bars: the training's, and shorter ones for each evaluation, a dataset map
    # or a pipeline's loading (HF Trainer's evaluation loop, Lightning's validation bar, diffusers'
    # validation pipeline). Each bar counts from 1 again, so their rates in one series would stand at
    # the training's steps and read as the training slowing down or speeding up. The training's bar is
    # the longest: a bar's rate is kept only while no longer bar printed the same rate before it.
    def main_bar(self, rec: Record) -> bool:
        """Whether ``rec`` is kept. A progress bar shorter than the longest one so far loses its rates
        and its count: its other metrics (an evaluation bar's ``val_loss=``) stand at the training's
        step; a record left without metrics is dropped."""
        total = rec.totals.get("progress")
        if total is None:
            return True
        rates = [k for k in rec.metrics if k.lower() in RATE_KEYS]
        if not rates:
            return True
        if any(total < self.bar_total.get(k, -math.inf) for k in rates):
            for k in rates:
                del rec.metrics[k]
            del rec.counters["progress"], rec.totals["progress"]
            return bool(rec.metrics)
        self.bar_total.update((k, total) for k in rates)
        return True

    def _block_row(self, text: str, no: int, rank: int | None) -> bool:
        """A row of a vertical key/value table, taken into the table's record. stable-baselines3's
        logger prints one table per dump (stable_baselines3/common/logger.py, HumanOutputFormat)::

            -----------------------------------------
            | time/                   |             |
            |    fps                  | 26          |
            |    total_timesteps      | 3584        |
            | train/                  |             |
            |    loss                 | 20.1        |
            -----------------------------------------

        A row with an empty value opens a section whose name prefixes the rows below it
        (``train/loss``, as the logger's own keys read); counters keep their bare names."""
        body = text.strip()
        if body.startswith("\u2502") and body.endswith("\u2502") and len(body) <= 400:
            # Ray Train's result box (ray/tune/experimental/output.py): "│ loss      50 │", one
            # key and its value a row, under a "│ Training result │" title
            inner = body[1:-1].strip()
            key, _, value = inner.rpartition(" ")
            if not key or number(value) is None:
                if not inner.endswith(" result"):
                    return False
                self.block = self.block or Record(no, rank, {}, {}, {})
                return True
            cells = ["", key, value, ""]
        elif len(body) > 400 or not (body.startswith("|") and body.endswith("|")):
            return False
        else:
            cells = body.split("|")
        if len(cells) != 4:
            return False
        key, value = cells[1].strip(), cells[2].strip()
        if not key or key[0].isdigit():
            return False
        if not value:
            if not key.endswith("/"):
                return False
            self.block_section = key
            self.block = self.block or Record(no, rank, {}, {}, {})
            return True
        v = number(value)
        if v is None:
            return False
        self.block = self.block or Record(no, rank, {}, {}, {})
        if counter_rank(key) is not None and math.isfinite(v) and v >= 0:
            self.block.counters.setdefault(key.lower(), v)
        else:
            name = self.block_section + key if cells[1].startswith("  ") else key
            self.block.metrics[name] = v
        self.block.line = no
        self.vertical = True
        return True

    _RESULT_ROW = re.compile(r"( {2,40})([\w/.\-]{1,120}): ?(.{0,60})$")
    # a result's identifiers and clock, not measurements of the run
    _RESULT_IGNORED = frozenset({"timestamp", "pid", "iterations_since_restore", "time_since_restore"})

    def _result_row(self, text: str, no: int, rank: int | None) -> bool:
        """A line of the result Ray Tune prints for each report of a trial (RLlib's and Ray Train's
        included; ray/tune/progress_reporter.py, TrialProgressCallback.on_trial_result at verbose=3)::

            Result for PPO_CartPole-v0_120b5_00000:
              episode_reward_mean: 22.577142857142857
              info:
                learner:
                  default_policy:
                    learner_stats:
                      policy_loss: -0.0349934846162796
              training_iteration: 1

        One record per block; a nested key is its path (``info/learner/default_policy/...``)."""
        if text.startswith("Result for ") and text.rstrip().endswith(":"):
            self.block = self.block or Record(no, rank, {}, {}, {})
            self.block_sections, self.in_result, self.vertical = [], True, True
            return True
        m = self._RESULT_ROW.match(text.rstrip())
        if m is None or self.block is None:
            self.in_result = False
            return False
        depth = len(m.group(1)) // 2 - 1
        key, value = m.group(2), m.group(3).strip()
        del self.block_sections[depth:]
        if not value:
            self.block_sections.append(key)
            return True
        v = number(value)
        if v is None or key in self._RESULT_IGNORED:
            return True
        name = "/".join([*self.block_sections, key])
        if counter_rank(key) is not None and not self.block_sections and math.isfinite(v) and v >= 0:
            self.block.counters.setdefault(key.lower(), v)
        else:
            self.block.metrics[name] = v
        self.block.line = no
        return True

    _OBJECT_ROW = re.compile(r'\s{0,40}"([^"]{1,120})": ?(.{1,200})')

    def _object_row(self, text: str, no: int, rank: int | None) -> list[tuple[int, Record]] | None:
        """A line of a pretty-printed JSON object of numbers, one record per object, as a pasted
        excerpt of ``trainer_state.json``'s ``log_history`` shows it (json.dumps with ``indent=2``
        puts every key on its own line, and sorts ``step`` after the metrics)::

            {
              "epoch": 6.33,
              "eval_loss": NaN,
              "step": 500
            },

        A nested object after the record's first numbers is skipped whole (its keys are not the
        record's); an array, or an object as the first value, makes the object a container. Returns the records
        placed when the line was taken (the object's closing brace places it), None when the line is
        not such a row: the object ends there, and the line is read as any other."""
        body = text.strip()
        if self.nested:
            self.nested += body.endswith(("{", "[")) - body.startswith(("}", "]"))
            return []
        if body in ("{", "},{", "}, {"):
            done = self._feed_block() if self.block is not None else []
            self.block, self.in_object, self.vertical = Record(no, rank, {}, {}, {}), True, True
            return done
        if not self.in_object:
            return None
        if body in ("}", "},"):
            return self._feed_block()
        m = self._OBJECT_ROW.fullmatch(text.rstrip())
        if m is None or self.block is None:
            self.in_object = False  # what the object held so far is its record (a paste cut inside it)
            return None
        value = m.group(2).removesuffix(",").strip()
        if value == "{" and (self.block.metrics or self.block.counters):
            self.nested = 1
            return []
        if value in ("{", "["):
            # a container, not a record: a list of records (``"log_history": [``), each of its objects one,
            # or an object of objects (a golden-values file's ``"lm loss": {``), whose lines are read as any other
            self.block, self.in_object = None, False
            return []
        key, v = m.group(1), number(value)
        if v is not None:
            if counter_rank(key) is not None and math.isfinite(v) and v >= 0:
                self.block.counters.setdefault(key.lower(), v)
            else:
                self.block.metrics[key] = v
            self.block.line = no
        return []

    def _feed_block(self) -> list[tuple[int, Record]]:
        rec, self.block, self.block_section = self.block, None, ""
        self.in_result = self.in_object = False
        if rec is None or not (rec.metrics or rec.counters):
            return []
        return self._feed(rec)

    def _feed(self, rec: Record) -> list[tuple[int, Record]]:
        if self.step is None:
            self.pending.append(rec)
            if len(self.pending) < self.decide_after:
                return []
            self.step = self._decide(self.pending)
            out = [self.place(r) for r in self.pending]
            self.pending = []
            return [x for x in out if x is not None]
        placed = self.place(rec)
        return [placed] if placed is not None else []

    def finish(self) -> list[tuple[int, Record]]:
        out = self._feed_block() if self.block is not None else []
        if self.step is None:
            self.step = self._decide(self.pending)
            placed = [self.place(r) for r in self.pending]
            self.pending = []
            out += [x for x in placed if x is not None]
        return out

    @staticmethod
    def _decide(records: list[Record]) -> _Step:
        with_metrics = [r for r in records if r.metrics] or records
        best: tuple[int, int, float, str] | None = None
        seen: dict[str, list[float]] = {}
        for r in records:
            for k, v in r.counters.items():
                seen.setdefault(k, []).append(v)
        moving = {k: _moving(v) for k, v in seen.items()}
        # a line of counters alone heads the lines of metrics without counters after it: OLMo's
        # "[step=10/1000,epoch=0]" then "    train/CrossEntropyLoss=9.362", one metric a line
        # (olmo/train.py, log_metrics_to_console); they are at its step (place: the last step)
        held: dict[int, frozenset[str]] = {}
        heading: frozenset[str] = frozenset()
        for r in records:
            if r.counters:
                heading = frozenset(r.counters) if not r.metrics else frozenset()
            elif r.metrics:
                held[id(r)] = heading
        for k in seen:
            rank = counter_rank(k)
            rank = 9 if k == "progress" else rank
            if rank is None:
                continue
            cover = sum(1 for r in with_metrics if k in r.counters or k in held.get(id(r), ())) / len(with_metrics)
            if cover < 0.25 and len(seen) > 1:
                continue
            # a counter that stays put while another one moves on every line is not the step
            # ("iter 1152 step 144": gradient accumulation; the iteration is what each line is)
            stuck = moving[k] < 0.5 and any(m >= 0.9 and counter_rank(o) is not None
                                             for o, m in moving.items() if o != k)
            cand = (int(stuck), rank, -cover, k)
            if best is None or cand < best:
                best = cand
        if best is None:
            return _Step(None, True)
        k = best[3]
        vals = seen[k]
        totals = [r.totals[k] for r in records if k in r.totals]
        if len(set(vals)) == 1 and len(totals) >= 3 and len(set(totals)) > 1:
            # "Batch 0/4000", "Batch 0/4100": the number after the slash is the one that counts
            for r in records:
                if k in r.totals:
                    r.counters[k] = r.totals[k]
            return _Step(k, all(t == int(t) for t in totals), swap_total=True)
        total = int(totals[0]) if len(set(totals)) == 1 and totals[0] == int(totals[0]) and totals[0] > 0 else None
        return _Step(k, all(v == int(v) for v in vals), total=total)

    def place(self, rec: Record) -> tuple[int, Record] | None:
        assert self.step is not None
        key = self.step.key
        if self.step.swap_total and key is not None and key in rec.totals:
            rec.counters[key] = rec.totals[key]
        for k, v in rec.counters.items():
            rank_k = counter_rank(k)
            if k != key and rank_k is not None and rank_k >= OUTER_RANK:
                self.outer[k] = v  # epoch: the counter around the step
        if key is not None and key not in rec.counters:
            # another counter of the same kind on this line ("iteration 3" in a log of "step N")
            alt = _alt_counter((k, v == int(v)) for k, v in rec.counters.items())
            if alt is not None:
                rec.counters[key] = rec.counters[alt]
        if key is not None and self.step.integral and key in rec.counters:
            v = rec.counters[key]
            prev = self.last_counter.get(rec.rank)
            if prev is not None and v < prev and self.last_step is not None and \
                    (epochs := self._outer_moved(rec) or self._header_moved(rec)):
                self.offset = self._restart_offset(int(v), epochs)  # the inner counter restarted in a new epoch
            step = int(v) + self.offset
            self.last_counter[rec.rank] = v
            self.outer_at_step = dict(self.outer)
            self.step_outer.update({k: rec.counters[k] for k in self.outer if k in rec.counters})
            if self.offset or self.outer:
                self._text(step, rec, key)
        elif (key is not None and key in rec.counters) or not rec.counters or key is None:
            if key is not None and self.last_step is not None and key not in rec.counters:
                step = self.last_step  # a line without the counter belongs to the last step
            else:
                self.index += 1
                step = self.index
                self._text(step, rec, key)
        else:
            if self.last_step is None:
                return None
            step = self.last_step
        if not rec.metrics:
            self.last_step = step
            return None
        self.last_step = step
        return step, rec

    @property
    def steady(self) -> bool:
        """Records can be placed in bulk (:meth:`place_many`): the step counter is decided,
        integral and read as printed, and a step has been placed."""
        s = self.step
        return (s is not None and s.key is not None and s.integral and not s.swap_total
                and self.last_step is not None and not self.vertical)

    def row_plan(self, layout: RecordLayout, facts: Sequence[int]) -> _RowPlan:
        """How records of ``layout`` whose values have ``facts`` are placed (``steady`` only)."""
        assert self.step is not None and self.step.key is not None
        key = self.step.key
        counters = dict(layout.counters)
        slot = counters.get(key)
        if slot is None:
            alt = _alt_counter((k, bool(facts[i] & 2)) for k, i in layout.counters)
            slot = None if alt is None else counters[alt]
        outer = tuple((k, i) for k, i in layout.counters
                      if k != key and (r := counter_rank(k)) is not None and r >= OUTER_RANK)
        others = tuple((k, i) for k, i in layout.counters if k != key and (k, i) not in outer)
        return _RowPlan(slot, outer, others, bool(layout.metrics))

    def place_many(self, n: int, groups: Sequence[tuple[_RowPlan, NDArray[np.int64], NDArray[np.float64]]]
                   ) -> NDArray[np.int64] | None:
        """Place ``n`` records of no launcher rank at once, exactly as :meth:`place` one by one
        (``steady`` only). Each group holds the records of one :class:`_RowPlan`: their positions
        among the ``n`` and their values (a row a record, a column a slot). Returns each record's
        step; None, with nothing changed, where the step counter goes back (a restart, whose
        offset :meth:`place` decides record by record) or a step would not fit 62 bits."""
        assert self.step is not None and self.step.key is not None and self.last_step is not None
        kv = np.zeros(n)
        keyed = np.zeros(n, dtype=bool)
        for plan, pos, vals in groups:
            if plan.step is not None:
                kv[pos] = vals[:, plan.step]
                keyed[pos] = True
        kk = kv[keyed]
        if kk.size and (float(np.abs(kk).max()) >= 2.0**53 or abs(self.offset) >= 2**62):
            return None
        if kk.size and self._restarts(n, groups, kk, keyed):
            return None
        headings = any(plan.step is None and plan.outer for plan, _, _ in groups)
        if kk.size and (headings or self.outer != self.outer_at_step):
            prev = self.last_counter.get(None)
            if (prev is not None and kk[0] < prev) or bool(np.any(kk[1:] < kk[:-1])):
                return None  # a counter going back after an epoch heading: place decides whether it restarted
        outer_before = dict(self.outer)
        at = np.where(keyed, np.arange(n), -1)
        np.maximum.accumulate(at, out=at)
        full = np.zeros(n, dtype=np.int64)
        full[keyed] = kk.astype(np.int64) + self.offset
        steps = np.where(at >= 0, full[np.maximum(at, 0)], self.last_step)
        # the counters around the step: each one's last value, new ones in the order they appear
        last: dict[str, tuple[int, float]] = {}
        first: list[tuple[int, int, str]] = []
        in_step: dict[str, tuple[int, float]] = {}
        for plan, pos, vals in groups:
            for j, (k, i) in enumerate(plan.outer):
                p, v = int(pos[-1]), float(vals[-1, i])
                if k not in last or last[k][0] < p:
                    last[k] = (p, v)
                if k not in self.outer:
                    first.append((int(pos[0]), j, k))
                if plan.step is not None and (k not in in_step or in_step[k][0] < p):
                    in_step[k] = (p, v)
        new = list(dict.fromkeys(k for _, _, k in sorted(first)))
        if len(self.texts) < TEXTS_MAX and kk.size:
            self._texts_many(n, groups, steps, kv, keyed, new)
        for k in new:
            self.outer[k] = math.nan  # its place in the order; its value below
        for k, (_, v) in last.items():
            self.outer[k] = v
        self.step_outer.update({k: v for k, (_, v) in in_step.items()})
        if kk.size:
            self.last_counter[None] = float(kk[-1])
            # the counters around the step as of its last line here (a heading after it comes later)
            last_keyed = int(np.flatnonzero(keyed)[-1])
            around = outer_before
            latest: dict[str, int] = {}
            for plan, pos, vals in groups:
                j = int(np.searchsorted(pos, last_keyed, side="right")) - 1  # its last record up to there
                for k, i in plan.outer:
                    if j >= 0 and int(pos[j]) > latest.get(k, -1):
                        latest[k] = int(pos[j])
                        around[k] = float(vals[j, i])
            self.outer_at_step = around
        self.last_step = int(steps[-1])
        return steps

    def _restarts(self, n: int, groups: Sequence[tuple[_RowPlan, NDArray[np.int64], NDArray[np.float64]]],
                  kk: NDArray[np.float64], keyed: NDArray[np.bool_]) -> bool:
        """Whether a record among them restarts the step counter: its counter goes back while a
        counter around it moved (:meth:`_outer_moved`, as of the record before)."""
        prev = self.last_counter.get(None)
        back = np.zeros(kk.shape[0], dtype=bool)
        back[0] = prev is not None and kk[0] < prev
        back[1:] = kk[1:] < kk[:-1]
        if not back.any():
            return False
        rank = np.cumsum(keyed) - 1  # a keyed record's index among the keyed ones
        moved = np.zeros(kk.shape[0], dtype=bool)
        for k in {k for plan, _, _ in groups if plan.step is not None for k, _ in plan.outer}:
            vals = np.full(kk.shape[0], np.nan)
            has = np.zeros(kk.shape[0], dtype=bool)
            for plan, pos, v in groups:
                i = dict(plan.outer).get(k)
                if plan.step is not None and i is not None:
                    vals[rank[pos]] = v[:, i]
                    has[rank[pos]] = True
            # the value the step counter's records last had, before each record
            mark = np.where(has, np.arange(kk.shape[0]), -1)
            np.maximum.accumulate(mark, out=mark)
            before = np.concatenate([[-1], mark[:-1]])
            start = self.step_outer.get(k)
            seen = np.where(before >= 0, vals[np.maximum(before, 0)], np.nan if start is None else start)
            known = (before >= 0) | (start is not None)
            moved |= has & known & (vals != seen)
        return bool((back & moved).any())

    def _texts_many(self, n: int, groups: Sequence[tuple[_RowPlan, NDArray[np.int64], NDArray[np.float64]]],
                    steps: NDArray[np.int64], kv: NDArray[np.float64], keyed: NDArray[np.bool_],
                    new: list[str]) -> None:
        """:meth:`_text` of each record with the step counter, in order, while there is room."""
        assert self.step is not None and self.step.key is not None
        key = self.step.key
        names = [*self.outer, *new]
        found: dict[str, list[tuple[NDArray[np.int64], NDArray[np.float64]]]] = {}
        row_group = np.zeros(n, dtype=np.int64)
        row_index = np.zeros(n, dtype=np.int64)
        for g, (plan, pos, vals) in enumerate(groups):
            row_group[pos] = g
            row_index[pos] = np.arange(pos.shape[0])
            for k, i in plan.outer:
                found.setdefault(k, []).append((pos, vals[:, i]))
        values: list[list[float]] = []
        present: list[list[bool]] = []
        for k in names:  # each counter's value as of each record
            col = np.full(n, self.outer.get(k, math.nan))
            has = np.full(n, k in self.outer)
            if k in found:
                pos = np.concatenate([p for p, _ in found[k]])
                v = np.concatenate([x for _, x in found[k]])
                order = np.argsort(pos, kind="stable")
                mark = np.full(n, -1)
                mark[pos[order]] = np.arange(pos.shape[0])
                np.maximum.accumulate(mark, out=mark)
                col = np.where(mark >= 0, v[order][np.maximum(mark, 0)], col)
                has |= mark >= 0
            values.append(col.tolist())
            present.append(has.tolist())
        for r in np.flatnonzero(keyed).tolist():
            if len(self.texts) >= TEXTS_MAX:
                return
            here = [c for c in range(len(names)) if present[c][r]]
            if not (self.offset or here):
                continue
            plan, _, vals = groups[int(row_group[r])]
            j = int(row_index[r])
            parts = [f"{names[c]} {_fmt(values[c][r])}" for c in here]
            parts.append(f"{key} {_fmt(float(kv[r]))}")
            parts += [f"{k} {_fmt(float(vals[j, i]))}" for k, i in plan.others]
            self.texts[int(steps[r])] = ", ".join(parts)

    def _outer_moved(self, rec: Record) -> float:
        """How far an outer counter (epoch) on this line moved since the last line of the step counter
        that had it (0: it did not): the inner one restarts with it. Without one, a counter going back
        is a restart of the run, kept as printed; an outer-looking counter never seen with the step
        before has not moved ("iter 144: ... batch:(16|85)" after a debug print "begin iter
        2222222222" is step 144, not a new epoch)."""
        return next((rec.counters[k] - v for k, v in self.step_outer.items()
                     if k in rec.counters and rec.counters[k] != v), 0.0)

    def _header_moved(self, rec: Record) -> float:
        """How far an outer counter (epoch) moved on a line of its own since the step counter's last line
        (0: it did not; "==>> [Epoch=001/020]" above "Iter: [000/3877]"): the inner one restarts with it."""
        return next((v - self.outer_at_step[k] for k, v in self.outer.items()
                     if k not in rec.counters and k in self.outer_at_step and self.outer_at_step[k] != v), 0.0)

    def _restart_offset(self, counter: int, epochs: float) -> int:
        """The offset of an inner counter that restarted ``epochs`` epochs on. With the one total it
        prints ("Train: 3 [ 10/200 ...]", 200 batches an epoch), an epoch is that many steps, though a
        paste left out an epoch's last lines; else the new epoch starts one step after the last."""
        assert self.step is not None and self.last_step is not None
        n = self.step.total
        if n is not None and epochs == int(epochs) and epochs >= 1 and \
                counter + self.offset + int(epochs) * n > self.last_step:
            return self.offset + int(epochs) * n
        return self.last_step + 1 - counter

    def _text(self, step: int, rec: Record, key: str | None) -> None:
        if len(self.texts) >= TEXTS_MAX:
            return
        parts = [f"{k} {_fmt(v)}" for k, v in self.outer.items()]
        if key is not None and key in rec.counters:
            parts.append(f"{key} {_fmt(rec.counters[key])}")
        for k, v in rec.counters.items():
            if k != key and k not in self.outer:
                parts.append(f"{k} {_fmt(v)}")
        if parts:
            self.texts[step] = ", ".join(parts)


def _moving(vals: list[float]) -> float:
    """The share of consecutive values that change."""
    if len(vals) < 2:
        return 1.0
    return sum(1 for a, b in itertools.pairwise(vals) if a != b) / (len(vals) - 1)


def _fmt(v: float) -> str:
    return str(int(v)) if v == int(v) else f"{v:g}"
