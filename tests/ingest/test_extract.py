"""The format-agnostic extractor on verbatim lines of real logs: one test per spelling of a step
counter, a metric pair or a table, each line as its author posted it (the source is named beside
it; lines from ``tests/corpus/logs`` carry their source in the case's ``label.json``; the few
written here say so). Then logs whose numbers are no metric at all (timestamps, PIDs, thread ids,
C++ logger locations, versions, ports), written in the shapes glog, syslog and Python's logging
print, must give no series: a fake step series would make every rule fire on noise.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from shared_data import CORPUS_LOGS, corpus_log

from trainaudit.errors import InputError
from trainaudit.ingest import load_run
from trainaudit.ingest.extract import Extractor, parse_line, parse_line_full
from trainaudit.model import Run, unnamed
from trainaudit.series.roles import find_roles


def read(tmp_path: Path, text: str, name: str = "train.log") -> Run:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    run, _ = load_run([str(p)])
    return run


def points(run: Run, name: str) -> list[tuple[int, float]]:
    s = run.series[name]
    return list(zip(s.steps.tolist(), s.values.tolist()))


def head(case: str, n: int) -> str:
    """The first ``n`` lines of a corpus log, verbatim."""
    return "\n".join(corpus_log(case)[:n]) + "\n"


# -- step counters --------------------------------------------------------------------------------
def test_iter_and_step_the_iteration_is_what_each_line_is(tmp_path: Path) -> None:
    # litgpt with gradient accumulation: "step" stays put while "iter" moves on every line
    run = read(tmp_path, head("litgpt-Lightning-AI-litgpt-628", 5))
    assert points(run, "loss") == [(1151, 1.7019), (1152, 11.463), (1153, 11.7545), (1154, 11.5019), (1155, 11.4807)]
    assert points(run, "iter time")[0] == (1151, 1106.53)


def test_iteration_n_of_m_in_a_megatron_deepspeed_line(tmp_path: Path) -> None:
    run = read(tmp_path, head("megatron-deepspeed-bigscience-workshop-Megatron-DeepSpeed-396", 2))
    steps = {int(x) for s in run.series.values() for x in s.steps}
    assert steps == {5426, 5427}  # not the 250000 after the slash, nor consumed samples/tokens
    assert points(run, "elapsed time per iteration (ms)") == [(5426, 4247.9), (5427, 4225.8)]


def test_global_step_printed_twice_by_two_loggers(tmp_path: Path) -> None:
    # TF1 object detection: every line twice (absl and the tensorflow logger)
    run = read(tmp_path, head("tf1-yangxue0827-FPN_Tensorflow-2", 2))
    assert points(run, "loss") == [(124368, 0.114)]
    assert points(run, "sec/step") == [(124368, 0.138)]


def test_milliseconds_per_iteration_after_the_number_are_a_step_time(tmp_path: Path) -> None:
    # a hand-written loop's "| 1.4 ms/it |" and DLRM's "53.58 ms/it": the time of a step, in milliseconds
    # (DLRM counts its iterations as "Finished training it 1024/2048437 of epoch 0")
    run = read(tmp_path, "epoch 1 | iter 10 | loss 0.56 | 1.4 ms/it\nepoch 1 | iter 20 | loss 0.52 | 28.3 ms/it\n")
    assert points(run, "ms/it") == [(10, 1.4), (20, 28.3)]
    assert find_roles(run).names["step_time"] == "ms/it"
    run = read(tmp_path, head("pytorch-loop-facebookresearch-dlrm-65", 8))
    assert points(run, "ms/it")[:2] == [(1024, 53.58), (2048, 35.21)]


def test_epoch_and_batch_in_brackets_with_a_speed(tmp_path: Path) -> None:
    # MXNet's Speedometer, https://github.com/apache/mxnet/issues/15962 (verbatim, tabs kept)
    run = read(tmp_path, (
        "2019-08-21 14:56:44,024 INFO Epoch[101] Batch [250]\tSpeed: 581.56 samples/sec\taccuracy=1.000000\n"
        "2019-08-21 14:56:54,971 INFO Epoch[101] Batch [300]\tSpeed: 584.65 samples/sec\taccuracy=1.000000\n"
        "2019-08-21 14:57:14,472 INFO Epoch[101] Train-accuracy=1.000000\n"
        "2019-08-21 14:57:18,638 INFO Epoch[101] Validation-accuracy=0.808193\n"
        "2019-08-21 14:57:29,825 INFO Epoch[102] Batch [50]\tSpeed: 580.51 samples/sec\taccuracy=1.000000\n"))
    speed = points(run, "Speed")
    assert [v for _, v in speed] == [581.56, 584.65, 580.51]
    assert speed[0][0] < speed[1][0] < speed[2][0]  # the batch restarts with the epoch; the step does not
    assert run.meta["step_text"][speed[2][0]] == "epoch 102, batch 50"
    assert points(run, "Validation-accuracy") == [(speed[1][0], 0.808193)]
    assert not any(k.startswith(("2019", "14:")) for k in run.series)


def test_session_epoch_iter_of_total(tmp_path: Path) -> None:
    # faster-rcnn.pytorch's trainer, https://github.com/ruoqianguo/cascade-rcnn_Pytorch/issues/18
    run = read(tmp_path, (
        "[session 1][epoch 16][iter  500/ 565] loss: 0.9430, lr: 1.00e-03\n"
        "\t\t\tfg/bg=(223/1057), time cost: 301.081875\n"
        "\t\t\trpn_cls: 0.0097, rpn_box: 0.0153, rcnn_cls: 0.1231, rcnn_box 0.2279\n"
        "save model: weights/detnet59/pascal_voc/exp_name/fpn_1_16_564.pth\n"
        "[session 1][epoch 17][iter    0/ 565] loss: 0.7003, lr: 1.00e-03\n"
        "[session 1][epoch 17][iter  100/ 565] loss: 0.8786, lr: 1.00e-03\n"))
    loss = points(run, "loss")
    assert [v for _, v in loss] == [0.943, 0.7003, 0.8786]
    assert loss[0][0] < loss[1][0] < loss[2][0]
    assert run.meta["step_text"][loss[1][0]] == "epoch 17, iter 0"
    assert points(run, "rcnn_box") == [(500, 0.2279)]  # "k v" on a continuation line joins its step


def test_a_counter_first_seen_beside_the_step_is_no_new_epoch(tmp_path: Path) -> None:
    # FastMaskRCNN after a debug print "begin iter 2222222222": "batch:(16|85, ...)" is not an epoch
    # that moved, so "iter 144" is step 144 (not 2222222222 + 1) and the bare "Killed" after it too
    run = read(tmp_path, head("tf1-charlesshang-fastmaskrcnn-172", 10))
    assert points(run, "regular_loss") == [(144, 0.248765)]
    assert [e.step for e in run.events] == [144, 144]  # the shell's "Killed": SIGKILL, likely host OOM


def test_the_step_the_log_prints_in_its_first_epoch(tmp_path: Path) -> None:
    # DeepSpeed-Chat's "Epoch 1, Step 0" after tqdm's bar: the step is 0 as printed; from the second
    # epoch on the step counter restarts and the steps run on
    run = read(tmp_path, head("deepspeed-BeyonderXX-TRACE-5", 20))
    loss = points(run, "Loss")
    assert loss[:2] == [(0, 0.9741), (1, 1.3742)]
    assert [s for s, _ in loss] == list(range(len(loss)))
    assert run.meta["step_text"][8].startswith("epoch 2,") and "step 0" in run.meta["step_text"][8]


def test_keras_epoch_n_of_m_then_its_metrics(tmp_path: Path) -> None:
    run = read(tmp_path, head("keras-keras-team-keras-10102", 4))
    assert points(run, "loss") == [(4, 55.8033), (5, 53.3749)]
    assert points(run, "val_loss") == [(4, 26.4454), (5, 26.3017)]
    assert "200" not in str(run.series.keys())


def test_caffe_iteration_comma_loss_equals_under_glog(tmp_path: Path) -> None:
    # https://github.com/rbgirshick/py-faster-rcnn/issues/261 (verbatim)
    run = read(tmp_path, (
        "I0716 19:43:47.749999 10332 solver.cpp:229] Iteration 0, loss = 1.97911\n"
        "I0716 19:43:47.750056 10332 solver.cpp:245]     Train net output #0: loss_bbox = 0.215723 (* 1 = 0.215723 loss)\n"
        "I0716 19:43:47.750092 10332 sgd_solver.cpp:106] Iteration 0, lr = 0.001\n"
        "I0716 19:44:22.012998 10332 solver.cpp:229] Iteration 20, loss = 0.540817\n"
        "I0716 19:44:22.013044 10332 solver.cpp:245]     Train net output #0: loss_bbox = 0.449951 (* 1 = 0.449951 loss)\n"
        "I0716 19:44:22.013074 10332 sgd_solver.cpp:106] Iteration 20, lr = 0.001\n"))
    assert points(run, "loss") == [(0, 1.97911), (20, 0.540817)]
    assert points(run, "loss_bbox") == [(0, 0.215723), (20, 0.449951)]
    assert points(run, "lr") == [(0, 0.001), (20, 0.001)]
    assert set(run.series) == {"loss", "loss_bbox", "lr"}  # nothing from 10332, solver.cpp:229 or the clock


def test_tensorflow_step_under_glog_with_a_15_digit_thread_id(tmp_path: Path) -> None:
    # TF2 object detection API, printed by absl and the tensorflow logger:
    # https://github.com/armaanpriyadarshan/Training-a-Custom-TensorFlow-2.X-Object-Detector/issues/6
    run = read(tmp_path, (
        "I0912 11:40:27.956218 139735407601536 model_lib_v2.py:652] Step 100 per-step time 0.813s loss=1.396\n"
        "INFO:tensorflow:Step 200 per-step time 0.831s loss=1.192\n"
        "I0912 11:41:51.976096 139735407601536 model_lib_v2.py:652] Step 200 per-step time 0.831s loss=1.192\n"))
    assert points(run, "loss") == [(100, 1.396), (200, 1.192)]
    assert set(run.series) == {"loss", "per-step time"}


def test_recbole_day_month_clock_preamble_is_no_step(tmp_path: Path) -> None:
    # RecBole's logger ("%d %b %H:%M"): the day of the month is no step counter, the epoch is
    run = read(tmp_path, head("recbole-nuster1128-RecBole-MetaRec-6", 11))
    assert points(run, "train loss") == [(0, 1.3043), (1, 1.3043), (2, 1.3043)]
    assert points(run, "valid_score") == [(0, 0.4289), (1, 0.4289)]


def test_an_evaluation_tag_in_brackets_names_the_evaluation(tmp_path: Path) -> None:
    # Marian: "[valid] Ep. 57 : Up. 120000 : cross-entropy : 43.6931 : stalled 10 times"; other tags ("[memory]",
    # "[data]") are a logger's, dropped with the time before them
    lines = [ln for ln in corpus_log("marian-cepin19-dp-europarl-fr-overfitting") if "[valid]" in ln][:7]
    run = read(tmp_path, "\n".join(lines) + "\n")
    assert "cross-entropy" not in run.series and "translation" not in run.series
    assert points(run, "val cross-entropy") == [(60000, 43.2518), (65000, 43.2315)]


def test_pytorch_profiler_stage_lines_are_no_step(tmp_path: Path) -> None:
    # kineto's "STAGE:<time> <pid>:<tid> <file>:<line>]" lines between the epochs: their pid is no step counter
    run = read(tmp_path, head("pytorch-loop-B777B2056-2-machine-translation-en2zh-sgd-stuck", 17))
    assert points(run, "Train Loss") == [(0, 11.2338), (1, 10.8902)]
    assert not any("Profiler" in k for k in run.series)


def test_tqdm_speed_in_both_units_as_one_throughput_series(tmp_path: Path) -> None:
    # Ultralytics YOLOv8's epoch bars; tqdm prints s/it once an iteration takes more than a second
    run = read(tmp_path, head("ultralytics-ultralytics-ultralytics-7618", 7))
    speed = points(run, "it/s")
    assert speed[0] == (1, 1.61)
    assert speed[1][0] == 2 and speed[1][1] == pytest.approx(1 / 6.11)
    assert points(run, "epoch_time") == [(1, 37.0), (2, 366.0)]
    # tqdm's default bar (written here): the position is the step
    run = read(tmp_path, (" 45%|████▌     | 450/1000 [01:02<01:16,  7.21it/s]\n"
                          " 46%|████▌     | 460/1000 [01:03<01:15,  7.18it/s]\n"
                          " 48%|████▊     | 480/1000 [01:20<01:30,  1.52s/it]\n"), "bar.log")
    bar = points(run, "it/s")
    assert [s for s, _ in bar] == [450, 460, 480] and bar[2][1] == pytest.approx(1 / 1.52)


def test_a_data_split_names_the_number_after_it(tmp_path: Path) -> None:
    # build-nanogpt writes "{step} train {loss:.6f}" and "{step} val {loss:.4f}" to its log file
    run = read(tmp_path, "55999 train 2.944906\n56000 val 2.9752\n56000 hella 0.3233\n56000 train 2.952454\n")
    assert points(run, "train") == [(55999, 2.944906), (56000, 2.952454)] and points(run, "val") == [(56000, 2.9752)]
    # qlib's LSTM benchmark: "train %.6f, valid %.6f" of its scores, here both NaN
    run = read(tmp_path, "Epoch0:\ntrain nan, valid nan\n")
    assert math.isnan(points(run, "train")[0][1]) and math.isnan(points(run, "valid")[0][1])
    # prose with a split word before a count is no metric
    assert "train" not in read(tmp_path, "step 1 loss 2.5\nwe train 3 models\nstep 2 loss 2.4\n").series


def test_a_possessive_s_in_a_key_is_no_quote(tmp_path: Path) -> None:
    # LightGBM's log_evaluation: "[N]\t<data>'s <metric>: value" for each validation set
    # (lightgbm-lightgbm-org-LightGBM-742); read as a quote, "'s binary_logloss: ...\tvalid_1'" hid
    # both sets' names and the validation value overwrote the training one
    run = read(tmp_path, head("lightgbm-lightgbm-org-LightGBM-742", 5))
    assert points(run, "training's binary_logloss") == [(1, 0.712679), (2, 0.732192), (3, 0.751667), (4, 0.77109)]
    assert points(run, "valid_1's binary_logloss")[-1] == (4, 0.770573)
    # a quoted key is still a quote
    assert points(read(tmp_path, "{'loss': 1.5, 'step': 3}\n{'loss': 1.25, 'step': 4}\n"), "loss") == [(3, 1.5), (4, 1.25)]


def test_a_duration_ending_its_sentence_is_no_part_of_the_next_key(tmp_path: Path) -> None:
    # DeepLearnToolbox's nntrain: "epoch 1/10. Took 62.275 seconds. Mean squared error is 0.50315"
    run = read(tmp_path, head("deeplearntoolbox-rasmusbergpalm-DeepLearnToolbox-12", 9))
    assert points(run, "Mean squared error")[:3] == [(1, 0.50315), (2, 0.50001), (3, 0.5)]
    # an abbreviation before its word stays in the key
    assert parse_line("Epoch 2 - loss: 0.4 - val. loss: 0.8").pairs[-1].key == "val. loss"


def test_a_duration_of_several_parts_is_one_number_of_seconds(tmp_path: Path) -> None:
    # StyleGAN's training loop prints its clock with dnnlib.util.format_time: "45s", "13m 25s", "1h 02m 23s"
    case = "stylegan3-bluelionlabs-Towards-Generating-Large-Synthetic-Phytoplankton-Datasets-log"
    line = next(ln for ln in corpus_log(case) if " 1h 02m 23s " in ln)
    assert parse_line(line).pairs[0] == parse_line("time 3743s").pairs[0]
    assert parse_line("time 2d 03h 10m").pairs[0].value == 2 * 86400 + 3 * 3600 + 10 * 60
    # parts out of order, or a number between them, are no duration
    assert [p.value for p in parse_line("time 5s 2m, loss 1.5 3m").pairs] == [5.0, 1.5]


def test_the_global_batch_index_is_the_step(tmp_path: Path) -> None:
    # "Epoch 1, batch 3849, global_batch_idx: 3850" (icefall-k2-fsa-ZipVoice-146): the run's own count, not the epoch's
    line = next(ln for ln in corpus_log("icefall-k2-fsa-ZipVoice-146") if "global_batch_idx: 3850" in ln)
    run = read(tmp_path, line + "\n")
    assert {int(s.steps[0]) for s in run.series.values()} == {3850}


def test_counters_in_json_strings_glued_to_their_word_or_after_a_phase(tmp_path: Path) -> None:
    # pycls's json_stats under its "[file.py: line]:" logger: "iter": "10/625" is the step, the logger's
    # line number no metric
    run = read(tmp_path, head("pytorch-loop-feymanpriv-DOLG-7", 4))
    assert [s for s, _ in points(run, "desc_loss")] == [10, 20] and not any(".py" in n for n in run.series)
    assert run.meta["step_total"] == 625
    # qlib's "[pid:thread](time) LEVEL - logger - [file:line] - " and its "Epoch0:" heading
    run = read(tmp_path, "".join(corpus_line + "\n" for corpus_line in corpus_log("qlib-microsoft-qlib-1734")))
    assert list(run.series) == ["train", "valid"] and [s for s, _ in points(run, "train")] == [0]
    # DINOv2's glog-like prefix with the year and its "Training  [     40/5000000]" counter
    run = read(tmp_path, head("pytorch-loop-facebookresearch-dinov2-143", 3))
    assert [s for s, _ in points(run, "total_loss")] == [40, 50, 60] and "Training" not in run.series
    # an episode counts a reinforcement-learning loop's progress
    run = read(tmp_path, "Episode 10, reward = 3.5\nEpisode 20, reward = 4.5\n")
    assert points(run, "reward") == [(10, 3.5), (20, 4.5)]


def test_mlperf_log_lines_and_values_named_with_is(tmp_path: Path) -> None:
    # MLPerf's ":::MLLOG {...}": the key names the value, the metadata's epoch_num is its counter
    run = read(tmp_path, "".join(ln + "\n" for ln in corpus_log(
        "pytorch-loop-mlcommons-training_results_v2.0-NVIDIA-dgxa100_n192-rnnt-result_7")))
    assert [s for s, _ in points(run, "eval_accuracy")][:3] == [97, 98, 99] and "lineno" not in run.series
    # "avg loss so far is 0.0236": the verb stands for the ':'; prose with "is" and a number stays out
    run = read(tmp_path, head("paddle-IcarusWizard-prednet-paddle-train-log", 7))
    assert points(run, "avg loss")[:2] == [(25, 0.02361789532005787), (50, 0.022946488112211227)]
    assert points(run, "val loss") == [(125, 0.030769934877753258)]
    assert parse_line("the batch size is 32").pairs == [] and parse_line("this is 3 times faster").pairs == []


def test_olmo_metrics_one_a_line_under_the_step_that_heads_them(tmp_path: Path) -> None:
    # OLMo's console log: "[step=1/739328]" after its logger's fields, then "    name=value" lines
    run = read(tmp_path, head("olmo-edwardsp-ai-on-aks-readme-1", 60))
    assert [s for s, _ in points(run, "train/CrossEntropyLoss")][:3] == [1, 2, 3]
    assert "olmo.train" not in run.series and run.meta["step_total"] == 739328
    # its tab-separated logger ("2025-12-27 00:58:00.517\thost:0\tolmo.train:990\tINFO\t[step=10/1000,epoch=0]")
    run = read(tmp_path, "".join(ln + "\n" for ln in corpus_log("olmo-antoniolopardo-olmo-20m", "train.log")[:30]))
    assert [s for s, _ in points(run, "train/CrossEntropyLoss")][:2] == [10, 20] and "olmo.train" not in run.series
    # "[olmo.train:816, rank=0] [step=1/739328]" with the commas of "81,424": a text log, not CSV
    run = read(tmp_path, head("olmo-edwardsp-ai-on-aks-readme-2", 12))
    assert run.sources[0].format == "text" and [s for s, _ in points(run, "train/CrossEntropyLoss")] == [1, 2]


def test_the_source_line_under_a_python_warning_is_no_record(tmp_path: Path) -> None:
    # warnings.formatwarning prints the offending source line under the warning: "loss.data[0]" is code
    run = read(tmp_path, head("pytorch-loop-NVIDIA-DeepRecommender-25", 9))
    assert list(run.series) == ["RMSE"] and [s for s, _ in points(run, "RMSE")] == [0, 1000, 2000]
    assert parse_line("  t_loss += loss.data[0]").pairs == [] and parse_line("loss = 0.5").pairs


def test_a_counter_named_with_a_number_sign(tmp_path: Path) -> None:
    # dlib's dnn_trainer prints "step#: 0  learning rate: 0.1  average loss: 0 ..."; "#0" alone stays an index
    run = read(tmp_path, head("dlib-davisking-dlib-252", 6) + "step#: 100     learning rate: 0.1   average loss: 0.75\n")
    assert points(run, "average loss") == [(0, 0.0), (100, 0.75)] and points(run, "learning rate")[0] == (0, 0.1)
    run = read(tmp_path, "GPU #0 loss 0.5\nGPU #1 loss 0.4\n")
    assert [v for _, v in points(run, "loss")] == [0.5, 0.4]


def test_a_duration_in_parentheses_after_a_value(tmp_path: Path) -> None:
    # NiftyNet's "Training iter {}, loss={} ({:.6f}s)": the iteration's time; a running mean in
    # parentheses has no unit and stays out
    run = read(tmp_path, ("INFO:niftynet:2018-02-04 06:07:02,482: Training iter 3211, loss=0.4551 (1.349622s)\n"
                          "INFO:niftynet:2018-02-04 06:07:04,463: Training iter 3212, loss=0.3341 (63.809136s)\n"
                          "iter 3213 time: 0.5 (0.6)\n"))
    assert points(run, "time") == [(3211, 1.349622), (3212, 63.809136), (3213, 0.5)]
    assert points(run, "loss") == [(3211, 0.4551), (3212, 0.3341)]


def test_a_number_after_the_counter_with_no_name(tmp_path: Path) -> None:
    # accelerate's notebook_launcher example prints its accuracy as "epoch N: value": a value of the run
    # whose meaning the log does not say, read under a name that no rule takes for a loss
    run = read(tmp_path, head("accelerate-huggingface-accelerate-docs-notebook-launcher", 6))
    assert points(run, "unnamed") == [(0, 88.12), (1, 91.73), (2, 92.58), (3, 93.9), (4, 94.71)]
    assert list(run.series) == ["unnamed"]


def test_the_rate_of_shorter_progress_bars_is_not_the_trainings(tmp_path: Path) -> None:
    # A loop with tqdm: the training bar (200 steps) stops for an evaluation bar of 12 batches,
    # which counts from 1 again at five times the rate; a data-set map bar before training is shorter
    # too (written here). The rates in one series would read as the training slowing down 5x.
    lines = [f"Map: 100%|██████████| {n}/10 [00:00<00:00, {900 + n}.00it/s]" for n in range(1, 11)]
    for s in range(1, 201):
        lines.append(f" {s // 2}%|█         | {s}/200 [00:{s % 60:02d}<01:00,  2.{s % 10}0it/s]")
        if s % 50 == 0:
            lines += [f" {e * 8}%|█         | {e}/12 [00:00<00:01, 10.{e}0it/s]" for e in range(1, 13)]
            lines.append(f"eval_loss: {1 / s:.4f}")  # at the training's step, not the evaluation bar's count
    run = read(tmp_path, "\n".join(lines) + "\n", "hf.log")
    rate = points(run, "it/s")
    assert [s for s, _ in rate] == list(range(1, 201)) and all(2.0 <= v < 3.0 for _, v in rate)
    assert points(run, "eval_loss")[0] == (50, 0.02)
    # a shorter bar's own metrics stay, at the training's step
    run = read(tmp_path, (" 50%|#  | 100/200 [00:10<00:10, 2.00it/s, loss=0.9]\n"
                          " 50%|#  | 2/4 [00:00<00:00, 9.00it/s, val_loss=0.7]\n"), "bars.log")
    assert points(run, "it/s") == [(100, 2.0)] and points(run, "val_loss") == [(100, 0.7)]


def test_a_markdown_table_with_a_step_column(tmp_path: Path) -> None:
    # transformers' Trainer prints this table in notebooks; pasted as Markdown (written here)
    run = read(tmp_path, ("| Step | Training Loss | Validation Loss |\n"
                          "|------|---------------|-----------------|\n"
                          "| 500 | 2.104500 | 1.987311 |\n"
                          "| 1000 | 1.876200 | nan |\n"))
    assert points(run, "Training Loss") == [(500, 2.1045), (1000, 1.8762)]
    val = points(run, "Validation Loss")
    assert val[0] == (500, 1.987311) and val[1][0] == 1000 and math.isnan(val[1][1])


def test_a_model_card_row_whose_training_loss_is_not_logged_yet(tmp_path: Path) -> None:
    # transformers' model card writes "No log" for the training loss of an evaluation that came before
    # the first logging step (modelcard.py, parse_log_history): the row's other columns still count
    run = read(tmp_path, ("| Training Loss | Epoch | Step | Validation Loss | Rouge1 |\n"
                          "|:-------------:|:-----:|:----:|:---------------:|:------:|\n"
                          "| No log | 1.0 | 272 | 0.6162 | 15.9418 |\n"
                          "| 0.7405 | 2.0 | 544 | 0.6100 | 16.0021 |\n"))
    assert points(run, "Validation Loss") == [(272, 0.6162), (544, 0.61)]
    assert points(run, "Rouge1") == [(272, 15.9418), (544, 16.0021)]
    assert points(run, "Training Loss") == [(544, 0.7405)] and "No log" not in run.series


def test_a_whitespace_table_with_a_header(tmp_path: Path) -> None:
    # Chainer's PrintReport
    run = read(tmp_path, head("chainer-chainer-chainer-mnist-tutorial", 3))
    assert points(run, "main/loss") == [(1, 1.53241), (2, 0.578334)]
    assert points(run, "validation/main/accuracy") == [(1, 0.835839), (2, 0.882812)]


def test_an_ascii_table_and_a_headerless_one() -> None:
    ex = Extractor()
    lines = ["+------+--------+", "| step |  loss  |", "+------+--------+", "|  10  | 2.3026 |",
             "|  20  | 1.9500 |", "+------+--------+"]
    placed = [p for no, t in enumerate(lines, 1) for p in ex.feed(t, no, None)] + ex.finish()
    assert [(s, r.metrics) for s, r in placed] == [(10, {"loss": 2.3026}), (20, {"loss": 1.95})]
    ex = Extractor()
    placed = [p for no, t in enumerate(["76930 2.6496577", "76940 2.6401"], 1) for p in ex.feed(t, no, None)]
    placed += ex.finish()
    assert [(s, r.metrics) for s, r in placed] == [(76930, {"value": 2.6496577}), (76940, {"value": 2.6401})]


def test_a_delimited_row_led_by_its_counters_names_its_other_cells_by_column() -> None:
    # MuseGAN's training table, pasted without its header (salu133445/musegan#66): epoch | step/total |
    # time | losses; the cells after the counters keep their column, as a headerless table's do
    ex = Extractor()
    lines = ["   1  |  104/ 180 |  67.79 |      60.750362 |     -16.181793",
             "   1  |  105/ 180 |  67.73 |      62.146736 |      40.134007"]
    placed = [p for no, t in enumerate(lines, 1) for p in ex.feed(t, no, None)] + ex.finish()
    assert [(s, r.metrics) for s, r in placed] == [
        (104, {"col3": 67.79, "col4": 60.750362, "col5": -16.181793}),
        (105, {"col3": 67.73, "col4": 62.146736, "col5": 40.134007})]
    # the same numbers without delimiters stay a step and its values, as before
    ex = Extractor()
    placed = [p for no, t in enumerate(["3 2.5 1.5", "4 2.4 1.4"], 1) for p in ex.feed(t, no, None)] + ex.finish()
    assert [(s, r.metrics) for s, r in placed] == [(3, {"col2": 2.5, "col3": 1.5}), (4, {"col2": 2.4, "col3": 1.4})]


def test_a_leading_integer_followed_by_a_counters_name_is_that_counter() -> None:
    # HAKE-Action-Torch's pre-training loop (DirtyHarryLYL/HAKE-Action-Torch#34): iteration lines, then an
    # epoch summary led by the epoch alone; the summary is no step 0 that would start the run again
    lines = ["000 epoch, 04000 iter, average time 0.6286, loss -801.8414",
             "000 epoch, 06000 iter, average time 0.6607, loss nan",
             "2021-03-01 00:56:42,407 - __main__ - INFO - 000 epoch training, L_rec=nan, L_cls=nan, L_ae=0.0000, loss=nan"]
    ex = Extractor()
    placed = [p for no, t in enumerate(lines, 1) for p in ex.feed(t, no, None)] + ex.finish()
    assert [s for s, _ in placed] == [4000, 6000, 6000]
    assert placed[-1][1].counters == {"epoch": 0.0}
    assert [r.counters for _, r in placed[:2]] == [{"epoch": 0.0, "iter": 4000.0}, {"epoch": 0.0, "iter": 6000.0}]


# -- metric pairs ---------------------------------------------------------------------------------
def test_colon_pairs_with_running_averages_and_nan(tmp_path: Path) -> None:
    # maskrcnn-benchmark, https://github.com/facebookresearch/maskrcnn-benchmark/issues/721
    run = read(tmp_path, (
        "2019-04-27 12:59:06,432 maskrcnn_benchmark.trainer INFO: eta: 6:07:52  iter: 20  loss: 5.6908 (nan)  "
        "loss_box_reg: 0.0103 (nan)  time: 0.7274 (0.7362)  data: 0.0025 (0.0143)  lr: 0.001793  max mem: 5827\n"
        "2019-04-27 12:59:20,762 maskrcnn_benchmark.trainer INFO: eta: 6:02:41  iter: 40  loss: nan (nan)  "
        "loss_box_reg: nan (nan)  time: 0.7273 (0.7264)  data: 0.0023 (0.0084)  lr: 0.001927  max mem: 5827\n"))
    loss = points(run, "loss")
    assert loss[0] == (20, 5.6908) and loss[1][0] == 40 and math.isnan(loss[1][1])  # the value, not its average
    assert points(run, "max mem") == [(20, 5827.0), (40, 5827.0)]
    assert "eta" not in run.series


def test_python_dicts_and_json_lines(tmp_path: Path) -> None:
    run = read(tmp_path, head("hf-transformers-ironjr-grokfast-9", 40))
    assert points(run, "grad_norm")[0][1] == 3789384056832.0  # very large numbers as printed
    run = read(tmp_path, head("deit-jer-ry-cf-vit", 2), "log.txt")
    assert [v for _, v in points(run, "train_loss")] == [6.919728336438455, 6.867710180881896]


def test_tensor_reprs_in_a_loss_dict() -> None:
    # https://github.com/yqc123456/HKD_for_person_search/issues/6 (verbatim)
    p = parse_line("{'loss_rcnn_cls_1st': tensor(1.1173, device='cuda:0', grad_fn=<MulBackward0>), "
                   "'loss_box_reid': tensor(nan, device='cuda:0', grad_fn=<MulBackward0>)}")
    values = {x.key: x.value for x in p.pairs}
    assert values["loss_rcnn_cls_1st"] == 1.1173 and math.isnan(values["loss_box_reid"])
    assert len(values) == 2  # nothing from "cuda:0" or "MulBackward0"


@pytest.mark.parametrize(("printed", "value"), [
    # the C runtimes' spellings of non-finite values: glibc prints "-nan"; MSVC since Visual Studio
    # 2015 prints "-nan(ind)" and "inf", older MSVC "1.#INF", "-1.#IND" and "1.#QNAN" (Microsoft's
    # printf documentation, "Infinity and NaN formatting")
    ("nan", math.nan), ("-nan", math.nan), ("-nan(ind)", math.nan), ("inf", math.inf), ("-inf", -math.inf),
    ("1.#INF", math.inf), ("-1.#IND", math.nan), ("1.#QNAN", math.nan), ("3.1e+21", 3.1e21),
    ("7.696129e+22", 7.696129e22), ("1,234.5", 1234.5),
])
def test_number_spellings(printed: str, value: float) -> None:
    (pair,) = parse_line(f"iteration 10, loss = {printed}").pairs[1:]
    assert pair.key == "loss"
    assert (math.isnan(pair.value) and math.isnan(value)) or pair.value == value


def test_key_value_without_separator_reads_only_metric_words() -> None:
    p = parse_line("step 10 loss 2.31 Tried to allocate 20.00 MiB exits with code 1")
    assert {x.key: x.value for x in p.pairs} == {"step": 10.0, "loss": 2.31}


# -- several ranks, epoch-level metrics --------------------------------------------------------------
def test_ranks_interleaved_keep_their_own_series(tmp_path: Path) -> None:
    # RETURNN under torchrun --tee=3, https://github.com/rwth-i6/i6_core/pull/658 (verbatim)
    run = read(tmp_path, (
        "[default0]:ep 55 train, step 1347, ce 0.324, ctc_4 1.006, ctc_10 0.776, ctc_16 0.677, grad_norm:p2 3.388, "
        "num_seqs 27, max_size:time 291200, max_size:aug_spatial 128, mem_usage:cuda:0 67.8GB, 0.855 sec/step, "
        "elapsed 0:16:59, exp. remaining 0:03:45, complete 81.92%\n"
        "[default3]:ep 55 train, step 1347, ce 0.355, ctc_4 1.038, ctc_10 0.790, ctc_16 0.729, grad_norm:p2 3.388, "
        "num_seqs 26, max_size:time 306560, max_size:aug_spatial 143, mem_usage:cuda:3 66.8GB, 0.838 sec/step, "
        "elapsed 0:16:59, exp. remaining 0:04:53, complete 77.63%\n"))
    assert points(run, "ce") == [(1347, 0.324)]
    assert points(run, "ce@rank3") == [(1347, 0.355)]
    assert points(run, "sec/step@rank3") == [(1347, 0.838)]
    assert points(run, "grad_norm:p2") == [(1347, 3.388)]
    assert not any("elapsed" in k or "remaining" in k for k in run.series)  # clock times, not metrics


def test_epoch_level_train_and_validation_metrics(tmp_path: Path) -> None:
    # https://github.com/LingxiaoShawn/PairNorm/issues/1 (verbatim)
    run = read(tmp_path, ("Epoch 521: train loss 0.244 train acc: 0.957, val loss: 1.078 val acc 0.708.\n"
                          "Epoch 522: train loss 0.227 train acc: 0.950, val loss: 1.080 val acc 0.690.\n"))
    assert points(run, "train loss") == [(521, 0.244), (522, 0.227)]
    assert points(run, "val loss") == [(521, 1.078), (522, 1.08)]
    assert points(run, "val acc") == [(521, 0.708), (522, 0.69)]


def test_a_line_under_an_evaluation_heading_holds_the_evaluations_metrics(tmp_path: Path) -> None:
    # OpenNMT-tf's evaluator prints "Evaluation result for step N: loss = ..." between training lines
    # whose loss is spelled "Loss": the evaluation's loss is no point of the training loss
    run = read(tmp_path, head("opennmt-OpenNMT-OpenNMT-tf-744", 5))
    assert points(run, "val loss") == [(435000, 148890.71875)]
    assert points(run, "Loss") == [(435100, 185912.78125), (435200, 158771.15625)]
    assert math.isinf(run.series["val perplexity"].values[0])
    # PyTorch's MNIST example: "Test set: Average loss: ..., Accuracy: ..." after each epoch's training line
    run = read(tmp_path, head("pytorch-loop-wangkuiyi-gotorch-265", 4))
    assert points(run, "Loss") == [(0, 0.139567), (1, 0.068877)]
    assert points(run, "val Average loss") == [(0, 0.2848), (1, 0.2322)]
    # TensorFlow Estimator's evaluation summary, between its "loss = ..., step = N" training lines
    run = read(tmp_path, ("INFO:tensorflow:loss = 2.9886985, step = 200 (0.283 sec)\n"
                          "INFO:tensorflow:Saving dict for global step 200: accuracy = 0.3725, global_step = 200, "
                          "loss = 3.187702\n"
                          "INFO:tensorflow:loss = 2.2661626, step = 300 (0.215 sec)\n"))
    assert points(run, "loss") == [(200, 2.9886985), (300, 2.2661626)]
    assert points(run, "val loss") == [(200, 3.187702)] and points(run, "val accuracy") == [(200, 0.3725)]
    # a key that is itself the evaluation's ("test Loss", "val_loss") is not renamed, nor is a step counter
    assert [(p.key, p.value) for p in parse_line_full("test Loss: 0.7038 Top-1 Acc: 77.4802").pairs] == \
        [("test Loss", 0.7038), ("val Top-1 Acc", 77.4802)]
    assert [p.key for p in parse_line_full("eval epoch: 1, loss: 119.7388, BCE: 95.0571").pairs] == \
        ["eval epoch", "val loss", "val BCE"]
    assert [p.key for p in parse_line_full("val_loss: 0.5 val_acc: 0.9").pairs] == ["val_loss", "val_acc"]
    assert [p.key for p in parse_line_full("test: 0.91").pairs] == ["test"]
    # a word that only starts like one is no heading
    assert [p.key for p in parse_line_full("Testament loss: 0.5").pairs] == ["Testament loss"]
    assert [p.key for p in parse_line_full("development loss: 0.5").pairs] == ["development loss"]


def test_a_phase_and_its_epoch_before_the_metrics(tmp_path: Path) -> None:
    # dgcnn.pytorch prints "Train %d, loss: ..." and "Test %d, loss: ..." with the epoch after the phase
    run = read(tmp_path, head("pytorch-loop-antao97-dgcnn.pytorch-20", 4))
    assert points(run, "loss") == [(95, 1.406623), (96, 1.406077)]
    assert points(run, "val loss") == [(94, 1.42498), (95, 1.428333)]
    assert points(run, "train acc") == [(95, 0.948905), (96, 0.949219)]
    assert parse_line_full("train 3: 0.5").pairs == []  # no metric after the number: not read as an epoch


def test_a_loss_heading_then_the_value_of_each_data_set(tmp_path: Path) -> None:
    # uPIT-for-speech-separation's trainer, under its "[file:line - LEVEL ]" logger location
    run = read(tmp_path, head("pytorch-loop-funcwj-uPIT-for-speech-separation-5", 2))
    assert math.isnan(run.series["train loss"].values[0]) and math.isnan(run.series["dev loss"].values[0])
    assert not any("trainer.py" in k for k in run.series)
    assert [p.key for p in parse_line_full("loss: 0.5, train: 3").pairs] == ["loss", "train"]


def test_darknets_unnamed_loss_then_values_named_after_them(tmp_path: Path) -> None:
    # AlexeyAB/darknet: " %d: %f, %f avg loss, %f rate, %lf seconds, %d images, %f hours left"
    run = read(tmp_path, "\n".join(corpus_log("darknet-AlexeyAB-darknet-5836")[7:10]) + "\n")
    loss = run.series["loss"]
    assert loss.steps.tolist() == [181, 182, 183] and loss.values[0] == 590.941345 and math.isnan(loss.values[1])
    assert points(run, "avg loss")[0] == (181, 834.728516) and points(run, "time")[0] == (181, 1.937414)
    # pjreddie/darknet: "%ld: %f, %f avg, %f rate, %lf seconds, %d images"
    assert [(p.key, p.value) for p in parse_line_full("849: 2.5, 2.25 avg, 0.002078 rate, 1.032942 seconds, "
                                                      "217344 images").pairs][:4] == \
        [("iteration", 849.0), ("loss", 2.5), ("avg loss", 2.25), ("lr", 0.002078)]


def test_marians_update_counter(tmp_path: Path) -> None:
    run = read(tmp_path, head("marian-marian-nmt-marian-120", 6))
    cost = run.series["Cost"]
    assert cost.steps.tolist() == [116760, 116770, 116780, 116790, 116800, 116810]
    assert cost.value_at(116790) == 87.32 and math.isnan(cost.value_at(116800))


def test_a_step_of_the_runs_length_then_one_value(tmp_path: Path) -> None:
    # the makemore lectures' loop: f'{i:7d}/{max_steps:7d}: {loss.item():.4f}'
    run = read(tmp_path, head("pytorch-loop-karpathy-nn-zero-to-hero-makemore-part3-bn", 3))
    assert points(run, "value") == [(0, 3.3239), (10000, 2.0322), (20000, 2.5675)]
    assert parse_line_full("Epoch 3/10: done").pairs[-1].key != "value"  # no value after the counter


def test_detectron2_logger_prefix_is_no_counter(tmp_path: Path) -> None:
    # "[02/10 22:55:41 d2.engine.train_loop]" is a date and a logger, not "iteration 2 of 10"
    run = read(tmp_path, "\n".join(corpus_log("detectron2-facebookresearch-detectron2-838")) + "\n")
    assert run.meta.get("steps_are_line_counts") is True


# -- numbers that are no metric ------------------------------------------------------------------
def test_a_glog_server_log_gives_no_series(tmp_path: Path) -> None:
    text = ("W0305 10:11:12.123456  4242 server.cc:218] Connection 17 dropped after 3 retries\n"
            "I0305 10:11:13.223456  4242 server.cc:230] Serving version 2.14.1 on port 8500\n"
            "I0305 10:11:14.323456  4243 server.cc:241] Loaded 12 models in 0.53 s\n") * 20
    with pytest.raises(InputError, match="no metrics or events"):
        read(tmp_path, text)


def test_a_syslog_gives_no_series(tmp_path: Path) -> None:
    text = ("Oct 12 10:11:12 gpu-node-3 kernel: [12345.678901] eth0: link up 1000 Mbps\n"
            "Oct 12 10:11:13 gpu-node-3 sshd[4242]: Accepted publickey for user from 10.0.0.5 port 52344\n"
            "Oct 12 10:11:14 gpu-node-3 systemd[1]: Started Session 17 of user.\n"
            "Oct 12 10:11:15 gpu-node-3 kernel: [12346.001122] nvidia-uvm: Loaded the UVM driver, major device number 510.\n"
            ) * 20
    with pytest.raises(InputError, match="no metrics or events"):
        read(tmp_path, text)


def test_a_python_logger_with_versions_pids_and_ports_gives_no_series(tmp_path: Path) -> None:
    text = ("2024-05-01 10:00:01,123 - INFO - torch 2.3.0+cu121, transformers 4.41.2, python 3.11.7\n"
            "2024-05-01 10:00:02,456 - INFO - worker pid=31337 listening on 127.0.0.1 port 29500\n"
            "2024-05-01 10:00:03,789 - INFO - rank 3 of world_size 8 on node 2\n") * 20
    with pytest.raises(InputError, match="no metrics or events"):
        read(tmp_path, text)


def test_a_step_beyond_64_bits_is_left_out_not_the_whole_file(tmp_path: Path) -> None:
    p = tmp_path / "train.log"
    p.write_text("step 99999999999999999999999 loss 2.3\nstep 1 loss 2.2\nstep 2 loss 2.1\n", encoding="utf-8")
    run, problems = load_run([str(p)])
    assert run.series["loss"].steps.tolist() == [1, 2]
    assert [(pr.fatal, "beyond 64 bits" in str(pr)) for pr in problems] == [(False, True)]


def test_key_colon_value_pairs_between_dash_separators() -> None:
    # verl's console logger: "step:N - key:value - ..." (a NaN value and integers included)
    p = parse_line_full("step:2 - perf/max_memory_allocated_gb:41.29 - train/loss:nan - train/grad_norm:0.0 - "
                        "train/global_tokens:126")
    got = {pr.key: pr.value for pr in p.pairs}
    assert got["step"] == 2 and got["train/global_tokens"] == 126 and got["perf/max_memory_allocated_gb"] == 41.29
    assert math.isnan(got["train/loss"])
    # a device index before its value stays part of the key
    assert [(pr.key, pr.value) for pr in parse_line_full("mem_usage:cuda:0 67.8GB").pairs] == [("mem_usage:cuda:0", 67.8)]


def test_a_counter_in_parentheses_after_another_is_the_finer_step() -> None:
    # LLMs-from-scratch prints "Ep 1 (Step 000005): Train loss 8.066, Val loss 8.332"
    keys = [(p.key, p.value) for p in parse_line("Ep 1 (Step 000005): Train loss 8.066, Val loss 8.332").pairs]
    assert keys == [("Ep", 1.0), ("Step", 5.0), ("Train loss", 8.066), ("Val loss", 8.332)]
    # a value's own parenthesised note stays out of the pairs
    assert [p.key for p in parse_line("loss 2.3 (avg 2.1) step 5").pairs] == ["loss", "step"]


def test_a_fraction_in_parentheses_after_the_epoch_is_the_batch_of_the_epoch() -> None:
    # minimind prints "Epoch:[0/19](100/24681) loss:5.251 ...": epoch 0 of 19, batch 100 of 24681
    keys = [(p.key, p.value, p.total) for p in parse_line("Epoch:[0/19](100/24681) loss:5.251 lr:0.0002").pairs]
    assert keys == [("Epoch", 0.0, 19.0), ("batch", 100.0, 24681.0), ("loss", 5.251, None), ("lr", 0.0002, None)]
    # the steps of the run come from the batches: one point per line, not one per epoch
    run, _ = load_run([str(CORPUS_LOGS / "pytorch-loop-jingyaogong-minimind-26" / "log.txt")])
    loss = run.series["loss"]
    assert len(loss.steps) >= 10 and len(set(loss.steps.tolist())) == len(loss.steps)
    # a number that is not a whole counter stays a note of the value before it
    assert [p.key for p in parse_line("Epoch 1 (1.5/500) loss: 2.3").pairs] == ["Epoch", "loss"]


def test_the_set_up_progress_bars_are_no_training_rate(tmp_path: Path) -> None:
    # mlx-lm#330: the hub's "Fetching 11 files" bar (101848.44it/s) before the validation bar (4.75it/s);
    # in one series they read as the run slowing down 21000 times
    run, _ = load_run([str(CORPUS_LOGS / "mlx-lm-ml-explore-mlx-lm-330" / "log.txt")])
    assert run.series["it/s"].values.tolist() == [4.75]
    log = tmp_path / "hf.log"
    log.write_text("Loading checkpoint shards: 100%|██████████| 2/2 [00:05<00:00,  2.60s/it]\n"
                   "Map (num_proc=4): 100%|██████████| 5000/5000 [00:01<00:00, 3712.21 examples/s]\n"
                   " 10%|█         | 10/100 [00:10<01:30,  1.00it/s]\n"
                   " 20%|██        | 20/100 [00:20<01:20,  1.00it/s]\n", encoding="utf-8")
    run, _ = load_run([str(log)])
    assert run.series["it/s"].values.tolist() == [1.0, 1.0]


def test_a_command_line_measures_nothing() -> None:
    # the command of mlx-lm#330, pasted above its log: its options are no metrics
    line = corpus_log("mlx-lm-ml-explore-mlx-lm-330")[0]
    assert line.startswith("mlx_lm.lora --model") and parse_line(line).pairs == []
    assert parse_line("python train.py --learning_rate=9.65e-6 --epochs 3").pairs == []
    # dashes that are no options leave the line as it is
    assert [p.key for p in parse_line("Epoch 1 -- loss 2.3 -- acc 0.9").pairs] == ["Epoch", "loss", "acc"]


def test_a_counter_that_restarts_under_an_epoch_heading_runs_on(tmp_path: Path) -> None:
    # MAR#35: "==>>[...] [Epoch=001/020] Stage 1" on a line of its own, then "Iter: [000/3877] ... loss_ml nan":
    # the iteration counter restarts with the epoch, so epoch 1's points do not overwrite epoch 0's
    run, _ = load_run([str(CORPUS_LOGS / "pytorch-loop-KovenYu-MAR-35" / "log.txt")])
    ml = run.series["loss_ml"]
    assert len(set(ml.steps.tolist())) == len(ml) and ml.values[0] == 13879.977
    first_nan = next(int(t) for t, v in zip(ml.steps, ml.values) if math.isnan(v))
    assert first_nan == 3800 and int(ml.steps[-1]) > 3877
    # without the heading, a counter that goes back is the run restarting, kept as printed
    lines = [ln for ln in corpus_log("pytorch-loop-KovenYu-MAR-35") if "[Epoch=" not in ln]
    (tmp_path / "cut.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    run, _ = load_run([str(tmp_path / "cut.log")])
    assert int(run.series["loss_ml"].steps.max()) <= 3877


def test_the_names_of_values_printed_without_one_are_known_as_such(tmp_path: Path) -> None:
    # what the text reader names them is what the rules ask for (trainaudit.model.unnamed)
    log = tmp_path / "bare.log"
    log.write_text("".join(f"{-1.5 * k} {k} {0.5 * k}\n" for k in range(1, 6)) + "epoch 3: 93.90\n", encoding="utf-8")
    run, _ = load_run([str(log)])
    assert sorted(run.series) == ["col1", "col2", "col3", "unnamed"] and all(unnamed(n) for n in run.series)
    assert not unnamed("loss") and not unnamed("cold") and not unnamed("col")


def test_a_nan_value_before_a_colon_is_read() -> None:
    # Marian prints "Cost nan : Time 2.74s": a NaN where a whole number (an index) is looked for
    p = parse_line("[2017-10-14 02:03:33] Ep. 2 : Up. 116800 : Sen. 6972416 : Cost nan : Time 2.74s : 19413.05 words/s")
    cost = [x.value for x in p.pairs if x.key == "Cost"]
    assert len(cost) == 1 and math.isnan(cost[0])


@pytest.mark.parametrize("header", ["epoch train_loss valid_loss accuracy time",
                                    "epoch     train_loss  valid_loss  accuracy  time"])
def test_a_fastai_table_with_its_time_column(tmp_path: Path, header: str) -> None:
    # fastai's progress table: the last column is a clock ("00:02"), which is no number of the row
    log = tmp_path / "fastai.log"
    log.write_text(f"{header}\n1 0.727221 0.693147 0.495584 00:02\n2 0.693826 0.693147 0.495584 00:02\n",
                   encoding="utf-8")
    run, _ = load_run([str(log)])
    assert sorted(run.series) == ["accuracy", "train_loss", "valid_loss"]
    assert run.series["train_loss"].steps.tolist() == [1, 2] and run.series["valid_loss"].values.tolist() == [0.693147] * 2


def test_itr_counts_the_iterations(tmp_path: Path) -> None:
    # mks0601's trainers (Hand4Whole, I2L-MeshNet) print "Epoch 0/7 itr 26/3489: lr: 0.0001 ..."
    run = read(tmp_path, "\n".join(head("pytorch-loop-mks0601-Hand4Whole_RELEASE-31", 24).splitlines()[5:8]) + "\n")
    assert points(run, "loss_smpl_pose") == [(31, 0.3169), (52, 0.2893), (53, 0.2910)]
    assert points(run, "lr") == [(31, 0.0001), (52, 0.0001), (53, 0.0001)]


def test_a_speed_unit_is_read_once_and_the_next_value_keeps_its_own_unit() -> None:
    # "8526.1 samples/s | 0.0150 s/it": the unit word names the value before it, not the value after it
    p = parse_line("[step 25/2000] loss 2.0893 |  8526.1 samples/s | 0.0150 s/it")
    got = {x.key: x.value for x in p.pairs}
    assert [x.key for x in p.pairs] == ["step", "loss", "samples/s", "it/s"]
    assert got["samples/s"] == 8526.1 and got["it/s"] == pytest.approx(1 / 0.015)


@pytest.mark.parametrize("key", ["rss", "maxrss", "alloc", "reserved", "vram"])
def test_memory_named_by_a_short_word_is_read(key: str) -> None:
    # "step   20 | loss 2.1058 | rss    442.8 MB": a key without ':' is read when it names a measurement
    p = parse_line(f"step   20 | loss 2.1058 | {key}    442.8 MB")
    assert {x.key: x.value for x in p.pairs}.get(key) == 442.8


def test_timms_train_and_test_lines(tmp_path: Path) -> None:
    # pytorch-image-models' train.py: "Train: {epoch} [{update:>4d}/{updates_per_epoch} ({pct:>3.0f}%)]  Loss: {now} ({avg})
    # ...", and its validate(): "Test: [{batch:>4d}/{last}]  ...": the update of the epoch becomes the run's step,
    # the value is the step's (not the running mean in parentheses), the evaluation is at the step before it
    text = "".join(
        f"Train: {e} [{i:>4d}/200 ({100 * (i + 1) / 200:>3.0f}%)]  Loss: {185.0 if (e, i) == (1, 100) else 0.9:#.3g} "
        f"(2.77)  Time: 0.003s, 43347.86/s  (0.003s, 41064.56/s)  LR: 1.000e-03  Data: 0.000 (0.000)\n"
        for e in range(2) for i in (0, 50, 100, 150, 199))  # every log_interval updates, and the epoch's last
    text += "Test: [   7/7]  Time: 0.002 (0.003)  Loss:   0.936 ( 0.936)  Acc@1:  64.900 ( 64.900)\n"
    run = read(tmp_path, text)
    assert points(run, "Loss") == [(0, 0.9), (50, 0.9), (100, 0.9), (150, 0.9), (199, 0.9), (200, 0.9), (250, 0.9),
                                   (300, 185.0), (350, 0.9), (399, 0.9)]
    assert points(run, "val Loss") == [(399, 0.936)]
    assert "Train" not in run.series and points(run, "Data")[0] == (0, 0.0)


def test_an_epochs_total_places_the_next_epoch_though_its_last_lines_are_missing(tmp_path: Path) -> None:
    # a paste of timm's train.py at log_interval 50 without the epoch's last update (199): epoch 1 still starts at
    # update 200, the one total printed ("[  50/200 ...]") being the updates of an epoch
    text = "".join(f"Train: {e} [{i:>4d}/200 ({100 * i / 200:>3.0f}%)]  Loss: {0.9 - e / 10:#.3g} (0.9)  LR: 1.000e-03\n"
                   for e in range(3) for i in (0, 50, 100, 150))
    assert [s for s, _ in points(read(tmp_path, text), "Loss")] == [0, 50, 100, 150, 200, 250, 300, 350, 400, 450,
                                                                     500, 550]


def test_an_epoch_restarts_one_step_on_when_its_totals_differ(tmp_path: Path) -> None:
    # "batch i/N" with a total that changes is not the updates of an epoch: the next epoch starts one step on
    text = "".join(f"epoch {e} batch {i}/{n} loss {0.9 - e / 10:.2f}\n" for e, n in ((0, 120), (1, 130)) for i in (0, 50, 100))
    assert [s for s, _ in points(read(tmp_path, text), "loss")] == [0, 50, 100, 101, 151, 201]
