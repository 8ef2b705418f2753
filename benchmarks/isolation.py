"""Each runtime's measurement in a fresh interpreter of its own, rounds interleaved.

Why: runtimes disturb each other in one process (thread pools that keep spinning after a
call, BLAS state fixed at import, allocator and code caches), and this machine's noise
drifts over minutes, so a ratio is only fair when both sides ran in the same stretch of
time. ``run_interleaved`` therefore starts one child per runtime, lets each build its
workload once (setup, output check), then asks them in turn for one timed round each,
``A, B, C, A, B, C, ...``: every child's round *r* ran in the same minute as the others'.
Children stay alive between rounds as small servers, blocked on a pipe while another one
measures, so an idle child costs nothing but the threads its runtime leaves spinning
(``settle_s`` gives those time to park).

A child is ``python isolation.py --serve CMD_FD REPLY_FD``: it reads JSON lines on one pipe
and answers on the other, so its stdout and stderr stay free for the runtime's own chatter
(they go to a log whose end is quoted if the child fails). The first request names a
*workload script* (a file path) and a factory in it; ``factory(**params)`` builds the
workload and returns ``(measure, info)``: ``measure()`` runs one round and returns its
time in seconds, ``info`` (JSON-able) says what was built and checked. The interpreter is
per child, so a runtime that lives in another virtual environment (TensorFlow) takes part
in the same run. The BLAS thread count is fixed per child through
``OPENBLAS_NUM_THREADS``/``OMP_NUM_THREADS``/``MKL_NUM_THREADS``: OpenBLAS reads it when
numpy is imported, so it must be in the environment before the child starts.

Standard library only: it runs under any of the interpreters it starts.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import select
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

BLAS_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
LOG_TAIL_CHARS = 3000
"""How much of a failed child's output the error quotes."""


class ChildFailed(RuntimeError):
    """A runtime's child could not start, raised in its workload, crashed or hung. The
    message names the runtime, the interpreter and the phase (setup or which round)."""


@dataclass(frozen=True)
class Child:
    """One runtime's measurement: which workload to build, where, with how many threads."""

    name: str
    """The runtime's label in results and errors ("numpy", "onnxruntime", ...)."""
    script: Path
    """The workload script, loaded by path in the child (so any interpreter can load it)."""
    factory: str
    """The function in ``script`` that builds the workload: ``factory(**params) ->
    (measure, info)``."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """Keyword arguments for the factory; JSON-able."""
    threads: int = 1
    """The BLAS thread count, set in the child's environment before it starts."""
    python: str = sys.executable
    """The interpreter that runs the child."""
    env: Mapping[str, str] = field(default_factory=dict)
    """More environment variables for the child (after the BLAS ones)."""


@dataclass(frozen=True)
class ChildResult:
    """What one child reported: its setup's ``info`` and one time per round, in order."""

    name: str
    info: dict[str, Any]
    seconds: list[float]


def run_interleaved(
    children: Sequence[Child],
    rounds: int,
    *,
    settle_s: float = 0.0,
    reply_timeout_s: float = 600.0,
) -> dict[str, ChildResult]:
    """Start every child, let each set up, then run ``rounds`` rounds in turn (children in
    the given order, one round each per pass). ``settle_s`` is slept before each child's
    round: the previous child's worker threads (OpenBLAS spins about 0.1 s after a product)
    would otherwise take cores from the next one. Raises ``ChildFailed`` if any child fails;
    every child is stopped either way."""
    names = [child.name for child in children]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"children need distinct names; repeated: {duplicates}")
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    servers: list[_Server] = []
    try:
        for child in children:
            servers.append(_Server(child, reply_timeout_s))
        for server in servers:
            server.send_setup()
        infos = {server.child.name: server.receive("setup")["info"] for server in servers}
        seconds: dict[str, list[float]] = {name: [] for name in names}
        for round_ in range(1, rounds + 1):
            for server in servers:
                if settle_s:
                    time.sleep(settle_s)
                server.send({"op": "round"})
                reply = server.receive(f"round {round_}")
                seconds[server.child.name].append(_seconds(server.child, reply, round_))
        for server in servers:
            server.stop()
    finally:
        for server in servers:
            server.close()
    return {name: ChildResult(name, infos[name], seconds[name]) for name in names}


def _seconds(child: Child, reply: dict[str, Any], round_: int) -> float:
    value = reply.get("seconds")
    if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ChildFailed(
            f"{child.name}: round {round_} returned {value!r}; the measure function of "
            f"{child.factory}() in {child.script} must return a time in seconds (a float >= 0)"
        )
    return float(value)


