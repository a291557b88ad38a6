"""Sums over several axes, one axis at a time.

A global average pooling sums a feature map over its height and width in
one ``stablehlo.reduce``, which IREE's CPU code runs as one running sum per
channel: 12,544 additions in a row for a 112x112 map, each rounded at the
sum's size. An EfficientNet's squeeze-and-excite means came out 5x further
from the exact ones than TensorFlow's (which sums in blocks). Summed one
axis at a time (the width's 112, then the height's 112 row sums), each sum
is short and the error is TensorFlow's; the additions are as many.

Only float32 sums over two or more axes whose count is over ``LONG_SUM``
are rewritten, in the compact form TensorFlow's converter prints them.
"""
from __future__ import annotations

import re

#: Sums of fewer terms stay one reduce (their error is small already; a
#: keyword spotter's 25x5 pooling keeps its one dispatch).
LONG_SUM = 256

_REDUCE = re.compile(
    r"^(?P<indent>\s*)(?P<out>%[\w.#:]+) = stablehlo\.reduce\((?P<x>%[\w.#]+) init: "
    r"(?P<init>%[\w.#]+)\) applies stablehlo\.add across dimensions = \[(?P<dims>[\d, ]+)\] "
    r": \(tensor<(?P<shape>[\dx]+)xf32>, tensor<f32>\) -> tensor<(?P<result>[\dx]*)f32>$",
    re.M)


def sum_one_axis_at_a_time(mlir_text: str) -> tuple[str, int]:
    """``mlir_text`` with each long sum over several axes split into sums
    over one axis, the last axis first; and how many were split."""
    count = 0

    def split(m: re.Match) -> str:
        nonlocal count
        dims = sorted((int(d) for d in m["dims"].split(",")), reverse=True)
        shape = [int(d) for d in m["shape"].split("x")]
        terms = 1
        for d in dims:
            terms *= shape[d]
        if len(dims) < 2 or terms <= LONG_SUM:
            return m[0]
        count += 1
        lines, value = [], m["x"]
        for k, d in enumerate(dims):
            before = _tensor(shape)
            shape = shape[:d] + shape[d + 1:]
            out = m["out"] if k == len(dims) - 1 else f"%tfaot_sum{count}_{k}"
            lines.append(f"{m['indent']}{out} = stablehlo.reduce({value} init: {m['init']}) "
                         f"applies stablehlo.add across dimensions = [{d}] : ({before}, "
                         f"tensor<f32>) -> {_tensor(shape)}")
            value = out
        return "\n".join(lines)

    return _REDUCE.sub(split, mlir_text), count


def _tensor(shape: list[int]) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + "f32>"
