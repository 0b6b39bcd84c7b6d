"""Which series plays which role: cases where the name alone would pick the wrong one."""

from __future__ import annotations

import numpy as np

from trainaudit.model import Run, Series
from trainaudit.series.roles import adversarial, elapsed_clock, find_roles, peak, validation


def _series(name: str, n: int) -> Series:
    return Series(name, np.arange(1, n + 1, dtype=np.int64), np.linspace(1.0, 2.0, n), np.arange(1, n + 1, dtype=np.int64),
                  np.zeros(n, dtype=np.int16))


def test_a_one_point_summary_does_not_take_a_role_from_a_series_with_points() -> None:
    # HF Trainer's end-of-training dict prints train_samples_per_second once; the bar's rate has every step
    run = Run(series={"train_samples_per_second": _series("train_samples_per_second", 1), "it/s": _series("it/s", 40)})
    assert find_roles(run).names["throughput"] == "it/s"
    alone = Run(series={"train_samples_per_second": _series("train_samples_per_second", 1)})
    assert find_roles(alone).names["throughput"] == "train_samples_per_second"
    # MLPerf GNMT's epoch summary "Training Loss: 3.1356" (an exact name, once) and its per-iteration "Loss/tok"
    run = Run(series={"Training Loss": _series("Training Loss", 1), "Loss/tok": _series("Loss/tok", 40)})
    assert find_roles(run).names["loss"] == "Loss/tok"


def test_gan_players_losses_and_peak_counters_are_named() -> None:
    assert all(adversarial(n) for n in ("d_loss", "Loss_G", "errD", "train/disc_loss", "critic_loss",
                                        "D_A", "G_B", "G_GAN", "D_real", "D_fake"))  # CycleGAN's and pix2pix's
    assert not any(adversarial(n) for n in ("loss", "lm loss", "dice_loss", "val_loss", "grad_norm", "cycle_A",
                                            "idt_B", "G_L1", "d_model", "g_norm"))


def test_a_gans_training_loss_is_a_players() -> None:
    # keras-io's GauGAN prints disc_loss, gen_loss and the generator's terms feat_loss, vgg_loss, kl_loss:
    # kl_loss (the shortest name) is a term of the generator's loss, not the training loss
    names = ("disc_loss", "gen_loss", "feat_loss", "vgg_loss", "kl_loss")
    assert find_roles(Run(series={n: _series(n, 15) for n in names})).names["loss"] == "gen_loss"
    # without players, the shortest loss name is the loss still
    assert find_roles(Run(series={n: _series(n, 15) for n in names[2:]})).names["loss"] == "kl_loss"
    assert all(peak(n) for n in ("MaxMemAllocated", "max_memory_allocated", "mem_max_allocated_bytes", "peak_mem"))
    assert not any(peak(n) for n in ("MemAllocated", "memory_reserved", "gpu_mem", "mem_total"))


def test_a_count_of_iterations_is_no_step_time() -> None:
    # Stable-Baselines3 logs time/iterations (1, 2, 3, ...) and time/total_timesteps beside time/fps
    names = ("time/iterations", "time/total_timesteps", "time/fps")
    run = Run(series={n: _series(n, 5) for n in names})
    roles = find_roles(run).names
    assert "step_time" not in roles and roles["throughput"] == "time/fps"
    # a time per so many steps is a step time
    assert find_roles(Run(series={"time per 100 steps": _series("time per 100 steps", 5)})).names["step_time"] \
        == "time per 100 steps"
    # Composer's timestamp counts the batches (samples, tokens) trained so far: "Train time/batch: 100"
    composer = ("time/batch", "time/batch_in_epoch", "time/sample", "time/token_in_epoch")
    assert "step_time" not in find_roles(Run(series={n: _series(n, 5) for n in composer})).names
    assert find_roles(Run(series={"batch_time": _series("batch_time", 5)})).names["step_time"] == "batch_time"


def test_a_boosting_librarys_error_metrics_are_its_losses() -> None:
    # XGBoost's "<set>-<metric>" and LightGBM's "<set>'s <metric>": lower is better, round after round
    from trainaudit.series.roles import _keyword, norm

    for name in ("train-rmse", "training's binary_logloss", "train-mlogloss"):
        assert _keyword("loss", norm(name)) and not _keyword("val_loss", norm(name)), name
    for name in ("eval-rmspe", "valid_0's l2", "validation_0-logloss", "test-merror"):
        assert _keyword("val_loss", norm(name)) and not _keyword("loss", norm(name)), name
    for name in ("train-auc", "eval-ndcg", "rmse"):  # higher is better, or no data set named
        assert not _keyword("loss", norm(name)) and not _keyword("val_loss", norm(name)), name
    # LIBMF's "tr_rmse" / "va_rmse" columns
    assert _keyword("loss", "tr_rmse") and not _keyword("val_loss", "tr_rmse")
    assert _keyword("val_loss", "va_rmse") and not _keyword("loss", "va_rmse")
    assert not _keyword("loss", "tr_auc") and validation("va_rmse") and not validation("nova_loss")


