"""The MLIR text of a micro-kernel's dispatch (compiler/lower/microkernel.py).

A kernel call becomes a private function that dispatches an executable
whose only work is the call of the C kernel (declared
``hal.import.static``), on its packed weights: a read-only global of the
kernel object, or with weights as globals (--weights=file) a mutable global
of the host program passed as the dispatch's first binding.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import weight_globals

#: Byte alignment of the packed weights: vector loads that straddle cache
#: lines made the kernel 1.4x slower (IREE's default for globals is 16).
ALIGN = 64


def dispatch_function(sym: str, xt: str, yt: str, weights: "WeightsGlobal | None") -> str:
    """``@sym``: the dispatch of its executable."""
    body = "".join(f"\n    {line}" for line in dispatch_lines(sym, weights, "%x", xt, "%y", yt))
    return f"""
  func.func private @{sym}(%x: tensor<{xt}>) -> tensor<{yt}> {{{body}
    return %y : tensor<{yt}>
  }}"""


def dispatch_lines(sym: str, weights: "WeightsGlobal | ComputedWeights | None", x: str,
                   xt: str, y: str, yt: str, scratch: int = 0,
                   in_place: bool = False) -> list[str]:
    """``y = dispatch(x)``, with the weights (a global loaded, or computed)
    passed first when they are a binding; with ``scratch`` bytes, the
    dispatch has a second result, the kernel's scratch buffer (unused after
    it: IREE allocates it with the step's other temporaries). ``in_place``
    (x and y of one type): y is x's buffer, tied to it, so IREE gives the
    result no buffer of its own where x is not used after (otherwise it
    copies x first)."""
    y_type = x if in_place else f"tensor<{yt}>"
    results, result_types = y, y_type
    if scratch:
        results, result_types = f"{y}, %scratch", f"({y_type}, tensor<{scratch}xi8>)"
    if weights is None:
        return [f"{results} = flow.dispatch @{sym}_exe::@{sym}({x}) : (tensor<{xt}>) -> "
                f"{result_types}"]
    return [*weights.load_lines(),
            f"{results} = flow.dispatch @{sym}_exe::@{sym}(%w, {x}) : ({weights.tensor}, "
            f"tensor<{xt}>) -> {result_types}"]


def weights_global(sym: str, data: np.ndarray, as_global: bool) -> WeightsGlobal | None:
    """The kernel's weights as a global of the host program, when weights are
    globals and these are over weight_globals.INLINE_MAX_BYTES (smaller ones
    stay in the code, as other small constants do)."""
    big = data.nbytes > weight_globals.INLINE_MAX_BYTES
    return WeightsGlobal(sym, data) if as_global and big else None


@dataclass(frozen=True)
class WeightsGlobal:
    """The packed weights of one kernel as a mutable global with a setter (the
    form of weight_globals.py: the setter keeps IREE from folding the global
    back into a constant, and drop_setters removes it from the VM program)."""

    sym: str
    data: np.ndarray = field(compare=False)  # as the kernel reads them (_weight_data)

    @property
    def name(self) -> str:
        return f"{weight_globals.WEIGHT_PREFIX}_{self.sym}"

    @property
    def tensor(self) -> str:
        return tensor_type(self.data)

    def load_lines(self) -> list[str]:
        """The line that makes ``%w`` for the dispatch."""
        return [f"%w = ml_program.global_load @{self.name} : {self.tensor}"]

    def global_text(self) -> str:
        hexval = self.data.tobytes().hex().upper()
        return (f'  ml_program.global private mutable @{self.name}(dense<"0x{hexval}"> : '
                f"{self.tensor}) : {self.tensor}\n")

    def setter_text(self) -> str:
        setter = f"{weight_globals.SETTER_PREFIX}_{self.sym}"
        return f"""
  func.func @{setter}(%v: {self.tensor}) {{
    ml_program.global_store @{self.name} = %v : {self.tensor}
    return
  }}"""


@dataclass(frozen=True)
class ComputedWeights:
    """Weights the kernel's function computes before the dispatch (a
    channel gate's: lower/channel_gate.py), passed as a global's are: the
    lines that make ``%w``, of type ``tensor``."""

    lines: tuple[str, ...]
    tensor: str

    def load_lines(self) -> list[str]:
        return list(self.lines)


def tensor_type(data: np.ndarray) -> str:
    """The MLIR tensor type of packed weights as the kernel reads them."""
    return f"tensor<{'x'.join(map(str, data.shape))}x{element(data)}>"


def element(data: np.ndarray) -> str:
    """The MLIR element type of weights as the kernel reads them: f32, i16
    (half-width patterns) or i8 (the int8 blob)."""
    return {1: "i8", 2: "i16", 4: "f32"}[data.dtype.itemsize]


def executable_text(sym: str, data: np.ndarray | None, xt: str, yt: str, kernel: str,
                     sizes: tuple[int, ...],
                     weights: WeightsGlobal | ComputedWeights | None = None,
                     post: np.ndarray | None = None, scratch: int = 0,
                     in_place: bool = False, images: str = "f32", batch: int = 1,
                     activation: tuple[str, int] | None = None) -> str:
    """The executable whose only work is
    ``kernel(w, w_offset, x, x_offset, y, y_offset, *sizes)``, or with
    ``post`` (f32: a convolution's epilogue, conv_epilogue.Epilogue)
    ``kernel(w, w_offset, x, x_offset, y, y_offset, post, *sizes)``, and
    with ``scratch`` (bytes: the int8 convolution's quantized image, the
    dispatch's second result) ``kernel(..., post, s, s_offset, *sizes)``.

    The packed weights are a read-only global of the kernel object, or with
    ``weights`` (a global of the host program, or weights it computes) a
    third binding, the first. A kernel without weights (``data`` None: the
    pooling kernel) is ``kernel(x, x_offset, y, y_offset, *sizes)``.
    Each binding is a base pointer plus an element offset: IREE moves a
    binding's offset (e.g. one state inside a fused state buffer, one
    weights global among the others) into the subspan. Half-width weights
    are ``i16`` data, int8 ones an ``i8`` blob (pack_int8): the kernel knows
    their dtype. ``in_place`` (dispatch_lines): x's binding is y's too.
    ``images``: the element type of x and y ("f16": the convolutions on
    half images, microkernel.HALF_KINDS). ``batch``: x and y hold that many
    images (x's and y's leading dimension; an N-stream build's
    convolutions), the kernel is called on each in turn, the scratch
    reused. ``activation`` (a kernel and conv_epilogue.ACTIVATIONS' number):
    after them, ``act_kernel(y, y_offset, count, act)`` over all of y.
    """
    elem = "f32" if data is None else element(data)
    wtype = "" if data is None else f"memref<{'x'.join(map(str, data.shape))}x{elem}>"
    index_types = ", ".join(["index"] * len(sizes))
    constants = "".join(f"\n        %s{i} = arith.constant {v} : index"
                        for i, v in enumerate(sizes))
    size_values = ", ".join(f"%s{i}" for i in range(len(sizes)))
    x_rank, y_rank = xt.count("x"), yt.count("x")
    post_global = post_type = post_value = post_arg = ""
    if post is not None:  # a constant of the kernel object, as small ones are
        post_type = "memref<" + f"{post.size}xf32>"
        post_global = f"""
      "memref.global"() <{{sym_name = "{sym}_post", sym_visibility = "private",
          type = {post_type}, initial_value = dense<"0x{post.astype('<f4').tobytes().hex().upper()}">
          : tensor<{post.size}xf32>, constant, alignment = {ALIGN} : i64}}> : () -> ()"""
        post_value = f"""
        %post = memref.get_global @{sym}_post : {post_type}
        {metadata("post", post_type, 1)}"""
        post_arg = "%postb, "
    post_decl = "memref<f32>, " * (post is not None)
    scratch_binding = scratch_value = scratch_arg = ""
    if scratch:
        scratch_binding, scratch_arg = ", %bs: !stream.binding", "%sb, %so, "
        scratch_value = f"""
        %s = stream.binding.subspan %bs[%c0] : !stream.binding -> memref<{scratch}xi8>
        {metadata("s", f"memref<{scratch}xi8>", 1, "i8")}"""
    post_decl += "memref<i8>, index, " * bool(scratch)
    if data is None:
        w_global = w_binding = w_value = ""
    elif weights is None:
        hexval = data.tobytes().hex().upper()
        ttype = "tensor" + wtype[len("memref"):]
        w_global = f"""
      "memref.global"() <{{sym_name = "{sym}_w", sym_visibility = "private", type = {wtype},
          initial_value = dense<"0x{hexval}"> : {ttype}, constant,
          alignment = {ALIGN} : i64}}> : () -> ()"""
        w_binding, w_value = "", f"memref.get_global @{sym}_w : {wtype}"
    else:
        w_global, w_binding = "", "%bw: !stream.binding, "
        w_value = f"stream.binding.subspan %bw[%c0] : !stream.binding -> {wtype}"
    y_binding = "" if in_place else ", %by: !stream.binding"
    act_decl = act_call = ""
    if activation is not None:
        act_kernel, act = activation
        count = int(np.prod([int(d) for d in yt.split("x")[:-1]]))
        act_decl = f"""
      func.func private @{act_kernel}(memref<f32>, index, index, index)
          attributes {{hal.import.static, llvm.bareptr = true, llvm.no_unwind}}"""
        act_call = f"""
        %act_count = arith.constant {count} : index
        %act = arith.constant {act} : index
        func.call @{act_kernel}(%yb, %yo, %act_count, %act) : (memref<f32>, index, index, index) -> ()"""
    w_decl = "" if data is None else f"memref<{elem}>, index, "
    w_lines = "" if data is None else f"""
        %w = {w_value}"""
    w_metadata = "" if data is None else f"""
        {metadata("w", wtype, data.ndim, elem)}"""
    return f"""
  stream.executable private @{sym}_exe {{
    stream.executable.export public @{sym} workgroups() -> (index, index, index) {{
      %c1 = arith.constant 1 : index
      stream.return %c1, %c1, %c1 : index, index, index
    }}
    builtin.module {{{w_global}{post_global}
      func.func private @{kernel}({w_decl}memref<{images}>, index,
                                  memref<{images}>, index, {post_decl}{index_types})
          attributes {{hal.import.static, llvm.bareptr = true, llvm.no_unwind}}{act_decl}
      func.func @{sym}({w_binding}%bx: !stream.binding{y_binding}{scratch_binding}) {{
        %c0 = arith.constant 0 : index{constants}{w_lines}
        %x = stream.binding.subspan %bx[%c0] : !stream.binding -> memref<{xt}>
        %y = stream.binding.subspan {"%bx" if in_place else "%by"}[%c0] : !stream.binding -> memref<{yt}>{w_metadata}
        {metadata("x", f"memref<{xt}>", x_rank, images)}
        {metadata("y", f"memref<{yt}>", y_rank, images)}{post_value}{scratch_value}
        {_calls(kernel, batch, xt, yt, f"{post_arg}{scratch_arg}{size_values}",
                f"{w_decl}memref<{images}>, index, memref<{images}>, index, "
                f"{post_decl}{index_types}", data is not None)}{act_call}
        return
      }}
    }}
  }}
"""


def _calls(kernel: str, batch: int, xt: str, yt: str, args: str, types: str,
           with_weights: bool = True) -> str:
    """The kernel's call, or with ``batch`` > 1 a loop of calls, one per
    image of x and y (types ``xt``, ``yt``), offset by their image sizes."""
    w_args = "%wb, %wo, " if with_weights else ""
    if batch == 1:
        return f"func.call @{kernel}({w_args}%xb, %xo, %yb, %yo, {args}) : ({types}) -> ()"
    x_image, y_image = (int(np.prod([int(d) for d in t.split("x")[1:-1]])) for t in (xt, yt))
    return f"""%batch = arith.constant {batch} : index
        %c1_b = arith.constant 1 : index
        %x_image = arith.constant {x_image} : index
        %y_image = arith.constant {y_image} : index
        scf.for %b = %c0 to %batch step %c1_b {{
          %x_skip = arith.muli %b, %x_image : index
          %y_skip = arith.muli %b, %y_image : index
          %xo_b = arith.addi %xo, %x_skip : index
          %yo_b = arith.addi %yo, %y_skip : index
          func.call @{kernel}({w_args}%xb, %xo_b, %yb, %yo_b, {args}) : ({types}) -> ()
        }}"""


def metadata(v: str, memref: str, rank: int, elem: str = "f32") -> str:
    """``%{v}b`` (base) and ``%{v}o`` (offset) of the memref ``%{v}``."""
    return (f"%{v}b, %{v}o, %{v}s:{rank}, %{v}st:{rank} = iree_codegen.extract_strided_metadata "
            f"%{v} : {memref} -> memref<{elem}>, index{', index' * (2 * rank)}")
