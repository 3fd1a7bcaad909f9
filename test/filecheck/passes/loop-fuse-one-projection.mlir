// RUN: emmy-opt %s -p convert-tensor-to-loop,loop-fuse | filecheck %s
// Rule (b)'s limit: one contraction against weights per loop. Phi-2 adds its attention's output
// projection (dense) and the MLP's fc2 to the residual in one expression; the sum absorbs one
// projection as its epilogue and reads the other, which stays a loop of its own (one loop
// holding both, over k = 512 and k_1 = 1024, was no contraction kernel and failed at the tile stage).

builtin.module {
  func.func @parallel(%x: tensor<300x64xbf16> {emmy.name = "hidden_states", emmy.role = "input"}, %a: tensor<300x512xbf16> {emmy.name = "attn", emmy.role = "input"}, %h: tensor<300x1024xbf16> {emmy.name = "h", emmy.role = "input"}, %wd: tensor<64x512xbf16> {emmy.name = "self_attn.dense.weight", emmy.role = "param"}, %wf: tensor<64x1024xbf16> {emmy.name = "mlp.fc2.weight", emmy.role = "param"}) -> tensor<300x64xbf16> {
    %d = tensor.matmul %a, %wd {transpose_rhs, emmy.origin = "linear_dense"} : (tensor<300x512xbf16>, tensor<64x512xbf16>) -> tensor<300x64xbf16>
    %f = tensor.matmul %h, %wf {transpose_rhs, emmy.origin = "linear_fc2"} : (tensor<300x1024xbf16>, tensor<64x1024xbf16>) -> tensor<300x64xbf16>
    %s = tensor.add %d, %f {emmy.origin = "add"} : tensor<300x64xbf16>
    %r = tensor.add %s, %x {emmy.origin = "residual"} : tensor<300x64xbf16>
    func.return %r : tensor<300x64xbf16>
  }
}

// CHECK:      %f = loop.fused @linear_fc2 axes [m = 300, n = 64, k = 1024] ins(%h, %wf
// CHECK:      %r = loop.fused @dense_residual axes [m = 300, n = 64, k = 512] ins(%x, %f, %a, %wd
// CHECK-SAME: emmy.fused_from = ["linear_dense", "add", "residual"]
// CHECK:      func.return %r
