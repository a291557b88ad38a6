"""Loop variable classification.

Each variable of a ``Loop`` is one of: ``inlist`` (the sequence read at the
time index), ``outlist`` (the sequence written at the time index, mode
``seq``, or at a constant index, mode ``last``: the last output), ``counter``
(an integer scalar that only counts and indexes), ``frames`` (a tensor the
body only reads one frame of, at the counter: ``x[:, t]``), ``state`` (a
float that changes every step), ``accumulator`` (a list every step's
intermediate value is appended to, for gradients), ``settled`` (set to a
constant by every iteration: AutoGraph's flag that a variable first
assigned in the body is defined) or ``passthrough`` (weights, bounds, list
handles).
Anything else cannot be streamed and is a ``Fail`` naming the loop and node.
"""
from __future__ import annotations

from .graphdef import COMPARISONS, FLOAT_TYPES, IDENTITY, INT_TYPES, READ_OPS, Fail, \
    dtype_name, parse_tensor, tname
from .loops import Loop


def classify(loop: Loop) -> None:
    body = {n.name: n for n in loop.body.node}
    arg_index = {v.arg: v.index for v in loop.vars}
    consumers: dict[str, list[tuple[str, int]]] = {}
    for n in loop.body.node:
        for pos, i in enumerate(n.input):
            if not i.startswith("^"):
                consumers.setdefault(tname(i), []).append((n.name, pos))

    def resolve(t: str) -> str:
        """Follow Identity chains back to the producing tensor."""
        seen = 0
        while True:
            n = body.get(parse_tensor(t)[0])
            if n is None or n.op not in IDENTITY or seen > 100:
                return tname(t)
            t = tname(n.input[0])
            seen += 1

    def arg_of(t: str) -> int | None:
        node, _ = parse_tensor(resolve(t))
        return arg_index.get(node)

    def forward(t: str) -> list[tuple[str, int]]:
        """Consumers of t, looking through Identity chains."""
        out, work = [], [tname(t)]
        while work:
            u = work.pop()
            for c, pos in consumers.get(u, []):
                if body[c].op in IDENTITY:
                    work.append(f"{c}:0")
                else:
                    out.append((c, pos))
        return out

    for v in loop.vars:
        v.kind, v.detail = "", {}
    # Reads and writes of the sequences.
    reads: dict[int, list[str]] = {}
    for n in loop.body.node:
        if n.op in READ_OPS:
            a = arg_of(n.input[0])
            if a is None:
                raise Fail(f"loop '{loop.name}': node '{n.name}' ({n.op}) reads a list that is "
                           "not a loop variable")
            reads.setdefault(a, []).append(n.name)
    for v in loop.vars:
        if v.index in reads:
            v.kind = "inlist"
            v.detail = {"reads": reads[v.index]}
    for v in loop.vars:
        if v.kind:
            continue
        r = resolve(v.ret)
        rnode = parse_tensor(r)[0]
        rn = body.get(rnode)
        if rnode == v.arg:
            v.kind = "passthrough"
            continue
        if rn is not None and rn.op == "TensorListSetItem" and arg_of(rn.input[0]) == v.index:
            v.kind = "outlist"
            v.detail = {"write": rn.name, "item": tname(rn.input[2]), "index": tname(rn.input[1])}
            continue
        if rn is not None and rn.op == "TensorArrayWriteV3" and arg_of(rn.input[3]) == v.index:
            v.kind = "outlist"
            v.detail = {"write": rn.name, "item": tname(rn.input[2]),
                        "index": tname(rn.input[1]), "handle_arg": arg_of(rn.input[0])}
            continue
        if v.dtype in INT_TYPES and rn is not None and rn.op in ("Add", "AddV2") and \
                arg_of(rn.input[0]) == v.index:
            by = resolve(rn.input[1])
            by_node = body.get(parse_tensor(by)[0])
            by_var = arg_of(by)
            if by_node is not None and by_node.op == "Const":
                v.kind = "counter"
                v.detail = {"increment": rn.name, "by": by}
                continue
            if by_var is not None and _unchanged(loop.vars[by_var], resolve):
                # tf.range's counter in a loop AutoGraph wrote: t + delta,
                # delta a loop variable that never changes
                v.kind = "counter"
                v.detail = {"increment": rn.name, "by": by, "by_var": by_var}
                continue
        if v.dtype in FLOAT_TYPES:
            v.kind = "state"
            continue
        if rn is not None and rn.op == "TensorListPushBack" and arg_of(rn.input[0]) == v.index:
            # while_v2 in a TF1-style graph keeps every step's intermediate
            # values for gradients, in lists nothing reads at inference
            v.kind = "accumulator"
            continue
        if rn is not None and rn.op == "Const":
            # the same value after every iteration: AutoGraph's flag that a
            # variable first assigned in the loop's body is defined
            v.kind = "settled"
            continue
        if v.dtype in INT_TYPES and rn is not None and rn.op == "Sub" and \
                arg_of(rn.input[0]) == v.index:
            raise Fail(f"loop '{loop.name}': loop variable {v.index} ('{v.arg}') counts down "
                       f"(node '{rnode}'): the loop walks its sequence backwards in time "
                       "(tf.scan(reverse=True), a backward RNN), and a stream cannot, since "
                       "the last frame comes last")
        raise Fail(f"loop '{loop.name}': loop variable {v.index} ('{v.arg}', dtype "
                   f"{dtype_name(v.dtype)}) changes every step but is neither a float state, "
                   f"a counter nor a sequence; it cannot be streamed (returned from node "
                   f"'{rnode}', op {rn.op if rn is not None else '?'})")
    # Index checks: reads/writes at the time counter (or a constant index).
    for v in loop.vars:
        if v.kind == "inlist":
            for rname in v.detail["reads"]:
                idx = arg_of(body[rname].input[1])
                if idx is None or loop.vars[idx].kind != "counter":
                    raise Fail(f"loop '{loop.name}': node '{rname}' reads the sequence at an "
                               "index that is not the loop's time counter")
        if v.kind == "outlist":
            idx_t = resolve(v.detail["index"])
            a = arg_of(idx_t)
            if a is not None and loop.vars[a].kind == "counter":
                v.detail["mode"] = "seq"
            elif getattr(body.get(parse_tensor(idx_t)[0]), "op", None) == "Const":
                v.detail["mode"] = "last"
            else:
                raise Fail(f"loop '{loop.name}': node '{v.detail['write']}' writes the output "
                           "at an index that is neither the time counter nor a constant")
    # Counters may index, count and be compared with a bound (dynamic_rnn's
    # ``time >= sequence_length``): a comparison stays exact with a saturating
    # step counter; any other use (the time index as a value) would not.
    accumulated = {parse_tensor(resolve(v.ret))[0] for v in loop.vars if v.kind == "accumulator"}
    for v in loop.vars:
        if v.kind != "counter":
            continue
        for c, pos in forward(f"{v.arg}:0"):
            op = body[c].op
            if op in READ_OPS and pos == 1 or c in accumulated:
                continue
            if op in ("TensorListSetItem", "TensorArrayWriteV3") and pos == 1:
                continue
            if c == v.detail["increment"]:
                continue
            if op in COMPARISONS:
                v.detail.setdefault("compared", []).append(c)
                v.detail["mode"] = "step counter"  # shown by inspect
                continue
            if _reads_frames(loop, v, c, body, forward, arg_of):
                continue
            sliced = _slice_at(c, body, forward)
            if sliced is not None:
                raise Fail(f"loop '{loop.name}': node '{sliced}' (op {body[sliced].op}) "
                           "indexes a tensor with the loop counter (x[:, t]); tfaot streams "
                           "a loop's input read from a TensorArray or TensorList at the "
                           "counter (tf.TensorArray(...).unstack(x) then .read(t), as "
                           "tf.scan, dynamic_rnn and Keras RNN layers do)" + _pfor_hint(loop))
            raise Fail(f"loop '{loop.name}': the loop counter (loop variable {v.index}, "
                       f"initially '{v.operand}') is used by node '{c}' "
                       f"(op {op}); a stream keeps a step counter only for comparisons "
                       "with a bound (sequence_length), not as a value")
    _check_frames_only(loop, forward)


