"""Signs a person sees at once in a paste of a handful of lines: they are evidence at n = 5 to 10,
and the healthy look-alikes stay silent."""

from __future__ import annotations

from pathlib import Path

from trainaudit.ingest import load_run
from trainaudit.rules import run_rules
from trainaudit.series.roles import find_roles


def _hits(tmp_path: Path, text: str) -> dict:
    log = tmp_path / "train.log"
    log.write_text(text, encoding="utf-8")
    run, _ = load_run([str(log)])
    return {h.rule: h for h in run_rules(run)}


def _grad_log(norms: list[float]) -> str:
    return "".join(f"step {i} loss {2.0 - 0.01 * i:.3f} grad_norm {g}\n" for i, g in enumerate(norms, 1))


def test_grad_norm_that_steps_up_tenfold_and_stays(tmp_path: Path) -> None:
    h = _hits(tmp_path, _grad_log([1.1, 1.0, 0.9, 1.2, 15.0, 14.0, 16.5, 18.0, 17.0]))["TA204"]
    assert h.category == "grad_explosion" and h.first_bad_step == 5 and "stays there" in h.message


def test_grad_norm_spike_it_comes_back_from_is_no_explosion(tmp_path: Path) -> None:
    hits = _hits(tmp_path, _grad_log([1.1, 1.0, 0.9, 1.2, 15.0, 1.1, 1.0, 0.9, 1.0]))
    assert "TA204" not in hits


def test_grad_norm_that_doubles_is_no_explosion(tmp_path: Path) -> None:
    assert "TA204" not in _hits(tmp_path, _grad_log([1.1, 1.0, 0.9, 1.2, 2.4, 2.2, 2.5, 2.6, 2.4]))


def _overflows(start: int, n: int) -> str:
    out, s = [], start
    for i in range(1, n + 1):
        out.append(f"[2023-05-01 10:00:{i:02d},000] [INFO] [stage_1_and_2.py:1800:step] [deepspeed] OVERFLOW! Rank 0 "
                   f"Skipping step. Attempted loss scale: {s}, reducing to {s // 2}\n")
        s //= 2
    return "".join(out)


def test_overflows_in_a_row_down_to_a_tiny_scale(tmp_path: Path) -> None:
    h = _hits(tmp_path, _overflows(4096, 6))["TA104"]
    assert h.category == "loss_scale_collapse" and "6 fp16 overflows in a row" in h.message


def test_the_scaler_calibrating_at_the_start_is_silent(tmp_path: Path) -> None:
    # DeepSpeed starts at 2**16 and halves until the scale fits: a few overflows to 2048 are normal
    assert "TA104" not in _hits(tmp_path, _overflows(65536, 5))


def _fairseq(scales: list[float]) -> str:
    # fairseq's train_inner JSON lines, the loss scale as it logs it (fairseq/trainer.py, train_step)
    return "".join(f'| INFO | train_inner | {{"epoch": 1, "loss": "{16.4 - 0.1 * i:.3f}", "num_updates": "{i}", '
                   f'"loss_scale": "{s:g}"}}\n' for i, s in enumerate(scales, 1))


def test_a_small_initial_scale_settling_at_one_is_no_collapse(tmp_path: Path) -> None:
    # fairseq's FSDP example starts at --fp16-init-scale 4: two halvings to 1 and it trains on
    assert "TA104" not in _hits(tmp_path, _fairseq([4, 4, 1, 1, 1, 1, 1, 1, 1, 1]))
    h = _hits(tmp_path, _fairseq([16, 16, 8, 4, 2, 1, 1, 1, 1, 1]))["TA104"]  # four halvings down to 1
    assert h.category == "loss_scale_collapse" and h.first_bad_step == 3


def test_a_loss_that_jumps_around_is_not_flat(tmp_path: Path) -> None:
    # the same first and last tenths, but it moves 20-50% between logged points: not a plateau
    noisy = [16.5, 16.4, 25.2, 18.1, 23.7, 20.4, 19.0, 22.5, 17.9, 16.6]
    assert "TA202" not in _hits(tmp_path, "".join(f"step {i} loss {v}\n" for i, v in enumerate(noisy, 1)))
    flat = [2.303, 2.302, 2.304, 2.303, 2.301, 2.303, 2.302, 2.304, 2.303, 2.302]
    assert _hits(tmp_path, "".join(f"step {i} loss {v}\n" for i, v in enumerate(flat, 1)))["TA202"].category == "plateau"


