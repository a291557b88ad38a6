"""Verify helper: drive a built model's shared library from Python (ctypes).

    m = tfaot.harness.load("out/model")   # reads model.json, loads libmodel.so, calls init()
    y = m.step(x)                          # x: numpy array of the input shape/dtype
    ys = m.step_n(xs)                      # xs: (n, *input shape)
    # A model with several inputs takes a tuple/list (manifest order = the
    # model's input order) or a dict by input name, in step (one array per
    # input) and step_n (one (n, *input i shape) array per input).
    # A model with several outputs returns a tuple (manifest order) from
    # step, and a tuple of (n, *output i shape) arrays from step_n.
    m.reset()
    s = m.get_state()                      # list of arrays, manifest order
    m.set_state(s)                         # restore (this or another context)

A token id outside the table its input indexes (the manifest's ``id_range``)
is refused by the library (NAME_ERR_INPUT_RANGE, nothing run, state
unchanged); step and step_n then raise ``InputRangeError`` naming the
input, the id, its valid range and the step.

Each ``Model`` owns one context (64-byte aligned memory that it allocates
once), so several models or several contexts of one model can coexist.
"""
from __future__ import annotations

import ctypes
import json
from pathlib import Path

import numpy as np

from ..errors import TfaotError
from ..program import StreamInfo
from ..status import STATUSES


#: NAME_ERR_INPUT_RANGE
INPUT_RANGE_STATUS = next(s.value for s in STATUSES if s.name == "INPUT_RANGE")


class InputRangeError(TfaotError):
    """A step refused a token id outside its input's table (NAME_ERR_INPUT_RANGE):
    nothing ran and the state is as it was before the call. ``step`` counts
    the steps run since init/reset; ``sample`` is the offending sample's
    index in a step_n call (0 for step)."""

    def __init__(self, message: str, *, input: str, id: int, valid: tuple[int, int],
                 element: int, step: int, sample: int = 0):
        super().__init__(message)
        self.input, self.id, self.valid = input, id, tuple(valid)
        self.element, self.step, self.sample = element, step, sample


class LibrarySpec:
    """What a built library's manifest says of its tensors and stream: enough
    to make its inputs and references (``tfaot verify --save-case``) without
    loading the library, which may be built for another machine."""

    def __init__(self, lib_dir: Path, manifest: dict):
        self.dir = lib_dir
        self.manifest = manifest
        self.name = manifest["name"]
        inp, out = manifest["inputs"][0], manifest["outputs"][0]
        self.input_shape = tuple(inp["shape"])
        self.output_shape = tuple(out["shape"])
        self.input_dtype = np.dtype(inp["dtype"])
        self.output_dtype = np.dtype(out["dtype"])
        # Every input, manifest order: (name, dtype, shape); which are streamed.
        self.input_specs = [(i["name"], np.dtype(i["dtype"]), tuple(i["shape"]))
                            for i in manifest["inputs"]]
        self.input_shapes = [shape for _, _, shape in self.input_specs]
        self.input_dtypes = [dt for _, dt, _ in self.input_specs]
        self.input_streamed = [bool(i.get("streamed", True)) for i in manifest["inputs"]]
        # per-step inputs the model has one value of for the whole sequence
        self.input_held = [bool(i.get("held", False)) for i in manifest["inputs"]]
        # a graph's sequence_length (the bound of its time index)
        self.input_length = [bool(i.get("length", False)) for i in manifest["inputs"]]
        self._inputs_struct = _tensors_struct(self.input_specs, "Inputs") \
            if len(self.input_specs) > 1 else None
        # Every output, manifest order: (name, dtype, shape).
        self.output_specs = [(o["name"], np.dtype(o["dtype"]), tuple(o["shape"]))
                             for o in manifest["outputs"]]
        self.output_shapes = [shape for _, _, shape in self.output_specs]
        self._outputs_struct = _tensors_struct(self.output_specs, "Outputs") \
            if len(self.output_specs) > 1 else None
        # How steps relate to the model's time axis: frames per step, window,
        # the first step whose output is defined (program.StreamInfo).
        self.stream = StreamInfo.from_json(manifest.get("stream"))
        # Independent streams per context (--streams): every tensor's axis 0.
        self.streams = self.stream.streams


