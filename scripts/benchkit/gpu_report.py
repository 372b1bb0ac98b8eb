"""The GPU check's results as people read them: the markdown table that docs/benchmarks.md
keeps between its gpu-check markers (scripts/benchkit/gpu_check.py writes the results)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scripts.benchkit.host import ROOT
from scripts.benchkit.stats import percentile

DOCS = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- gpu-check: begin -->", "<!-- gpu-check: end -->"


def render(results: dict[str, Any]) -> str:
    """The results as the markdown that docs/benchmarks.md keeps."""
    facts = results["machine"]
    lines = [
        f"Card: {facts.get('card', 'none (--cpu)')}; driver and memory: "
        f"{facts.get('driver', '?')}; torch {facts['torch']} (CUDA {facts.get('cuda')}).",
        "",
        "| step | job type | ended | should end | billed s | bills | peak GPU GiB |",
        "| --- | --- | --- | --- | ---: | ---: | ---: |",
    ]
    runs = [r for r in results["runs"] if r["step"] != "dispatch gap"]
    for r in runs:
        end = r["status"] + (f":{r['error_kind']}" if r["error_kind"] else "")
        peak = "" if r["peak_gpu_bytes"] is None else f"{r['peak_gpu_bytes'] / (1 << 30):.2f}"
        billed = "" if r["billed_s"] is None else f"{r['billed_s']:.3f}"
        lines.append(
            f"| {r['step']} | `{r['type']}` | {end} | {r['expect']} | {billed} | {r['bills']} "
            f"| {peak} |"
        )
    gaps = results.get("gap_ms", [])
    burns, plain = results.get("burn_tflops", []), results.get("plain_tflops", [])
    lines += [
        "",
        f"- burn TFLOP/s: {_numbers(burns)}; the plain torch loop: {_numbers(plain)}.",
        f"- dispatch gap over {len(gaps) + 1} empty jobs: p50 {percentile(gaps, 50):.2f} ms, "
        f"p99 {percentile(gaps, 99):.2f} ms."
        if gaps
        else "- dispatch gap: not measured.",
        f"- seconds per empty job in a burst: warm child {results.get('per_job_warm_s')}, "
        f"CHILD_PER_JOB {results.get('per_job_fresh_s')}.",
        f"- child replacements by reason: {results.get('replacements')}.",
        *(
            [f"- left out, torch not being installed: {', '.join(results['skipped'])}."]
            if results.get("skipped")
            else []
        ),
        f"- jobs that did not end as they should, or were not billed once: "
        f"{sum(1 for r in results['runs'] if not r['ok'])}.",
        "",
        *(
            f"- {'met' if ok else '**not met**'}: {what}"
            for what, ok in results["verdicts"].items()
        ),
    ]
    return "\n".join(lines) + "\n"


def _numbers(values: list[float | None]) -> str:
    return ", ".join("n/a" if v is None else f"{v:.3g}" for v in values)


def into_docs(results_file: Path) -> None:
    """Put the results' table into docs/benchmarks.md, between its gpu-check markers."""
    results = json.loads(results_file.read_text())
    text = DOCS.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    DOCS.write_text(text[:start] + "\n" + render(results) + text[end:])
