// RUN: emmy-opt %s --split-input-file -p tensor-merge-siblings | filecheck %s
// RUN: emmy-opt %inputs/torch-layer.mlir -p convert-torch-to-tensor,tensor-merge-siblings | filecheck %s --check-prefix=LAYER

// The Qwen3 layer: q/k/v become one matmul over [4096, 1024] weights, gate/up one over [6144, 1024].
// LAYER: %w_qkv_proj = tensor.concat %self_attn.q_proj.weight, %self_attn.k_proj.weight, %self_attn.v_proj.weight {axis = 0 : i64, emmy.origin = "linear_qkv_proj"} : (tensor<2048x1024xbf16>, tensor<1024x1024xbf16>, tensor<1024x1024xbf16>) -> tensor<4096x1024xbf16>
// LAYER-NEXT: %qkv_proj = tensor.matmul %{{.*}}, %w_qkv_proj {transpose_rhs, emmy.origin = "linear_qkv_proj"} : (tensor<32x1024xbf16>, tensor<4096x1024xbf16>) -> tensor<32x4096xbf16>
// LAYER: %w_gate_up_proj = tensor.concat %mlp.gate_proj.weight, %mlp.up_proj.weight {axis = 0 : i64, emmy.origin = "linear_gate_up_proj"}
// LAYER-NEXT: %gate_up_proj = tensor.matmul %{{.*}}, %w_gate_up_proj {transpose_rhs, emmy.origin = "linear_gate_up_proj"} : (tensor<32x1024xbf16>, tensor<6144x1024xbf16>) -> tensor<32x6144xbf16>
// LAYER-NOT: "linear_q_proj"} : (
// LAYER-NOT: "linear_up_proj"} : (

// q, k and v read the same 3-D input, each through its own reshape to 2-D.
func.func @qkv(%h: tensor<1x8x64xbf16>, %wq: tensor<128x64xbf16>, %wk: tensor<32x64xbf16>, %wv: tensor<32x64xbf16>) -> (tensor<1x8x128xbf16>, tensor<1x8x32xbf16>, tensor<1x8x32xbf16>) {
  %0 = tensor.reshape %h {emmy.origin = "linear_q_proj"} : tensor<1x8x64xbf16> -> tensor<8x64xbf16>
  %q_proj = tensor.matmul %0, %wq {transpose_rhs, emmy.origin = "linear_q_proj"} : (tensor<8x64xbf16>, tensor<128x64xbf16>) -> tensor<8x128xbf16>
  %q = tensor.reshape %q_proj {emmy.origin = "linear_q_proj"} : tensor<8x128xbf16> -> tensor<1x8x128xbf16>
  %1 = tensor.reshape %h {emmy.origin = "linear_k_proj"} : tensor<1x8x64xbf16> -> tensor<8x64xbf16>
  %k_proj = tensor.matmul %1, %wk {transpose_rhs, emmy.origin = "linear_k_proj"} : (tensor<8x64xbf16>, tensor<32x64xbf16>) -> tensor<8x32xbf16>
  %k = tensor.reshape %k_proj {emmy.origin = "linear_k_proj"} : tensor<8x32xbf16> -> tensor<1x8x32xbf16>
  %2 = tensor.reshape %h {emmy.origin = "linear_v_proj"} : tensor<1x8x64xbf16> -> tensor<8x64xbf16>
  %v_proj = tensor.matmul %2, %wv {transpose_rhs, emmy.origin = "linear_v_proj"} : (tensor<8x64xbf16>, tensor<32x64xbf16>) -> tensor<8x32xbf16>
  %v = tensor.reshape %v_proj {emmy.origin = "linear_v_proj"} : tensor<8x32xbf16> -> tensor<1x8x32xbf16>
  func.return %q, %k, %v : tensor<1x8x128xbf16>, tensor<1x8x32xbf16>, tensor<1x8x32xbf16>
}

