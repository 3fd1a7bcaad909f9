// RUN: emmy-opt %s -p convert-tensor-to-loop,loop-fuse | filecheck %s
// A computed A (here a residual add of two activations, as OLMo-2 feeds its MLP) is written
// once, not computed again for every column tile, from COMPUTED_A_MIN_COLUMNS (1024) output
// columns; below that it is the contraction's prologue as before.

builtin.module {
  func.func @wide(%x: tensor<8x64xbf16> {emmy.name = "hidden_states", emmy.role = "input"}, %y: tensor<8x64xbf16> {emmy.name = "o", emmy.role = "input"}, %w: tensor<2048x64xbf16> {emmy.name = "mlp.up_proj.weight", emmy.role = "param"}) -> tensor<8x2048xbf16> {
    %h = tensor.add %x, %y {emmy.origin = "residual"} : tensor<8x64xbf16>
    %u = tensor.matmul %h, %w {transpose_rhs, emmy.origin = "linear_up_proj"} : (tensor<8x64xbf16>, tensor<2048x64xbf16>) -> tensor<8x2048xbf16>
    func.return %u : tensor<8x2048xbf16>
  }
  func.func @narrow(%x: tensor<8x64xbf16> {emmy.name = "hidden_states", emmy.role = "input"}, %y: tensor<8x64xbf16> {emmy.name = "o", emmy.role = "input"}, %w: tensor<64x64xbf16> {emmy.name = "mlp.up_proj.weight", emmy.role = "param"}) -> tensor<8x64xbf16> {
    %h = tensor.add %x, %y {emmy.origin = "residual"} : tensor<8x64xbf16>
    %u = tensor.matmul %h, %w {transpose_rhs, emmy.origin = "linear_up_proj"} : (tensor<8x64xbf16>, tensor<64x64xbf16>) -> tensor<8x64xbf16>
    func.return %u : tensor<8x64xbf16>
  }
}

// CHECK-LABEL: func.func @wide
// CHECK:         %h = loop.fused @residual axes [d0 = 8, d1 = 64] ins(%x, %y
// CHECK:         %u = loop.fused @linear_up_proj axes [m = 8, n = 2048, k = 64] ins(%h, %w
// CHECK:         func.return %u

// CHECK-LABEL: func.func @narrow
// CHECK-NOT:     loop.fused @residual axes
// CHECK:         %u = loop.fused @residual_up_proj axes [m = 8, n = 64, k = 64] ins(%w, %x, %y
// CHECK:         func.return %u
