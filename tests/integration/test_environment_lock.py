"""Running as the other kind of machine (CL_BENCH_CPU_BF16), at the CLI: a bad switch
value is refused, and the dry run's header follows the switch (the switch, the package
versions and the lock: tests/unit/test_environment_lock.py)."""

from __future__ import annotations

from cl_bench.engine import environment
from tests.helpers.cli import invoke

SYN = ["--scenario", "synthetic", "--no-progress", "--methods", "simplecil", "--dry-run"]


def test_a_bad_switch_value_is_one_paragraph_exit_2(monkeypatch, tmp_path):
    monkeypatch.setenv(environment.BF16_SWITCH, "maybe")
    result = invoke("run", "--out", str(tmp_path / "out"), *SYN)
    assert result.exit_code == 2
    assert "CL_BENCH_CPU_BF16='maybe' is not a switch value. Set it to 1" in result.stderr
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()


def test_dry_run_header_follows_the_switch(monkeypatch, tmp_path):
    for value, precision in (("1", "bf16"), ("0", "fp32")):
        monkeypatch.setenv(environment.BF16_SWITCH, value)
        result = invoke("run", "--out", str(tmp_path), *SYN)
        assert result.exit_code == 0, result.output
        assert f", cpu/{precision}, seeds 1993" in result.stdout.splitlines()[1]