def _hf_dicts(grad_norms: list[str]) -> str:
    return "".join(f"{{'loss': 0.0, 'grad_norm': {g}, 'learning_rate': 1e-05, 'epoch': {0.01 * i:.2f}}}\n"
                   for i, g in enumerate(grad_norms, 1))


def test_a_zero_loss_with_flowing_gradients_is_a_surrogate_not_a_dead_loss(tmp_path: Path) -> None:
    # TRL's GRPO logs loss 0.0 with a grad norm of ~0.1 at every step: expected (trl#3452)
    assert "TA203" not in _hits(tmp_path, _hf_dicts(["0.0866", "0.0967", "0.1059", "0.1036"]))
    # all labels masked: the loss is 0 and nothing reaches the weights
    assert _hits(tmp_path, _hf_dicts(["0.0", "0.0", "0.0", "0.0"]))["TA203"].category == "plateau"
    assert "TA203" in _hits(tmp_path, _hf_dicts(["nan", "nan", "nan", "nan"]))


def test_a_validation_loss_climbing_at_the_end_past_a_later_minimum(tmp_path: Path) -> None:
    # the shape of LLMs-from-scratch chapter 5: val 6.13 at step 60, then up at each evaluation to 6.37
    val = [9.9, 8.3, 7.0, 6.6, 6.5, 6.38, 6.26, 6.29, 6.13, 6.18, 6.12, 6.15, 6.133, 6.186, 6.23, 6.251, 6.278, 6.373]
    train = [9.8 * 0.88 ** i for i in range(len(val))]
    text = "".join(f"Ep 1 (Step {5 * i:06d}): Train loss {t:.3f}, Val loss {v:.3f}\n" for i, (t, v) in enumerate(zip(train, val)))
    h = _hits(tmp_path, text)["TA301"]
    assert h.category == "overfitting" and h.first_bad_step == 65 and "last 5 evaluations" in h.message
    # the same validation loss while the training loss has stopped falling: not overfitting
    flat = "".join(f"Ep 1 (Step {5 * i:06d}): Train loss {max(t, 3.0):.3f}, Val loss {v:.3f}\n"
                   for i, (t, v) in enumerate(zip(train, val)))
    assert "TA301" not in _hits(tmp_path, flat)


def _clock_log(per_step_ms: list[float], every: int = 200) -> str:
    out, t = [], 0.0
    for i, ms in enumerate(per_step_ms, 1):
        t += ms * every
        out.append(f"step:{i * every}/20000 train_loss:{2.6 - 0.001 * i:.4f} train_time:{t:.0f}ms "
                   f"step_avg:{t / (i * every):.2f}ms\n")
    return "".join(out)


def test_a_clock_running_through_the_run_gives_the_step_time(tmp_path: Path) -> None:
    # parameter-golf's train_gpt.py prints the time since the start; another job slows each step 2.5x
    h = _hits(tmp_path, _clock_log([55.0 + (i % 3) for i in range(30)] + [138.0 + (i % 5) for i in range(10)]))["TA406"]
    assert h.category == "throughput_regression" and h.first_bad_step == 6200 and "train_time per step" in h.message
    assert "TA406" not in _hits(tmp_path, _clock_log([55.0 + (i % 3) for i in range(40)]))


def _epochs(train: list[float], val: list[float], acc: list[float] | None = None) -> str:
    return "".join(f"Epoch {i}: loss {t:.4f} - acc {a:.4f} - val_loss {v:.4f} - val_acc 0.5200\n" for i, (t, v, a) in
                   enumerate(zip(train, val, acc or [0.5] * len(val)), 1))


def test_a_validation_loss_descending_to_its_minimum_then_climbing_steadily(tmp_path: Path) -> None:
    # the validation loss falls for 15 epochs, then rises at each of the last 4 while the training loss
    # falls: no plateau before the minimum to measure its noise on, and none needed
    val = [1.04, 0.99, 0.94, 0.84, 0.73, 0.63, 0.56, 0.50, 0.43, 0.37, 0.33, 0.30, 0.27, 0.26, 0.227,
           0.237, 0.240, 0.255, 0.263]
    train = [1.5 * 0.93 ** i for i in range(len(val))]
    h = _hits(tmp_path, _epochs(train, val))["TA301"]
    assert h.first_bad_step == 16 and "minimum 0.227 at step 15" in h.message
    # up and down after the minimum by as much: noise around a level, not a climb
    wavy = val[:15] + [0.237, 0.229, 0.255, 0.231]
    assert "TA301" not in _hits(tmp_path, _epochs(train, wavy))


