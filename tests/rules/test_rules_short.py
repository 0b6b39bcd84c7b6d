"""Rules on short pastes (a few logged points), on real logs from the corpus: each fires where the
signal is unambiguous, with the step the log prints. Healthy short logs stay silent (the corpus
score's false alarms, tests/corpus/test_scores.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_data import CORPUS_LOGS, write_lines

from trainaudit.ingest import load_run
from trainaudit.rules import run_rules


def _hits(case: str) -> dict[str, list]:  # type: ignore[type-arg]
    path = next(p for p in (CORPUS_LOGS / case).iterdir() if p.name != "label.json")
    run, _ = load_run([str(path)])
    out: dict[str, list] = {}  # type: ignore[type-arg]
    for h in run_rules(run):
        out.setdefault(h.rule, []).append(h)
    return out


@pytest.mark.parametrize("case,rule,category,step", [
    # loss pinned at ln(1000) = 6.9078: a uniform guess over ImageNet's classes
    ("caffe-jixing0415-caffe-mobilenet-v3-1", "TA202", "plateau", 0),
    # the MLM loss does not move and the MLM accuracy stays at 0
    ("tf-loop-aws-samples-deep-learning-models-45", "TA202", "plateau", 1040),
    # every epoch prints the same per-step losses: the LoRA weights do not change
    ("deepspeed-BeyonderXX-TRACE-5", "TA208", "plateau", 0),
    # data loading takes 80% of each iteration
    ("mmengine-open-mmlab-mmdetection-929", "TA411", "data_pipeline", 5231),
    # throughput falls from ~1530 to ~485 samples/s after step 450
    ("insightface-deepinsight-insightface-1624", "TA406", "throughput_regression", 450),
    # GPU memory grows on every printed iteration
    ("tf-loop-tensorflow-tensorflow-73457", "TA403", "memory_growth", 7),
    # a single-step spike 0.80 -> 4.27 that returns at once, at the progress bar's step 2566
    ("hf-transformers-haotian-liu-LLaVA-918", "TA102", "loss_spike", 2566),
    # grad norm 4.2 -> 5044 -> 1.8e8: an explosion in five printed points
    ("mlx-ml-explore-mlx-lm-1658", "TA204", "grad_explosion", 30),
    # TF1 Object Detection API: 0.14 at step 408, 25237 at 409 and climbing (the jump sits inside the
    # smoothing window of the best point: the raw points say where it starts)
    ("tf1-tensorflow-models-8423", "TA201", "divergence", 409),
    # a GAN: the generator's loss is NaN at iteration 37, the discriminator's (the loss role) from 38
    ("numpy-loop-eriklindernoren-ML-From-Scratch-29", "TA101", "nan_inf", 37),
    # an error printed as the objective: DeepRecommender's "[0,  1000] RMSE: nan" (its training RMSE)
    ("pytorch-loop-NVIDIA-DeepRecommender-25", "TA101", "nan_inf", 1000),
    # qlib's "train nan, valid nan", the split's score
    ("qlib-microsoft-qlib-1734", "TA101", "nan_inf", 0),
    # a wav2vec2 CTC fine-tune whose WER is 1.0 at all 14 evaluations: it emits nothing but blanks
    ("hf-transformers-Wenxin-Jiang-CS577-NLP-Raffay-wav2vec2-urdu-asr-project", "TA202", "plateau", 200),
    # Caffe's softmax clamp 87.3365 from iteration 100
    ("caffe-BVLC-caffe-6047", "TA201", "divergence", 100),
    # validation loss rises over its last evaluations while the training loss falls
    ("nanogpt-karpathy-nanoGPT-211", "TA301", "overfitting", 1500),
    # one per-layer gradient print: the first layers get 1e-9 of the last layer's gradient
    ("pytorch-loop-juebrauer-code-jb-vanishing-gradients", "TA205", "grad_vanishing", 2),
    # the same translation for two different source sentences
    ("opennmt-OpenNMT-OpenNMT-py-1743", "TA209", "mode_collapse", None),
    # BLOOM 104B test run: lm loss 6.37 -> 10.24, up at every one of five printed iterations
    ("megatron-deepspeed-bigscience-workshop-bigscience-tr8-104b-exp2", "TA201", "divergence", 6910),
    # PaddleOCR: reading data takes 78% and 65% of the two printed batch times
    ("paddle-PaddlePaddle-PaddleOCR-9740", "TA411", "data_pipeline", 100),
    # SwAV's loss at ln(3000): uniform over its 3000 prototypes
    ("pytorch-loop-facebookresearch-swav-12", "TA202", "mode_collapse", 0),
    # Keras CIFAR-10: the epoch loss comes down to 1.093 at epoch 4, then rises at each of the next five
    ("keras-keras-team-keras-5239", "TA201", "divergence", 5),
    # GPT-NeoX resumed from a checkpoint: lm_loss 2.28 at iteration 1, 11.05 at iteration 2
    ("gpt-neox-EleutherAI-gpt-neox-947", "TA201", "divergence", 2),
    # Megatron-LLM: 84.6 s, 142.5 s, 202.4 s per iteration over three printed iterations
    ("megatron-lm-epfLLM-Megatron-LLM-22", "TA406", "throughput_regression", 15),
    # Lasagne MNIST: the validation loss sits at ln(10) = 2.3026 on all six epochs
    ("lasagne-Lasagne-Lasagne-525", "TA202", "plateau", 1),
    # Keras IMDB: val_loss 0.3429, 0.2873, 0.2827 (its minimum, epoch 3), 0.2921 ...; the smoothed curve ties
    # over epochs 1-3 (its edge copies the first full window): the rise starts after the raw minimum
    ("keras-fchollet-dlwp-notebooks-original-model-short", "TA301", "overfitting", 4),
    # a pasted trainer_state.json excerpt: one object a record at its "step" (printed after the metrics)
    ("hf-transformers-TencentGameMate-chinese_speech_pretrain-22", "TA101", "nan_inf", 500),
])
def test_short_log_signal(case: str, rule: str, category: str, step: int | None) -> None:
    hits = _hits(case).get(rule, [])
    assert hits, f"{rule} did not fire on {case}"
    assert hits[0].category == category and hits[0].first_bad_step == step, (hits[0].message, hits[0].first_bad_step)


def test_a_noisy_short_fine_tune_is_not_divergence() -> None:
    # a maintainer's healthy verification run: the loss is noisy after its first fast drop
    assert "TA201" not in _hits("torchtune-meta-pytorch-torchtune-1358")


STEP = "step {}"  # a counter every 10 steps: the second point is step 20
EPOCH = "epoch {}"


@pytest.mark.parametrize("counter,values,fires,step,text", [
    # up at every point of a short paste, 1.5x or more
    (STEP, [6.4, 6.6, 7.3, 9.1, 10.2], True, 20, "rises at every one of its 5 points"),
    (STEP, [6.4, 6.6, 7.3, 9.1], False, None, ""),  # four points: too few for a climb alone
    (STEP, [6.4, 6.5, 6.7, 6.9, 7.0], False, None, ""),  # up at every point, but only 1.09x
    (STEP, [6.4, 7.3, 6.9, 9.1, 10.2], False, None, ""),  # not steady
    # down first, then up at each of the last 5 points (1.15x), or a trend over ten (tau 0.87)
    (EPOCH, [2.0, 1.4, 1.1, 1.12, 1.15, 1.19, 1.22, 1.26], True, 4, "climbs steadily over its last"),
    (EPOCH, [2.0, 1.4, 1.1, 1.12, 1.15, 1.13, 1.19, 1.22, 1.2, 1.26, 1.3, 1.33], True, 4, "climbs steadily over its last"),
    (EPOCH, [2.0, 1.4, 1.1, 1.12, 1.15, 1.19, 1.22], False, None, ""),  # four rises
    (EPOCH, [2.0, 1.4, 1.1, 1.11, 1.12, 1.13, 1.14, 1.15], False, None, ""),  # five rises, but only 1.05x
    (EPOCH, [2.0, 1.4, 1.1, 1.12, 1.15, 1.13, 1.22, 1.26], False, None, ""),  # one step back in six: no trend yet
    (EPOCH, [2.0, 1.4, 1.1, 1.3, 1.12, 1.28, 1.15, 1.26, 1.14, 1.27, 1.16, 1.25], False, None, ""),  # up and down
    (EPOCH, [2.0] + [1.0 + 0.01 * (i % 7) for i in range(40)] + [1.05, 1.1, 1.15, 1.2, 1.25], False, None, ""),
    # a loss of a few nats that more than triples and stays up, from two points on
    (STEP, [2.3, 11.0], True, 20, "jumps from 2.3 (step 10) to 11"),
    (STEP, [2.3, 6.0], False, None, ""),  # 2.6x
    (STEP, [0.05, 0.2], False, None, ""),  # 4x, but a loss near 0 jumps by multiples in healthy runs
    (STEP, [2.3, 11.0, 2.2], False, None, ""),  # it came back: a spike, not divergence
])
def test_short_divergence(tmp_path: Path, counter: str, values: list[float], fires: bool, step: int | None,
                          text: str) -> None:
    scale = 10 if counter == STEP else 1
    lines = [f"{counter.format(scale * (i + 1))} | loss {v}" for i, v in enumerate(values)]
    run, _ = load_run([str(write_lines(tmp_path / "t.log", lines))])
    hits = [h for h in run_rules(run) if h.rule == "TA201"]
    assert bool(hits) is fires, [h.message for h in hits]
    if fires:
        assert hits[0].first_bad_step == step and text in hits[0].message


def test_healthy_short_pastes_of_a_small_loss_are_not_divergence() -> None:
    # PaddlePaddle's MNIST tutorials: per-batch losses between 0.002 and 0.09
    for case in ("paddle-PaddlePaddle-docs-quick-start-mnist", "paddle-PaddlePaddle-docs-train-eval-predict-mnist"):
        assert "TA201" not in _hits(case)


@pytest.mark.parametrize("times,fires", [
    ([840.0, 1420.0, 2020.0], True),  # slower at every point, 2.4x
    ([840.0, 1000.0, 1300.0], False),  # slower at every point, 1.5x
    ([2020.0, 1420.0, 840.0], False),  # faster at every point: warm-up
    ([840.0, 2020.0, 1420.0], False),  # not steady
])
def test_a_short_step_time_that_grows_at_every_point(tmp_path: Path, times: list[float], fires: bool) -> None:
    lines = [f"iteration {5 * (i + 2)} | elapsed time per iteration (ms): {t} | lm loss: 2.1" for i, t in enumerate(times)]
    run, _ = load_run([str(write_lines(tmp_path / "t.log", lines))])
    hits = [h for h in run_rules(run) if h.rule == "TA406"]
    assert bool(hits) is fires, [h.message for h in hits]
    if fires:
        assert hits[0].first_bad_step == 15 and "at every one of its 3 logged points" in hits[0].message


def test_a_clock_running_through_the_epoch_is_no_step_time() -> None:
    # TFLearn prints the time elapsed in the epoch ("time: 2.792s", "5.079s", "7.356s"): it grows at every point
    assert "TA406" not in _hits("tflearn-tflearn-tflearn-530")


def test_a_loss_creeping_up_after_a_learning_rate_drop_is_no_divergence() -> None:
    # Wide ResNet's reference log: lr 0.1 -> 0.02 at epoch 60, the loss falls to 0.065 and creeps back
    # to 0.078 with weight decay, a normal step-schedule shape
    assert "TA201" not in _hits("torch7-szagoruyko-wide-residual-networks-wrn-40-4")
    # a Keras run with no schedule whose loss climbs for 30 epochs from its lowest point
    hits = _hits("keras-udacity-deep-learning-v2-pytorch-cifar10-augmentation").get("TA201", [])
    assert hits and hits[0].first_bad_step == 10 and "climbs steadily" in hits[0].message


@pytest.mark.parametrize("cut,step", [(11, 175), (9, 175)])
def test_a_short_break_starts_at_the_interval_that_holds_it(tmp_path: Path, cut: int, step: int) -> None:
    # an independent generator's run (gen_short) whose debug hook, registered at step 165, slows every step from
    # there: logged every 25 steps, step 175's rate (5938 samples/s) is the mean over steps 151-175 and stands between
    # the levels before (8526-11471) and after (3281-3846); the paste cut after its first ``cut`` lines
    lines = (CORPUS_LOGS.parent / "runs" / "short-a-throughput-s4" / "log.txt").read_text().splitlines()[:cut]
    run, _ = load_run([str(write_lines(tmp_path / "t.log", lines))])
    hits = [h for h in run_rules(run) if h.rule == "TA406"]
    assert hits and hits[0].first_bad_step == step, [h.message for h in hits]