// CHECK-LABEL: func.func @qkv
// CHECK-NEXT:    %[[X:.*]] = tensor.reshape %h {emmy.origin = "linear_qkv_proj"} : tensor<1x8x64xbf16> -> tensor<8x64xbf16>
// CHECK-NEXT:    %w_qkv_proj = tensor.concat %wq, %wk, %wv {axis = 0 : i64, emmy.origin = "linear_qkv_proj"} : (tensor<128x64xbf16>, tensor<32x64xbf16>, tensor<32x64xbf16>) -> tensor<192x64xbf16>
// CHECK-NEXT:    %qkv_proj = tensor.matmul %[[X]], %w_qkv_proj {transpose_rhs, emmy.origin = "linear_qkv_proj"} : (tensor<8x64xbf16>, tensor<192x64xbf16>) -> tensor<8x192xbf16>
// CHECK-NEXT:    %q_proj = tensor.slice %qkv_proj {starts = array<i64: 0, 0>, sizes = array<i64: 8, 128>, strides = array<i64: 1, 1>, emmy.origin = "linear_qkv_proj"} : tensor<8x192xbf16> -> tensor<8x128xbf16>
// CHECK-NEXT:    %k_proj = tensor.slice %qkv_proj {starts = array<i64: 0, 128>, sizes = array<i64: 8, 32>, strides = array<i64: 1, 1>, emmy.origin = "linear_qkv_proj"} : tensor<8x192xbf16> -> tensor<8x32xbf16>
// CHECK-NEXT:    %v_proj = tensor.slice %qkv_proj {starts = array<i64: 0, 160>, sizes = array<i64: 8, 32>, strides = array<i64: 1, 1>, emmy.origin = "linear_qkv_proj"} : tensor<8x192xbf16> -> tensor<8x32xbf16>
// CHECK-NEXT:    %q = tensor.reshape %q_proj {emmy.origin = "linear_q_proj"} : tensor<8x128xbf16> -> tensor<1x8x128xbf16>
// CHECK-NEXT:    %k = tensor.reshape %k_proj {emmy.origin = "linear_k_proj"} : tensor<8x32xbf16> -> tensor<1x8x32xbf16>
// CHECK-NEXT:    %v = tensor.reshape %v_proj {emmy.origin = "linear_v_proj"} : tensor<8x32xbf16> -> tensor<1x8x32xbf16>
// CHECK-NEXT:    func.return %q, %k, %v

// -----

// gate and up share a 2-D input; down reads another value and stays alone.
func.func @gate_up(%h: tensor<8x64xbf16>, %wg: tensor<96x64xbf16>, %wu: tensor<96x64xbf16>, %wd: tensor<64x96xbf16>) -> tensor<8x64xbf16> {
  %g = tensor.matmul %h, %wg {transpose_rhs, emmy.origin = "linear_gate_proj"} : (tensor<8x64xbf16>, tensor<96x64xbf16>) -> tensor<8x96xbf16>
  %u = tensor.matmul %h, %wu {transpose_rhs, emmy.origin = "linear_up_proj"} : (tensor<8x64xbf16>, tensor<96x64xbf16>) -> tensor<8x96xbf16>
  %m = tensor.mul %g, %u {emmy.origin = "mul"} : tensor<8x96xbf16>
  %d = tensor.matmul %m, %wd {transpose_rhs, emmy.origin = "linear_down_proj"} : (tensor<8x96xbf16>, tensor<64x96xbf16>) -> tensor<8x64xbf16>
  func.return %d : tensor<8x64xbf16>
}

// CHECK-LABEL: func.func @gate_up
// CHECK-NEXT:    %w_gate_up_proj = tensor.concat %wg, %wu {axis = 0 : i64, emmy.origin = "linear_gate_up_proj"} : (tensor<96x64xbf16>, tensor<96x64xbf16>) -> tensor<192x64xbf16>
// CHECK-NEXT:    %gate_up_proj = tensor.matmul %h, %w_gate_up_proj {transpose_rhs, emmy.origin = "linear_gate_up_proj"} : (tensor<8x64xbf16>, tensor<192x64xbf16>) -> tensor<8x192xbf16>
// CHECK-NEXT:    %g = tensor.slice %gate_up_proj {starts = array<i64: 0, 0>, sizes = array<i64: 8, 96>, strides = array<i64: 1, 1>, emmy.origin = "linear_gate_up_proj"} : tensor<8x192xbf16> -> tensor<8x96xbf16>
// CHECK-NEXT:    %u = tensor.slice %gate_up_proj {starts = array<i64: 0, 96>, sizes = array<i64: 8, 96>, strides = array<i64: 1, 1>, emmy.origin = "linear_gate_up_proj"} : tensor<8x192xbf16> -> tensor<8x96xbf16>
// CHECK-NEXT:    %m = tensor.mul %g, %u {emmy.origin = "mul"} : tensor<8x96xbf16>
// CHECK-NEXT:    %d = tensor.matmul %m, %wd {transpose_rhs, emmy.origin = "linear_down_proj"} : (tensor<8x96xbf16>, tensor<64x96xbf16>) -> tensor<8x64xbf16>
// CHECK-NEXT:    func.return %d

// -----