class Model(LibrarySpec):
    """One context of a built model library."""

    def __init__(self, lib_dir: Path, manifest: dict, lib: ctypes.CDLL):
        super().__init__(lib_dir, manifest)
        self._lib = lib
        self._fn = {}
        for fn, restype, argtypes in (
                ("ctx_size", ctypes.c_size_t, []),
                ("init", ctypes.c_int, [ctypes.c_void_p]),
                ("reset", ctypes.c_int, [ctypes.c_void_p]),
                ("step", ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]),
                ("step_n", ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                          ctypes.c_size_t]),
                ("state_size", ctypes.c_size_t, []),
                ("get_state", ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p]),
                ("set_state", ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p]),
                ("deinit", None, [ctypes.c_void_p]),
                ("status_string", ctypes.c_char_p, [ctypes.c_int])):
            f = getattr(lib, f"{self.name}_{fn}")
            f.restype = restype
            f.argtypes = argtypes
            self._fn[fn] = f
        for fn, argtypes in (("get_stream_state", [ctypes.c_void_p, ctypes.c_size_t,
                                                   ctypes.c_void_p]),
                             ("set_stream_state", [ctypes.c_void_p, ctypes.c_size_t,
                                                   ctypes.c_void_p]),
                             ("reset_stream", [ctypes.c_void_p, ctypes.c_size_t])):
            f = getattr(lib, f"{self.name}_{fn}", None)  # (absent from older builds)
            if f is not None:
                f.restype, f.argtypes = ctypes.c_int, argtypes
                self._fn[fn] = f
        self.state_specs = [(s["name"], np.dtype(s["dtype"]), tuple(s["shape"]))
                            for s in manifest.get("state", [])]
        self.state_bytes = int(self._fn["state_size"]())
        want = sum(dt.itemsize * int(np.prod(shape)) for _, dt, shape in self.state_specs)
        if self.state_bytes != want:
            raise TfaotError(f"{self.name}: library state size {self.state_bytes} does not match "
                             f"the manifest's states ({want} bytes); the build folder is "
                             "inconsistent")
        size = int(self._fn["ctx_size"]())
        align = int(manifest.get("ctx_align", 64))
        if manifest.get("ctx_size") and size > manifest["ctx_size"]:
            raise TfaotError(f"{self.name}: library context size {size} exceeds the manifest's "
                             f"{manifest['ctx_size']}; the build folder is inconsistent")
        self._mem = np.zeros(size + align, dtype=np.uint8)
        base = self._mem.ctypes.data
        self._ctx = ctypes.c_void_p(base + (-base % align))
        self._live = False
        self.weights = self._read_weights(lib)
        # Steps run since init/reset (named when a token id is refused).
        self.steps = 0

    def _read_weights(self, lib) -> np.ndarray | None:
        """--weights=file builds: NAME.weights, kept alive as long as the model."""
        info = self.manifest.get("weights") or {}
        if info.get("mode") != "file":
            return None
        path = self.dir / info["file"]
        if not path.exists():
            raise TfaotError(f"{self.dir}: no {info['file']}; this library was built with "
                             "--weights=file and needs it")
        f = lib[f"{self.name}_init_with_weights"]
        f.restype = ctypes.c_int
        f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        self._fn["init_with_weights"] = f
        return np.fromfile(path, dtype=np.uint8)

    # -- helpers ---------------------------------------------------------------
    def _check(self, status: int, what: str) -> None:
        if status != 0:
            text = self._fn["status_string"](status).decode()
            raise TfaotError(f"{self.name}_{what} failed with status {status}: {text}")

    def _check_step(self, status: int, what: str, x, batch: int | None) -> None:
        """``_check`` for step / step_n: a refused token id raises InputRangeError."""
        if status == INPUT_RANGE_STATUS:
            error = self._range_error(x, batch, what)
            if error is not None:
                raise error
        self._check(status, what)

    def _range_error(self, x, batch: int | None, what: str) -> InputRangeError | None:
        """The first id outside its range in ``x`` (one sample, or ``batch``
        samples for step_n), as the error to raise; None if none is found."""
        parts = [x] if self._inputs_struct is None else self._each_input(x)
        n = 1 if batch is None else batch
        for sample in range(n):
            for index, (part, spec) in enumerate(zip(parts, self.manifest["inputs"])):
                r = spec.get("id_range")
                if not r:
                    continue
                flat = np.asarray(part).reshape(n, -1)[sample]
                for first, count, lo, hi in r["runs"]:
                    for element in range(first, first + count):
                        v = int(flat[element])
                        if v < lo or v >= hi:
                            where = (f"step {self.steps}" if batch is None else
                                     f"sample {sample} of this step_n call (step "
                                     f"{self.steps + sample} since init/reset)")
                            return InputRangeError(
                                f"{self.name}_{what} refused input '{spec['name']}' at "
                                f"{where}: id {v} (element {element}) is outside its table's "
                                f"range [{lo}, {hi}); nothing ran and the state is unchanged",
                                input=spec["name"], id=v, valid=(lo, hi), element=element,
                                step=self.steps + sample, sample=sample)
        return None

    def _as_input(self, x, batch: int | None, index: int = 0) -> np.ndarray:
        name, dtype, shape = self.input_specs[index]
        what = "input" if len(self.input_specs) == 1 else f"input '{name}'"
        x = np.asarray(x)
        want = shape if batch is None else (batch, *shape)
        if x.dtype != dtype:
            raise TfaotError(f"{self.name}: {what} has dtype {x.dtype}, the model takes "
                             f"{dtype} (convert with .astype(np.{dtype}))")
        if tuple(x.shape) != tuple(want):
            hint = "(n, " + ", ".join(map(str, shape)) + ")" if batch is not None \
                else str(shape)
            raise TfaotError(f"{self.name}: {what} has shape {tuple(x.shape)}, expected {hint}")
        return np.ascontiguousarray(x)

    def _each_input(self, x) -> list:
        """Several inputs given as a tuple/list (manifest order) or a dict by name."""
        names = [name for name, _, _ in self.input_specs]
        if isinstance(x, dict):
            unknown = sorted(set(x) - set(names))
            missing = [n for n in names if n not in x]
            if unknown or missing:
                raise TfaotError(f"{self.name}: inputs are {', '.join(names)}; got "
                                 f"{', '.join(map(str, x)) or 'none'}")
            return [x[n] for n in names]
        if not isinstance(x, (list, tuple)) or len(x) != len(names):
            raise TfaotError(f"{self.name}: the model has {len(names)} inputs "
                             f"({', '.join(names)}); pass a tuple or a dict of them")
        return list(x)

    def _pack_inputs(self, x, batch: int | None) -> np.ndarray:
        """The bytes of one NAME_inputs struct per step: (max(n, 1), sizeof)."""
        parts = [self._as_input(v, batch, i) for i, v in enumerate(self._each_input(x))]
        n = 1 if batch is None else batch
        raw = np.zeros((max(n, 1), ctypes.sizeof(self._inputs_struct)), dtype=np.uint8)
        for i, part in enumerate(parts):
            offset = getattr(self._inputs_struct, f"f{i}").offset
            flat = part.reshape(n, -1).view(np.uint8)
            raw[:n, offset:offset + flat.shape[1]] = flat
        return raw

    def _step_count(self, xs) -> int:
        """n for step_n: the length of the (first) input's leading axis."""
        first = self._each_input(xs)[0] if self._inputs_struct is not None else xs
        first = np.asarray(first)
        return first.shape[0] if first.ndim else 0

    # -- API ---------------------------------------------------------------------
    def init(self) -> None:
        """(Re)initialises the context: state = initial value."""
        if self._live:
            self._fn["deinit"](self._ctx)
        if self.weights is None:
            self._check(self._fn["init"](self._ctx), "init")
        else:
            self._check(self._fn["init_with_weights"](self._ctx, self.weights.ctypes.data,
                                                      self.weights.size), "init_with_weights")
        self._live = True
        self.steps = 0

    def reset(self) -> None:
        self._check(self._fn["reset"](self._ctx), "reset")
        self.steps = 0

    def step(self, x):
        """One step; returns a new array of the output shape (a tuple of
        arrays, manifest order, for a model with several outputs)."""
        given = x
        x = self._as_input(x, None) if self._inputs_struct is None else self._pack_inputs(x, None)
        if self._outputs_struct is not None:
            out = self._outputs_struct()
            self._check_step(self._fn["step"](self._ctx, x.ctypes.data, ctypes.addressof(out)),
                             "step", given, None)
            self.steps += 1
            raw = np.frombuffer(bytearray(out), dtype=np.uint8)[None]
            return tuple(y[0] for y in _unpack_outputs(raw, self.output_specs,
                                                       self._outputs_struct))
        y = np.empty(self.output_shape, dtype=self.output_dtype)
        self._check_step(self._fn["step"](self._ctx, x.ctypes.data, y.ctypes.data), "step",
                         given, None)
        self.steps += 1
        return y

    def step_n(self, xs):
        """Runs len(xs) steps in order; returns (n, *output shape) (a tuple of
        such arrays, manifest order, for a model with several outputs)."""
        n = self._step_count(xs)
        given = xs
        xs = self._as_input(xs, n) if self._inputs_struct is None else self._pack_inputs(xs, n)
        if self._outputs_struct is not None:
            size = ctypes.sizeof(self._outputs_struct)
            raw = np.zeros((max(n, 1), size), dtype=np.uint8)
            self._check_step(self._fn["step_n"](self._ctx, xs.ctypes.data, raw.ctypes.data, n),
                             "step_n", given, n)
            self.steps += n
            return _unpack_outputs(raw[:n], self.output_specs, self._outputs_struct)
        ys = np.empty((n, *self.output_shape), dtype=self.output_dtype)
        self._check_step(self._fn["step_n"](self._ctx, xs.ctypes.data, ys.ctypes.data, n),
                         "step_n", given, n)
        self.steps += n
        return ys

    def get_state(self) -> list[np.ndarray]:
        """A copy of the recurrent state: one array per state, manifest order."""
        buf = np.zeros(max(self.state_bytes, 1), dtype=np.uint8)
        self._check(self._fn["get_state"](self._ctx, buf.ctypes.data), "get_state")
        return _states_from_bytes(buf, self.state_specs)

    def set_state(self, states) -> None:
        """Replaces the state with ``states`` (as returned by get_state)."""
        buf = self._states_to_bytes(states, self.state_specs, "set_state", "")
        self._check(self._fn["set_state"](self._ctx, buf.ctypes.data), "set_state")

    def _states_to_bytes(self, states, specs, what: str, of: str) -> np.ndarray:
        """``states`` checked against ``specs`` and packed as the C API's
        flat state array."""
        states = list(states)
        if len(states) != len(specs):
            raise TfaotError(f"{self.name}: {what} got {len(states)} arrays, the model has "
                             f"{len(specs)} states")
        parts = []
        for s, (sname, dtype, shape) in zip(states, specs):
            s = np.asarray(s)
            if s.dtype != dtype or tuple(s.shape) != shape:
                raise TfaotError(f"{self.name}: state '{sname}'{of} must be "
                                 f"{dtype}{list(shape)}, got {s.dtype}{list(s.shape)}")
            parts.append(np.ascontiguousarray(s).view(np.uint8).ravel())
        return np.concatenate(parts) if parts else np.zeros(1, np.uint8)

    # -- one stream of many (--streams) -------------------------------------
    def _stream_state_specs(self) -> list[tuple]:
        return [(n, dt, shape[1:] if self.streams > 1 else shape)
                for n, dt, shape in self.state_specs]

    def _stream_fn(self, fn: str):
        if fn not in self._fn:
            raise TfaotError(f"{self.name}: this library has no {self.name}_{fn} "
                             "(built before --streams; rebuild it)")
        return self._fn[fn]

    def get_stream_state(self, stream: int) -> list[np.ndarray]:
        """Stream ``stream``'s part of every state (the state without the
        streams axis)."""
        buf = np.zeros(max(self.state_bytes // self.streams, 1), dtype=np.uint8)
        self._check(self._stream_fn("get_stream_state")(self._ctx, stream, buf.ctypes.data),
                    "get_stream_state")
        return _states_from_bytes(buf, self._stream_state_specs())

    def set_stream_state(self, stream: int, states) -> None:
        """Replaces stream ``stream``'s state (as get_stream_state returns it)."""
        buf = self._states_to_bytes(states, self._stream_state_specs(), "set_stream_state",
                                    " of one stream")
        self._check(self._stream_fn("set_stream_state")(self._ctx, stream, buf.ctypes.data),
                    "set_stream_state")

    def reset_stream(self, stream: int) -> None:
        """Puts one stream back to the initial state; the others keep theirs."""
        self._check(self._stream_fn("reset_stream")(self._ctx, stream), "reset_stream")

    def close(self) -> None:
        if self._live:
            self._fn["deinit"](self._ctx)
            self._live = False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _states_from_bytes(buf: np.ndarray, specs) -> list[np.ndarray]:
    """The C API's flat state array as one array per state (copies)."""
    out, offset = [], 0
    for _, dtype, shape in specs:
        n = dtype.itemsize * int(np.prod(shape))
        out.append(buf[offset:offset + n].view(dtype).reshape(shape).copy())
        offset += n
    return out


def _tensors_struct(specs, name: str):
    """A ctypes twin of the header's NAME_inputs / NAME_outputs struct (same
    fields, same order, so the same padding as the C compiler)."""
    fields = []
    for i, (_, dtype, shape) in enumerate(specs):
        # (ctypes has no half: a 16-bit integer has its size and alignment)
        elem = (ctypes.c_uint16 if np.dtype(dtype) == np.float16
                else np.ctypeslib.as_ctypes_type(dtype))
        fields.append((f"f{i}", elem * max(int(np.prod(shape)), 1)))
    return type(name, (ctypes.Structure,), {"_fields_": fields})


def _unpack_outputs(raw: np.ndarray, specs, struct) -> tuple:
    """(n, sizeof struct) bytes -> one (n, *shape) array per output."""
    out = []
    for i, (_, dtype, shape) in enumerate(specs):
        offset = getattr(struct, f"f{i}").offset
        nbytes = dtype.itemsize * int(np.prod(shape))
        part = np.ascontiguousarray(raw[:, offset:offset + nbytes])
        out.append(part.view(dtype).reshape(len(raw), *shape).copy())
    return tuple(out)


def _check_cpu(lib_dir: Path, manifest: dict) -> None:
    """Refuses a library built for a CPU whose instructions this one lacks:
    its first such instruction would kill the process (SIGILL)."""
    from ..target import missing_instruction_sets

    cpu = manifest.get("cpu", "generic")
    missing = missing_instruction_sets(manifest["triple"], cpu)
    if missing:
        raise TfaotError(f"{lib_dir}: the library is built for --cpu {cpu}, whose instructions "
                         f"this CPU lacks ({', '.join(missing)}): it would stop at the first "
                         "one. Run it on such a CPU (tfaot verify MODEL DIR --save-case FILE "
                         "here, tfaot verify --case FILE DIR there), or build with --cpu host")


def load_spec(lib_dir, *, name: str | None = None) -> LibrarySpec:
    """The manifest ``lib_dir/NAME.json`` alone (no library is loaded)."""
    lib_dir = Path(lib_dir)
    return LibrarySpec(lib_dir, _read_manifest(lib_dir, name))


def load(lib_dir, *, name: str | None = None, init: bool = True) -> Model:
    """Loads ``lib_dir/NAME.json`` and ``lib_dir/libNAME.so``; calls init() unless told not to."""
    lib_dir = Path(lib_dir)
    manifest = _read_manifest(lib_dir, name)
    so = lib_dir / f"lib{manifest['name']}.so"
    if not so.exists():
        raise TfaotError(f"{lib_dir}: no {so.name}; shared libraries are only built for the "
                         f"host triple (this build: {manifest.get('triple')})")
    _check_cpu(lib_dir, manifest)
    model = Model(lib_dir, manifest, ctypes.CDLL(str(so.resolve())))
    if init:
        model.init()
    return model


def _read_manifest(lib_dir: Path, name: str | None) -> dict:
    if not lib_dir.is_dir():
        raise TfaotError(f"{lib_dir}: no such folder; give the folder tfaot build wrote "
                         "(its -o)")
    if name is None:
        manifests = sorted(lib_dir.glob("*.json"))
        if not manifests:
            raise TfaotError(f"{lib_dir}: not a folder tfaot build wrote (no NAME.json "
                             "manifest in it)")
        if len(manifests) > 1:
            raise TfaotError(f"{lib_dir}: holds {len(manifests)} manifests "
                             f"({', '.join(m.name for m in manifests)}); which library is "
                             "meant? (harness.load(DIR, name=NAME))")
        path = manifests[0]
    else:
        path = lib_dir / f"{name}.json"
    if not path.exists():
        raise TfaotError(f"{lib_dir}: no manifest {path.name}; build the model first")
    manifest = json.loads(path.read_text())
    if not manifest["inputs"] or not manifest["outputs"]:
        raise TfaotError(f"{manifest['name']}: the manifest lists no inputs or no outputs; the "
                         "build folder is inconsistent")
    return manifest