def test_a_memorised_training_set_with_a_validation_loss_past_its_best(tmp_path: Path) -> None:
    # 200 samples learned by heart: training accuracy 1.0, the validation loss never better than epoch 1
    train = [0.69, 0.50, 0.28, 0.12, 0.058, 0.031, 0.017, 0.0098, 0.0058, 0.0035]
    val = [0.692, 0.735, 0.701, 0.728, 0.699, 0.731, 0.703, 0.729, 0.718, 0.724]  # no trend: up and down
    acc = [0.47, 0.99] + [1.0] * 8
    h = _hits(tmp_path, _epochs(train, val, acc))["TA301"]
    assert h.first_bad_step == 2 and "memorised" in h.message
    # the same training set learned by heart while the validation loss is still at its best: no finding
    improving = [0.692, 0.60, 0.52, 0.45, 0.40, 0.36, 0.33, 0.31, 0.30, 0.29]
    assert "TA301" not in _hits(tmp_path, _epochs(train, improving, acc))


def test_a_validation_loss_rising_while_the_validation_accuracy_still_improves(tmp_path: Path) -> None:
    # keras.io's IMDB convnet: val_loss 0.331 -> 0.379 while val_accuracy climbs to its best at the end
    lines = "".join(f"Epoch {i}: loss {t} - accuracy {a} - val_loss {v} - val_accuracy {va}\n" for i, (t, a, v, va) in
                    enumerate([(0.61, 0.61, 0.331, 0.859), (0.27, 0.89, 0.350, 0.866), (0.14, 0.95, 0.379, 0.876)], 1))
    assert "TA301" not in _hits(tmp_path, lines)
    # the same losses with the validation accuracy past its best: overfitting
    worse = lines.replace("0.876", "0.851")
    assert _hits(tmp_path, worse)["TA301"].first_bad_step == 2


def test_a_fine_tune_converged_near_zero_has_no_spike_from_its_noise(tmp_path: Path) -> None:
    # the loss falls from 3.8 to ~0.02 in its first points; a later 0.12 is 3% of the way it came down
    loss = [3.82, 0.346, 0.063, 0.054, 0.058, 0.041, 0.020, 0.017, 0.017, 0.001, 0.117, 0.038, 0.019, 0.02, 0.018]
    text = "".join(f"step {10 * i} loss {v}\n" for i, v in enumerate(loss))
    assert "TA102" not in _hits(tmp_path, text)
    # a jump of half the way it came down is a spike
    assert "TA102" in _hits(tmp_path, text.replace("loss 0.117", "loss 2.1"))


def test_a_flat_training_loss_with_a_validation_loss_still_falling_is_learning(tmp_path: Path) -> None:
    # an adapter fine-tune: the training loss settles after its first evaluation, the validation loss
    # keeps falling a little at every evaluation
    train = [1.4143, 1.2203, 1.2193, 1.2127, 1.1912, 1.1855, 1.1998, 1.1959, 1.1884, 1.1988]
    val = [1.2817, 1.2299, 1.2281, 1.2252, 1.2238, 1.2236, 1.2216, 1.2219, 1.2210, 1.2209]
    text = "".join(f"step {135 * i} loss {t} val_loss {v}\n" for i, (t, v) in enumerate(zip(train, val), 1))
    assert "TA202" not in _hits(tmp_path, text)
    # the same training loss with a validation loss that does not move: not learning
    flat = "".join(f"step {135 * i} loss {t} val_loss {1.2817 - 0.0001 * (i % 2)}\n" for i, t in enumerate(train, 1))
    assert "TA202" in _hits(tmp_path, flat)


def test_a_validation_loss_that_rises_then_holds_in_a_short_table(tmp_path: Path) -> None:
    # three epochs of a model card's table: the validation loss rises after epoch 1 and prints the same
    # value at epoch 3, while the training loss falls by a third
    rows = [(1.4762, 3934, 1.9821), (1.1208, 7868, 2.1770), (0.9811, 11802, 2.1770)]
    text = "".join(f"step {s} loss {t} val_loss {v}\n" for t, s, v in rows)
    h = _hits(tmp_path, text)["TA301"]
    assert h.first_bad_step == 7868 and "rises from 1.982" in h.message
    # a validation loss printed the same at every epoch has not risen
    flat = "".join(f"step {s} loss {t} val_loss 1.9821\n" for t, s, _ in rows)
    assert "TA301" not in _hits(tmp_path, flat)


