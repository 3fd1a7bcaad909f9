// RUN: emmy-opt %s -p convert-tensor-to-loop,loop-fuse,loop-hoist-params | filecheck %s
// Weights concatenated with no norm weight to fold (q and k merged as siblings, Phi-2's
// q/k/v/fc1): the one factor reads two parameters, so it is prepared once as one tensor (the
// prepare phase) and the contraction reads plain rows of it, which tensor maps can copy.

builtin.module {
  func.func @concat_weights(%x: tensor<300x64xbf16> {emmy.name = "h", emmy.role = "input"}, %wq: tensor<32x64xbf16> {emmy.name = "q_proj.weight", emmy.role = "param"}, %wk: tensor<16x64xbf16> {emmy.name = "k_proj.weight", emmy.role = "param"}) -> tensor<300x48xbf16> {
    %w = tensor.concat %wq, %wk {axis = 0 : i64, emmy.origin = "linear_qk_proj"} : (tensor<32x64xbf16>, tensor<16x64xbf16>) -> tensor<48x64xbf16>
    %y = tensor.matmul %x, %w {transpose_rhs, emmy.origin = "linear_qk_proj"} : (tensor<300x64xbf16>, tensor<48x64xbf16>) -> tensor<300x48xbf16>
    func.return %y : tensor<300x48xbf16>
  }
}

// CHECK-LABEL: func.func @concat_weights
// CHECK-NEXT:    %qk_proj_weights = loop.fused @qk_proj_weights axes [n = 48, k = 64] ins(%wq, %wk : tensor<32x64xbf16>, tensor<16x64xbf16>) -> tensor<48x64xbf16> attributes {emmy.origin = "qk_proj_weights", emmy.phase = "prepare"}
// CHECK:           arith.select
// CHECK:         %y = loop.fused @qk_proj axes [m = 300, n = 48, k = 64] ins(%x, %qk_proj_weights : tensor<300x64xbf16>, tensor<48x64xbf16>)
// CHECK-NOT:       arith.select
// CHECK:           loop.load %{{.*}}[%{{.*}}, %{{.*}}] : tensor<48x64xbf16> -> bf16
// CHECK:         func.return %y
