// RUN: emmy-opt %s --split-input-file -p convert-torch-to-tensor | filecheck %s
// RUN: emmy-opt %s --split-input-file -p convert-torch-to-tensor | filecheck %s --check-prefix=NOTORCH
// RUN: emmy-opt %inputs/torch-layer.mlir -p convert-torch-to-tensor | filecheck %s --check-prefix=LAYER

// NOTORCH-NOT: torch.

// The whole Qwen3 layer: the three projections, attention with GQA, the MLP.
// LAYER: tensor.matmul {{.*}}emmy.origin = "linear_q_proj"} : (tensor<32x1024xbf16>, tensor<2048x1024xbf16>) -> tensor<32x2048xbf16>
// LAYER: tensor.matmul {{.*}}emmy.origin = "linear_k_proj"}
// LAYER: tensor.matmul {{.*}}emmy.origin = "linear_v_proj"}
// LAYER: tensor.broadcast {{.*}}emmy.origin = "attention"} : tensor<1x8x32x128xbf16> -> tensor<1x8x2x32x128xbf16>
// LAYER: %scores = tensor.matmul {{.*}}emmy.origin = "attention"} : (tensor<1x16x32x128xbf16>, tensor<1x16x32x128xbf16>) -> tensor<1x16x32x32xf32>
// LAYER: tensor.causal_mask
// LAYER: tensor.matmul {{.*}}emmy.origin = "attention"} : (tensor<1x16x32x32xbf16>, tensor<1x16x32x128xbf16>) -> tensor<1x16x32x128xbf16>
// LAYER: tensor.matmul {{.*}}emmy.origin = "linear_o_proj"}
// LAYER: tensor.add %hidden_states, {{.*}}emmy.origin = "residual"}
// LAYER: tensor.matmul {{.*}}emmy.origin = "linear_gate_proj"}
// LAYER: tensor.sigmoid {{.*}}emmy.origin = "silu"}
// LAYER: tensor.matmul {{.*}}emmy.origin = "linear_up_proj"}
// LAYER: tensor.matmul {{.*}}emmy.origin = "linear_down_proj"}
// LAYER: tensor.add {{.*}}emmy.origin = "residual"}
// LAYER-NEXT: func.return

func.func @rms_norm_linear(%x: tensor<2x4x8xbf16> {emmy.name = "hidden_states", emmy.role = "input"}, %w: tensor<8xbf16> {emmy.name = "input_layernorm.weight", emmy.role = "param"}, %wq: tensor<16x8xbf16> {emmy.name = "self_attn.q_proj.weight", emmy.role = "param"}) -> tensor<2x4x16xbf16> {
  %h = torch.rms_norm %x, %w {eps = 1.000000e-06 : f64} : (tensor<2x4x8xbf16>, tensor<8xbf16>) -> tensor<2x4x8xbf16>
  %q = torch.linear %h, %wq : (tensor<2x4x8xbf16>, tensor<16x8xbf16>) -> tensor<2x4x16xbf16>
  func.return %q : tensor<2x4x16xbf16>
}

// CHECK-LABEL: func.func @rms_norm_linear
// CHECK-NEXT:    %xf = tensor.cast %x {emmy.origin = "rms_norm"} : tensor<2x4x8xbf16> -> tensor<2x4x8xf32>
// CHECK-NEXT:    %sq = tensor.mul %xf, %xf {emmy.origin = "rms_norm"} : tensor<2x4x8xf32>
// CHECK-NEXT:    %ss = tensor.sum %sq {axes = array<i64: 2>, emmy.origin = "rms_norm"} : tensor<2x4x8xf32> -> tensor<2x4xf32>
// CHECK-NEXT:    %[[INVN:.*]] = tensor.splat 1.250000e-01 {emmy.origin = "rms_norm"} : tensor<2x4xf32>
// CHECK-NEXT:    %ms = tensor.mul %ss, %[[INVN]] {emmy.origin = "rms_norm"} : tensor<2x4xf32>
// CHECK-NEXT:    %[[EPS:.*]] = tensor.splat 1.000000e-06 {emmy.origin = "rms_norm"} : tensor<2x4xf32>
// CHECK-NEXT:    %var = tensor.add %ms, %[[EPS]] {emmy.origin = "rms_norm"} : tensor<2x4xf32>
// CHECK-NEXT:    %rstd = tensor.rsqrt %var {emmy.origin = "rms_norm"} : tensor<2x4xf32>
// CHECK-NEXT:    %[[RB:.*]] = tensor.broadcast %rstd {dims = array<i64: 0, 1>, emmy.origin = "rms_norm"} : tensor<2x4xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT:    %normed = tensor.mul %xf, %[[RB]] {emmy.origin = "rms_norm"} : tensor<2x4x8xf32>
// CHECK-NEXT:    %[[BACK:.*]] = tensor.cast %normed {emmy.origin = "rms_norm"} : tensor<2x4x8xf32> -> tensor<2x4x8xbf16>
// CHECK-NEXT:    %[[WB:.*]] = tensor.broadcast %w {dims = array<i64: 2>, emmy.origin = "rms_norm"} : tensor<8xbf16> -> tensor<2x4x8xbf16>
// CHECK-NEXT:    %h = tensor.mul %[[WB]], %[[BACK]] {emmy.origin = "rms_norm"} : tensor<2x4x8xbf16>
// CHECK-NEXT:    %[[X2:.*]] = tensor.reshape %h {emmy.origin = "linear_q_proj"} : tensor<2x4x8xbf16> -> tensor<8x8xbf16>
// CHECK-NEXT:    %q_proj = tensor.matmul %[[X2]], %wq {transpose_rhs, emmy.origin = "linear_q_proj"} : (tensor<8x8xbf16>, tensor<16x8xbf16>) -> tensor<8x16xbf16>
// CHECK-NEXT:    %q = tensor.reshape %q_proj {emmy.origin = "linear_q_proj"} : tensor<8x16xbf16> -> tensor<2x4x16xbf16>
// CHECK-NEXT:    func.return %q : tensor<2x4x16xbf16>