def test_a_small_loss_that_jumps_by_whole_nats_is_divergence_from_two_points(tmp_path: Path) -> None:
    # a Keras epoch log: 0.22 after a good first epoch, 5.18 after the second
    text = "Epoch 1: loss 0.2193 - acc 0.9354\nEpoch 2: loss 5.1823 - acc 0.5994\n"
    h = _hits(tmp_path, text)["TA201"]
    assert h.first_bad_step == 2 and "23.63x" in h.message
    # a loss near 0 that triples is noise: 0.02 -> 0.08
    assert "TA201" not in _hits(tmp_path, "Epoch 1: loss 0.0200 - acc 0.99\nEpoch 2: loss 0.0800 - acc 0.98\n")


def test_a_validation_loss_the_same_at_every_evaluation(tmp_path: Path) -> None:
    # a model card's table: the evaluated model never changes (the training loss hovers, the validation
    # loss and every score are the same at each epoch)
    rows = "".join(f"| {0.7405 + 0.004 * (i % 3):.4f} | {i}.0 | {272 * i} | 0.6162 | 15.9418 |\n" for i in range(1, 9))
    text = "| Training Loss | Epoch | Step | Validation Loss | Rouge1 |\n|---|---|---|---|---|\n" + rows
    h = _hits(tmp_path, text)["TA202"]
    # (the first evaluation already saw the final weights, and the training loss sits at its later level there)
    assert h.first_bad_step == 272 and "0.6162 to every printed digit at its last 8 evaluations" in h.message
    # NeMo's progress line carries the last validation loss on every step while the per-step loss moves
    nemo = "".join(f"Training epoch 0, iteration {i}/149 | global_step: {i} | reduced_train_loss: {1.23 + 0.03 * (i % 5):.3f} "
                   f"| val_loss: 4.106\n" for i in range(120, 132))
    assert "TA202" not in _hits(tmp_path, nemo)
    # one evaluation an epoch with the training loss flat as well: frozen weights
    fastai = "epoch train_loss valid_loss accuracy\n" + "".join(
        f"{i} {0.6895 - 0.0002 * (i % 2):.6f} 0.690565 0.518646\n" for i in range(5))
    assert _hits(tmp_path, fastai)["TA202"].first_bad_step == 1


def test_a_spike_at_the_ninth_point_is_judged_on_the_eight_before_it(tmp_path: Path) -> None:
    # one corrupt batch early in a log: its evidence is the points there are, none borrowed from the end
    values = [0.55, 0.55, 0.49, 0.65, 0.51, 0.48, 0.57, 0.47, 1.7e5] + [0.5 + 0.05 * (k % 3) for k in range(30)]
    h = _hits(tmp_path, "".join(f"step {s} loss {v}\n" for s, v in enumerate(values, 81)))["TA102"]
    assert h.first_bad_step == 89
    base = next(p for p in h.points if p.key == "base")
    assert list(base.indices) == list(range(8)) and "over the 8 points before the spike" in base.statement


def test_three_evaluations_whose_loss_and_accuracy_do_not_move(tmp_path: Path) -> None:
    # three evaluations a few hundred updates apart, the loss and the accuracy the same to every digit while
    # the training loss moves: the evaluated weights do not change
    def log(accs: list[float]) -> str:
        lines = []
        for e, acc in enumerate(accs):
            lines += [f"Epoch {e} step {e * 200 + k * 50} loss {2.2 - 0.1 * e + 0.04 * (k % 3):.4f}" for k in range(4)]
            lines.append(f"Epoch {e} step {e * 200 + 199} val_loss 1.9310 val_acc {acc:.3f}")
        return "\n".join(lines) + "\n"
    h = _hits(tmp_path, log([41.2, 41.2, 41.2]))["TA202"]
    assert h.first_bad_step == 399 and "1.931 to every printed digit at its last 3 evaluations" in h.message
    # the loss alone the same at three evaluations, the accuracy moving: a loss that rounds alike, no proof
    assert "TA202" not in _hits(tmp_path, log([41.2, 41.6, 42.0]))


