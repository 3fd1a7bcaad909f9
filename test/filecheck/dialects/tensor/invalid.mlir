// RUN: emmy-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @binary(%a: tensor<4xf32>, %b: tensor<8xf32>) {
  %c = tensor.add %a, %b : (tensor<4xf32>, tensor<8xf32>) -> tensor<4xf32>
  func.return
}
// CHECK: tensor.add: operands and result must have one type (broadcast and cast explicitly), got (tensor<4xf32>, tensor<8xf32>) -> tensor<4xf32>

// -----
func.func @unary(%a: tensor<4xf32>) {
  %c = tensor.exp %a : tensor<4xf32> -> tensor<4xbf16>
  func.return
}
// CHECK: tensor.exp: result type must equal the operand type, got tensor<4xf32> -> tensor<4xbf16>

// -----
func.func @cast(%a: tensor<4xf32>) {
  %c = tensor.cast %a : tensor<4xf32> -> tensor<8xbf16>
  func.return
}
// CHECK: tensor.cast: result shape [8] must equal the operand shape [4]

// -----
func.func @splat() {
  %c = tensor.splat {value = 1.0 : f32} : tensor<4xf32>
  func.return
}
// CHECK: tensor.splat: value must be an f64 float, got 1.000000e+00 : f32

// -----
func.func @sum_axes(%a: tensor<4x8xf32>) {
  %c = tensor.sum %a {axes = array<i64: 1, 0>} : tensor<4x8xf32> -> tensor<f32>
  func.return
}
// CHECK: tensor.sum: axes must be non-empty and strictly increasing, got [1, 0]

// -----
func.func @sum_range(%a: tensor<4x8xf32>) {
  %c = tensor.sum %a {axes = array<i64: 2>} : tensor<4x8xf32> -> tensor<4x8xf32>
  func.return
}
// CHECK: tensor.sum: axes [2] out of range for rank 2

// -----
func.func @sum_shape(%a: tensor<4x8xf32>) {
  %c = tensor.reduce_max %a {axes = array<i64: 1>} : tensor<4x8xf32> -> tensor<8xf32>
  func.return
}
// CHECK: tensor.reduce_max: result shape must be [4] (operand [4, 8] without axes [1]), got [8]

// -----
func.func @sum_dtype(%a: tensor<4x8xbf16>) {
  %c = tensor.sum %a {axes = array<i64: 1>} : tensor<4x8xbf16> -> tensor<4xf32>
  func.return
}
// CHECK: tensor.sum: result element type f32 must equal the operand's bf16

// -----
func.func @matmul_rank(%a: tensor<4x8xbf16>, %b: tensor<8xbf16>) {
  %c = tensor.matmul %a, %b : (tensor<4x8xbf16>, tensor<8xbf16>) -> tensor<4xbf16>
  func.return
}
// CHECK: tensor.matmul: operands must have one rank >= 2, got [4, 8] and [8]

// -----
func.func @matmul_batch(%a: tensor<2x4x8xbf16>, %b: tensor<3x16x8xbf16>) {
  %c = tensor.matmul %a, %b {transpose_rhs} : (tensor<2x4x8xbf16>, tensor<3x16x8xbf16>) -> tensor<2x4x16xbf16>
  func.return
}
// CHECK: tensor.matmul: batch dims must be equal, got [2] and [3]

// -----
func.func @matmul_k(%a: tensor<4x8xbf16>, %b: tensor<16x8xbf16>) {
  %c = tensor.matmul %a, %b : (tensor<4x8xbf16>, tensor<16x8xbf16>) -> tensor<4x8xbf16>
  func.return
}
// CHECK: tensor.matmul: contraction dims differ: lhs [4, 8] has K = 8, rhs [16, 8] has 16 on its second to last axis

