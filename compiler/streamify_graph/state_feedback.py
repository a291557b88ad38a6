"""Graphs that are already a step function: state fed back by the caller.

Streaming graphs are often published as one step with the recurrent state
as explicit inputs and outputs (``previous_state_c`` -> ``new_state_c``, as
DeepSpeech and "external state" keyword-spotting exports write them): the
caller must copy each state output back into its input before the next
call. This stage hoists such pairs into the program's own states, so the
library's ``step`` keeps them between calls like any recurrent state
(reset, get/set_state and the manifest cover them).

Pairs come from ``--state IN=OUT,...``, or, when not given, from the names:
an input and an output of the same shape and dtype whose names are equal
once the usual words for "before"/"after" (previous/new, in/out, ...) are
removed, and which say they are a state (``state``, ``h``, ``c``, ...).
"""
from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from ..errors import TfaotError
from ..program import ProgramSignature, StateInfo, StepProgram

_BEFORE = ("previous", "prev", "old", "last", "input", "inputs", "in", "current", "curr")
_AFTER = ("new", "next", "updated", "output", "outputs", "out")
_STATE_WORDS = ("state", "states", "h", "c", "hidden", "cell", "memory", "mem")


def parse_pairs(text: str | None) -> list[tuple[str, str]] | None:
    """"in=out,in2=out2" -> [("in", "out"), ...]; None when not given."""
    if not text:
        return None
    pairs = []
    for item in text.split(","):
        if item.count("=") != 1 or not all(item.split("=")):
            raise TfaotError(f"--state: '{item}' is not INPUT=OUTPUT")
        a, b = item.split("=")
        pairs.append((_node(a.strip()), _node(b.strip())))
    return pairs


def _node(name: str) -> str:
    return name[:-2] if name.endswith(":0") else name


def _stem(name: str, words: tuple[str, ...]) -> str:
    """The name's last path component, lower case, less one leading or
    trailing word of ``words``."""
    base = _node(name).rsplit("/", 1)[-1].lower()
    parts = [p for p in re.split(r"[_\-.]", base) if p]
    if len(parts) > 1 and parts[0] in words:
        parts = parts[1:]
    elif len(parts) > 1 and parts[-1] in words:
        parts = parts[:-1]
    return "_".join(parts)


def _stems_after(name: str) -> set[str]:
    """The stems an output named ``name`` may pair by: less an after-word
    (``new_state_h``), or less a trailing ``n`` (Silero VAD's and
    PyTorch's ``state`` -> ``stateN``, ``h`` -> ``hn``, ``c`` -> ``cn``)."""
    stem = _stem(name, _AFTER)
    return {stem, stem[:-1]} if len(stem) > 1 and stem.endswith("n") else {stem}


def _is_state_name(stem: str) -> bool:
    return any(p in _STATE_WORDS for p in stem.split("_"))


def named_like_state(name: str, outputs: list[str]) -> bool:
    """Whether an input named ``name`` says it is a state and one of
    ``outputs`` has the matching name (``find_pairs``, by names alone)."""
    stem = _stem(name, _BEFORE)
    return _is_state_name(stem) and any(stem in _stems_after(o) and _node(o) != _node(name)
                                        for o in outputs)


def find_pairs(signature: ProgramSignature) -> list[tuple[str, str]]:
    """Input/output pairs whose names say "the state before / after the step"."""
    pairs = []
    for inp in signature.inputs:
        stem = _stem(inp.name, _BEFORE)
        if not _is_state_name(stem):
            continue
        matches = [o for o in signature.outputs
                   if stem in _stems_after(o.name) and o.name != inp.name
                   and tuple(o.shape) == tuple(inp.shape) and o.dtype == inp.dtype
                   and inp.dtype == "float32"]
        if len(matches) == 1:
            pairs.append((inp.name, matches[0].name))
    outputs = [b for _, b in pairs]
    if len(set(outputs)) != len(outputs):
        return []  # ambiguous: let the user say it with --state
    return pairs


