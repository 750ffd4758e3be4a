"""Progress written to a file is a few plain lines, not carriage-return frames."""

from __future__ import annotations

import io
import os
import subprocess
import sys

from cl_bench import progress


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_plain_progress_writes_coarse_whole_lines(monkeypatch):
    monkeypatch.setenv("CL_BENCH_PROGRESS_EVERY_S", "10")
    out, clock = io.StringIO(), Clock()
    bar = progress.PlainProgress(None, 100, "tosca task 1/5", "it", stream=out, clock=clock)
    for _ in range(100):
        clock.now += 0.25  # 25 s in all: lines at 10 s and 20 s, then the end
        bar.update(1)
        bar.set_postfix(loss="0.500")
    bar.close()
    bar.close()  # a second close writes nothing
    assert out.getvalue().splitlines() == [
        "tosca task 1/5: 40/100 it after 10 s (loss 0.500)",
        "tosca task 1/5: 80/100 it after 20 s (loss 0.500)",
        "tosca task 1/5: 100 it in 25.0 s (loss 0.500)",
    ]


def test_plain_progress_wraps_an_iterable():
    out = io.StringIO()
    bar = progress.PlainProgress(iter("abc"), 3, "decoding", "img", stream=out, clock=Clock())
    assert list(bar) == ["a", "b", "c"]
    assert out.getvalue() == "decoding: 3 img in 0.0 s\n"


def test_bad_interval_falls_back_to_the_default(monkeypatch):
    monkeypatch.setenv("CL_BENCH_PROGRESS_EVERY_S", "often")
    assert progress.every_s() == progress.EVERY_S


def test_a_run_logged_to_a_file_has_no_carriage_returns(tmp_path):
    log = tmp_path / "log"
    with log.open("w") as sink:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "cl_bench",
                "run",
                "--out",
                str(tmp_path / "out"),
                "--scenario",
                "synthetic",
                "--methods",
                "tosca",
                "--precision",
                "fp32",
                "--set",
                "tosca.epochs=2",
                "--image-size",
                "64",
            ],  # what is logged, not the features
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, "CL_BENCH_CACHE": str(tmp_path / "cache")},
        )
    text = log.read_text()
    assert done.returncode == 0, text
    assert "\r" not in text
    assert "tosca task 1/" in text and " it in " in text