// -----
func.func @matmul_result(%a: tensor<4x8xbf16>, %b: tensor<16x8xbf16>) {
  %c = tensor.matmul %a, %b {transpose_rhs} : (tensor<4x8xbf16>, tensor<16x8xbf16>) -> tensor<4x8xbf16>
  func.return
}
// CHECK: tensor.matmul: result shape must be [4, 16], got [4, 8]

// -----
func.func @matmul_dtype(%a: tensor<4x8xbf16>, %b: tensor<16x8xf32>) {
  %c = tensor.matmul %a, %b {transpose_rhs} : (tensor<4x8xbf16>, tensor<16x8xf32>) -> tensor<4x16xf32>
  func.return
}
// CHECK: tensor.matmul: operands must have one element type, got bf16 and f32

// -----
func.func @layout_dtype(%a: tensor<4xf32>) {
  %c = tensor.reshape %a : tensor<4xf32> -> tensor<2x2xbf16>
  func.return
}
// CHECK: tensor.reshape: result element type bf16 must equal the operand's f32

// -----
func.func @reshape(%a: tensor<4xf32>) {
  %c = tensor.reshape %a : tensor<4xf32> -> tensor<2x3xf32>
  func.return
}
// CHECK: tensor.reshape: element count must be kept: [4] has 4, [2, 3] has 6

// -----
func.func @broadcast_count(%a: tensor<4xf32>) {
  %c = tensor.broadcast %a {dims = array<i64: 0, 1>} : tensor<4xf32> -> tensor<4x8xf32>
  func.return
}
// CHECK: tensor.broadcast: dims must have one entry per operand axis (1), got [0, 1]

// -----
func.func @broadcast_order(%a: tensor<4x8xf32>) {
  %c = tensor.broadcast %a {dims = array<i64: 2, 0>} : tensor<4x8xf32> -> tensor<8x2x4xf32>
  func.return
}
// CHECK: tensor.broadcast: dims must be strictly increasing result axes (< 3), got [2, 0]

// -----
func.func @broadcast_size(%a: tensor<4xf32>) {
  %c = tensor.broadcast %a {dims = array<i64: 1>} : tensor<4xf32> -> tensor<4x8xf32>
  func.return
}
// CHECK: tensor.broadcast: operand axis 0 (size 4) cannot broadcast to result axis 1 (size 8)

// -----
func.func @transpose_perm(%a: tensor<4x8xf32>) {
  %c = tensor.transpose %a {perm = array<i64: 0, 0>} : tensor<4x8xf32> -> tensor<4x4xf32>
  func.return
}
// CHECK: tensor.transpose: perm must be a permutation of 0..1, got [0, 0]

// -----
func.func @transpose_shape(%a: tensor<4x8xf32>) {
  %c = tensor.transpose %a {perm = array<i64: 1, 0>} : tensor<4x8xf32> -> tensor<4x8xf32>
  func.return
}
// CHECK: tensor.transpose: result shape must be [8, 4], got [4, 8]

// -----
func.func @slice_count(%a: tensor<4x8xf32>) {
  %c = tensor.slice %a {starts = array<i64: 0>, sizes = array<i64: 4, 4>, strides = array<i64: 1, 1>} : tensor<4x8xf32> -> tensor<4x4xf32>
  func.return
}
// CHECK: tensor.slice: starts, sizes and strides must have one entry per axis (2), got 1, 2, 2

// -----
func.func @slice_sizes(%a: tensor<4x8xf32>) {
  %c = tensor.slice %a {starts = array<i64: 0, 0>, sizes = array<i64: 4, 4>, strides = array<i64: 1, 1>} : tensor<4x8xf32> -> tensor<4x2xf32>
  func.return
}
// CHECK: tensor.slice: result shape [4, 2] must equal sizes [4, 4]

// -----
func.func @slice_fit(%a: tensor<4x8xf32>) {
  %c = tensor.slice %a {starts = array<i64: 0, 2>, sizes = array<i64: 4, 4>, strides = array<i64: 1, 2>} : tensor<4x8xf32> -> tensor<4x4xf32>
  func.return
}
// CHECK: tensor.slice: axis 1: start 2, size 4, stride 2 do not fit in extent 8

