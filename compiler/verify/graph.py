"""Verify stage, graph formats: TensorFlow running the original frozen graph
or SavedModel (a TF1 session) as the reference for the built library.

``GraphReference`` gives the reference per step for a stream described by
the library's manifest; ``feedback_reference`` steps a graph whose caller
feeds its state back; ``build_cut`` and ``token_limit`` pick how the graph is
fed (the cut the build recorded, ids that stay inside embedding tables).
"""
from __future__ import annotations

import numpy as np

from ..errors import TfaotError


def build_cut(lib, given):
    """The graph options given, else those the library was built with."""
    from ..frontend.load_graph import GraphOptions

    if given is not None and (given.inputs, given.outputs, given.time_axis,
                              given.signature) != (None,) * 4:
        return given
    cut = lib.manifest.get("graph_cut")
    return GraphOptions(cut.get("inputs"), cut.get("outputs"), cut.get("time_axis"),
                        cut.get("state"), cut.get("signature")) if cut else given


def token_limit(graph_def) -> int | None:
    """The smallest table an id may index: the first dimension of every constant
    that a Gather reads rows of (an embedding), so random ids stay in range;
    None without such a table (``random_inputs`` picks by the dtype)."""
    consts = {n.name: n for n in graph_def.node if n.op == "Const"}
    sizes = []
    for fn_nodes in [graph_def.node, *(f.node_def for f in graph_def.library.function)]:
        for n in fn_nodes:
            if n.op in ("GatherV2", "Gather", "ResourceGather") and n.input:
                table = consts.get(n.input[0].split(":")[0].lstrip("^"))
                dims = table.attr["value"].tensor.tensor_shape.dim if table else []
                if dims:
                    sizes.append(int(dims[0].size))
    return min(sizes) if sizes else None


