"""A project folder holds code, documents and configuration next to its logs. Inside a folder (or
an archive) those are the run's context and are not read as metric logs; a file the user names
is still read as given, and a format's own reader still takes the files it knows."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from shared_data import run_cli
from trainaudit.ingest import load_run

TRAIN_PY = '''\
import torch
from torch import nn

torch.manual_seed(0)
lr = 0.001
lr_finetune = lr * 49.5  # not used in this run
model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
x, y = torch.randn(256, 20), torch.randint(0, 2, (256,))
for step in range(1, 121):
    i = (step * 32) % 256
    loss = nn.functional.cross_entropy(model(x[i:i + 32]), y[i:i + 32])
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} | loss {loss.item():.4f} | lr {lr}")
'''
CONFIG = "model:\n  hidden: 32\n  layers: 2\noptim:\n  lr: 0.001\n  momentum: 0.9\nbatch_size: 32\nsteps: 120\n"
README = """# tiny classifier

| lr | batch | loss |
|----|-------|------|
| 0.001 | 32 | 0.69 |
| 0.0495 | 32 | 0.41 |

Run `python train.py > train.log`; step 1 loss 0.7 lr 0.001.
"""
MANIFEST = {"_commit": "4b1e2c0", "cases": [{"name": "tiny", "first_bad_step": 40, "indent": 2, "seconds": 3.5}]}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    proj = tmp_path_factory.mktemp("proj")
    (proj / "train.py").write_text(TRAIN_PY)
    (proj / "config.yaml").write_text(CONFIG)
    (proj / "README.md").write_text(README)
    (proj / "manifest.json").write_text(json.dumps(MANIFEST, indent=2))
    with open(proj / "train.log", "w") as out:  # as a user runs it: python train.py > train.log
        subprocess.run([sys.executable, "train.py"], cwd=proj, stdout=out, check=True, timeout=300)
    return proj


def test_a_project_folder_reads_only_its_log(project: Path) -> None:
    run, problems = load_run([str(project)])
    assert [s.path for s in run.sources] == [f"{project}/train.log"]
    assert sorted(run.series) == ["loss", "lr"]
    assert len(run.series["loss"].steps) == 120
    skipped = {Path(p.path).name: p.message for p in problems}
    assert skipped == {"README.md": "skipped: documentation, not a log",
                       "config.yaml": "skipped: configuration, not a log",
                       "manifest.json": "skipped: configuration, not a log",
                       "train.py": "skipped: source code, not a log"}
    assert not any(p.fatal for p in problems)


def test_diagnose_a_project_folder_names_no_code_or_document(project: Path, tmp_path: Path) -> None:
    res = run_cli("diagnose", project.name, "-o", str(tmp_path / "out"), "--json", cwd=project.parent)
    assert res.returncode == 0, res.stderr
    answer = json.loads(res.stdout)
    assert [s["path"] for s in answer["source_refs"]] == [f"{project.name}/train.log"]
    text = json.dumps(answer["findings"]) + json.dumps(answer["extracted_facts"])
    for name in ("train.py", "README.md", "config.yaml", "manifest.json"):
        assert name not in text
    assert answer["final_answer"]["verdict"] == "healthy", answer["final_answer"]
    assert "skipped: source code, not a log" in res.stderr


def test_parse_a_folder_makes_no_metric_of_a_table_or_a_json_key(project: Path, tmp_path: Path) -> None:
    out = tmp_path / "series.csv"
    res = run_cli("parse", str(project), "-o", str(out))
    assert res.returncode == 0, res.stderr
    metrics = {line.split(",")[4] for line in out.read_text().splitlines()[1:]}
    assert metrics == {"loss", "lr"}


def test_the_same_files_in_an_archive_are_context_too(project: Path, tmp_path: Path) -> None:
    zpath = tmp_path / "artifacts.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        for f in sorted(project.iterdir()):
            zf.write(f, f"job/{f.name}")
    run, problems = load_run([str(zpath)])
    assert [s.path for s in run.sources] == [f"{zpath}!job/train.log"]
    assert len(problems) == 4 and not any(p.fatal for p in problems)


def test_a_named_file_is_read_as_given(project: Path) -> None:
    # the user points at the file: read it, whatever its name says
    run, _ = load_run([str(project / "README.md")])
    assert [s.format for s in run.sources] == ["text"]
    assert "lr" in run.series


def test_a_format_reader_still_takes_its_config(tmp_path: Path) -> None:
    # a W&B run folder's config.yaml is read by the W&B reader, as the learning rate and the rest
    files = tmp_path / "wandb" / "run-1" / "files"
    files.mkdir(parents=True)
    (files / "config.yaml").write_text("wandb_version: 1\nlearning_rate:\n  desc: null\n  value: 0.0003\n")
    (files / "wandb-history.jsonl").write_text("".join(
        json.dumps({"_step": s, "loss": 2.0 / s}) + "\n" for s in range(1, 30)))
    run, problems = load_run([str(tmp_path / "wandb")])
    assert run.meta.get("config.learning_rate") == 0.0003
    assert not [p for p in problems if "config.yaml" in p.path]
