"""Keras 2 (tf_keras) call nodes in Keras 3's form.

Keras 2 writes a layer's call in a model config as ``[name, node, tensor,
kwargs]`` (or a list of those for a call on a list of tensors), with the
tensors among the keyword arguments as the same triples: an op layer's
``x + y`` (``{"y": [name, node, tensor]}``), an attention layer's
``value``. Keras 3 reads that legacy form without looking into the keyword
arguments, so such calls are rewritten as ``{"args", "kwargs"}`` with every
tensor as a reference Keras 3 resolves (``call_node``).
"""
from __future__ import annotations

from ..errors import TfaotError


def tf_function(name: str):
    """``tf.<name>`` (a dotted path such as ``math.tanh``), or a clear error."""
    import tensorflow as tf

    target = tf
    for part in name.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise TfaotError(f"Keras 2 op layer calls tf.{name}, which this TensorFlow "
                             "does not have")
    return target


def slices(spec):
    """A Keras 2 slice spec (dicts for slices, in lists) as Python slices."""
    if isinstance(spec, dict) and set(spec) == {"start", "stop", "step"}:
        return slice(spec["start"], spec["stop"], spec["step"])
    if isinstance(spec, list):
        return tuple(slices(v) for v in spec)
    return spec


def call_node(node, function=None):
    """One call of a Keras 2 layer in Keras 3's node form (an op layer's,
    whose ``function`` it names, or another layer's with a tensor among its
    keyword arguments).

    Keras 2 writes ``[name, node, tensor, kwargs]`` for a call on one
    tensor, or a list of those for a call on a list of tensors
    (``tf.concat([a, b])``), and tensors among the keyword arguments
    (``x + y``: ``{"y": [name, node, tensor]}``) as the same triples.
    Keras 3 reads the legacy form without looking into the keyword
    arguments, so the call is written as ``{"args", "kwargs"}`` with every
    tensor as a reference Keras 3 resolves."""
    if not isinstance(node, list) or not node:
        return node
    if node[0] == _CONSTANT_VALUE and function:
        # A Python value first (``1.0 - x``: subtract(1.0, y=x)): Keras 3
        # takes only tensors as positional arguments, and no mix of tensors
        # and values among the keyword ones; so the (first) tensor keyword
        # argument goes first and the call puts both back (TFOpLambda).
        kwargs = dict(node[3]) if len(node) > 3 else {}
        key = next((k for k, v in kwargs.items() if is_tensor_triple(v)), None)
        if key is None:
            raise TfaotError(f"Keras 2 op layer calls tf.{function} on no tensor")
        tensor = kwargs.pop(key)
        kwargs[CONSTANT_FIRST] = [_first_parameter(function), node[2], key]
        return {"args": [_tensor_ref(tensor)], "kwargs": _tensor_refs(kwargs)}
    if isinstance(node[0], str):  # one tensor
        first, kwargs = _tensor_ref(node), (node[3] if len(node) > 3 else {})
    else:  # a list of tensors, each entry repeating the keyword arguments
        first = [_tensor_ref(entry) for entry in node]
        kwargs = node[0][3] if len(node[0]) > 3 else {}
    kwargs, tensors = _unmixed(kwargs)
    extra = [[_tensor_ref(t) for t in tensors]] if tensors else []
    return {"args": [first, *extra], "kwargs": _tensor_refs(kwargs)}


def _unmixed(kwargs: dict) -> tuple[dict, list]:
    """Keyword arguments whose lists mix tensors and Python values
    (``tf.reshape(h, [-1, tf.shape(h)[1], 152])``), which Keras 3 refuses
    in a call ("you cannot mix tensors and non-tensors"), as a template
    with numbered holes (under ``MIXED_LISTS``), and the tensors that fill
    them, which the call takes as its last positional argument; TFOpLambda
    fills the holes back in."""
    tensors, templates = [], {}

    def hole(value):
        if is_tensor_triple(value):
            tensors.append(value)
            return {HOLE: len(tensors) - 1}
        return [hole(v) for v in value] if isinstance(value, list) else value

    for key, value in kwargs.items():
        if isinstance(value, list) and not is_tensor_triple(value) and \
                _has_tensor(value) and not all(map(is_tensor_triple, value)):
            templates[key] = hole(value)
    if not templates:
        return kwargs, []
    rest = {k: v for k, v in kwargs.items() if k not in templates}
    return {**rest, MIXED_LISTS: templates}, tensors


def has_tensor_kwargs(nodes) -> bool:
    """Whether a layer's Keras 2 inbound nodes (each a list of calls) pass
    a tensor among a call's keyword arguments."""
    calls = [call for node in nodes or [] if isinstance(node, list) for call in node]
    return any(isinstance(call, list) and len(call) > 3 and isinstance(call[3], dict)
               and any(map(_has_tensor, call[3].values())) for call in calls)


def _has_tensor(value) -> bool:
    if is_tensor_triple(value):
        return True
    return isinstance(value, list) and any(map(_has_tensor, value))


def filled(template, tensors):
    """``template`` (``_unmixed``) with its holes filled by ``tensors``."""
    if isinstance(template, dict) and HOLE in template:
        return tensors[template[HOLE]]
    return [filled(v, tensors) for v in template] if isinstance(template, list) else template


def _first_parameter(function: str) -> str:
    """The name of the first parameter of ``tf.<function>``."""
    import inspect

    try:
        return next(iter(inspect.signature(tf_function(function)).parameters))
    except (TypeError, ValueError, StopIteration):
        raise TfaotError(f"Keras 2 op layer calls tf.{function} with a Python value first, "
                         "and its parameters cannot be read") from None


#: What Keras 2 writes in place of a layer name for a call's first argument
#: that is a Python value, not a tensor (``1.0 - x``: ``subtract(1.0, y=x)``),
#: with the value where the tensor index would be; it was read as a layer
#: ("Unknown layer: _CONSTANT_VALUE").
_CONSTANT_VALUE = "_CONSTANT_VALUE"
#: The keyword argument of such a call in Keras 3's form: [the first
#: parameter's name, its value, the keyword of the tensor passed first].
CONSTANT_FIRST = "tfaot_constant_first"
#: A call's keyword lists that mixed tensors and values, with holes
#: (``{HOLE: i}``) for the tensors (``_unmixed``).
MIXED_LISTS, HOLE = "tfaot_mixed_lists", "tfaot_hole"


def is_tensor_triple(value) -> bool:
    return (isinstance(value, list) and len(value) in (3, 4) and isinstance(value[0], str)
            and all(isinstance(v, int) for v in value[1:3]))


def _tensor_ref(triple) -> dict:
    # (the shape and dtype are placeholders: Keras 3 looks the tensor up by its history)
    return {"class_name": "__keras_tensor__",
            "config": {"shape": [], "dtype": "float32", "keras_history": list(triple[:3])}}


def _tensor_refs(value):
    if is_tensor_triple(value):
        return _tensor_ref(value)
    if isinstance(value, list):
        return [_tensor_refs(v) for v in value]
    if isinstance(value, dict):
        return {k: _tensor_refs(v) for k, v in value.items()}
    return value
