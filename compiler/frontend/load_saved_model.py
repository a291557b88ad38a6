"""Load stage for SavedModel folders: the serving signature as one frozen GraphDef.

* v2 (``tf.saved_model.save``, Keras 3 ``model.export``): ``tf.saved_model.load``
  -> the serving signature -> re-traced at batch 1 with the time dimension
  kept as in the signature (usually ``None``) ->
  ``convert_variables_to_constants_v2(lower_control_flow=False)``, which keeps
  functional ``While`` loops (tf-import-notes §2.1, §4).
* v1 (TF1 ``SavedModelBuilder``): loaded into a TF1 session and frozen with
  ``convert_variables_to_constants``; its loops are usually v1 control flow.

Both end in ``graph_cut.graph_def_to_loaded``, like a frozen GraphDef.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import TfaotError, first_line
from .graph_cut import LoadedGraph, _fmt_shape, graph_def_to_loaded
from .inline_calls import inline_compiled_calls
from .variable_state import OTHER_WRITES, variables_as_state_io


def read_saved_model(path: Path):
    """The ``SavedModel`` proto of a SavedModel folder (saved_model.pb or .pbtxt)."""
    from google.protobuf import message, text_format
    from tensorflow.core.protobuf import saved_model_pb2

    sm = saved_model_pb2.SavedModel()
    try:
        if (path / "saved_model.pb").is_file():
            sm.ParseFromString((path / "saved_model.pb").read_bytes())
        else:
            text_format.Parse((path / "saved_model.pbtxt").read_text(), sm)
    except (message.DecodeError, text_format.ParseError, UnicodeDecodeError, ValueError) as e:
        raise TfaotError(f"{path}: saved_model.pb cannot be parsed (truncated?): {e}") from None
    if not sm.meta_graphs:
        raise TfaotError(f"{path}: the SavedModel has no meta graph")
    return sm


def saved_model_version(path: Path, saved_model=None) -> int:
    """1 for a TF1 (Builder) SavedModel, 2 for one with an object graph."""
    sm = saved_model if saved_model is not None else read_saved_model(path)
    return 2 if len(sm.meta_graphs[0].object_graph_def.nodes) > 0 else 1


def load_saved_model(path: Path, input_specs, output_specs,
                     signature: str | None = None,
                     state_inputs: tuple[str, ...] = (),
                     time_axis: int | None = None) -> LoadedGraph:
    """``signature``: the signature to load (default: serving_default, else
    the first by name); the choice and the others are in the details.
    ``state_inputs``: the inputs of the --state pairs (graph_cut).
    ``time_axis``: the first input's (--time-axis): an open axis 0 that is
    time (a waveform ``(None,)``) stays open instead of becoming batch 1."""
    sm = read_saved_model(path)
    if saved_model_version(path, sm) == 2:
        return _load_saved_model_v2(path, input_specs, output_specs, signature, state_inputs,
                                    time_axis)
    tags = list(sm.meta_graphs[0].meta_info_def.tags) or ["serve"]
    return _load_saved_model_v1(path, tags, input_specs, output_specs, signature)


def _pick_signature(sigs: dict, path: Path, wanted: str | None = None):
    if not sigs:
        raise TfaotError(f"{path}: the SavedModel has no signatures, nor a __call__ traced "
                         "once for tensors to take instead (save it with a serving "
                         "signature: tf.saved_model.save(module, dir, signatures=module.f), "
                         "or Keras model.export(dir))")
    if wanted is not None and wanted not in sigs:
        raise TfaotError(f"--signature {wanted}: {path} has no such signature; it has "
                         + ", ".join(sorted(sigs)))
    key = wanted or ("serving_default" if "serving_default" in sigs else sorted(sigs)[0])
    return key, sigs[key]


def _call_as_signature(obj) -> dict:
    """{"__call__": a signature} of a SavedModel saved without signatures
    (tf.saved_model.save(module, dir), as tensorflow.org's audio tutorial
    exports its model) whose object keeps one trace of its ``__call__``,
    on tensors: its inputs named by their specs, its outputs by their keys
    (output_0, ... where it returns a tensor or a list); else {}."""
    import tensorflow as tf

    traces = getattr(getattr(obj, "__call__", None), "concrete_functions", None)
    if not traces or len(traces) != 1:
        return {}
    trace = traces[0]
    args, kwargs = trace.structured_input_signature
    if kwargs or not args or not all(isinstance(a, tf.TensorSpec) for a in args):
        return {}
    names = [a.name or f"input_{i}" for i, a in enumerate(args)]

    def named(**inputs):
        out = trace(*(inputs[n] for n in names))
        if isinstance(out, dict):
            return out
        return {f"output_{i}": v for i, v in enumerate(tf.nest.flatten(out))}

    return {"__call__": tf.function(named).get_concrete_function(
        **{n: tf.TensorSpec(a.shape, a.dtype, name=n) for n, a in zip(names, args)})}


def signature_details(key: str, sigs) -> dict:
    """What the build says about the signature it took (pipeline prints a
    note when there was a choice)."""
    return {"signature": key, "signatures": sorted(sigs)}


def _load_saved_model_v2(path: Path, input_specs, output_specs, signature,
                         state_inputs: tuple[str, ...] = (),
                         time_axis: int | None = None) -> LoadedGraph:
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    try:
        obj = tf.saved_model.load(str(path))
    except Exception as e:
        raise TfaotError(f"{path}: TensorFlow cannot load the SavedModel: "
                         f"{first_line(e)}") from None
    sigs = dict(obj.signatures) or _call_as_signature(obj)
    key, sig = _pick_signature(sigs, path, signature)
    _, kw_specs = sig.structured_input_signature
    # Several inputs keep the signature's order (its input names, sorted).
    in_keys = sorted(kw_specs)
    # --inputs naming a signature input gives its shape; any other name is a
    # tensor of the graph to cut it at, as in a frozen graph
    cuts = [(n, sh) for n, sh in input_specs or [] if n.partition(":")[0] not in in_keys]
    shapes = [_batch_one_shape(path, key, k, kw_specs[k], _override(input_specs, k),
                               time_axis if k == in_keys[0] else None)
              for k in in_keys]
    out_keys = sorted(sig.structured_outputs)
    if output_specs is None:
        _refuse_text_outputs(path, key, sig.structured_outputs, out_keys)

    def call(*xs):
        res = sig(**dict(zip(in_keys, xs)))
        return [res[k] for k in out_keys]

    cf, state = None, None
    try:
        cf = tf.function(call).get_concrete_function(
            *[tf.TensorSpec(shape, kw_specs[k].dtype, name=k) for k, shape in zip(in_keys, shapes)])
        frozen = convert_variables_to_constants_v2(cf, lower_control_flow=False)
    except Exception as e:
        assigned = _assigned_variables(cf) if cf is not None else []
        seeds = _seed_generators(obj)
        state = variables_as_state_io(cf) if assigned else None
        if state is None:
            _refuse_unfrozen(path, key, shapes, e, assigned, seeds)
    if state is not None:  # (a stateful RNN's variables: the step's state I/O)
        gd = state.graph_def
        # the call's own inputs: not its captures (a variable's handle, or a
        # tensor of the module, e.g. a mel matrix made in __init__, which
        # freezing made a constant)
        own = cf.inputs[:len(cf.inputs) - len(cf.captured_inputs)]
        in_names = [t.op.name for t in own if t.dtype != tf.resource]
        in_names += state.inputs
        shapes += [state.initial[name].shape for name in state.inputs]
        outs = [t.name for t in cf.outputs] + [f"{name}:0" for name in state.outputs]
        out_keys += state.output_keys()
        state_inputs = (*state_inputs, *state.inputs)
    else:
        gd = frozen.graph.as_graph_def()
        in_names = [t.name.partition(":")[0] for t in frozen.inputs if t.dtype != tf.resource]
        outs = [t.name for t in frozen.outputs]
    gd = own_function_names(inline_compiled_calls(gd))
    signature_inputs = [(name, tuple(shape)) for name, shape in zip(in_names, shapes)]
    if cuts:  # the signature inputs the user named stay inputs beside the cuts
        named = {n.partition(":")[0] for n, _ in input_specs}
        cuts = [sig for sig, k in zip(signature_inputs, in_keys) if k in named] + cuts
    # --outputs may name the signature's outputs by their keys ("output_0")
    by_key = dict(zip(out_keys, outs))
    out_specs = None if output_specs is None else [by_key.get(o, o) for o in output_specs]
    loaded = graph_def_to_loaded(
        gd, path, "savedmodel", cuts or signature_inputs, out_specs, state_inputs=state_inputs,
        state_initial=state.initial if state is not None else None,
        details={"savedmodel_version": 2, **signature_details(key, sigs),
                 "signature_input": in_keys[0] if len(in_keys) == 1 else in_keys})
    if output_specs is None:
        loaded.outputs = outs
        loaded.output_names = out_keys
    else:
        loaded.output_names = [o if o in by_key else name
                               for o, name in zip(output_specs, loaded.output_names)]
    if state is not None:
        with_variable_state(loaded, state)
    return loaded


def _refuse_text_outputs(path, key: str, specs: dict, out_keys: list[str]) -> None:
    """A signature output of strings (an audio model's class names, looked
    up by its argmax) cannot be a C library's: named, with the --outputs
    that leaves it out (it failed as "node 'Identity_1' is referenced but
    not in the graph")."""
    import tensorflow as tf

    text = [k for k in out_keys if specs[k].dtype == tf.string]
    if not text:
        return
    numeric = [k for k in out_keys if k not in text]
    what = (f"{path}: signature '{key}' output '{text[0]}' is a tensor of strings, which a "
            "C library cannot return")
    if not numeric:
        raise TfaotError(f"{what}, and it has no other output; cut the graph before the "
                         "strings with --outputs NODE (a node that computes numbers)")
    raise TfaotError(f"{what}; leave it out with --outputs {','.join(numeric)} (its other "
                     "outputs)")


def with_variable_state(loaded, state) -> None:
    """Notes the variables made state in ``loaded``'s details (how many,
    their initial values), and leaves out the state outputs added for those
    whose input only started a time loop: the stream keeps that loop's
    state itself (graph_cut._loop_initial_states), and the output was the
    rewrite's, not the model's."""
    in_loops = set(loaded.details.get("loop_initial_states", ()))
    dropped = {f"{new}:0" for old, new in zip(state.inputs, state.outputs) if old in in_loops}
    kept = [i for i, t in enumerate(loaded.outputs) if t not in dropped]
    loaded.outputs = [loaded.outputs[i] for i in kept]
    loaded.output_names = [loaded.output_names[i] for i in kept]
    loaded.details["loop_initial_states"] = [name for name in in_loops
                                             if name not in state.inputs]
    # (0: a dropout's seed alone); only float32 ones become the library's
    # state (state_feedback.find_pairs), the others stay step I/O
    kept_as_state = [name for name in state.inputs
                     if str(state.initial[name].dtype) == "float32"]
    loaded.details["variable_state"] = len(kept_as_state)
    loaded.details["variable_io"] = [name.rsplit("/", 1)[-1] for name in state.inputs
                                     if name not in kept_as_state]
    loaded.details["state_initial"] = state.initial


def _refuse_unfrozen(path, key: str, shapes, error, assigned: list, seeds: list):
    """Why a signature's call did not freeze: a Keras seed it advances, a
    variable it assigns that cannot become state I/O, or ``error``."""
    if assigned and seeds:
        raise TfaotError(
            f"{path}: signature '{key}' advances a Keras random seed (variable "
            f"'{seeds[0]}', node '{assigned[0]}'), as a Keras 3 export of a layer with "
            f"dropout or recurrent_dropout > 0 does on every call, even at inference, "
            f"and a frozen graph cannot assign it; build the model's .keras file "
            f"instead (dropout does nothing at inference)") from None
    if assigned:
        raise TfaotError(
            f"{path}: signature '{key}' keeps state in a tf.Variable (node '{assigned[0]}' "
            f"assigns one) in a way tfaot cannot hoist (a read after the assign, an "
            f"assign_add or another op on the variable); compute the new value, assign it "
            f"with v.assign(new) and use that value, not a read of v after the assign; or "
            f"export the step with its state as an input and an output (e.g. "
            f"previous_state_h -> new_state_h: pairs named so are found, others are given "
            f"with --state IN=OUT)") from None
    raise TfaotError(f"{path}: cannot re-trace signature '{key}' at shape(s) "
                     f"{', '.join(_fmt_shape(s) for s in shapes)}: {first_line(error)}") from None


def own_function_names(graph_def):
    """``graph_def`` with its library's functions renamed (``NAME_tfaot``):
    the frozen copies of a tf.cond's branches keep the names of the loaded
    SavedModel's, which TensorFlow's eager context already holds with other
    bodies, and tracing the step then failed ("Attempting to add a duplicate
    function with name: __inference_cond_false_...")."""
    names = {f.signature.name: f"{f.signature.name}_tfaot" for f in graph_def.library.function}
    if not names:
        return graph_def

    def rename(attr_map):
        for value in attr_map.values():
            if value.HasField("func") and value.func.name in names:
                value.func.name = names[value.func.name]
            for func in value.list.func:
                if func.name in names:
                    func.name = names[func.name]

    for node in graph_def.node:
        rename(node.attr)
    for function in graph_def.library.function:
        function.signature.name = names[function.signature.name]
        for node in function.node_def:
            rename(node.attr)
    for gradient in graph_def.library.gradient:
        if gradient.function_name in names:
            gradient.function_name = names[gradient.function_name]
    return graph_def


#: Ops that write a resource variable.
_ASSIGN_OPS = {"AssignVariableOp", *OTHER_WRITES}


def _seed_generators(obj) -> list[str]:
    """The Keras SeedGenerator states among the SavedModel's variables (a
    dropout's seed, which Keras 3's recurrent layers advance even at
    inference): an export of an LSTM(dropout=0.2) was told it "keeps state
    in a tf.Variable" and to export its state as an input and an output."""
    try:
        names = [v.name for v in getattr(obj, "variables", [])]
    except Exception:  # noqa: BLE001 - an object without the list: no hint
        return []
    return [n.partition(":")[0] for n in names if "seed_generator_state" in n]


def _assigned_variables(concrete) -> list[str]:
    """The nodes of ``concrete`` (a traced signature call, its functions
    included) that assign a variable, those whose write the state rewrite
    does not take (variable_state.OTHER_WRITES: an assign_add) first."""
    graph_def = concrete.graph.as_graph_def()
    nodes = [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]
    writes = [n for n in nodes if n.op in _ASSIGN_OPS]
    return [n.name for n in sorted(writes, key=lambda n: n.op not in OTHER_WRITES)]


def _override(input_specs, key: str):
    """The --inputs shape given for signature input ``key``, or None."""
    for name, shape in input_specs or []:
        if name.partition(":")[0] == key:
            return shape
    return None


def _batch_one_shape(path: Path, key: str, in_key: str, spec, override,
                     time_axis: int | None = None) -> list:
    """The shape to trace input ``in_key`` at: an open axis 0 is batch 1,
    unless it may be time: given so (``time_axis`` 0), the only axis (a
    waveform ``(None,)``, which the streamifier tells from a batch of
    scalars by the frames cut from it), or before a batch of 1 (time-major)."""
    shape = list(spec.shape.as_list()) if spec.shape.rank is not None else None
    if override is not None:
        if shape is not None and (len(shape) != len(override) or any(
                a is not None and b is not None and a != b for a, b in zip(shape, override))):
            raise TfaotError(f"{path}: input '{in_key}' of signature '{key}' has shape "
                             f"{_fmt_shape(shape)}, not {_fmt_shape(override)} (--inputs): "
                             "--inputs sizes the signature's open axes only; export the "
                             "model with those axes open or of the sizes you want")
        shape = list(override)
    if shape is None:
        raise TfaotError(f"{path}: input '{in_key}' of signature '{key}' has unknown rank; "
                         "give its shape with --inputs NAME:SHAPE")
    # (time-major (None, 1, F...): the streamifier takes axis 0 for time, as
    # in a frozen graph; it was made batch 1, and the loop's axis 0 refused)
    time_major = len(shape) >= 3 and shape[1] == 1 and None not in shape[1:]
    may_be_time = time_axis == 0 or (time_axis is None and (len(shape) == 1 or time_major))
    if shape and shape[0] is None and not may_be_time:
        shape[0] = 1  # batch 1
    return shape


def _tensor_spec_name(tensor: str) -> str:
    """"x:0" -> "x"; "split:1" -> "split:1" (the --inputs NAME[:INDEX] form)."""
    node, _, index = tensor.partition(":")
    return node if index in ("", "0") else f"{node}:{index}"


def _load_saved_model_v1(path: Path, tags: list[str], input_specs,
                         output_specs, signature) -> LoadedGraph:
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as sess:
        try:
            meta = tf.compat.v1.saved_model.loader.load(sess, tags, str(path))
        except Exception as e:
            raise TfaotError(f"{path}: TensorFlow cannot load the SavedModel (v1): "
                             f"{first_line(e)}") from None
        sigs = dict(meta.signature_def)
        key, sig = _pick_signature(sigs, path, signature)
        in_items = sorted(sig.inputs.items())
        out_items = sorted(sig.outputs.items())
        if input_specs:
            spec_inputs = input_specs
        else:  # every signature input, in the signature's (sorted) order
            spec_inputs = [(_tensor_spec_name(v.name), None) for _, v in in_items]
        if output_specs:  # a signature key stands for its tensor (as in v2)
            by_key = {k: v.name for k, v in out_items}
            out_tensors = [by_key.get(o) or (o if ":" in o else o + ":0") for o in output_specs]
            out_names = [o if o in by_key else o.partition(":")[0] for o in output_specs]
        else:
            out_tensors = [v.name for _, v in out_items]
            out_names = [k for k, _ in out_items]
        out_nodes = sorted({t.partition(":")[0] for t in out_tensors})
        try:
            gd = tf.compat.v1.graph_util.convert_variables_to_constants(
                sess, graph.as_graph_def(), out_nodes)
        except Exception as e:
            raise TfaotError(f"{path}: cannot freeze the SavedModel (v1) variables: "
                             f"{first_line(e)}") from None
    gd = tf.compat.v1.graph_util.extract_sub_graph(gd, out_nodes)
    loaded = graph_def_to_loaded(gd, path, "savedmodel", spec_inputs, out_tensors,
                                 details={"savedmodel_version": 1,
                                          **signature_details(key, sigs)})
    loaded.output_names = out_names
    return loaded