// Not merged: a computed right operand, an untransposed matmul, and two matmuls with
// different result dtypes.
func.func @kept(%h: tensor<8x64xbf16>, %w: tensor<16x64xbf16>, %w2: tensor<16x64xbf16>, %kt: tensor<64x16xbf16>) -> (tensor<8x16xbf16>, tensor<8x16xbf16>, tensor<8x16xbf16>, tensor<8x16xf32>) {
  %n = tensor.neg %w : tensor<16x64xbf16>
  %a = tensor.matmul %h, %n {transpose_rhs} : (tensor<8x64xbf16>, tensor<16x64xbf16>) -> tensor<8x16xbf16>
  %b = tensor.matmul %h, %kt : (tensor<8x64xbf16>, tensor<64x16xbf16>) -> tensor<8x16xbf16>
  %c = tensor.matmul %h, %w {transpose_rhs} : (tensor<8x64xbf16>, tensor<16x64xbf16>) -> tensor<8x16xbf16>
  %d = tensor.matmul %h, %w2 {transpose_rhs} : (tensor<8x64xbf16>, tensor<16x64xbf16>) -> tensor<8x16xf32>
  func.return %a, %b, %c, %d : tensor<8x16xbf16>, tensor<8x16xbf16>, tensor<8x16xbf16>, tensor<8x16xf32>
}

// CHECK-LABEL: func.func @kept
// CHECK-NEXT:    %n = tensor.neg %w
// CHECK-NEXT:    %a = tensor.matmul %h, %n {transpose_rhs}
// CHECK-NEXT:    %b = tensor.matmul %h, %kt :
// CHECK-NEXT:    %c = tensor.matmul %h, %w {transpose_rhs}
// CHECK-NEXT:    %d = tensor.matmul %h, %w2 {transpose_rhs}
// CHECK-NEXT:    func.return

// -----

// Two groups on two inputs; labels without the usual names are joined with "_".
func.func @two_groups(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>, %w1: tensor<2x8xf32>, %w2: tensor<3x8xf32>, %w3: tensor<2x8xf32>, %w4: tensor<2x8xf32>) -> (tensor<4x2xf32>, tensor<4x3xf32>, tensor<4x2xf32>, tensor<4x2xf32>) {
  %a = tensor.matmul %x, %w1 {transpose_rhs, emmy.origin = "linear_wq"} : (tensor<4x8xf32>, tensor<2x8xf32>) -> tensor<4x2xf32>
  %c = tensor.matmul %y, %w3 {transpose_rhs} : (tensor<4x8xf32>, tensor<2x8xf32>) -> tensor<4x2xf32>
  %b = tensor.matmul %x, %w2 {transpose_rhs, emmy.origin = "linear_wk"} : (tensor<4x8xf32>, tensor<3x8xf32>) -> tensor<4x3xf32>
  %d = tensor.matmul %y, %w4 {transpose_rhs} : (tensor<4x8xf32>, tensor<2x8xf32>) -> tensor<4x2xf32>
  func.return %a, %b, %c, %d : tensor<4x2xf32>, tensor<4x3xf32>, tensor<4x2xf32>, tensor<4x2xf32>
}

// CHECK-LABEL: func.func @two_groups
// CHECK-NEXT:    %w_wq_wk = tensor.concat %w1, %w2 {axis = 0 : i64, emmy.origin = "linear_wq_wk"} : (tensor<2x8xf32>, tensor<3x8xf32>) -> tensor<5x8xf32>
// CHECK-NEXT:    %wq_wk = tensor.matmul %x, %w_wq_wk {transpose_rhs, emmy.origin = "linear_wq_wk"}
// CHECK-NEXT:    %a = tensor.slice %wq_wk {starts = array<i64: 0, 0>, sizes = array<i64: 4, 2>, strides = array<i64: 1, 1>, emmy.origin = "linear_wq_wk"}
// CHECK-NEXT:    %b = tensor.slice %wq_wk {starts = array<i64: 0, 2>, sizes = array<i64: 4, 3>, strides = array<i64: 1, 1>, emmy.origin = "linear_wq_wk"}
// CHECK-NEXT:    %w_merged = tensor.concat %w3, %w4 {axis = 0 : i64, emmy.origin = "linear_merged"}
// CHECK-NEXT:    %merged = tensor.matmul %y, %w_merged {transpose_rhs, emmy.origin = "linear_merged"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x4xf32>
// CHECK-NEXT:    %c = tensor.slice %merged {starts = array<i64: 0, 0>, sizes = array<i64: 4, 2>
// CHECK-NEXT:    %d = tensor.slice %merged {starts = array<i64: 0, 2>, sizes = array<i64: 4, 2>
// CHECK-NEXT:    func.return %a, %b, %c, %d
