"""Rules on short pastes (a few logged points), on real logs from the corpus: each fires where the
signal is unambiguous, with the step the log prints. Healthy short logs stay silent (the corpus
score's false alarms, tests/corpus/test_scores.py)."""

from __future__ import annotations


import pytest
from shared_data import CORPUS_LOGS

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
    # Caffe's softmax clamp 87.3365 from iteration 100
    ("caffe-BVLC-caffe-6047", "TA201", "divergence", 100),
    # validation loss rises over its last evaluations while the training loss falls
    ("nanogpt-karpathy-nanoGPT-211", "TA301", "overfitting", 1500),
    # one per-layer gradient print: the first layers get 1e-9 of the last layer's gradient
    ("pytorch-loop-juebrauer-code-jb-vanishing-gradients", "TA205", "grad_vanishing", 2),
    # the same translation for two different source sentences
    ("opennmt-OpenNMT-OpenNMT-py-1743", "TA209", "mode_collapse", None),
    # SwAV's loss at ln(3000): uniform over its 3000 prototypes
    ("pytorch-loop-facebookresearch-swav-12", "TA202", "mode_collapse", 0),
])
def test_short_log_signal(case: str, rule: str, category: str, step: int | None) -> None:
    hits = _hits(case).get(rule, [])
    assert hits, f"{rule} did not fire on {case}"
    assert hits[0].category == category and hits[0].first_bad_step == step, (hits[0].message, hits[0].first_bad_step)


def test_a_noisy_short_fine_tune_is_not_divergence() -> None:
    # a maintainer's healthy verification run: the loss is noisy after its first fast drop
    assert "TA201" not in _hits("torchtune-meta-pytorch-torchtune-1358")