def hoist(program: StepProgram, pairs: list[tuple[str, str]],
          initial: dict | None = None) -> StepProgram:
    """``program`` with each (input, output) pair made a state: the input's
    value is the state, the output its new value (neither stays in the I/O);
    its initial value zeros, or ``initial``'s for its input's name."""
    sig = program.signature
    in_names = [i.name for i in sig.inputs]
    out_names = [o.name for o in sig.outputs]
    hoisted_in, hoisted_out = [], []
    for a, b in pairs:
        if a not in in_names:
            raise TfaotError(f"--state: '{a}' is not an input of {program.source} "
                             f"(inputs: {', '.join(in_names)})")
        if b not in out_names:
            raise TfaotError(f"--state: '{b}' is not an output of {program.source} "
                             f"(outputs: {', '.join(out_names)})")
        i, o = in_names.index(a), out_names.index(b)
        if (tuple(sig.inputs[i].shape), sig.inputs[i].dtype) != \
                (tuple(sig.outputs[o].shape), sig.outputs[o].dtype):
            raise TfaotError(f"--state: input '{a}' is {sig.inputs[i].dtype} "
                             f"{tuple(sig.inputs[i].shape)} but output '{b}' is "
                             f"{sig.outputs[o].dtype} {tuple(sig.outputs[o].shape)}")
        if sig.inputs[i].dtype != "float32":
            raise TfaotError(f"--state: input '{a}' is {sig.inputs[i].dtype}; tfaot keeps "
                             "float32 state only")
        hoisted_in.append(i)
        hoisted_out.append(o)
    kept_in = [i for i in range(len(in_names)) if i not in hoisted_in]
    kept_out = [o for o in range(len(out_names)) if o not in hoisted_out]
    if not kept_in or not kept_out:
        raise TfaotError(f"--state: {program.source} would have no "
                         f"{'input' if not kept_in else 'output'} left")
    new_states = tuple(
        StateInfo(sig.inputs[i].name, sig.inputs[i].dtype, tuple(sig.inputs[i].shape),
                  initial=np.asarray((initial or {}).get(
                      sig.inputs[i].name, np.zeros(sig.inputs[i].shape)), sig.inputs[i].dtype),
                  layer=sig.inputs[i].name)
        for i in hoisted_in)
    step = _reordered_step(program.pure_step, sig, kept_in, hoisted_in, kept_out,
                           hoisted_out)
    signature = ProgramSignature(tuple(sig.inputs[i] for i in kept_in),
                                 tuple(sig.outputs[o] for o in kept_out),
                                 sig.states + new_states)
    report = dict(program.report)
    report["state_feedback"] = [list(p) for p in pairs]
    report["notes"] = list(report.get("notes", [])) + [
        "state kept between steps (fed back by the caller in the original graph): " +
        ", ".join(f"output '{b}' -> input '{a}'" for a, b in pairs)]
    return replace(program, signature=signature, pure_step=step, report=report)


def _reordered_step(old_step, sig, kept_in, hoisted_in, kept_out, hoisted_out):
    """(kept inputs, old states, hoisted states) -> (kept outputs, new old
    states, new hoisted states), calling ``old_step`` in its own order."""
    import tensorflow as tf

    n_in, n_kept, n_states = len(sig.inputs), len(kept_in), len(sig.states)

    def step(*args):
        xs, states = args[:n_kept], args[n_kept:n_kept + n_states]
        hoisted = args[n_kept + n_states:]
        full = [None] * n_in
        for i, x in zip(kept_in, xs):
            full[i] = x
        for i, s in zip(hoisted_in, hoisted):
            full[i] = s
        res = old_step(*full, *states)
        res = list(res) if isinstance(res, (list, tuple)) else [res]
        ys, new_states = res[:len(sig.outputs)], res[len(sig.outputs):]
        return (*[ys[o] for o in kept_out], *new_states, *[ys[o] for o in hoisted_out])

    specs = [tf.TensorSpec(sig.inputs[i].shape, sig.inputs[i].dtype) for i in kept_in]
    specs += [tf.TensorSpec(s.shape, s.dtype) for s in sig.states]
    specs += [tf.TensorSpec(sig.inputs[i].shape, sig.inputs[i].dtype) for i in hoisted_in]
    return tf.function(step, input_signature=specs, autograph=False).get_concrete_function()
