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


# Per-layer streaming facts (the Keras streamifier's rows), printed in this order.
_ROW_KEYS = ("buffer", "window", "kernel", "stride", "dilation", "delay", "ring", "pad", "crop", "state")


def _stream_line(stream: dict) -> str:
    if stream["mode"] == "window":
        text = f"window {stream['window']} frames"
    else:
        text = "prefix (frames 0..t)"
    text += f", {stream['frames_per_step']} frame{'s' if stream['frames_per_step'] != 1 else ''}" \
            " per step"
    text += f", outputs valid from step {stream['first_valid_step']}"
    if stream.get("delay"):
        text += f", window ends {stream['delay']} frame(s) before the step's last"
    if stream.get("recompute"):
        text += ", whole window recomputed each step"
    frames = stream.get("output_frames", [])
    if any(n != 1 for n in frames):
        text += ", output frames per step " + " ".join(str(n) for n in frames)
    late = stream.get("output_latency", [])
    if any(late):
        text += ", outputs late by " + " ".join(str(n) for n in late) + " frame(s)"
    return text


def inspect_text(program: StepProgram) -> str:
    r = inspect_dict(program)
    lines = [f"model:      {r['model']}", f"format:     {r['format']}"]
    if "mode" in r:
        lines.append(f"mode:       {r['mode']}")
    stream = r.get("stream")
    if stream and stream.get("mode") != "stateless":
        lines.append("stream:     " + _stream_line(stream))
    if "parameters" in r:
        lines.append(f"parameters: {r['parameters']:,}")
    if r.get("signature"):  # a SavedModel with several
        lines.append(f"signature:  '{r['signature']['name']}' (also has "
                     f"{', '.join(r['signature']['others'])}; --signature NAME for another)")
    for c in r.get("cut", []):  # graph formats cut with --inputs
        lines.append(f"cut:        at {c['tensor']} (op {c['op']}); dropped "
                     f"{c['dropped_nodes']} nodes before it ({', '.join(c['dropped_ops'])})")
    for u in r.get("unrolled", []):
        lines.append(f"unrolled:   {u['steps']} copies of one cell (sliced by "
                     f"'{u['slicer']}'), streamed as a loop")
    for note in r.get("notes", []) + r.get("stream_notes", []):
        lines.append(f"note:       {note}")
    if r.get("layers"):
        lines.append("layers:")
        for row in r["layers"]:
            extra = ""
            if row.get("role") == "recurrent":
                extra = f"  units={row.get('units')} return_sequences={row.get('return_sequences')}"
            keys = [k for k in _ROW_KEYS if k in row]
            if keys:
                extra += "  " + " ".join(f"{k}={row[k]}" for k in keys)
            lines.append(f"  {row['name']:<24} {row['type']:<20} {row['role']}{extra}")
    for key in ("loops",):
        if r.get(key):
            lines.append(f"{key}:")
            lines += [f"  {json.dumps(item)}" for item in r[key]]
    lines.append("state:" + ("" if r["state"] else " none (stateless)"))
    for s in r["state"]:
        lines.append(f"  {s['name']:<24} {s['dtype']} {tuple(s['shape'])}")
    lines.append("step:")
    id_ranges = r.get("id_ranges", {})
    for t in r["inputs"]:
        ids = id_ranges.get(t["name"])
        lines.append(f"  input  {t['name']:<17} {t['dtype']} {tuple(t['shape'])}" +
                     (f"  ids in [{ids['min']}, {ids['end']})" if ids else ""))
    for t in r["outputs"]:
        lines.append(f"  output {t['name']:<17} {t['dtype']} {tuple(t['shape'])}")
    return "\n".join(lines)