def test_a_log_of_evaluation_lines_only_has_its_loss_as_the_loss() -> None:
    # "Test net output #2: loss = 87.3" (Caffe) with no training line: the loss read under the evaluation's
    # heading is the only loss, and the loss rules read it
    only = Run(series={"val loss": _series("val loss", 5), "val accuracy": _series("val accuracy", 5)})
    assert find_roles(only).names["loss"] == "val loss" and "val_loss" not in find_roles(only).names
    both = Run(series={"loss": _series("loss", 9), "val loss": _series("val loss", 5)})
    assert find_roles(both).names == {"loss": "loss", "val_loss": "val loss"}
    # a series its own name calls a validation loss stays one (nanoGPT: "validation loss 1.52")
    named = Run(series={"validation loss": _series("validation loss", 8)})
    assert find_roles(named).names == {"val_loss": "validation loss"}


def test_the_time_since_the_start_is_no_step_time() -> None:
    # Ultralytics' results.csv "time": seconds since the start at each epoch (a resume restarts it)
    steps = np.arange(1, 31, dtype=np.int64)
    clock = 112.0 * steps + np.where(steps >= 4, -240.0, 0.0)
    run = Run(series={"time": Series("time", steps, clock, steps, np.zeros(30, dtype=np.int16))})
    assert elapsed_clock(run.series["time"]) and "step_time" not in find_roles(run).names
    # a step time that grows (a slowdown) is a step time
    slow = 1.0 + 0.05 * steps
    run = Run(series={"time": Series("time", steps, slow, steps, np.zeros(30, dtype=np.int16))})
    assert not elapsed_clock(run.series["time"]) and find_roles(run).names["step_time"] == "time"


def test_llm_c_main_log_names() -> None:
    # llm.c writes "s:%d trl:%.4f lr:%.6f norm:%.2f" and "s:%d tel:%.4f" to its main.log
    run = Run(series={n: _series(n, 5) for n in ("trl", "lr", "norm", "tel")})
    roles = find_roles(run).names
    assert roles["loss"] == "trl" and roles["val_loss"] == "tel"


def test_a_mean_squared_error_is_the_loss_only_when_nothing_is_named_loss() -> None:
    # DeepLearnToolbox's nntrain prints "Mean squared error is 0.5"; Keras prints a metric "mse" beside "loss"
    assert find_roles(Run(series={"Mean squared error": _series("Mean squared error", 5)})).names["loss"] == \
        "Mean squared error"
    keras = find_roles(Run(series={n: _series(n, 5) for n in ("loss", "mse", "val_loss", "val_mse")})).names
    assert keras["loss"] == "loss" and keras["val_loss"] == "val_loss"


def test_a_clock_whose_first_point_holds_only_the_set_up() -> None:
    # StyleGAN's "time" at tick 0 is 45 s (set-up), then 293 s a tick: a clock, not a step time that grows
    steps = np.arange(1, 41, dtype=np.int64)
    values = np.concatenate([[45.0], 45.0 + 468.0 + 293.0 * np.arange(1, 40)])
    s = Series("time", steps, values, steps, np.zeros(40, dtype=np.int16))
    assert elapsed_clock(s)
    assert not elapsed_clock(Series("time", steps, np.full(40, 293.0), steps, np.zeros(40, dtype=np.int16)))


def test_the_validation_loss_is_the_training_losss_counterpart() -> None:
    # YOLOv3 (TensorFlow 2) prints giou/conf/prob components and their total, for training and validation:
    # the validation loss is total_val_loss, the counterpart of total_loss, not the shortest component
    names = ("giou_loss", "conf_loss", "prob_loss", "total_loss",
             "giou_val_loss", "conf_val_loss", "prob_val_loss", "total_val_loss")
    roles = find_roles(Run(series={n: _series(n, 5) for n in names}))
    assert (roles.names["loss"], roles.names["val_loss"]) == ("total_loss", "total_val_loss")
    # without a counterpart, the shortest validation loss name still takes the role
    roles = find_roles(Run(series={n: _series(n, 5) for n in names[:7]}))
    assert roles.names["val_loss"] == "conf_val_loss"


def test_memory_printed_as_a_bare_mem_is_memory() -> None:
    # a logging-module loop's "time/step 6.08ms mem 342MB": the process's memory under its shortest name
    for name in ("mem", "cpu_mem", "host_mem"):
        assert find_roles(Run(series={"loss": _series("loss", 12), name: _series(name, 12)})).memory == [name]
    # a word that only holds "mem" is not memory
    assert find_roles(Run(series={"loss": _series("loss", 12), "member_count": _series("member_count", 12)})).memory == []


def test_names_of_paddle_tensorflow_and_opennmt() -> None:
    # TensorFlow's StepCounterHook "global_step/sec: 81.2": steps per second
    assert find_roles(Run(series={"global_step/sec": _series("global_step/sec", 5)})).names["throughput"] \
        == "global_step/sec"
    # OpenNMT-py prints a validation perplexity and no validation loss; a validation loss takes the role first
    ppl = {"xent": _series("xent", 5), "Validation perplexity": _series("Validation perplexity", 5)}
    roles = find_roles(Run(series=ppl)).names
    assert roles["val_ppl"] == "Validation perplexity" and "val_loss" not in roles
    assert "val_ppl" not in find_roles(Run(series={"Train perplexity": _series("Train perplexity", 5)})).names


def test_scores_of_the_models_answers() -> None:
    from trainaudit.series.roles import score

    assert all(score(n) for n in ("val_acc", "eval/f1", "val ENTS_F", "val CATS_SCORE", "val SCORE", "metrics/mAP_0.5", "top1"))
    assert not any(score(n) for n in ("val_loss", "LOSS NER", "f_measure_time", "scorer_loss", "val ppl"))