// -----

func.func @attention(%q: tensor<1x4x6x8xbf16>, %k: tensor<1x2x6x8xbf16>, %v: tensor<1x2x6x8xbf16>) -> tensor<1x4x6x8xbf16> {
  %o = torch.scaled_dot_product_attention %q, %k, %v {is_causal = true, scale = 0.35355339059327373 : f64, enable_gqa = true} : (tensor<1x4x6x8xbf16>, tensor<1x2x6x8xbf16>, tensor<1x2x6x8xbf16>) -> tensor<1x4x6x8xbf16>
  func.return %o : tensor<1x4x6x8xbf16>
}

// CHECK-LABEL: func.func @attention
// CHECK-NEXT:    %[[KB:.*]] = tensor.broadcast %k {dims = array<i64: 0, 1, 3, 4>, emmy.origin = "attention"} : tensor<1x2x6x8xbf16> -> tensor<1x2x2x6x8xbf16>
// CHECK-NEXT:    %[[K:.*]] = tensor.reshape %[[KB]] {emmy.origin = "attention"} : tensor<1x2x2x6x8xbf16> -> tensor<1x4x6x8xbf16>
// CHECK-NEXT:    %[[VB:.*]] = tensor.broadcast %v {dims = array<i64: 0, 1, 3, 4>, emmy.origin = "attention"} : tensor<1x2x6x8xbf16> -> tensor<1x2x2x6x8xbf16>
// CHECK-NEXT:    %[[V:.*]] = tensor.reshape %[[VB]] {emmy.origin = "attention"} : tensor<1x2x2x6x8xbf16> -> tensor<1x4x6x8xbf16>
// CHECK-NEXT:    %scores = tensor.matmul %q, %[[K]] {transpose_rhs, emmy.origin = "attention"} : (tensor<1x4x6x8xbf16>, tensor<1x4x6x8xbf16>) -> tensor<1x4x6x6xf32>
// CHECK-NEXT:    %[[SCALE:.*]] = tensor.splat 0.35355339059327373 {emmy.origin = "attention"} : tensor<1x4x6x6xf32>
// CHECK-NEXT:    %scaled = tensor.mul %scores, %[[SCALE]] {emmy.origin = "attention"} : tensor<1x4x6x6xf32>
// CHECK-NEXT:    %masked = tensor.causal_mask %scaled {emmy.origin = "attention"} : tensor<1x4x6x6xf32>
// CHECK-NEXT:    %rowmax = tensor.reduce_max %masked {axes = array<i64: 3>, emmy.origin = "attention"} : tensor<1x4x6x6xf32> -> tensor<1x4x6xf32>
// CHECK-NEXT:    %[[MB:.*]] = tensor.broadcast %rowmax {dims = array<i64: 0, 1, 2>, emmy.origin = "attention"} : tensor<1x4x6xf32> -> tensor<1x4x6x6xf32>
// CHECK-NEXT:    %[[SH:.*]] = tensor.sub %masked, %[[MB]] {emmy.origin = "attention"} : tensor<1x4x6x6xf32>
// CHECK-NEXT:    %ex = tensor.exp %[[SH]] {emmy.origin = "attention"} : tensor<1x4x6x6xf32>
// CHECK-NEXT:    %rowsum = tensor.sum %ex {axes = array<i64: 3>, emmy.origin = "attention"} : tensor<1x4x6x6xf32> -> tensor<1x4x6xf32>
// CHECK-NEXT:    %[[ZB:.*]] = tensor.broadcast %rowsum {dims = array<i64: 0, 1, 2>, emmy.origin = "attention"} : tensor<1x4x6xf32> -> tensor<1x4x6x6xf32>
// CHECK-NEXT:    %probs = tensor.div %ex, %[[ZB]] {emmy.origin = "attention"} : tensor<1x4x6x6xf32>
// CHECK-NEXT:    %[[P:.*]] = tensor.cast %probs {emmy.origin = "attention"} : tensor<1x4x6x6xf32> -> tensor<1x4x6x6xbf16>
// CHECK-NEXT:    %o = tensor.matmul %[[P]], %[[V]] {emmy.origin = "attention"} : (tensor<1x4x6x6xbf16>, tensor<1x4x6x8xbf16>) -> tensor<1x4x6x8xbf16>
// CHECK-NEXT:    func.return %o

// -----

// A sliding window rides on the causal mask.
func.func @window(%q: tensor<1x2x6x8xbf16>) -> tensor<1x2x6x8xbf16> {
  %o = torch.scaled_dot_product_attention %q, %q, %q {is_causal = true, scale = 0.35355339059327373 : f64, enable_gqa = false, window = 3 : i64} : (tensor<1x2x6x8xbf16>, tensor<1x2x6x8xbf16>, tensor<1x2x6x8xbf16>) -> tensor<1x2x6x8xbf16>
  func.return %o : tensor<1x2x6x8xbf16>
}

// CHECK-LABEL: func.func @window
// CHECK:         %masked = tensor.causal_mask %scaled {window = 3 : i64, emmy.origin = "attention"} : tensor<1x2x6x6xf32>

// -----