class _Server:
    """The parent's handle on one child: its process, its two pipes and its log."""

    def __init__(self, child: Child, reply_timeout_s: float) -> None:
        self.child = child
        self.timeout = reply_timeout_s
        # Closed by close(), which run_interleaved always reaches.
        self.log: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        cmd_read, cmd_write = os.pipe()
        reply_read, reply_write = os.pipe()
        env = {
            **os.environ,
            **dict.fromkeys(BLAS_VARS, str(child.threads)),
            "PYTHONUNBUFFERED": "1",
            **child.env,
        }
        argv = [child.python, str(Path(__file__).resolve()), "--serve"]
        try:
            self.process = subprocess.Popen(
                [*argv, str(cmd_read), str(reply_write)],
                stdin=subprocess.DEVNULL,
                stdout=self.log,
                stderr=subprocess.STDOUT,
                env=env,
                pass_fds=(cmd_read, reply_write),
            )
        except OSError as exc:
            for fd in (cmd_read, cmd_write, reply_read, reply_write):
                os.close(fd)
            self.log.close()
            raise ChildFailed(
                f"{child.name}: cannot start its interpreter {child.python!r} ({exc}); "
                "point the runtime at an existing python"
            ) from exc
        os.close(cmd_read)
        os.close(reply_write)
        self.commands = os.fdopen(cmd_write, "w", encoding="utf-8")
        self.replies = os.fdopen(reply_read, "rb")

    def send_setup(self) -> None:
        self.send(
            {
                "op": "setup",
                "script": str(Path(self.child.script).resolve()),
                "factory": self.child.factory,
                "params": dict(self.child.params),
            }
        )

    def send(self, message: dict[str, Any]) -> None:
        try:
            self.commands.write(json.dumps(message) + "\n")
            self.commands.flush()
        except BrokenPipeError:
            raise self._failure(f"{message['op']}", "it exited before the request") from None

    def receive(self, phase: str) -> dict[str, Any]:
        ready, _, _ = select.select([self.replies], [], [], self.timeout)
        if not ready:
            raise ChildFailed(
                f"{self.child.name}: no reply to {phase} within {self.timeout:.0f} s "
                f"({self.child.python}); the end of its output:\n{self._log_tail()}"
            )
        line = self.replies.readline()
        if not line:
            raise self._failure(phase, "it exited without replying")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise ChildFailed(
                f"{self.child.name}: {phase} failed in its child ({self.child.python}, "
                f"{self.child.factory}() in {self.child.script}):\n{reply['error']}"
            )
        return reply

    def _failure(self, phase: str, what: str) -> ChildFailed:
        try:
            code = self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        return ChildFailed(
            f"{self.child.name}: its child ({self.child.python}) failed during {phase}: "
            f"{what} (exit code {code}); the end of its output:\n{self._log_tail()}"
        )

    def _log_tail(self) -> str:
        self.log.seek(0)
        text = self.log.read().decode("utf-8", "replace")
        return text[-LOG_TAIL_CHARS:] or "(nothing)"

    def stop(self) -> None:
        self.send({"op": "stop"})
        self.process.wait(timeout=self.timeout)

    def close(self) -> None:
        """Close the pipes and reap the child, killing it if it has not exited."""
        for stream in (self.commands, self.replies):
            with contextlib.suppress(OSError):  # a pipe whose child is gone
                stream.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def serve(cmd_fd: int, reply_fd: int) -> int:
    """The child's loop: build the workload on "setup", time one round per "round", exit on
    "stop" or when the parent goes away. An exception is sent back as its traceback."""
    with (
        os.fdopen(cmd_fd, "r", encoding="utf-8") as commands,
        os.fdopen(reply_fd, "w", encoding="utf-8") as replies,
    ):

        def reply(message: dict[str, Any]) -> None:
            replies.write(json.dumps(message) + "\n")
            replies.flush()

        measure: Callable[[], float] | None = None
        for line in commands:
            request = json.loads(line)
            op = request["op"]
            if op == "stop":
                return 0
            try:
                if op == "setup":
                    measure, info = _build(request)
                    reply({"info": info})
                elif op == "round" and measure is not None:
                    reply({"seconds": measure()})
                else:
                    raise RuntimeError(f"unexpected request {request!r}")
            except BaseException:
                reply({"error": traceback.format_exc()})
                return 1
    return 0


def _build(request: dict[str, Any]) -> tuple[Callable[[], float], dict[str, Any]]:
    script = Path(request["script"])
    spec = importlib.util.spec_from_file_location(f"_isolated_{script.stem}", script)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the workload script {script}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and pickling look modules up by name
    spec.loader.exec_module(module)
    factory = getattr(module, request["factory"])
    measure, info = factory(**request["params"])
    return measure, dict(info)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        sys.exit(serve(int(sys.argv[2]), int(sys.argv[3])))
    sys.exit(f"usage: {sys.argv[0]} --serve CMD_FD REPLY_FD (started by run_interleaved)")
