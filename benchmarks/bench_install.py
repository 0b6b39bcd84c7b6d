"""Install size: a fresh ``pip install .`` (no extras) into an empty venv, and with the plots extra;
then ``trainaudit diagnose`` on the bundled example in the core install.

    python benchmarks/bench_install.py

Sizes are the venv's site-packages in MB (``du``) minus what an empty venv already holds (pip,
setuptools), so they are what trainaudit adds. Needs the package index that ``pip`` is set up for.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = HERE / "data" / "install"


def _site(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def _mb(path: Path) -> float:
    return int(subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=True)
               .stdout.split()[0]) / 1024


def _venv(name: str, spec: str | None) -> tuple[float, float, list[str]]:
    venv = DATA / name
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    empty = _mb(_site(venv))
    t0 = time.perf_counter()
    if spec is not None:
        subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", spec], check=True, capture_output=True)
    took = time.perf_counter() - t0
    names = subprocess.run([str(venv / "bin" / "pip"), "list", "--format=freeze"], capture_output=True, text=True,
                           check=True).stdout.split()
    return _mb(_site(venv)) - empty, took, sorted(n.split("==")[0] for n in names if not n.startswith(("pip=", "setuptools=")))


def main() -> int:
    DATA.mkdir(parents=True, exist_ok=True)
    core, core_s, core_pkgs = _venv("core", str(REPO))
    plots, _, plot_pkgs = _venv("plots", f"{REPO}[plots]")
    biggest = sorted(((p.name, _mb(p)) for p in _site(DATA / "core").iterdir() if p.is_dir()
                      and not p.name.endswith(("dist-info", "__pycache__")) and p.name not in ("pip", "setuptools",
                                                                                                "_distutils_hack",
                                                                                                "pkg_resources")),
                     key=lambda x: -x[1])[:5]
    out = DATA / "run"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    t0 = time.perf_counter()
    proc = subprocess.run([str(DATA / "core" / "bin" / "trainaudit"), "diagnose", str(REPO / "examples" / "nan-after-lr-jump")],
                          cwd=out, capture_output=True, text=True)
    took = time.perf_counter() - t0
    report = out / "trainaudit-out" / "diagnose"
    note = next((ln for ln in proc.stderr.splitlines() if "PNG" in ln), "")
    print("## Install size: core and plots extra\n")
    print("`python benchmarks/bench_install.py`: a fresh venv, `pip install .` (no extras), then "
          "`pip install '.[plots]'` in another; site-packages in MB minus an empty venv's (pip, setuptools).\n")
    print("| install | MB | packages |")
    print("|---|---|---|")
    print(f"| `pip install trainaudit` | {core:.0f} | {len(core_pkgs)}: {', '.join(core_pkgs)} |")
    extra = sorted(set(plot_pkgs) - set(core_pkgs))
    print(f"| `pip install 'trainaudit[plots]'` | {plots:.0f} | +{len(extra)}: {', '.join(extra)} |")
    print(f"\nLargest in the core install: {', '.join(f'{n} {mb:.0f} MB' for n, mb in biggest)}. "
          f"The core install took {core_s:.0f} s (wheels from the index, no cache).\n")
    print(f"In the core install, `trainaudit diagnose examples/nan-after-lr-jump` took {took:.1f} s, exit "
          f"{proc.returncode} (1: problems found), wrote {', '.join(sorted(p.name for p in report.iterdir()))} "
          f"and said on stderr:\n\n```\n{note}\n```\n")
    ok = proc.returncode == 1 and (report / "answer.json").is_file() and "trainaudit[plots]" in note
    print(f"Target: a core install without matplotlib that diagnoses and says how to get PNG plots: "
          f"**{'met' if ok else 'not met'}**.")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
