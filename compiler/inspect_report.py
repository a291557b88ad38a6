"""Formats what `tfaot inspect` prints about a step program."""
from __future__ import annotations

import json

from .program import StepProgram


def inspect_dict(program: StepProgram) -> dict:
    report = dict(program.report)
    report.setdefault("format", program.format)
    report["model"] = program.source
    report.update(program.signature.to_json())
    return report


def inspect_json(program: StepProgram) -> str:
    return json.dumps(inspect_dict(program), indent=2)


def inspect_text(program: StepProgram) -> str:
    r = inspect_dict(program)
    lines = [f"model:      {r['model']}", f"format:     {r['format']}"]
    if "mode" in r:
        lines.append(f"mode:       {r['mode']}")
    if "parameters" in r:
        lines.append(f"parameters: {r['parameters']:,}")
    if r.get("layers"):
        lines.append("layers:")
        for row in r["layers"]:
            extra = ""
            if row.get("role") == "recurrent":
                extra = f"  units={row.get('units')} return_sequences={row.get('return_sequences')}"
            lines.append(f"  {row['name']:<24} {row['type']:<20} {row['role']}{extra}")
    for key in ("loops",):
        if r.get(key):
            lines.append(f"{key}:")
            lines += [f"  {json.dumps(item)}" for item in r[key]]
    lines.append("state:" + ("" if r["state"] else " none (stateless)"))
    for s in r["state"]:
        lines.append(f"  {s['name']:<24} {s['dtype']} {tuple(s['shape'])}")
    lines.append("step:")
    for t in r["inputs"]:
        lines.append(f"  input  {t['name']:<17} {t['dtype']} {tuple(t['shape'])}")
    for t in r["outputs"]:
        lines.append(f"  output {t['name']:<17} {t['dtype']} {tuple(t['shape'])}")
    return "\n".join(lines)
