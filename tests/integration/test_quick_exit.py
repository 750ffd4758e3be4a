"""The entry point's quick exit: what shutdown does before its teardown still happens
(non-daemon threads finish, an executor left open lets its idle worker go, atexit
handlers run, buffered output arrives, the status is sys.exit's), the interpreter's
teardown does not, except under a tracer or profiler."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from cl_bench.commands.quick_exit import status_of

SCRIPT = textwrap.dedent("""
    import atexit, os, sys, threading, time
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path
    from cl_bench.commands.quick_exit import exit_quickly

    folder = Path(sys.argv[1])

    class Torn:  # a module global finalized only by the interpreter's teardown
        def __init__(self):  # holds what __del__ needs: module globals are gone by then
            self.fd = os.open(folder / "torn_down", os.O_WRONLY | os.O_CREAT)
            self.write = os.write

        def __del__(self):
            self.write(self.fd, b"yes")

    kept = Torn()
    atexit.register(lambda: (folder / "atexit").write_text("ran"))

    def late():
        time.sleep(0.3)
        (folder / "thread").write_text("finished")

    threading.Thread(target=late).start()
    pool = ThreadPoolExecutor(1)  # left open: its idle worker is woken at shutdown
    pool.submit(int).result()
    if sys.argv[2] == "traced":
        sys.settrace(lambda *a: None)
    sys.stdout.write("buffered, no newline")
    exit_quickly(int(sys.argv[3]))
""")


@pytest.mark.parametrize("mode", ["plain", "traced"])
def test_exit_keeps_threads_handlers_output_and_status(tmp_path, mode):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # a pipe buffers
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path), mode, "3"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout == "buffered, no newline"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "thread").read_text() == "finished"
    # the teardown is skipped, except under a tracer, whose output comes at the end
    assert (tmp_path / "torn_down").read_text() == ("yes" if mode == "traced" else "")


def test_status_is_sys_exits(capsys):
    assert [status_of(None), status_of(0), status_of(2)] == [0, 0, 2]
    assert status_of("error: no such scenario") == 1
    assert capsys.readouterr().err == "error: no such scenario\n"


def test_the_command_line_exits_through_it(tmp_path):
    """A refusal through `python -m cl_bench`: its status and its one paragraph arrive,
    nothing is written (cl-bench's subprocess tests cover the status-0 runs)."""
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "cl_bench",
            "run",
            "--scenario",
            "nope",
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.startswith('error: Unknown scenario "nope"')
    assert refused.stderr.count("\n") == 1 and refused.stdout == ""
    assert not (tmp_path / "out").exists()