// -----
func.func @concat_empty() {
  %c = "tensor.concat"() <{axis = 0 : i64}> : () -> tensor<4xf32>
  func.return
}
// CHECK: tensor.concat: needs at least one operand

// -----
func.func @concat_axis(%a: tensor<4xf32>) {
  %c = tensor.concat %a {axis = 1 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  func.return
}
// CHECK: tensor.concat: axis 1 out of range for rank 1

// -----
func.func @concat_dtype(%a: tensor<4xf32>, %b: tensor<4xbf16>) {
  %c = tensor.concat %a, %b {axis = 0 : i64} : (tensor<4xf32>, tensor<4xbf16>) -> tensor<8xf32>
  func.return
}
// CHECK: tensor.concat: operand 1 element type bf16 must equal the result's f32

// -----
func.func @concat_shape(%a: tensor<4x8xf32>, %b: tensor<4x4xf32>) {
  %c = tensor.concat %a, %b {axis = 0 : i64} : (tensor<4x8xf32>, tensor<4x4xf32>) -> tensor<8x8xf32>
  func.return
}
// CHECK: tensor.concat: operand 1 shape [4, 4] must match the result [8, 8] except on axis 0

// -----
func.func @concat_sum(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) {
  %c = tensor.concat %a, %b {axis = 0 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<12x8xf32>
  func.return
}
// CHECK: tensor.concat: result axis 0 has size 12, but the operands sum to 8

// -----
func.func @mask_rank(%a: tensor<4xf32>) {
  %c = tensor.causal_mask %a : tensor<4xf32>
  func.return
}
// CHECK: tensor.causal_mask: operand must have rank >= 2 ([..., Sq, Sk]), got [4]

// -----
func.func @mask_type(%a: tensor<4x4xf32>) {
  %c = tensor.causal_mask %a : tensor<4x4xf32> -> tensor<4x4xbf16>
  func.return
}
// CHECK: tensor.causal_mask: result type must equal the operand type, got tensor<4x4xf32> -> tensor<4x4xbf16>

// -----
func.func @mask_window(%a: tensor<4x4xf32>) {
  %c = tensor.causal_mask %a {window = 0 : i64} : tensor<4x4xf32>
  func.return
}
// CHECK: tensor.causal_mask: window must be at least 1 key, got 0

// -----
func.func @gather_table(%t: tensor<100xbf16>, %i: tensor<4xi64>) {
  %c = tensor.gather_rows %t, %i : (tensor<100xbf16>, tensor<4xi64>) -> tensor<4xbf16>
  func.return
}
// CHECK: tensor.gather_rows: table must be 2-D [V, H], got [100]

// -----
func.func @gather_ids(%t: tensor<100x8xbf16>, %i: tensor<4xf32>) {
  %c = tensor.gather_rows %t, %i : (tensor<100x8xbf16>, tensor<4xf32>) -> tensor<4x8xbf16>
  func.return
}
// CHECK: tensor.gather_rows: ids must be integers, got f32

// -----
func.func @gather_shape(%t: tensor<100x8xbf16>, %i: tensor<4xi64>) {
  %c = tensor.gather_rows %t, %i : (tensor<100x8xbf16>, tensor<4xi64>) -> tensor<8x4xbf16>
  func.return
}
// CHECK: tensor.gather_rows: result shape must be [4, 8], got [8, 4]

// -----
func.func @gather_dtype(%t: tensor<100x8xbf16>, %i: tensor<4xi64>) {
  %c = tensor.gather_rows %t, %i : (tensor<100x8xbf16>, tensor<4xi64>) -> tensor<4x8xf32>
  func.return
}
// CHECK: tensor.gather_rows: result element type f32 must equal the table's bf16
