"""Channels-first convolutions and pooling rewritten channels-last.

A graph trained on a GPU may hold ``Conv2D``/``MaxPool``/... with
``data_format='NCHW'`` (TF1 models exported for cuDNN, Keras layers with
``data_format='channels_first'``, as models ported from PyTorch use), which
TensorFlow cannot run on a CPU ("The Conv2D op currently only supports the
NHWC tensor format on the CPU"): the build's test run and verify's
reference failed on them. Each such node becomes the same op in NHWC
between two transposes (what TensorFlow's own layout optimizer does on a
GPU the other way round); the arithmetic is unchanged, and the transposes
are free for the streamifier, which follows the time axis through them.
"""
from __future__ import annotations

#: op -> the inputs that are images (the others are filters or shapes).
IMAGE_INPUTS = {"Conv2D": (0,), "Conv3D": (0,), "DepthwiseConv2dNative": (0,),
                "Conv2DBackpropInput": (2,), "Conv3DBackpropInputV2": (2,),
                "MaxPool": (0,), "AvgPool": (0,), "MaxPool3D": (0,), "AvgPool3D": (0,),
                "FusedBatchNorm": (0,), "FusedBatchNormV2": (0,), "FusedBatchNormV3": (0,)}

#: op -> its input that is an output shape in the data format's order (a
#: transposed convolution's ``input_sizes``).
SHAPE_INPUTS = {"Conv2DBackpropInput": 0, "Conv3DBackpropInputV2": 0}

#: attributes with one entry per axis, in the data format's order.
PER_AXIS = ("strides", "dilations", "ksize")


def channels_last(graph_def):
    """``graph_def`` with every channels-first node of ``IMAGE_INPUTS``
    written channels-last between transposes; (graph_def, count). A node
    whose later outputs are read (a batch norm's statistics) stays."""
    from tensorflow.core.framework import graph_pb2

    todo = [n.name for n in graph_def.node if _channels_first(n)]
    if not todo:
        return graph_def, 0
    read_later = {i.split(":")[0] for n in graph_def.node for i in n.input
                  if ":" in i and not i.endswith(":0") and not i.startswith("^")}
    todo = [name for name in todo if name not in read_later]
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    nodes = {n.name: n for n in out.node}
    for name in todo:
        _rewrite(out, nodes[name])
    return out, len(todo)


def _channels_first(node) -> bool:
    fmt = node.attr["data_format"].s if "data_format" in node.attr else b""
    return node.op in IMAGE_INPUTS and fmt in (b"NCHW", b"NCDHW")


def _rewrite(graph_def, node) -> None:
    """``node`` renamed ``NAME/channels_last`` and made channels-last, its
    image inputs transposed in front and a transpose back under its old name
    (so its readers, by name, get the same tensor as before)."""
    rank = 4 if node.attr["data_format"].s == b"NCHW" else 5
    to_last = [0, *range(2, rank), 1]
    to_first = [0, rank - 1, *range(1, rank - 1)]
    old = node.name
    node.name = f"{old}/channels_last"
    for k in IMAGE_INPUTS[node.op]:
        node.input[k] = _transpose(graph_def, f"{node.name}/input{k}", node.input[k], to_last,
                                   node.attr["T"].type)
    if node.op in SHAPE_INPUTS:
        k = SHAPE_INPUTS[node.op]
        node.input[k] = _gather(graph_def, f"{node.name}/sizes", node.input[k], to_last,
                                node.attr["Tshape"].type if "Tshape" in node.attr else 3)
    node.attr["data_format"].s = b"NHWC" if rank == 4 else b"NDHWC"
    for key in PER_AXIS:
        if key in node.attr and len(node.attr[key].list.i) == rank:
            values = list(node.attr[key].list.i)
            node.attr[key].list.i[:] = [values[a] for a in to_last]
    if "explicit_paddings" in node.attr and len(node.attr["explicit_paddings"].list.i) == 2 * rank:
        pads = list(node.attr["explicit_paddings"].list.i)
        node.attr["explicit_paddings"].list.i[:] = [p for a in to_last
                                                    for p in pads[2 * a:2 * a + 2]]
    node.attr.pop("_output_shapes", None)
    _transpose(graph_def, old, f"{node.name}:0", to_first, node.attr["T"].type)


def _transpose(graph_def, name: str, tensor: str, perm: list[int], dtype: int) -> str:
    """Add ``Transpose(tensor, perm)`` as node ``name``; its output's name."""
    from tensorflow.core.framework import types_pb2

    node = graph_def.node.add(name=name, op="Transpose",
                              input=[tensor, _int32s(graph_def, f"{name}/perm", perm)])
    node.attr["T"].type = dtype
    node.attr["Tperm"].type = types_pb2.DT_INT32
    return name + ":0"


def _gather(graph_def, name: str, vector: str, order: list[int], dtype: int) -> str:
    """Add ``GatherV2(vector, order, axis 0)`` as node ``name`` (a shape
    vector's entries reordered); its output's name."""
    from tensorflow.core.framework import types_pb2

    node = graph_def.node.add(name=name, op="GatherV2",
                              input=[vector, _int32s(graph_def, f"{name}/order", order),
                                     _int32s(graph_def, f"{name}/axis", 0)])
    node.attr["Tparams"].type = dtype
    node.attr["Tindices"].type = types_pb2.DT_INT32
    node.attr["Taxis"].type = types_pb2.DT_INT32
    node.attr["batch_dims"].i = 0
    return name + ":0"


def _int32s(graph_def, name: str, values) -> str:
    """Add an int32 Const ``values`` (a list, or one int: a scalar) as node ``name``."""
    import numpy as np
    import tensorflow as tf

    const = graph_def.node.add(name=name, op="Const")
    const.attr["dtype"].type = tf.int32.as_datatype_enum
    const.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.array(values, np.int32)))
    return name
