"""HF Trainer stdout dicts (plus TRL / axolotl / ms-swift) and trainer_state.json."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from shared_data import run_cli, sample_block, write_lines
from trainaudit.ingest import detect, load_run
from trainaudit.ingest.sources import expand_inputs
from trainaudit.model import EventKind

HF_35207 = sample_block("hf_transformers.txt", "transformers/pull/35207")
HF_NAN = sample_block("hf_transformers.txt", "SY-Xuan/Pink/issues/6")
HF_EVAL = sample_block("hf_transformers.txt", "sentence-transformers/pull/2449")
HF_OLD = sample_block("hf_transformers.txt", "transformers/pull/9491")
STATE_EXCERPT = sample_block("hf_transformers.txt", "trainer_state_viz")
TRL = sample_block("trl_axolotl.txt", "trl/issues/3452")
AXOLOTL_MEM = sample_block("trl_axolotl.txt", "axolotl/issues/3196")
AXOLOTL_LOGGING = sample_block("trl_axolotl.txt", "axolotl/pull/2608")
AXOLOTL_TQDM = sample_block("trl_axolotl.txt", "axolotl/issues/592")
SWIFT = sample_block("trl_axolotl.txt", "ms-swift/issues/5571")
MEGATRON = sample_block("megatron.txt", "Megatron-LM/issues/756")


def _detected(path: Path) -> str:
    return detect(expand_inputs([str(path)]))[0].reader.name


def test_stdout_dicts_step_is_index_of_train_dict(tmp_path: Path) -> None:
    log = write_lines(tmp_path / "train.log", HF_35207 + HF_NAN)
    run, problems = load_run([str(log)])
    assert problems == [] and run.frameworks == ["hf"] and run.meta["framework"] == "hf"
    loss = run.series["loss"]
    assert loss.steps.tolist() == [1, 2, 3, 4, 5]
    assert loss.values.tolist() == [10.5949, 8.2312, 5.8247, 0.0, 0.0]
    assert loss.lines.tolist() == [1, 2, 3, 4, 5]
    gn = run.series["grad_norm"]
    assert gn.value_at(1) == 188.28981018066406
    assert math.isnan(gn.value_at(4)) and math.isnan(gn.value_at(5))  # bare `nan` kept as NaN
    assert run.series["epoch"].values.tolist() == [0.25, 0.5, 1.5, 0.01, 0.01]
    assert run.series["learning_rate"].value_at(5) == 0.00055
    assert run.events == []


def test_eval_dicts_take_step_of_last_train_dict(tmp_path: Path) -> None:
    log = write_lines(tmp_path / "train.log", HF_OLD + HF_EVAL)
    run, _ = load_run([str(log)])
    # train dict #1 (pre-2021 unrounded), then two eval dicts (step 1), then train dict #2.
    assert run.series["loss"].steps.tolist() == [1, 2]
    assert run.series["loss"].values.tolist() == [14.846837043762207, 0.0601]
    assert run.series["eval_snli_loss"].steps.tolist() == [1]
    assert run.series["eval_snli_loss"].values.tolist() == [1.0761278867721558]
    assert run.series["eval_stsb_loss"].value_at(1) == 0.05780908837914467
    assert run.series["eval_stsb_loss"].lines.tolist() == [3]
    assert run.series["eval_snli_samples_per_second"].value_at(1) == 729.789


def test_trl_axolotl_swift_variants(tmp_path: Path) -> None:
    lines = TRL + AXOLOTL_MEM + AXOLOTL_LOGGING + AXOLOTL_TQDM
    run, _ = load_run([str(write_lines(tmp_path / "trl.log", lines))])
    assert run.series["rewards/hint_reward"].values.tolist() == [0.7171093255281449, 0.8844376325607299]
    assert run.series["kl"].steps.tolist() == [1, 2]
    assert run.series["memory/device_mem_reserved(gib)"].steps.tolist() == [3, 4]
    assert run.series["memory/device_mem_reserved(gib)"].values.tolist() == [30.22, 41.26]
    # The dict printed after a tqdm bar (line 7 of the file) is train dict #5.
    assert run.series["loss"].value_at(5) == 0.8635
    assert run.series["loss"].lines.tolist()[-1] == 7
    assert run.series["grad_norm"].steps.tolist() == [1, 2, 3, 4]

    # ms-swift: leading '{' lost, string values; the step comes from 'global_step/max_steps'.
    run, _ = load_run([str(write_lines(tmp_path / "swift.log", SWIFT))])
    assert run.series["loss"].steps.tolist() == [5]
    assert run.series["loss"].values.tolist() == [-0.0]
    assert run.series["memory(GiB)"].value_at(5) == 56.74
    assert run.series["train_speed(iter/s)"].value_at(5) == 0.056099
    assert "percentage" not in run.series and "elapsed_time" not in run.series
    assert run.meta["max_steps"] == 3766


def test_tqdm_carriage_returns_quoted_floats_and_end_summary(tmp_path: Path) -> None:
    # Raw terminal framing (fixtures had the \r removed): bar states and the dict on one
    # physical line; transformers 5.x quoted-float dicts and the end-of-training summary are
    # built from the Trainer's log templates in transformers' trainer.py (no verbatim sample exists).
    bar = AXOLOTL_TQDM[0]
    raw = bar + "\r" + bar.replace("283/873", "284/873") + "\r" + HF_35207[0]
    quoted = "{'loss': '2.345', 'grad_norm': 'inf', 'learning_rate': '5e-05', 'epoch': '0.5'}"
    summary = ("{'train_runtime': 61.2, 'train_samples_per_second': 3.27, 'train_steps_per_second': 0.82, "
               "'train_loss': 6.7, 'epoch': 0.5}")
    log = write_lines(tmp_path / "raw.log", [raw, quoted, summary])
    run, _ = load_run([str(log)])
    assert run.series["loss"].steps.tolist() == [1, 2]
    assert run.series["loss"].values.tolist() == [10.5949, 2.345]
    assert run.series["loss"].lines.tolist() == [1, 2]
    assert run.series["grad_norm"].value_at(2) == math.inf
    assert run.series["train_loss"].steps.tolist() == [2]
    [ev] = run.events
    assert ev.kind is EventKind.PHASE and ev.step == 2 and ev.line == 3 and ev.data["completed"] is True


def _trainer_state(tmp_path: Path) -> Path:
    """A complete trainer_state.json written the way TrainerState.save_to_json writes it
    (json.dumps(indent=2, sort_keys=True)), from the fixture excerpt's values, plus the
    stateful_callbacks block the excerpt omits and one entry with a NaN grad norm."""
    state = json.loads("\n".join(STATE_EXCERPT))
    nan_entry = {"epoch": 30.5, "grad_norm": math.nan, "learning_rate": 1e-05, "loss": 0.0, "step": 12100}
    state["log_history"].append(nan_entry)
    state["stateful_callbacks"] = {"TrainerControl": {"args": {"should_epoch_stop": False,
                                                               "should_training_stop": True}, "attributes": {}}}
    path = tmp_path / "checkpoint-12030" / "trainer_state.json"
    path.parent.mkdir()
    path.write_text(json.dumps(state, indent=2, sort_keys=True), encoding="utf-8")
    return path


def test_trainer_state_json(tmp_path: Path) -> None:
    path = _trainer_state(tmp_path)
    text_lines = path.read_text().splitlines()
    run, problems = load_run([str(path)])
    assert problems == [] and run.frameworks == ["hf_trainer_state"]
    loss = run.series["loss"]
    assert loss.steps.tolist() == [401, 12030, 12100]
    assert loss.values.tolist() == [1.1074, 0.0549, 0.0]
    assert '"loss": 1.1074' in text_lines[int(loss.lines[0]) - 1]  # provenance points at the value
    assert '"loss": 0.0549' in text_lines[int(loss.lines[1]) - 1]
    assert math.isnan(run.series["grad_norm"].value_at(12100))
    assert run.series["eval_g0_accuracy"].steps.tolist() == [0]
    assert run.series["eval_g0_accuracy"].values.tolist() == [0.7082294264339152]
    assert run.series["epoch"].value_at(401) == 1.0
    assert run.meta["max_steps"] == 12030 and run.meta["logging_steps"] == 500
    assert run.meta["num_train_epochs"] == 30 and run.meta["train_batch_size"] == 4
    [ev] = run.events
    assert ev.kind is EventKind.PHASE and ev.step == 12030 and ev.data["completed"] is True
    assert '"global_step": 12030' in ev.raw


def test_truncated_trainer_state_is_read_line_by_line(tmp_path: Path) -> None:
    # an excerpt of trainer_state.json (as pasted in threads) is not valid JSON: its numbers are
    # still read, with a one-line note
    path = _trainer_state(tmp_path)
    path.write_text(path.read_text()[:400], encoding="utf-8")
    proc = run_cli("parse", str(path))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert "invalid trainer_state.json" in proc.stderr and "read line by line" in proc.stderr


def test_cli_parse_writes_hf_rows(tmp_path: Path) -> None:
    log = write_lines(tmp_path / "train.log", HF_35207 + HF_NAN)
    out = tmp_path / "series.csv"
    proc = run_cli("parse", str(log), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "hf" in proc.stdout
    rows = list(csv.DictReader(out.open()))
    loss = [(r["step"], r["value"], r["line"]) for r in rows if r["metric"] == "loss"]
    assert loss[:2] == [("1", "10.5949", "1"), ("2", "8.2312", "2")]
    gn = [r["value"] for r in rows if r["metric"] == "grad_norm"]
    assert gn[3:] == ["nan", "nan"]
    assert {r["format"] for r in rows} == {"hf"}


def test_detection(tmp_path: Path) -> None:
    assert _detected(write_lines(tmp_path / "a.log", HF_35207)) == "hf"
    assert _detected(write_lines(tmp_path / "b.log", HF_OLD)) == "hf"
    assert _detected(write_lines(tmp_path / "c.log", SWIFT)) == "hf"
    assert _detected(_trainer_state(tmp_path)) == "hf_trainer_state"
    assert _detected(write_lines(tmp_path / "m.log", MEGATRON)) == "megatron"
    assert _detected(write_lines(tmp_path / "ax.log", AXOLOTL_LOGGING)) == "text"
    # A Megatron log with an HF-looking line in its config dump stays Megatron.
    assert _detected(write_lines(tmp_path / "mix.log", MEGATRON + HF_OLD)) == "megatron"


def test_stdout_dicts_take_the_global_step_of_the_progress_bar_after_them() -> None:
    # A real HF Trainer run on CPU (tests/corpus/runs, logging_steps=5 and 4, max_steps 200 and 160):
    # ProgressCallback prints each dict with tqdm.write, which redraws the bar at the global step.
    runs = Path(__file__).resolve().parents[1] / "corpus" / "runs"
    run, _ = load_run([str(runs / "hf-slow-s1-every5" / "log.txt")])
    assert run.series["loss"].steps.tolist() == list(range(5, 201, 5))
    assert run.meta["step_text"][5] == "epoch 0.025"
    run, _ = load_run([str(runs / "hf-overfit-s1-every4" / "log.txt")])
    # the eval bar printed between a train dict and its eval dict does not number either of them
    assert run.series["loss"].steps.tolist() == list(range(4, 161, 4))
    assert run.series["eval_loss"].steps.tolist() == run.series["loss"].steps.tolist()


def test_a_bar_that_does_not_move_forward_leaves_the_interval(tmp_path: Path) -> None:
    bar = "  5%|5         | {}/200 [00:00<00:00, 689.90it/s]"
    lines = ["{'loss': 2.0, 'epoch': 0.05}", bar.format(10), "{'loss': 1.9, 'epoch': 0.1}", bar.format(20),
             "{'loss': 1.8, 'epoch': 0.15}", "{'loss': 1.7, 'epoch': 0.2}", bar.format(3)]
    run, _ = load_run([str(write_lines(tmp_path / "train.log", lines))])
    # 10 and 20 from the bar; the third dict has no bar after it (one interval on), the fourth a bar
    # that went back (a bar of another loop): one interval on again
    assert run.series["loss"].steps.tolist() == [10, 20, 30, 40]



def test_the_bar_after_each_train_dict_gives_its_rate(tmp_path: Path) -> None:
    # ProgressCallback writes the dict, then tqdm redraws the bar at the dict's step with its speed
    lines = []
    for step, rate in ((5, "541.72it/s"), (10, "689.90it/s"), (15, "1.24s/it"), (20, "?it/s")):
        lines += [f"{{'loss': {2.0 - step / 100:.3f}, 'learning_rate': 0.001, 'epoch': {step / 200:.3f}}}",
                  f" {step // 2}%|#         | {step}/200 [00:01<00:10, {rate}]"]
    run, _ = load_run([str(write_lines(tmp_path / "hf.log", lines))])
    rate = run.series["it/s"]
    assert rate.steps.tolist() == [5, 10, 15] and rate.values.tolist()[:2] == [541.72, 689.9]
    assert abs(rate.values[2] - 1 / 1.24) < 1e-12 and rate.lines.tolist() == [2, 4, 6]


_RATE_PIECES = [" 45%|", "████▌", "▍     ", "##", "| ", "123/456", "7/8", " [", "00:12", "<", "01:02:03", "?", ", ",
                "2.36", "10", "0.5", "?it/s", "it/s", "s/it", "]", "\u0663", "\xff", "x", "/", "e", "5",
                "| 123/456 [00:12<01:02:03, 2.36it/s]", "| 7/8 [00:01<?, 10.00s/it]", "|██▌ | 5/10 [00:01<00:02,  0.5it/s]",
                "| 1/2 [00:00<00:00, 0s/it]", "| 3/9 [00:01<00:02, \u0663.5it/s]"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_RATE_PIECES), max_size=16), st.lists(st.integers(0, 9), min_size=1, max_size=6))
def test_the_rate_found_once_per_digit_shape_is_bar_rate(pieces: list[str], shifts: list[int]) -> None:
    # the bulk path finds where a bar's rate is once per segment with its ASCII digits zeroed, then
    # reads the bytes there: the same rate as bar_rate on every segment of that shape
    from trainaudit.ingest.formats.hf import _SLOW, _per_second, _rate_span, bar_rate

    base = "".join(pieces).encode("utf-8").replace("\xff".encode(), b"\xff")  # "\xff": an invalid byte
    spans = set()
    for d in shifts:
        segment = bytes((c - 48 + d) % 10 + 48 if 48 <= c <= 57 else c for c in base)
        text = segment.decode("utf-8", "replace")
        span = _rate_span(text)
        spans.add(span)
        if span is None:
            assert bar_rate(text) is None
        elif span is not _SLOW:
            assert _per_second(float(segment[span[0]:span[1]]), span[2]) == bar_rate(text)
    assert len(spans) == 1


def test_the_rate_cases_above_include_every_path() -> None:
    from trainaudit.ingest.formats.hf import _SLOW, _rate_span

    assert _rate_span("| 123/456 [00:12<01:02:03, 2.36it/s]") == (27, 31, True)
    assert _rate_span(" 50%|██▌ | 7/8 [00:01<?, 10.00s/it]")[2] is False  # type: ignore[index]
    assert _rate_span("| 3/9 [00:01<00:02, \u0663.5it/s]") is _SLOW  # an Arabic-Indic digit: read as text
    assert _rate_span("\ufffd| 3/9 [00:01<00:02, 1.5it/s]") is _SLOW
    assert _rate_span("| 3/9 [00:01<?, ?it/s]") is None


def test_an_evaluation_at_an_epoch_end_keeps_the_epoch_it_prints() -> None:
    # dicts that print only the epoch (hf-transformers-Nuist-XZX-QWen): the eval dict after the train dict of
    # epoch 7.98 says 8.0, the epoch its metric belongs to, and the step's text says both
    corpus = Path(__file__).resolve().parents[1] / "corpus" / "logs" / "hf-transformers-Nuist-XZX-QWen"
    run, _ = load_run([str(corpus / "log.txt")])
    i = run.series["eval_loss"].values.tolist().index(1.8072562217712402)
    step = int(run.series["eval_loss"].steps[i])
    assert run.meta["step_text"][step] == "epoch 7.98, evaluation at epoch 8"
    assert run.meta["step_text"][step + 1] == "epoch 8.09"
