"""What a dispatch loads and stores, from its executable's source
(compiler/emit/dispatch_source.py ``accessed_ranges``): the byte ranges of
the slices, with offsets from push constants (through IREE's
``util.assume.int``), and None where a binding is used some other way."""
from __future__ import annotations

import pytest

from tfaot.emit.dispatch_source import Access, accessed_ranges, binding_extents

_LAYOUT = ('layout(<constants = 2, bindings = [#hal.pipeline.binding<storage_buffer, '
           '"ReadOnly|Indirect">, #hal.pipeline.binding<storage_buffer, Indirect>], '
           'flags = Indirect>)')

# (IREE's dump of a batched ring buffer's copy: stream 0's and 1's rows
# 1..2 of a 3-row buffer into a 2-row state, at offsets the push constants give)
_COPY = f"""
func.func @copy_rows() {{
  %0 = hal.interface.constant.load {_LAYOUT} ordinal(0) : i32
  %1 = hal.interface.constant.load {_LAYOUT} ordinal(1) : i32
  %2 = arith.index_castui %0 : i32 to index
  %3 = arith.index_castui %1 : i32 to index
  %4:2 = util.assume.int %2[<umin = 64, umax = 64, udiv = 64>],
                         %3[<umin = 640, umax = 640, udiv = 640>] : index, index
  %5 = hal.interface.binding.subspan {_LAYOUT} binding(0) alignment(64) offset(%4#0) flags("ReadOnly|Indirect") : !iree_tensor_ext.dispatch.tensor<readonly:tensor<2x3x4xf32>>
  %6 = hal.interface.binding.subspan {_LAYOUT} binding(1) alignment(64) offset(%4#1) flags(Indirect) : !iree_tensor_ext.dispatch.tensor<writeonly:tensor<2x2x4xf32>>
  %7 = iree_tensor_ext.dispatch.tensor.load %5, offsets = [0, 1, 0], sizes = [2, 2, 4], strides = [1, 1, 1] : !iree_tensor_ext.dispatch.tensor<readonly:tensor<2x3x4xf32>> -> tensor<2x2x4xf32>
  %8 = arith.negf %7 : tensor<2x2x4xf32>
  iree_tensor_ext.dispatch.tensor.store %8, %6, offsets = [0, 0, 0], sizes = [2, 2, 4], strides = [1, 1, 1] : tensor<2x2x4xf32> -> !iree_tensor_ext.dispatch.tensor<writeonly:tensor<2x2x4xf32>>
  return
}}
"""

# bindings whose views go to a call (tfaot's kernels): what the callee
# touches is not in the source, but it stays within each view's shape
_CALL = f"""
func.func private @kernel(memref<2x3x4xf32>, memref<8xi8>)
func.func @call_kernel() {{
  %c0 = arith.constant 0 : index
  %c128 = arith.constant 128 : index
  %0 = hal.interface.binding.subspan {_LAYOUT} binding(0) alignment(64) offset(%c0) flags("ReadOnly|Indirect") : memref<2x3x4xf32>
  %1 = hal.interface.binding.subspan {_LAYOUT} binding(1) alignment(64) offset(%c128) flags(Indirect) : memref<8xi8>
  func.call @kernel(%0, %1) : (memref<2x3x4xf32>, memref<8xi8>) -> ()
  return
}}
"""


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "exe.mlir"
    path.write_text("module {" + _COPY + _CALL + "}")
    return path


def test_a_copy_touches_the_rows_it_names(source):
    effects = accessed_ranges(source, "copy_rows", [64, 640])
    # rows 1..2 of each stream's 3 rows of 16 bytes: bytes 16..96 of the
    # 96-byte tensor, past the binding's 64
    assert effects.loads == [Access(0, 64 + 16, 64 + 96, contiguous=False)]
    assert [store for store, _ in effects.stores] == [Access(1, 640, 640 + 64)]


def test_an_offset_not_known_or_a_binding_passed_on_is_no_answer(source):
    assert accessed_ranges(source, "copy_rows", [None, 640]) is None
    assert accessed_ranges(source, "call_kernel", []) is None


def test_a_call_touches_its_views_and_writes_the_writable_ones(source):
    assert binding_extents(source, "call_kernel", []) == [(0, 0, 96, False), (1, 128, 136, True)]
    assert binding_extents(source, "copy_rows", [64, 640]) == [(0, 64, 160, False),
                                                              (1, 640, 704, True)]
    assert binding_extents(source, "copy_rows", [None, 640]) is None
