"""Line cleaning on messy real logs: launcher prefixes, ANSI, carriage returns, CRLF, bad UTF-8."""

from __future__ import annotations

import io
import math

from shared_data import sample_block
from trainaudit.ingest.text import iter_lines, parse_number, strip_prefixes


def _lines(data: bytes):
    return list(iter_lines(io.BytesIO(data)))


def test_rank_prefixes_from_the_public_samples() -> None:
    block = sample_block("rank_prefixes.txt", "torchtitan/pull/3393")
    body, rank = strip_prefixes(block[0])
    assert rank == 0 and body.startswith("[titan] 2026-05-18 16:04:46,338 - root - INFO - step: 14")
    srun = sample_block("rank_prefixes.txt", "bionemo-recipes/issues/794")
    body, rank = strip_prefixes(srun[0])
    assert rank == 29 and body.startswith('  File "/usr/local/lib/python3.12')
    tee = sample_block("rank_prefixes.txt", "rwth-i6/i6_core/pull/658")
    assert [strip_prefixes(x)[1] for x in tee] == [0, 3]
    assert strip_prefixes(tee[1])[0].startswith("ep 55 train, step 1347, ce 0.355")
    slurm = sample_block("rank_prefixes.txt", "metaseq/pull/507")
    body, rank = strip_prefixes(slurm[0])
    assert rank == 0 and body.startswith("2022-11-11 14:05:27 | INFO | train_inner | {")
    ray = sample_block("rank_prefixes.txt", "alibaba/ROLL/issues/193")
    assert strip_prefixes(ray[0])[0].startswith("[2025-10-11 11:16:52] [decorator.py (306)]")


def test_stacked_nemo_run_prefix() -> None:
    line = sample_block("error_signatures.txt", "NVIDIA-NeMo/Speech/issues/14348")[0]
    body, rank = strip_prefixes(line)
    assert rank == 2 and body.startswith("RuntimeError: Rank 2, node dcfai-xe9680-01")


def test_data_lines_are_not_taken_for_prefixes() -> None:
    for text in ("422/422 [==============================] - 13s 29ms/step - loss: 0.7840",
                 "iter 1631: loss 4.0863, time 561.94ms", "12: 0.5 0.7", "10/30 22:18:02 - mmengine - INFO",
                 # darknet's iteration line with its loss NaN (darknet-pjreddie-darknet-1533), a negative value
                 "849: nan, -nan avg, 0.002078 rate, 1.032942 seconds, 217344 images", "3: -0.25 loss", "7: Inf"):
        assert strip_prefixes(text) == (text, None)


def test_ansi_cr_crlf_bad_utf8_and_truncated_last_line() -> None:
    data = (b"\x1b[32mstep 1\x1b[0m loss 2.0\r\n"
            b"bar 10%\rbar 50%\rbar 100% done\n"
            b"caf\xe9 \xff\xfe step 3\n"
            b"[rank1]: last line without newline")
    lines = _lines(data)
    assert [(ln.no, ln.text) for ln in lines] == [
        (1, "step 1 loss 2.0"), (2, "bar 10%"), (2, "bar 50%"), (2, "bar 100% done"),
        (3, "caf\ufffd \ufffd\ufffd step 3"), (4, "last line without newline")]
    assert lines[-1].rank == 1 and lines[0].raw.startswith("\x1b[32m")


def test_markdown_bold_around_pasted_numbers_is_dropped() -> None:
    # a Megatron line as pasted into a GitHub issue, with the slow field in bold (Megatron-LM#371)
    data = (b"iteration 5/200 | **elapsed time per iteration (ms): 4900.0** | lm loss: 1.089136E+01 |\n"
            b"    result = self.forward(*input, **kwargs)\n")
    lines = _lines(data)
    assert lines[0].text == "iteration 5/200 | elapsed time per iteration (ms): 4900.0 | lm loss: 1.089136E+01 |"
    assert lines[0].raw.count("**") == 2  # the evidence quotes the line as posted
    assert lines[1].text == "    result = self.forward(*input, **kwargs)"  # one ** is no bold


def test_number_spellings() -> None:
    assert parse_number("1.825991E+00") == 1.825991
    assert parse_number("7,282") == 7282.0
    assert math.isnan(parse_number("NaN")) and math.isnan(parse_number("nan"))  # type: ignore[arg-type]
    assert parse_number("-inf") == -math.inf and parse_number("inf") == math.inf
    assert parse_number("'0.5'") == 0.5 and parse_number("abc") is None and parse_number("") is None