func.func @activations(%x: tensor<4x8xbf16>, %y: tensor<4x8xf32>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x8xf32>) {
  %s = torch.silu %x : (tensor<4x8xbf16>) -> tensor<4x8xbf16>
  %g = torch.gelu %x {approximate = "none"} : (tensor<4x8xbf16>) -> tensor<4x8xbf16>
  %t = torch.gelu %y {approximate = "tanh"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %s, %g, %t : tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x8xf32>
}

// CHECK-LABEL: func.func @activations
// CHECK-NEXT:    %[[XF:.*]] = tensor.cast %x {emmy.origin = "silu"} : tensor<4x8xbf16> -> tensor<4x8xf32>
// CHECK-NEXT:    %[[SIG:.*]] = tensor.sigmoid %[[XF]] {emmy.origin = "silu"} : tensor<4x8xf32>
// CHECK-NEXT:    %[[PROD:.*]] = tensor.mul %[[XF]], %[[SIG]] {emmy.origin = "silu"} : tensor<4x8xf32>
// CHECK-NEXT:    %s = tensor.cast %[[PROD]] {emmy.origin = "silu"} : tensor<4x8xf32> -> tensor<4x8xbf16>
// CHECK-NEXT:    %[[GX:.*]] = tensor.cast %x {emmy.origin = "gelu"} : tensor<4x8xbf16> -> tensor<4x8xf32>
// CHECK-NEXT:    %[[R2:.*]] = tensor.splat 0.70710678118654757 {emmy.origin = "gelu"} : tensor<4x8xf32>
// CHECK-NEXT:    %[[XS:.*]] = tensor.mul %[[GX]], %[[R2]] {emmy.origin = "gelu"} : tensor<4x8xf32>
// CHECK-NEXT:    %[[ERF:.*]] = tensor.erf %[[XS]] {emmy.origin = "gelu"} : tensor<4x8xf32>
// CHECK-NEXT:    %[[HALF:.*]] = tensor.splat 5.000000e-01 {emmy.origin = "gelu"} : tensor<4x8xf32>
// CHECK-NEXT:    %[[XH:.*]] = tensor.mul %[[GX]], %[[HALF]] {emmy.origin = "gelu"} : tensor<4x8xf32>
// CHECK-NEXT:    %[[ONE:.*]] = tensor.splat 1.000000e+00 {emmy.origin = "gelu"} : tensor<4x8xf32>
// CHECK-NEXT:    %[[E1:.*]] = tensor.add %[[ERF]], %[[ONE]] {emmy.origin = "gelu"} : tensor<4x8xf32>
// CHECK-NEXT:    %[[G:.*]] = tensor.mul %[[XH]], %[[E1]] {emmy.origin = "gelu"} : tensor<4x8xf32>
// CHECK-NEXT:    %g = tensor.cast %[[G]] {emmy.origin = "gelu"} : tensor<4x8xf32> -> tensor<4x8xbf16>
// CHECK-NEXT:    %[[SQ:.*]] = tensor.mul %y, %y {emmy.origin = "gelu"} : tensor<4x8xf32>
// CHECK-NEXT:    %[[CUBE:.*]] = tensor.mul %[[SQ]], %y {emmy.origin = "gelu"} : tensor<4x8xf32>
// CHECK-NEXT:    %[[KAPPA:.*]] = tensor.splat 4.471500e-02 {emmy.origin = "gelu"} : tensor<4x8xf32>
// CHECK-NEXT:    %[[KC:.*]] = tensor.mul %[[CUBE]], %[[KAPPA]] {emmy.origin = "gelu"} : tensor<4x8xf32>
// CHECK-NEXT:    %[[IN:.*]] = tensor.add %y, %[[KC]] {emmy.origin = "gelu"} : tensor<4x8xf32>
// CHECK-NEXT:    %[[BETA:.*]] = tensor.splat 0.79788456080286541 {emmy.origin = "gelu"} : tensor<4x8xf32>
// CHECK-NEXT:    %[[IB:.*]] = tensor.mul %[[IN]], %[[BETA]] {emmy.origin = "gelu"} : tensor<4x8xf32>
// CHECK-NEXT:    %[[TH:.*]] = tensor.tanh %[[IB]] {emmy.origin = "gelu"} : tensor<4x8xf32>
// CHECK-NEXT:    %[[H2:.*]] = tensor.splat 5.000000e-01 {emmy.origin = "gelu"} : tensor<4x8xf32>
// CHECK-NEXT:    %[[YH:.*]] = tensor.mul %y, %[[H2]] {emmy.origin = "gelu"} : tensor<4x8xf32>
// CHECK-NEXT:    %[[O2:.*]] = tensor.splat 1.000000e+00 {emmy.origin = "gelu"} : tensor<4x8xf32>
// CHECK-NEXT:    %[[T1:.*]] = tensor.add %[[TH]], %[[O2]] {emmy.origin = "gelu"} : tensor<4x8xf32>
// CHECK-NEXT:    %t = tensor.mul %[[YH]], %[[T1]] {emmy.origin = "gelu"} : tensor<4x8xf32>
// CHECK-NEXT:    func.return %s, %g, %t

// -----

func.func @elementwise(%a: tensor<4x1x8xbf16>, %b: tensor<3x1xf32>, %c: tensor<4x3x8xf32>, %d: tensor<8xbf16>, %e: tensor<2x8xbf16>) -> (tensor<4x3x8xf32>, tensor<2x8xbf16>, tensor<2x8xbf16>, tensor<2x8xbf16>) {
  %m = torch.mul %a, %b : (tensor<4x1x8xbf16>, tensor<3x1xf32>) -> tensor<4x3x8xf32>
  %s = torch.sub %m, %c {alpha = 2.000000e+00 : f64} : (tensor<4x3x8xf32>, tensor<4x3x8xf32>) -> tensor<4x3x8xf32>
  %p = torch.add %e, %d {alpha = 5.000000e-01 : f64} : (tensor<2x8xbf16>, tensor<8xbf16>) -> tensor<2x8xbf16>
  %q = torch.mul_scalar %e {value = 1.000000e-01 : f64} : (tensor<2x8xbf16>) -> tensor<2x8xbf16>
  %n = torch.neg %e : (tensor<2x8xbf16>) -> tensor<2x8xbf16>
  func.return %s, %p, %q, %n : tensor<4x3x8xf32>, tensor<2x8xbf16>, tensor<2x8xbf16>, tensor<2x8xbf16>
}

// CHECK-LABEL: func.func @elementwise
// bf16 [4,1,8] * f32 [3,1]: cast to f32, then explicit broadcasts to [4,3,8]
// CHECK-NEXT:    %[[AF:.*]] = tensor.cast %a {emmy.origin = "mul"} : tensor<4x1x8xbf16> -> tensor<4x1x8xf32>
// CHECK-NEXT:    %[[AB:.*]] = tensor.broadcast %[[AF]] {dims = array<i64: 0, 1, 2>, emmy.origin = "mul"} : tensor<4x1x8xf32> -> tensor<4x3x8xf32>
// CHECK-NEXT:    %[[BB:.*]] = tensor.broadcast %b {dims = array<i64: 1, 2>, emmy.origin = "mul"} : tensor<3x1xf32> -> tensor<4x3x8xf32>
// CHECK-NEXT:    %m = tensor.mul %[[AB]], %[[BB]] {emmy.origin = "mul"} : tensor<4x3x8xf32>
// CHECK-NEXT:    %[[ALPHA:.*]] = tensor.splat 2.000000e+00 {emmy.origin = "sub"} : tensor<4x3x8xf32>
// CHECK-NEXT:    %[[CA:.*]] = tensor.mul %c, %[[ALPHA]] {emmy.origin = "sub"} : tensor<4x3x8xf32>
// CHECK-NEXT:    %s = tensor.sub %m, %[[CA]] {emmy.origin = "sub"} : tensor<4x3x8xf32>
// bf16 with alpha: computed in f32, rounded once
// CHECK-NEXT:    %[[EF:.*]] = tensor.cast %e {emmy.origin = "add"} : tensor<2x8xbf16> -> tensor<2x8xf32>
// CHECK-NEXT:    %[[DF:.*]] = tensor.cast %d {emmy.origin = "add"} : tensor<8xbf16> -> tensor<8xf32>
// CHECK-NEXT:    %[[DB:.*]] = tensor.broadcast %[[DF]] {dims = array<i64: 1>, emmy.origin = "add"} : tensor<8xf32> -> tensor<2x8xf32>
// CHECK-NEXT:    %[[HALF:.*]] = tensor.splat 5.000000e-01 {emmy.origin = "add"} : tensor<2x8xf32>
// CHECK-NEXT:    %[[DS:.*]] = tensor.mul %[[DB]], %[[HALF]] {emmy.origin = "add"} : tensor<2x8xf32>
// CHECK-NEXT:    %[[SUM:.*]] = tensor.add %[[EF]], %[[DS]] {emmy.origin = "add"} : tensor<2x8xf32>
// CHECK-NEXT:    %p = tensor.cast %[[SUM]] {emmy.origin = "add"} : tensor<2x8xf32> -> tensor<2x8xbf16>
// the scalar is not rounded to bf16: f32 arithmetic, one rounding
// CHECK-NEXT:    %[[EF2:.*]] = tensor.cast %e {emmy.origin = "mul_scalar"} : tensor<2x8xbf16> -> tensor<2x8xf32>
// CHECK-NEXT:    %[[TENTH:.*]] = tensor.splat 1.000000e-01 {emmy.origin = "mul_scalar"} : tensor<2x8xf32>
// CHECK-NEXT:    %[[PR:.*]] = tensor.mul %[[EF2]], %[[TENTH]] {emmy.origin = "mul_scalar"} : tensor<2x8xf32>
// CHECK-NEXT:    %q = tensor.cast %[[PR]] {emmy.origin = "mul_scalar"} : tensor<2x8xf32> -> tensor<2x8xbf16>
// CHECK-NEXT:    %n = tensor.neg %e {emmy.origin = "neg"} : tensor<2x8xbf16>
// CHECK-NEXT:    func.return %s, %p, %q, %n

// -----

func.func @layout(%x: tensor<2x3x8xbf16>, %t: tensor<10x4xbf16>, %ids: tensor<2x3xi64>) -> (tensor<3x8x2xbf16>, tensor<2x8x3xf32>, tensor<2x3x3xbf16>, tensor<2x6x8xbf16>, tensor<2x3x4xbf16>) {
  %v = torch.view %x : (tensor<2x3x8xbf16>) -> tensor<2x3x8xbf16>
  %w = torch.view %v : (tensor<2x3x8xbf16>) -> tensor<6x8xbf16>
  %p = torch.permute %x {perm = array<i64: 1, 2, 0>} : (tensor<2x3x8xbf16>) -> tensor<3x8x2xbf16>
  %tr = torch.transpose %x {dims = array<i64: 1, 2>} : (tensor<2x3x8xbf16>) -> tensor<2x8x3xbf16>
  %f = torch.to %tr : (tensor<2x8x3xbf16>) -> tensor<2x8x3xf32>
  %same = torch.to %x : (tensor<2x3x8xbf16>) -> tensor<2x3x8xbf16>
  %sl = torch.slice %same {dim = 2 : i64, start = 1 : i64, end = 8 : i64, step = 3 : i64} : (tensor<2x3x8xbf16>) -> tensor<2x3x3xbf16>
  %c = torch.cat %x, %x {dim = 1 : i64} : (tensor<2x3x8xbf16>, tensor<2x3x8xbf16>) -> tensor<2x6x8xbf16>
  %e = torch.embedding %t, %ids : (tensor<10x4xbf16>, tensor<2x3xi64>) -> tensor<2x3x4xbf16>
  func.return %p, %f, %sl, %c, %e : tensor<3x8x2xbf16>, tensor<2x8x3xf32>, tensor<2x3x3xbf16>, tensor<2x6x8xbf16>, tensor<2x3x4xbf16>
}

// CHECK-LABEL: func.func @layout
// no-op view and to disappear
// CHECK-NEXT:    %w = tensor.reshape %x {emmy.origin = "view"} : tensor<2x3x8xbf16> -> tensor<6x8xbf16>
// CHECK-NEXT:    %p = tensor.transpose %x {perm = array<i64: 1, 2, 0>, emmy.origin = "permute"} : tensor<2x3x8xbf16> -> tensor<3x8x2xbf16>
// CHECK-NEXT:    %tr = tensor.transpose %x {perm = array<i64: 0, 2, 1>, emmy.origin = "transpose"} : tensor<2x3x8xbf16> -> tensor<2x8x3xbf16>
// CHECK-NEXT:    %f = tensor.cast %tr {emmy.origin = "to"} : tensor<2x8x3xbf16> -> tensor<2x8x3xf32>
// CHECK-NEXT:    %sl = tensor.slice %x {starts = array<i64: 0, 0, 1>, sizes = array<i64: 2, 3, 3>, strides = array<i64: 1, 1, 3>, emmy.origin = "slice"} : tensor<2x3x8xbf16> -> tensor<2x3x3xbf16>
// CHECK-NEXT:    %c = tensor.concat %x, %x {axis = 1 : i64, emmy.origin = "cat"} : (tensor<2x3x8xbf16>, tensor<2x3x8xbf16>) -> tensor<2x6x8xbf16>
// CHECK-NEXT:    %e = tensor.gather_rows %t, %ids {emmy.origin = "embedding"} : (tensor<10x4xbf16>, tensor<2x3xi64>) -> tensor<2x3x4xbf16>
// CHECK-NEXT:    func.return %p, %f, %sl, %c, %e

// -----

func.func @layer_norm_bias(%x: tensor<4x8xbf16>, %w: tensor<8xbf16> {emmy.name = "ln.weight", emmy.role = "param"}, %b: tensor<8xbf16>, %lw: tensor<3x8xbf16> {emmy.name = "fc1.weight", emmy.role = "param"}, %lb: tensor<3xbf16>) -> tensor<4x3xbf16> {
  %h = torch.layer_norm %x, %w, %b {eps = 1.000000e-05 : f64} : (tensor<4x8xbf16>, tensor<8xbf16>, tensor<8xbf16>) -> tensor<4x8xbf16>
  %y = torch.linear %h, %lw, %lb : (tensor<4x8xbf16>, tensor<3x8xbf16>, tensor<3xbf16>) -> tensor<4x3xbf16>
  func.return %y : tensor<4x3xbf16>
}

// CHECK-LABEL: func.func @layer_norm_bias
// CHECK-NEXT:    %xf = tensor.cast %x {emmy.origin = "layer_norm"} : tensor<4x8xbf16> -> tensor<4x8xf32>
// CHECK-NEXT:    %sum = tensor.sum %xf {axes = array<i64: 1>, emmy.origin = "layer_norm"} : tensor<4x8xf32> -> tensor<4xf32>
// CHECK-NEXT:    %[[N1:.*]] = tensor.splat 1.250000e-01 {emmy.origin = "layer_norm"} : tensor<4xf32>
// CHECK-NEXT:    %mean = tensor.mul %sum, %[[N1]] {emmy.origin = "layer_norm"} : tensor<4xf32>
// CHECK-NEXT:    %[[MB:.*]] = tensor.broadcast %mean {dims = array<i64: 0>, emmy.origin = "layer_norm"} : tensor<4xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    %centered = tensor.sub %xf, %[[MB]] {emmy.origin = "layer_norm"} : tensor<4x8xf32>
// CHECK-NEXT:    %sq = tensor.mul %centered, %centered {emmy.origin = "layer_norm"} : tensor<4x8xf32>
// CHECK-NEXT:    %ss = tensor.sum %sq {axes = array<i64: 1>, emmy.origin = "layer_norm"} : tensor<4x8xf32> -> tensor<4xf32>
// CHECK-NEXT:    %[[N2:.*]] = tensor.splat 1.250000e-01 {emmy.origin = "layer_norm"} : tensor<4xf32>
// CHECK-NEXT:    %var = tensor.mul %ss, %[[N2]] {emmy.origin = "layer_norm"} : tensor<4xf32>
// CHECK-NEXT:    %[[EPS:.*]] = tensor.splat 1.000000e-05 {emmy.origin = "layer_norm"} : tensor<4xf32>
// CHECK-NEXT:    %[[VE:.*]] = tensor.add %var, %[[EPS]] {emmy.origin = "layer_norm"} : tensor<4xf32>
// CHECK-NEXT:    %rstd = tensor.rsqrt %[[VE]] {emmy.origin = "layer_norm"} : tensor<4xf32>
// CHECK-NEXT:    %[[RB:.*]] = tensor.broadcast %rstd {dims = array<i64: 0>, emmy.origin = "layer_norm"} : tensor<4xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    %normed = tensor.mul %centered, %[[RB]] {emmy.origin = "layer_norm"} : tensor<4x8xf32>
// CHECK-NEXT:    %[[WF:.*]] = tensor.cast %w {emmy.origin = "layer_norm"} : tensor<8xbf16> -> tensor<8xf32>
// CHECK-NEXT:    %[[WB:.*]] = tensor.broadcast %[[WF]] {dims = array<i64: 1>, emmy.origin = "layer_norm"} : tensor<8xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    %[[Y1:.*]] = tensor.mul %normed, %[[WB]] {emmy.origin = "layer_norm"} : tensor<4x8xf32>
// CHECK-NEXT:    %[[BF:.*]] = tensor.cast %b {emmy.origin = "layer_norm"} : tensor<8xbf16> -> tensor<8xf32>
// CHECK-NEXT:    %[[BB:.*]] = tensor.broadcast %[[BF]] {dims = array<i64: 1>, emmy.origin = "layer_norm"} : tensor<8xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    %[[Y2:.*]] = tensor.add %[[Y1]], %[[BB]] {emmy.origin = "layer_norm"} : tensor<4x8xf32>
// CHECK-NEXT:    %h = tensor.cast %[[Y2]] {emmy.origin = "layer_norm"} : tensor<4x8xf32> -> tensor<4x8xbf16>
// a 2-D input needs no reshape; the bias is added after the matmul
// CHECK-NEXT:    %fc1 = tensor.matmul %h, %lw {transpose_rhs, emmy.origin = "linear_fc1"} : (tensor<4x8xbf16>, tensor<3x8xbf16>) -> tensor<4x3xbf16>
// CHECK-NEXT:    %[[LB:.*]] = tensor.broadcast %lb {dims = array<i64: 1>, emmy.origin = "linear_fc1"} : tensor<3xbf16> -> tensor<4x3xbf16>
// CHECK-NEXT:    %y = tensor.add %fc1, %[[LB]] {emmy.origin = "linear_fc1"} : tensor<4x3xbf16>
// CHECK-NEXT:    func.return %y

// -----

func.func @labels(%x: tensor<1x2x4x8xbf16> {emmy.name = "hidden_states", emmy.role = "input"}, %cos: tensor<1x4x8xbf16> {emmy.name = "cos", emmy.role = "input"}, %sin: tensor<1x4x8xbf16> {emmy.name = "sin", emmy.role = "input"}) -> tensor<1x2x4x8xbf16> {
  %c = torch.view %cos : (tensor<1x4x8xbf16>) -> tensor<1x1x4x8xbf16>
  %s = torch.view %sin : (tensor<1x4x8xbf16>) -> tensor<1x1x4x8xbf16>
  %xc = torch.mul %x, %c : (tensor<1x2x4x8xbf16>, tensor<1x1x4x8xbf16>) -> tensor<1x2x4x8xbf16>
  %x1 = torch.slice %x {dim = 3 : i64, start = 0 : i64, end = 4 : i64, step = 1 : i64} : (tensor<1x2x4x8xbf16>) -> tensor<1x2x4x4xbf16>
  %x2 = torch.slice %x {dim = 3 : i64, start = 4 : i64, end = 8 : i64, step = 1 : i64} : (tensor<1x2x4x8xbf16>) -> tensor<1x2x4x4xbf16>
  %n = torch.neg %x2 : (tensor<1x2x4x4xbf16>) -> tensor<1x2x4x4xbf16>
  %r = torch.cat %n, %x1 {dim = 3 : i64} : (tensor<1x2x4x4xbf16>, tensor<1x2x4x4xbf16>) -> tensor<1x2x4x8xbf16>
  %rs = torch.mul %r, %s : (tensor<1x2x4x8xbf16>, tensor<1x1x4x8xbf16>) -> tensor<1x2x4x8xbf16>
  %e = torch.add %xc, %rs : (tensor<1x2x4x8xbf16>, tensor<1x2x4x8xbf16>) -> tensor<1x2x4x8xbf16>
  %sq = torch.mul %e, %e : (tensor<1x2x4x8xbf16>, tensor<1x2x4x8xbf16>) -> tensor<1x2x4x8xbf16>
  %res = torch.add %x, %sq : (tensor<1x2x4x8xbf16>, tensor<1x2x4x8xbf16>) -> tensor<1x2x4x8xbf16>
  %res2 = torch.add %sq, %res : (tensor<1x2x4x8xbf16>, tensor<1x2x4x8xbf16>) -> tensor<1x2x4x8xbf16>
  func.return %res2 : tensor<1x2x4x8xbf16>
}

// CHECK-LABEL: func.func @labels
// rotary arithmetic (cos/sin, rotate_half) is "rope"; adds of the input or of a residual are "residual"
// CHECK-NEXT:    %c = tensor.reshape %cos {emmy.origin = "rope"}
// CHECK-NEXT:    %s = tensor.reshape %sin {emmy.origin = "rope"}
// CHECK-NEXT:    tensor.broadcast %c {dims = array<i64: 0, 1, 2, 3>, emmy.origin = "rope"} : tensor<1x1x4x8xbf16> -> tensor<1x2x4x8xbf16>
// CHECK-NEXT:    %xc = tensor.mul %x, %{{.*}} {emmy.origin = "rope"}
// CHECK-NEXT:    %x1 = tensor.slice %x {{.*}}emmy.origin = "rope"
// CHECK-NEXT:    %x2 = tensor.slice %x {{.*}}emmy.origin = "rope"
// CHECK-NEXT:    %n = tensor.neg %x2 {emmy.origin = "rope"}
// CHECK-NEXT:    %r = tensor.concat %n, %x1 {axis = 3 : i64, emmy.origin = "rope"}
// CHECK-NEXT:    tensor.broadcast %s {{.*}}emmy.origin = "rope"
// CHECK-NEXT:    %rs = tensor.mul %r, %{{.*}} {emmy.origin = "rope"}
// CHECK-NEXT:    %e = tensor.add %xc, %rs {emmy.origin = "rope"}
// CHECK-NEXT:    %sq = tensor.mul %e, %e {emmy.origin = "mul"}
// CHECK-NEXT:    %res = tensor.add %x, %sq {emmy.origin = "residual"}
// CHECK-NEXT:    %res2 = tensor.add %sq, %res {emmy.origin = "residual"}
// CHECK-NEXT:    func.return %res2

// -----

// ReLU is max(x, 0) in x's type; powers are products (or sqrt / rsqrt / reciprocal) in f32;
// softmax over the last axis and mean are f32 reductions rounded once.
func.func @more_activations(%x: tensor<4x8xbf16>, %y: tensor<4x8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x1xbf16>) {
  %s = torch.sigmoid %x : (tensor<4x8xbf16>) -> tensor<4x8xbf16>
  %r = torch.relu %s : (tensor<4x8xbf16>) -> tensor<4x8xbf16>
  %c = torch.pow_scalar %r {value = 3.000000e+00 : f64} : (tensor<4x8xbf16>) -> tensor<4x8xbf16>
  %h = torch.pow_scalar %y {value = 5.000000e-01 : f64} : (tensor<4x8xbf16>) -> tensor<4x8xbf16>
  %m = torch.minimum %c, %h : (tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<4x8xbf16>
  %p = torch.softmax %m {dim = 1 : i64} : (tensor<4x8xbf16>) -> tensor<4x8xbf16>
  %a = torch.mean %p {dims = array<i64: 1>, keepdim = true} : (tensor<4x8xbf16>) -> tensor<4x1xbf16>
  func.return %r, %c, %p, %a : tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x1xbf16>
}

// CHECK-LABEL: func.func @more_activations
// CHECK-NEXT:    %s = tensor.sigmoid %x {emmy.origin = "sigmoid"} : tensor<4x8xbf16>
// CHECK-NEXT:    %[[Z:.*]] = tensor.splat 0.000000e+00 {emmy.origin = "relu"} : tensor<4x8xbf16>
// CHECK-NEXT:    %r = tensor.max %s, %[[Z]] {emmy.origin = "relu"} : tensor<4x8xbf16>
// CHECK-NEXT:    %[[RF:.*]] = tensor.cast %r {{.*}} : tensor<4x8xbf16> -> tensor<4x8xf32>
// CHECK-NEXT:    %[[SQ:.*]] = tensor.mul %[[RF]], %[[RF]]
// CHECK-NEXT:    %[[CU:.*]] = tensor.mul %[[SQ]], %[[RF]]
// CHECK-NEXT:    %c = tensor.cast %[[CU]] {{.*}} : tensor<4x8xf32> -> tensor<4x8xbf16>
// CHECK-NEXT:    %[[YF:.*]] = tensor.cast %y
// CHECK-NEXT:    %[[RT:.*]] = tensor.sqrt %[[YF]]
// CHECK-NEXT:    %h = tensor.cast %[[RT]]
// CHECK-NEXT:    %m = tensor.min %c, %h {emmy.origin = "minimum"} : tensor<4x8xbf16>
// CHECK-NEXT:    %[[MF:.*]] = tensor.cast %m {emmy.origin = "softmax"} : tensor<4x8xbf16> -> tensor<4x8xf32>
// CHECK-NEXT:    %rowmax = tensor.reduce_max %[[MF]] {axes = array<i64: 1>, emmy.origin = "softmax"}
// CHECK-NEXT:    %[[MB:.*]] = tensor.broadcast %rowmax
// CHECK-NEXT:    %[[SH:.*]] = tensor.sub %[[MF]], %[[MB]]
// CHECK-NEXT:    %ex = tensor.exp %[[SH]]
// CHECK-NEXT:    %rowsum = tensor.sum %ex {axes = array<i64: 1>, emmy.origin = "softmax"}
// CHECK-NEXT:    %[[SB:.*]] = tensor.broadcast %rowsum
// CHECK-NEXT:    %probs = tensor.div %ex, %[[SB]]
// CHECK-NEXT:    %p = tensor.cast %probs {emmy.origin = "softmax"} : tensor<4x8xf32> -> tensor<4x8xbf16>
// CHECK-NEXT:    %[[PF:.*]] = tensor.cast %p {emmy.origin = "mean"}
// CHECK-NEXT:    %sum = tensor.sum %[[PF]] {axes = array<i64: 1>, emmy.origin = "mean"} : tensor<4x8xf32> -> tensor<4xf32>
// CHECK-NEXT:    %[[N:.*]] = tensor.splat 1.250000e-01 {emmy.origin = "mean"} : tensor<4xf32>
// CHECK-NEXT:    %mean = tensor.mul %sum, %[[N]]
// CHECK-NEXT:    %[[K:.*]] = tensor.reshape %mean {emmy.origin = "mean"} : tensor<4xf32> -> tensor<4x1xf32>
// CHECK-NEXT:    %a = tensor.cast %[[K]] {emmy.origin = "mean"} : tensor<4x1xf32> -> tensor<4x1xbf16>
// CHECK-NEXT:    func.return %r, %c, %p, %a

// -----

// abs is max(x, -x) and clamp a max and/or a min with the bounds, exact in x's type; sum is an
// f32 reduction rounded once, amax a max reduction in x's type (keepdim reshapes back); sqrt is
// one tensor op.
func.func @abs_clamp_sum_amax_sqrt(%x: tensor<4x8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x1xbf16>, tensor<8xbf16>) {
  %a = torch.abs %x : (tensor<4x8xbf16>) -> tensor<4x8xbf16>
  %c = torch.clamp %x {min = -5.000000e-01 : f64, max = 2.500000e-01 : f64} : (tensor<4x8xbf16>) -> tensor<4x8xbf16>
  %s = torch.sum %x {dims = array<i64: 1>, keepdim = true} : (tensor<4x8xbf16>) -> tensor<4x1xbf16>
  %m = torch.amax %x {dims = array<i64: 0>, keepdim = false} : (tensor<4x8xbf16>) -> tensor<8xbf16>
  %r = torch.sqrt %a : (tensor<4x8xbf16>) -> tensor<4x8xbf16>
  func.return %r, %c, %s, %m : tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x1xbf16>, tensor<8xbf16>
}

// CHECK-LABEL: func.func @abs_clamp_sum_amax_sqrt
// CHECK-NEXT:    %[[N:.*]] = tensor.neg %x {emmy.origin = "abs"} : tensor<4x8xbf16>
// CHECK-NEXT:    %a = tensor.max %x, %[[N]] {emmy.origin = "abs"} : tensor<4x8xbf16>
// CHECK-NEXT:    %[[LO:.*]] = tensor.splat -5.000000e-01 {emmy.origin = "clamp"} : tensor<4x8xbf16>
// CHECK-NEXT:    %[[M:.*]] = tensor.max %x, %[[LO]] {emmy.origin = "clamp"} : tensor<4x8xbf16>
// CHECK-NEXT:    %[[HI:.*]] = tensor.splat 2.500000e-01 {emmy.origin = "clamp"} : tensor<4x8xbf16>
// CHECK-NEXT:    %c = tensor.min %[[M]], %[[HI]] {emmy.origin = "clamp"} : tensor<4x8xbf16>
// CHECK-NEXT:    %[[XF:.*]] = tensor.cast %x {emmy.origin = "sum"} : tensor<4x8xbf16> -> tensor<4x8xf32>
// CHECK-NEXT:    %sum = tensor.sum %[[XF]] {axes = array<i64: 1>, emmy.origin = "sum"} : tensor<4x8xf32> -> tensor<4xf32>
// CHECK-NEXT:    %[[K:.*]] = tensor.reshape %sum {emmy.origin = "sum"} : tensor<4xf32> -> tensor<4x1xf32>
// CHECK-NEXT:    %s = tensor.cast %[[K]] {emmy.origin = "sum"} : tensor<4x1xf32> -> tensor<4x1xbf16>
// CHECK-NEXT:    %amax = tensor.reduce_max %x {axes = array<i64: 0>, emmy.origin = "amax"} : tensor<4x8xbf16> -> tensor<8xbf16>
// CHECK-NEXT:    %r = tensor.sqrt %a {emmy.origin = "sqrt"} : tensor<4x8xbf16>
// CHECK-NEXT:    func.return %r, %c, %s, %amax

// -----

// expand is one tensor.broadcast, right-aligned (new leading axes and axes of extent 1).
func.func @expand(%x: tensor<2x1x8xbf16>) -> tensor<3x2x4x8xbf16> {
  %e = torch.expand %x : (tensor<2x1x8xbf16>) -> tensor<3x2x4x8xbf16>
  func.return %e : tensor<3x2x4x8xbf16>
}

// CHECK-LABEL: func.func @expand
// CHECK-NEXT:    %e = tensor.broadcast %x {{.*}}emmy.origin = "expand"{{.*}} : tensor<2x1x8xbf16> -> tensor<3x2x4x8xbf16>
// CHECK-NEXT:    func.return %e

// -----

// a @ b: the batch dims broadcast (b's leading 1 to 2), then one tensor.matmul with b as [K, N].
func.func @matmul(%a: tensor<2x4x8xbf16>, %b: tensor<1x8x5xbf16>) -> tensor<2x4x5xbf16> {
  %r = torch.matmul %a, %b : (tensor<2x4x8xbf16>, tensor<1x8x5xbf16>) -> tensor<2x4x5xbf16>
  func.return %r : tensor<2x4x5xbf16>
}

// CHECK-LABEL: func.func @matmul
// CHECK-NEXT:    %[[B:.*]] = tensor.broadcast %b {dims = array<i64: 0, 1, 2>, emmy.origin = "matmul"} : tensor<1x8x5xbf16> -> tensor<2x8x5xbf16>
// CHECK-NEXT:    %r = tensor.matmul %a, %[[B]] {emmy.origin = "matmul"} : (tensor<2x4x8xbf16>, tensor<2x8x5xbf16>) -> tensor<2x4x5xbf16>
// CHECK-NEXT:    func.return %r

// -----

// An empty slice concatenated to a tensor adds nothing (Phi-3 rotates all of a head and
// concatenates the empty rest): the concatenation is its other operand and the slice is erased.
func.func @empty_cat(%x: tensor<1x2x4x8xbf16>) -> tensor<1x2x4x8xbf16> {
  %rest = torch.slice %x {dim = 3 : i64, start = 8 : i64, end = 8 : i64, step = 1 : i64} : (tensor<1x2x4x8xbf16>) -> tensor<1x2x4x0xbf16>
  %n = torch.neg %x : (tensor<1x2x4x8xbf16>) -> tensor<1x2x4x8xbf16>
  %c = torch.cat %n, %rest {dim = 3 : i64} : (tensor<1x2x4x8xbf16>, tensor<1x2x4x0xbf16>) -> tensor<1x2x4x8xbf16>
  func.return %c : tensor<1x2x4x8xbf16>
}

// CHECK-LABEL: func.func @empty_cat
// CHECK-NEXT:    %n = tensor.neg %x {emmy.origin = "neg"} : tensor<1x2x4x8xbf16>
// CHECK-NEXT:    func.return %n
