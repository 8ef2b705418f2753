"""The ``run`` fixture of the CLI error tests: ``kernloom`` called in-process, its exit code
and output, with stderr's line breaks joined so that a message wrapped by rich still reads
as one line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kernloom.cli import main

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    def invoke(*argv: str | Path) -> tuple[int, str, str]:
        code = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return code, out, err.replace("\n", " ")

    return invoke