def test_two_runs_pasted_one_under_the_other_have_no_throughput_drop(tmp_path: Path) -> None:
    # the slow run's bar first, the fast one's under it (an earlier step on a later line): a comparison
    slow_first = " 273/1833 [09:09<55:41,  2.14s/it]\n 224/1849 [00:53<06:30,  4.17it/s]\n"
    assert "TA406" not in _hits(tmp_path, slow_first)
    # in step order they are still two bars (of 1849 and 1833 steps): the shorter one's rate is not the run's
    in_order = " 224/1849 [00:53<06:30,  4.17it/s]\n 273/1833 [09:09<55:41,  2.14s/it]\n"
    assert "TA406" not in _hits(tmp_path, in_order)
    # one bar that slowed down
    one_bar = " 224/1849 [00:53<06:30,  4.17it/s]\n 273/1849 [09:09<55:41,  2.14s/it]\n"
    assert _hits(tmp_path, one_bar)["TA406"].first_bad_step == 273


def test_a_loss_climbing_at_each_of_its_last_two_points_to_three_times_its_lowest(tmp_path: Path) -> None:
    # the warm-up raises the learning rate and the loss climbs: 4.83, 4.72, 8.42, 21.50
    text = "".join(f"step {s} loss {v}\n" for s, v in ((0, 4.831), (100, 4.718), (200, 8.423), (300, 21.497)))
    assert _hits(tmp_path, text)["TA201"].first_bad_step == 200
    # up and then back down is no climb
    down = "".join(f"step {s} loss {v}\n" for s, v in ((0, 4.831), (100, 4.718), (200, 8.423), (300, 6.1)))
    assert "TA201" not in _hits(tmp_path, down)


def test_boosting_rounds_whose_validation_error_trends_up_while_the_training_error_falls(tmp_path: Path) -> None:
    # XGBoost rounds: eval-rmspe climbs by ~1% a round with small dips, train-rmspe falls every round
    ev = [0.843, 0.849, 0.878, 0.880, 0.886, 0.887, 0.892, 0.8923, 0.8922, 0.895, 0.892, 0.894, 0.899, 0.903, 0.908]
    text = "".join(f"[{i}] train-rmspe:{0.36 - 0.0035 * i:.6f} eval-rmspe:{e:.6f}\n" for i, e in enumerate(ev, 10))
    h = _hits(tmp_path, text)["TA301"]
    assert h.first_bad_step == 11 and "trends up over its 15 evaluations" in h.message
    # the same validation error while the training error is flat: no overfitting
    flat = "".join(f"[{i}] train-rmspe:{0.36 + 0.001 * (i % 2):.6f} eval-rmspe:{e:.6f}\n" for i, e in enumerate(ev, 10))
    assert "TA301" not in _hits(tmp_path, flat)


def test_a_loss_that_moves_only_in_its_sixth_digit_is_frozen(tmp_path: Path) -> None:
    # 1535.619873, 1535.619629, 1535.633667: within 1e-4 of each other, step after step
    text = "".join(f"epoch: 8 - global_step: {s}/940 - loss:{v}\n" for s, v in
                   ((700, 1535.619873), (750, 1535.619629), (800, 1535.633667)))
    h = _hits(tmp_path, text)["TA202"]
    assert h.first_bad_step == 700 and "moving only in its last printed digits" in h.message
    # a loss that moves by a tenth of a percent a step is learning slowly, not frozen
    slow = "".join(f"epoch: 8 - global_step: {s}/940 - loss:{v}\n" for s, v in ((700, 1.5362), (750, 1.5347), (800, 1.5331)))
    assert "TA202" not in _hits(tmp_path, slow)


def test_overfitting_with_min_points_at_three_reads_a_three_point_validation_loss(tmp_path: Path) -> None:
    # the fitted grid lets min_points be 3: the long path then sees three validation points
    from trainaudit.rules.base import Context
    from trainaudit.rules.generalisation import Overfitting

    log = tmp_path / "t.log"
    log.write_text("".join(f"step {s} loss {t} val_loss {v} acc 1.0 val_acc 0.5\n" for s, t, v in
                           ((1, 0.5, 2.0), (2, 0.1, 2.1), (3, 0.01, 2.2))), encoding="utf-8")
    run, _ = load_run([str(log)])
    hits = Overfitting.with_overrides({"min_points": 3}).check(Context.of(run))
    assert len(hits) == 1 and hits[0].category == "overfitting"


