"""Shared helpers of the hostile-input corpus: run the CLI in-process (or as a subprocess) and check that
a failure is exactly one line on stderr with exit code 2, and that no output holds a traceback."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from click.testing import CliRunner


@dataclass
class Outcome:
    exit_code: int
    stdout: str
    stderr: str


def run_in_process(argv: list[str]) -> Outcome:
    """``dltsched ARGV`` through :func:`dltsched.engine.app.cli.main.main` in this process, output
    captured."""
    from dltsched.engine.app.cli.main import main

    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers.clear()  # the CLI's basicConfig then logs to the captured stderr
    try:
        with CliRunner().isolation() as (out, err, _both):
            try:
                code = main(argv)
            except SystemExit as exc:  # main never exits itself; keep the corpus honest if it does
                code = exc.code if isinstance(exc.code, int) else 1
            stdout = out.getvalue().decode("utf-8", "replace")
            stderr = err.getvalue().decode("utf-8", "replace")
    finally:
        root.handlers[:] = saved
    return Outcome(code, stdout, stderr)


def run_subprocess(argv: list[str], timeout_s: float = 120.0) -> Outcome:
    """``dltsched ARGV`` as a child process (the real entry point: interpreter, imports, exit status)."""
    proc = subprocess.run([sys.executable, "-m", "dltsched.engine.app.cli.main", *argv], capture_output=True,
                          text=True, timeout=timeout_s, check=False)
    return Outcome(proc.returncode, proc.stdout, proc.stderr)


def check_outcome(got: Outcome, exit_code: int) -> None:
    """Exit code as expected; a failure is exactly one line ``error: ...`` on stderr; never a traceback."""
    everything = got.stdout + got.stderr
    assert "Traceback" not in everything, everything[-2000:]
    assert got.exit_code == exit_code, f"exit {got.exit_code}, stderr: {got.stderr[-1000:]}"
    if exit_code != 0:
        lines = got.stderr.splitlines()
        assert len(lines) == 1, f"{len(lines)} stderr lines: {got.stderr[-1000:]}"
        assert lines[0].startswith("error: "), lines[0]


def strict_json(text: str) -> Any:
    """Parse ``text`` as strict JSON: bare NaN or Infinity fail."""
    def no_constant(name: str) -> Any:
        raise AssertionError(f"non-standard JSON constant {name} in output")

    return json.loads(text, parse_constant=no_constant)


@pytest.fixture
def run_cli() -> Callable[[list[str]], Outcome]:
    """Run ``dltsched ARGV`` in this process; returns exit code, stdout and stderr."""
    return run_in_process


@pytest.fixture
def run_cli_subprocess() -> Callable[..., Outcome]:
    """Run ``dltsched ARGV`` as a child process."""
    return run_subprocess


@pytest.fixture
def check_cli_outcome() -> Callable[[Outcome, int], None]:
    """Assert an outcome: the exit code, one ``error:`` line on stderr for a failure, no traceback."""
    return check_outcome


@pytest.fixture
def parse_strict_json() -> Callable[[str], Any]:
    """Parse text as strict JSON (bare NaN/Infinity fail)."""
    return strict_json
