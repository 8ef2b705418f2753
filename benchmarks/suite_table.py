"""The benchmark suite's table, rendered from its JSON alone (``suite.py --render``), and
the README block that holds it.

The README's performance table is this module's output for ``results/suite.json``,
byte for byte (``tests/test_bench_suite.py`` checks it): numbers reach the README only
through a run of the suite. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TIMES = "\u00d7"
"""The multiplication sign after a ratio, as in the rest of the README."""
BEGIN = "<!-- suite:begin -->"
END = "<!-- suite:end -->"

COLUMNS = (
    ("numpy", "numpy direct"),
    ("onnxruntime", "ONNX Runtime"),
    ("tf", "TF1 Session"),
    ("torch", "torch eager"),
    ("kernloom_off", "kernloom, optimizer off"),
    ("kernloom_on", "kernloom, optimizer on"),
)
"""(runtime key in the JSON, column header), left to right."""

LIBRARIES = (
    ("numpy", "numpy"),
    ("onnxruntime", "ONNX Runtime"),
    ("torch", "torch"),
    ("tensorflow", "TensorFlow"),
    ("kernloom", "kernloom"),
)
"""(library key in the JSON's ``versions``, its name in the header line)."""


def render(data: Mapping[str, Any]) -> str:
    """The block between the README's markers: what was run, where, and the table. A cell
    is the runtime's time over numpy direct's, median over the rounds, then its median
    time; a runtime the workload has no version for is "—", one the machine lacks "not
    installed", one left out of the run "not run"."""
    machine = data["machine"]
    versions = data["versions"]
    libraries = ", ".join(f"{name} {versions[key]}" for key, name in LIBRARIES if versions.get(key))
    missing = [name for key, name in LIBRARIES if not versions.get(key)]
    lines = [
        f"Measured on {data['date']} with `{data['command']}`"
        + (f" at commit {data['commit']}" if data.get("commit") else "")
        + (" (quick mode: a smoke test, not a measurement)" if data.get("quick") else "")
        + ".",
        f"Machine: {machine['cpu']}, {machine['cores']} cores, Python {machine['python']}, "
        f"load average {machine['load_average'][0]:.2f} at the start; {libraries}"
        + (f" ({', '.join(missing)}: not installed)" if missing else "")
        + ".",
        f"Each runtime ran in its own interpreter; {data['rounds']} rounds interleaved "
        "across them. A cell is the runtime's time divided by numpy direct's in the same "
        "round (median over the rounds), then its median time.",
        "",
        "| workload | " + " | ".join(header for _, header in COLUMNS) + " |",
        "| --- |" + " ---: |" * len(COLUMNS),
    ]
    for workload in data["workloads"]:
        cells = [_cell(workload, key) for key, _ in COLUMNS]
        lines.append(f"| {workload['title']} ({workload['unit']}) | " + " | ".join(cells) + " |")
    return "\n".join([*lines, *_notes(data["workloads"])])


def _notes(workloads: list[Mapping[str, Any]]) -> list[str]:
    """What the runtimes reported beside their times: how many nodes TF1 runs after
    grappler, how long kernloom took to compile (once per session and signature)."""
    tf_nodes, compiles, against_ort = [], [], []
    for workload in workloads:
        runtimes = workload["runtimes"]
        head_to_head = _per_round_ratio(runtimes.get("kernloom_on"), runtimes.get("onnxruntime"))
        if head_to_head:
            against_ort.append(f"{workload['key']} {head_to_head}")
        info = runtimes.get("tf", {}).get("info", {})
        if "nodes_after_grappler" in info:
            tf_nodes.append(f"{workload['key']} {info['nodes_after_grappler']}")
        seconds = [
            f"{runtimes[key]['info']['compile_s']:.2f}"
            for key in ("kernloom_on", "kernloom_off")
            if "compile_s" in runtimes.get(key, {}).get("info", {})
        ]
        if seconds:
            compiles.append(f"{workload['key']} {' / '.join(seconds)} s")
    notes = []
    if against_ort:
        notes.append(
            "kernloom (optimizer on) / ONNX Runtime, per round, median [middle half] and "
            f"rounds kernloom was faster: {', '.join(against_ort)}."
        )
    if tf_nodes:
        notes.append(f"Nodes a TF1 step runs after grappler: {', '.join(tf_nodes)}.")
    if compiles:
        notes.append(
            "kernloom's `make_callable` (graph optimizer on / off), paid once: "
            f"{', '.join(compiles)}."
        )
    return ["", " ".join(notes)] if notes else []


def _per_round_ratio(
    mine: Mapping[str, Any] | None, theirs: Mapping[str, Any] | None
) -> str | None:
    """One runtime's time over another's in each round (the two ran alternately), as
    "median [quartiles] (faster in k/n)"; None unless both ran every round."""
    if not mine or not theirs or mine.get("status") != "ok" or theirs.get("status") != "ok":
        return None
    rounds, other = mine.get("rounds") or [], theirs.get("rounds") or []
    if not rounds or len(rounds) != len(other):
        return None
    ratios = sorted(a / b for a, b in zip(rounds, other, strict=True))
    n = len(ratios)
    faster = sum(r < 1 for r in ratios)
    return (
        f"{_number(ratios[n // 2])} [{_number(ratios[n // 4])}-{_number(ratios[(3 * n) // 4])}]"
        f" ({faster}/{n})"
    )


def _cell(workload: Mapping[str, Any], key: str) -> str:
    result = workload["runtimes"].get(key)
    if result is None:
        return "—"
    if result["status"] == "not installed":
        return "not installed"
    if result["status"] == "not selected":
        return "not run"
    time = f"{_number(result['median'])} {workload['unit_short']}"
    return f"{_number(result['ratio'])}{TIMES} ({time})"


def _number(value: float) -> str:
    """Three significant digits, without exponents: 0.00853, 0.240, 2.41, 37.4, 1234."""
    text = f"{value:#.3g}"
    if "e" in text or text.endswith("."):
        return f"{value:.0f}"
    return text


def between_markers(text: str) -> str:
    """What ``text`` (the README) holds between the suite's markers."""
    start, stop = _marker_span(text)
    return text[start:stop].strip("\n")


def with_block(text: str, block: str) -> str:
    """``text`` with the part between the suite's markers replaced by ``block``."""
    start, stop = _marker_span(text)
    return f"{text[:start]}\n{block}\n{text[stop:]}"


def _marker_span(text: str) -> tuple[int, int]:
    begin, end = text.find(BEGIN), text.find(END)
    if begin < 0 or end < begin:
        raise ValueError(
            f"the README has no {BEGIN} ... {END} pair: put both markers, on lines of their "
            "own, where the performance table goes"
        )
    return begin + len(BEGIN), end