class GraphReference:
    """TensorFlow running an original frozen graph / SavedModel on whole sequences.

    Where the time axis is, and whether the length is fixed, comes from the
    library's manifest ("stream"), written by the build that analysed the
    graph; the graph is not streamed again here.
    """

    def __init__(self, loaded, lib, lib_dir, index: int = 0):
        """``loaded``: the load.LoadedModel of a graph format (``loaded.graph`` set);
        ``index``: which output (manifest order) this reference gives."""
        from ..program import StreamInfo

        if "stream" not in lib.manifest:
            raise TfaotError(f"{lib_dir}: built by an older tfaot (its manifest has no "
                             "'stream'); rebuild it with this version")
        self.stream = StreamInfo.from_json(lib.manifest["stream"])
        self.step_output = tuple(lib.output_shapes[index])
        self.index = index
        self.source = loaded.path
        self.streamed = list(lib.input_streamed)
        self._run = _session_runner(loaded.graph, index, self.stream.end_pads)
        self._lib = lib
        self._rank = None
        if len(loaded.graph.inputs) != len(lib.input_shapes):
            raise TfaotError(f"{lib_dir}: the library takes {len(lib.input_shapes)} inputs but "
                             f"{self.source} has {len(loaded.graph.inputs)}; was it built "
                             "from this model (with the same --inputs)?")
        for inp, step_shape, streamed in zip(loaded.graph.inputs, lib.input_shapes,
                                             self.streamed):
            self._check_input(inp.shape, tuple(step_shape), lib_dir, streamed)

    @property
    def stateless(self) -> bool:
        return self.stream.mode == "stateless"

    @property
    def fixed_last_output(self) -> bool:
        """A fixed-length prefix stream whose graph returns one value per sequence."""
        st = self.stream
        return st.mode == "prefix" and st.fixed_length is not None and \
            len(self.step_output) > 0 and self._output_rank == len(self.step_output)

    def fixed_output(self, xs, rng) -> tuple[np.ndarray, int]:
        """The graph's output on the stream's first T frames and the step that
        must return it. With P frames per step and P not dividing T, the last
        step holds frames past T: if the graph ignores frames T - T mod P ..
        T-1 (a strided front end that never reaches them), the step before
        it is the graph's last one."""
        st, a = self.stream, self.time_axis
        length, p = st.fixed_length, st.frames_per_step
        seqs = [np.take(self._frames(x), range(length), axis=a) if s else x[0]
                for x, s in zip(xs, self.streamed)]
        want = np.asarray(self._run(seqs), np.float64)
        last = -(-length // p) - 1
        tail = length % p
        if tail and last > 0:
            changed = [_with_new_tail(q, a, tail, rng) if s else q
                       for q, s in zip(seqs, self.streamed)]
            if np.array_equal(np.asarray(self._run(changed), np.float64), want):
                last -= 1  # the tail frames are not used
        return want, last

    @property
    def time_axis(self) -> int:
        return self.stream.time_axis

    def _frames(self, x: np.ndarray) -> np.ndarray:
        """(steps, *step input) -> the frames, along the time axis."""
        if self.stream.frames_per_step > 1:  # each step input holds P frames there
            return np.concatenate(list(x), axis=self.time_axis)
        return np.stack(list(x), axis=self.time_axis)

    @property
    def _output_rank(self) -> int:
        """The rank of the graph's output on one whole sequence (one probe run)."""
        if self._rank is None:
            st = self.stream
            probe = [np.zeros(self._sequence_shape(shape, st.fixed_length), dtype)
                     if s else np.zeros(shape, dtype)
                     for shape, dtype, s in zip(self._lib.input_shapes,
                                                self._lib.input_dtypes, self.streamed)]
            self._rank = np.asarray(self._run(probe)).ndim
        return self._rank

    def _sequence_shape(self, step_shape, length: int) -> tuple[int, ...]:
        shape = list(step_shape)
        if self.stream.frames_per_step > 1:
            shape[self.time_axis] = length
        else:
            shape.insert(self.time_axis, length)
        return tuple(shape)

    def _check_input(self, graph_shape, step_shape, lib_dir, streamed: bool = True) -> None:
        """The graph's input, less its time axis, must be what the library's step takes."""
        if graph_shape is None:
            return
        dims = [d for axis, d in enumerate(graph_shape)
                if self.stateless or not streamed or axis != self.time_axis]
        if streamed and self.stream.frames_per_step > 1:  # a step takes P frames
            dims = [self.stream.frames_per_step if axis == self.time_axis else d
                    for axis, d in enumerate(graph_shape)]
        if len(dims) != len(step_shape) or any(
                d is not None and d != s for d, s in zip(dims[1:], step_shape[1:])):
            raise TfaotError(f"{lib_dir}: the library takes {step_shape} per step but "
                             f"{self.source} takes {tuple(graph_shape)} (time axis "
                             f"{self.time_axis}); was it built from this model?")

    def steps(self, wanted: int) -> int:
        """The sequence length to test: a graph with a fixed length gets exactly that
        (a sliding window over it: any length)."""
        if self.stream.mode == "window":
            return wanted + self.stream.first_valid_step  # ``wanted`` compared steps
        if self.stateless or self.stream.fixed_length is None:
            return wanted
        return -(-self.stream.fixed_length // self.stream.frames_per_step)

    def outputs(self, xs, masked: bool = False) -> np.ndarray:
        """Reference per step; only the last step for fixed-length last-output graphs.

        ``xs``: one array per input, (steps, *step input); a per-step input
        (not streamed) holds the same value at every step. Steps without a
        reference are NaN, or with ``masked`` masked (``verify.undefined_steps``)."""
        xs = list(xs) if isinstance(xs, (list, tuple)) else [xs]
        steps = len(xs[0])
        if self.stateless:
            return np.stack([self._run([x[m] for x in xs]) for m in range(steps)])
        if self.stream.mode == "window" or self.stream.first_valid_step or \
                self.stream.frames_per_step > 1 or self._frames_out > 1 or \
                self.stream.latency_of(self.index):
            want = self._windowed(xs)
            return want if masked else np.ma.filled(want, np.nan)
        seqs = [np.moveaxis(x, 0, self.time_axis) if s else x[0]
                for x, s in zip(xs, self.streamed)]
        full = np.asarray(self._run(seqs))
        if full.ndim == len(self.step_output) + 1:
            return self._per_step(full, steps)
        if self.stream.fixed_length is not None:
            return full[None]  # the graph only ever saw the whole fixed-length sequence
        return np.stack([self._run([np.take(q, range(t + 1), axis=self.time_axis) if s else q
                                    for q, s in zip(seqs, self.streamed)])
                         for t in range(steps)])

    def _windowed(self, xs: list[np.ndarray]) -> np.ndarray:
        """Reference per step for a stream whose steps see a window, several
        frames or a conv front end (StreamInfo): the graph on the window that
        ends ``delay`` frames before the step's last frame, or on the prefix
        up to it (a sequence output: its last frame); masked where undefined.
        ``xs``: one array per input, (steps, *step input); a per-step input
        holds one value."""
        st, a, steps = self.stream, self.time_axis, len(xs[0])
        p = st.frames_per_step
        sequences = [(np.concatenate(list(x), axis=a) if p > 1 else np.moveaxis(x, 0, a))
                     if s else None for x, s in zip(xs, self.streamed)]
        want = np.ma.masked_all((steps, *self.step_output), np.float32)

        def run(lo, hi):
            return np.asarray(self._run([x[0] if q is None else np.take(q, range(lo, hi), axis=a)
                                         for x, q in zip(xs, sequences)]))

        if st.mode == "window":
            for m in range(steps):
                end = (m + 1) * p - st.delay
                if end - st.window >= 0:
                    want[m] = run(end - st.window, end)
            return want
        fixed = st.fixed_length
        full = run(0, steps * p if fixed is None else min(steps * p, fixed))
        if self._frames_out > 1 or st.latency_of(self.index):
            return self._chunks(full, want)
        if full.ndim == len(self.step_output) + 1:  # a sequence output: its last frames
            # (axis 0 last: time there is an output without a batch axis)
            axis = next(d for d in (*range(1, full.ndim), 0)
                        if full.shape[:d] + full.shape[d + 1:] == self.step_output)
            # outputs per step; a fixed-length graph runs on no other length:
            # one per step from the first valid step (P = the strides' product)
            rate = 1 if fixed is not None else \
                full.shape[axis] - run(0, (steps - 1) * p).shape[axis]
            for m in range(st.first_valid_step, steps):
                index = m - st.first_valid_step if fixed is not None else \
                    full.shape[axis] - 1 - (steps - 1 - m) * rate
                if 0 <= index < full.shape[axis]:
                    want[m] = np.take(full, index, axis=axis)
            return want
        if st.fixed_length is not None:  # only the whole fixed-length sequence
            want[-1] = full
            return want
        for m in range(st.first_valid_step, steps):
            want[m] = run(0, (m + 1) * p)
        return want

    @property
    def _frames_out(self) -> int:
        """Frames this output returns a step (StreamInfo.frames_of)."""
        return self.stream.frames_of(self.index)

    def _chunks(self, full: np.ndarray, want) -> np.ndarray:
        """``want`` for an output with n > 1 frames a step, or late: step m
        returns the n frames ending ``latency`` before the last of the graph
        on frames 0..(m+1)P-1, n a step of the graph's output on the whole
        stream ``full`` (causal, as streamed; final there but at its end)."""
        st, n, steps = self.stream, self._frames_out, len(want)
        latency = st.latency_of(self.index)
        step_output = self.step_output if n > 1 else \
            self.step_output[:1] + (1,) + self.step_output[1:]  # (one frame: no time axis)
        axis = next(d for d in (*range(1, full.ndim), 0)
                    if full.shape[:d] + full.shape[d + 1:] ==
                    step_output[:d] + step_output[d + 1:])
        # (the step the run ends on: a fixed-length graph ran on T frames at most)
        p = st.frames_per_step
        last = min(steps * p, st.fixed_length or steps * p) // p - 1
        for m in range(st.first_valid_step, last + 1):
            end = full.shape[axis] - (last - m) * n - latency
            if end - n >= 0:
                frames = np.take(full, range(end - n, end), axis=axis)
                want[m] = frames if n > 1 else np.squeeze(frames, axis)
        return want

    def _per_step(self, full: np.ndarray, steps: int) -> np.ndarray:
        for axis in range(full.ndim):
            rest = full.shape[:axis] + full.shape[axis + 1:]
            if full.shape[axis] == steps and tuple(rest) == tuple(self.step_output):
                return np.moveaxis(full, axis, 0)
        raise TfaotError(f"{self.source}: cannot find the time axis of the output "
                         f"{full.shape} (step output {tuple(self.step_output)})")


def _session_runner(graph, index: int = 0, end_pads=()):
    """A function running output ``index`` of the original graph in a TF1 session.

    The graph as the file has it (before any cut or simplification), fed at
    the streamed input: a tensor inside the graph when --inputs cut it there;
    without the paddings of a sequence's end the stream passes through
    (``end_pads``, StreamInfo).
    """
    import tensorflow as tf

    source = _without_pads(graph.details.get("source_graph_def", graph.graph_def), end_pads)
    # Where each input is fed in the graph as given: the cut tensor, or the
    # Placeholder itself.
    cut = {c["placeholder"]: c["tensor"] for c in graph.details.get("cut") or []}
    feeds = [cut.get(i.name, f"{i.name}:0") for i in graph.inputs]
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(source, name="")
    session = tf.compat.v1.Session(graph=g)
    fetch = graph.outputs[index] if index is not None else list(graph.outputs)
    # One array per input, in the graph's input order (= the feeds' order).
    return lambda xs: session.run(fetch, dict(zip(feeds, xs)))


def _without_pads(graph_def, pads):
    """``graph_def`` with the Pad nodes named ``pads`` made identities; a
    frame op's (``pad_end``) goes with its frame op, which gives the whole
    frames only (as the library does: signal_frames.py)."""
    if not pads:
        return graph_def
    import tensorflow as tf

    from ..streamify_graph.signal_frames import frames_as_convolutions

    names = {n.name for n in graph_def.node}
    graph_def, _, frame_pads = frames_as_convolutions(graph_def)
    copy = tf.compat.v1.GraphDef()
    copy.CopyFrom(graph_def)
    found = set(frame_pads) & names
    for n in copy.node:
        if n.name in pads:
            found.add(n.name)
            data = [i for i in n.input if not i.startswith("^")]
            n.op = "Identity"
            n.input[:] = data[:1] + [i for i in n.input if i.startswith("^")]
            for key in [k for k in n.attr if k != "T"]:
                del n.attr[key]
    missing = sorted(set(pads) - found)
    if missing:
        raise TfaotError(f"the library passes the padding of node '{missing[0]}' through, "
                         "which the model's graph does not have; was it built from this model?")
    return copy


def feedback_reference(graph, lib, xs: list[np.ndarray]) -> list[np.ndarray]:
    """Per step and library output, the graph run one step at a time with the
    state pairs of the manifest ("state_feedback") fed back, as the caller
    of the original graph does; the states start at zero (a SavedModel's
    variables made state: at their saved values, frontend/variable_state.py)."""
    def node(name):
        return name.split(":")[0]

    pairs = {node(a): node(b) for a, b in lib.manifest["state_feedback"]}
    run = _session_runner(graph, None)
    in_names = [i.name for i in graph.inputs]
    # the names the manifest uses: a SavedModel's signature keys, a graph's nodes
    out_names = [node(o) for o in graph.output_names]
    lib_inputs = [i["name"] for i in lib.manifest["inputs"]]
    lib_outputs = [o["name"] for o in lib.manifest["outputs"]]
    shapes = {i.name: i.shape for i in graph.inputs}
    saved = graph.details.get("state_initial", {})
    states = {a: np.asarray(saved[a], np.float32) if a in saved else np.zeros(shapes[a], np.float32)
              for a in pairs}
    wants = [[] for _ in lib_outputs]
    for m in range(len(xs[0])):
        feed = [states[n] if n in states else xs[lib_inputs.index(n)][m] for n in in_names]
        ys = dict(zip(out_names, run(feed)))
        states = {a: ys[b] for a, b in pairs.items()}
        for want, name in zip(wants, lib_outputs):
            want.append(ys[node(name)])
    return [np.stack(w).astype(np.float32) for w in wants]


def _with_new_tail(x: np.ndarray, axis: int, tail: int, rng) -> np.ndarray:
    """``x`` with its last ``tail`` frames along ``axis`` replaced by others."""
    x = np.array(x)
    index = [slice(None)] * x.ndim
    index[axis] = slice(x.shape[axis] - tail, None)
    part = x[tuple(index)]
    x[tuple(index)] = (rng.normal(size=part.shape) + 3.0).astype(x.dtype) \
        if np.issubdtype(x.dtype, np.floating) else (part + 1) % max(2, int(part.max()) + 1)
    return x