def test_a_loss_at_ln_c_while_every_accuracy_sits_at_one_in_c(tmp_path: Path) -> None:
    # four epochs of a 10-class model that does not learn: the loss next to ln(10) = 2.3026 and the
    # accuracy at 10% (archsyscall/ConvNets-TensorFlow2#2 prints these lines)
    rows = [(2.32971787453, 10.1759996414, 2.30850172043), (2.3074965477, 10.0780000687, 2.30438804626),
            (2.30412840843, 10.1899995804, 2.30372524261), (2.30375742912, 10.0920000076, 2.30361151695)]
    text = "".join(f"Epoch: [{e}/100], Loss: {lo}, Accuracy: {a}, Test Loss: {t}, Test Accuracy: 10.0\n"
                   for e, (lo, a, t) in enumerate(rows, 1))
    h = _hits(tmp_path, text)["TA202"]
    assert h.first_bad_step == 2 and "ln(10)" in h.message and "Accuracy" in h.message
    # the same losses while the accuracy climbs above chance: the first epochs of a model that learns
    learns = text.replace("Test Accuracy: 10.0", "Test Accuracy: 31.0")
    assert "TA202" not in _hits(tmp_path, learns)
    # a loss near ln(10) with no accuracy printed says nothing at four points
    assert "TA202" not in _hits(tmp_path, "".join(f"Epoch: [{e}/100], Loss: {lo}\n" for e, (lo, _, _) in enumerate(rows, 1)))


def test_a_learning_rate_of_zero_at_the_end_of_a_schedule(tmp_path: Path) -> None:
    # llm.c prints its lr with six decimals: the last steps of a cosine decay to 0 read "lr:0.000000"
    tail = "".join(f"s:{s} trl:{3.3 - 0.0001 * (s % 7):.4f} lr:0.000000 norm:0.22\n" for s in range(19396, 19420))
    assert "TA207" not in _hits(tmp_path, tail)
    # the same lines from the first step: nothing ever trained
    start = "".join(f"s:{s} trl:{3.3 - 0.0001 * (s % 7):.4f} lr:0.000000 norm:0.22\n" for s in range(24))
    assert _hits(tmp_path, start)["TA207"].first_bad_step == 0
    # late, but the log prints the planned steps and a third of them are left: the schedule is broken
    planned = "".join(f"Step {s}/1000000; xent: {4.0 - 0.001 * (s % 5):.2f}; lr: 0.00000\n" for s in range(380000, 382400, 100))
    assert _hits(tmp_path, planned)["TA207"].first_bad_step == 380000


def test_a_flat_loss_while_the_accuracy_climbs_is_learning(tmp_path: Path) -> None:
    # Bayes by backprop: the KL term dominates a loss that moves by 2% while the error rate falls fourfold
    lines = [f"Epoch {e}. Loss: {2626.0 - 4.5 * e:.4f}, Train_acc {0.945 + 0.0045 * e:.4f}\n" for e in range(12)]
    assert "TA202" not in _hits(tmp_path, "".join(lines))
    # the same loss while the accuracy does not move: nothing is learnt
    flat = [f"Epoch {e}. Loss: {2626.0 - 4.5 * e:.4f}, Train_acc {0.1 + 0.001 * (e % 2):.4f}\n" for e in range(12)]
    assert _hits(tmp_path, "".join(flat))["TA202"].first_bad_step == 1


def test_a_best_so_far_tracker_that_starts_at_inf_is_no_nan(tmp_path: Path) -> None:
    # icefall prints its params at the start: best_train_loss and best_valid_loss are inf until evaluated
    head = "{'best_train_loss': inf, 'best_valid_loss': inf, 'batch_idx_train': 0, 'log_interval': 50}\n"
    body = "".join(f"Epoch 1, batch {50 * i}, loss[loss={1.0 - 0.02 * i:.3f}], lr: 1.0e-03\n" for i in range(1, 13))
    assert "TA101" not in _hits(tmp_path, head + body)
    # the tracker is read as the validation loss there: a NaN after its start is one
    run, _ = load_run([str(tmp_path / "train.log")])
    assert find_roles(run).names["val_loss"] == "best_valid_loss"
    later = "Epoch 1, validation: best_valid_loss=nan\n"
    assert "TA101" in _hits(tmp_path, head + body + later)


def _rl_log(rewards: list[float]) -> str:
    losses = [20.0 + 2.0 * i for i in range(len(rewards))]
    return "".join(f"step {2048 * (i + 1)} loss {v:.2f} ep_rew_mean {r:.1f}\n"
                   for i, (v, r) in enumerate(zip(losses, rewards, strict=True)))


def test_a_value_loss_that_grows_with_the_return_is_no_divergence(tmp_path: Path) -> None:
    assert "TA201" not in _hits(tmp_path, _rl_log([22.0 + 15.0 * i for i in range(15)]))  # the return climbs
    assert "TA201" in _hits(tmp_path, _rl_log([22.0 + (i % 2) for i in range(15)]))  # the return does not