def _pfor_hint(loop: Loop) -> str:
    """What to do about a loop that tf.vectorized_map left behind: Keras 3's
    TimeDistributed over an open time axis maps over the frame index, and
    pfor falls back to this loop."""
    if "/pfor/" not in f"/{loop.name}/":
        return ""
    keras = ""
    if "time_distributed" in loop.name:
        # keras 3.15's TimeDistributed.call maps over arange(input_shape[0])
        # of the batch-major shape: the batch size, not the frame count.
        keras = (", and its loop there runs once per sample of the batch, not per frame: "
                 "the SavedModel itself returns as many frames as the batch has samples")
    return ("; this loop is what tf.vectorized_map leaves where it cannot vectorize (Keras 3 "
            f"writes TimeDistributed over an open time axis so{keras}): build the model's "
            ".keras file instead, or export it with a fixed number of frames")


def _unchanged(v, resolve) -> bool:
    """Whether loop variable ``v`` is the same every iteration."""
    return parse_tensor(resolve(v.ret))[0] == v.arg


def _reads_frames(loop, counter, use: str, body: dict, forward, arg_of) -> bool:
    """Whether the counter's ``use`` only indexes frames: the ``begin`` (or,
    plus a constant, the ``end``) of ``x[:, t]`` (StridedSlice, the axis
    shrunk) or the index of ``tf.gather(x, t, axis=a)``, x a loop variable
    that never changes. Such a loop variable becomes kind ``frames``."""
    node = body[use]
    if node.op in ("Add", "AddV2"):  # t + 1: the end of x[:, t]
        other = body.get(parse_tensor(node.input[1])[0])
        if other is None or other.op != "Const":
            return False
        packs = forward(f"{use}:0")
        return bool(packs) and all(
            body[p].op == "Pack" and all(pos == 2 and _frame_slice(loop, counter, s, body, arg_of)
                                         for s, pos in forward(f"{p}:0"))
            for p, _ in packs)
    if node.op == "Pack":  # the begin (or end) of a slice
        users = forward(f"{use}:0")
        return bool(users) and all(pos in (1, 2) and
                                   _frame_slice(loop, counter, s, body, arg_of)
                                   for s, pos in users)
    if node.op == "GatherV2" and arg_of(node.input[1]) == counter.index:
        axis = body.get(parse_tensor(node.input[2])[0])
        if axis is None or axis.op != "Const" or node.attr["batch_dims"].i:
            return False
        import tensorflow as tf

        return _mark_frames(loop, use, arg_of(node.input[0]),
                            int(tf.make_ndarray(axis.attr["value"].tensor)))
    return False


def _frame_slice(loop, counter, name: str, body: dict, arg_of) -> bool:
    """Whether ``name`` reads ``x[..., t, ...]``: a StridedSlice or a Slice
    (``tf.slice(x, [0, t, 0], [1, 1, F])``) whose begin is a Pack with the
    counter at one position k, that axis shrunk (StridedSlice, no ellipsis
    or new axis, so k is x's axis) or of size 1 (Slice; the frame keeps its
    axis, as the body's slice of the step's one frame does)."""
    node = body[name]
    if node.op not in ("StridedSlice", "Slice"):
        return False
    # (attr[...] of a missing attribute would add it: a Slice has no masks)
    if node.op == "StridedSlice" and (node.attr["ellipsis_mask"].i or
                                      node.attr["new_axis_mask"].i):
        return False
    begin = body.get(parse_tensor(node.input[1])[0])
    if begin is None or begin.op != "Pack" or begin.attr["axis"].i != 0:
        return False
    at = [k for k, i in enumerate(begin.input) if arg_of(i) == counter.index]
    if len(at) != 1:
        return False
    one_frame = _slice_size_one(body, node, at[0]) if node.op == "Slice" else \
        node.attr["shrink_axis_mask"].i >> at[0] & 1
    return bool(one_frame) and _mark_frames(loop, name, arg_of(node.input[0]), at[0])


def _slice_size_one(body: dict, node, axis: int) -> bool:
    """Whether Slice ``node`` takes one element along ``axis`` (its size a Const)."""
    import tensorflow as tf

    size = body.get(parse_tensor(node.input[2])[0])
    if size is None or size.op != "Const":
        return False
    sizes = tf.make_ndarray(size.attr["value"].tensor).reshape(-1)
    return axis < sizes.size and int(sizes[axis]) == 1


def _mark_frames(loop, read: str, var: int | None, axis: int) -> bool:
    """Loop variable ``var`` is read one frame at a time, along ``axis``, by
    ``read`` (False where it is not a loop variable or another read takes
    another axis)."""
    if var is None:
        return False
    v = loop.vars[var]
    if v.kind not in ("passthrough", "frames") or v.detail.get("axis", axis) != axis:
        return False
    v.kind = "frames"
    v.detail["axis"] = axis
    if read not in v.detail.setdefault("reads", []):
        v.detail["reads"].append(read)
    return True


def _check_frames_only(loop, forward) -> None:
    """A tensor read a frame at a time must not be used whole as well: the
    stream has only the current frame of it."""
    for v in loop.vars:
        if v.kind != "frames":
            continue
        for c, pos in forward(f"{v.arg}:0"):
            if c not in v.detail["reads"] or pos != 0:
                raise Fail(f"loop '{loop.name}': node '{c}' uses the whole of loop variable "
                           f"{v.index} ('{v.operand}'), which node '{v.detail['reads'][0]}' "
                           "reads a frame at a time (x[:, t]); a stream has only the current "
                           "frame")


#: Ops that index a tensor by a computed position (x[:, t], tf.gather).
_INDEXING = ("StridedSlice", "Slice", "GatherV2")


def _slice_at(node: str, body: dict, forward, hops: int = 3) -> str | None:
    """The indexing op the counter's use ``node`` feeds (itself, or within
    ``hops`` consumers: t + 1 and a Pack of the bounds come first), if any."""
    frontier = [node]
    for _ in range(hops):
        for name in frontier:
            if body[name].op in _INDEXING:
                return name
        frontier = [c for name in frontier for c, _ in forward(f"{name}:0")]
    return None
