// RUN: emmy-opt %s --split-input-file --verify-diagnostics | filecheck %s

// One chunk per verifier message of the torch dialect.

func.func @f(%x: tensor<bf16>, %w: tensor<1xbf16>) {
  %r = torch.rms_norm %x, %w {eps = 1.000000e-06 : f64} : (tensor<bf16>, tensor<1xbf16>) -> tensor<bf16>
  func.return
}
// CHECK: torch.rms_norm: x must have at least one dimension

// -----

func.func @f(%x: tensor<1x32x1024xbf16>, %w: tensor<512xbf16>) {
  %r = torch.rms_norm %x, %w {eps = 1.000000e-06 : f64} : (tensor<1x32x1024xbf16>, tensor<512xbf16>) -> tensor<1x32x1024xbf16>
  func.return
}
// CHECK: torch.rms_norm: weight shape [512] must be [1024] (the last dim of x)

// -----

func.func @f(%x: tensor<1x32x1024xbf16>, %w: tensor<1024xbf16>) {
  %r = torch.rms_norm %x, %w {eps = 1.000000e-06 : f64} : (tensor<1x32x1024xbf16>, tensor<1024xbf16>) -> tensor<32x1024xbf16>
  func.return
}
// CHECK: torch.rms_norm: result shape [32, 1024] must equal x's [1, 32, 1024]

// -----

func.func @f(%x: tensor<1x32x1024xbf16>, %w: tensor<1024xbf16>) {
  %r = torch.rms_norm %x, %w {eps = 1.000000e-06 : f64} : (tensor<1x32x1024xbf16>, tensor<1024xbf16>) -> tensor<1x32x1024xf32>
  func.return
}
// CHECK: torch.rms_norm: result element type f32 must be bf16

// -----

func.func @f(%x: tensor<f32>, %w: tensor<1xf32>) {
  %r = torch.layer_norm %x, %w, %w {eps = 1.000000e-05 : f64} : (tensor<f32>, tensor<1xf32>, tensor<1xf32>) -> tensor<f32>
  func.return
}
// CHECK: torch.layer_norm: x must have at least one dimension

// -----

func.func @f(%x: tensor<4x8xf32>, %w: tensor<8xf32>, %b: tensor<4xf32>) {
  %r = torch.layer_norm %x, %w, %b {eps = 1.000000e-05 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4xf32>) -> tensor<4x8xf32>
  func.return
}
// CHECK: torch.layer_norm: bias shape [4] must be [8] (the last dim of x)

// -----

func.func @f(%x: tensor<4x8xf32>, %w: tensor<8xf32>) {
  %r = torch.layer_norm %x, %w, %w {eps = 1.000000e-05 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xbf16>
  func.return
}
// CHECK: torch.layer_norm: result type tensor<4x8xbf16> must equal x's type tensor<4x8xf32>

// -----

func.func @f(%x: tensor<4x8xf32>, %w: tensor<8xf32>) {
  %r = torch.linear %x, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4xf32>
  func.return
}
// CHECK: torch.linear: weight must be 2-D [N, K], got [8]

// -----

func.func @f(%x: tensor<f32>, %w: tensor<16x8xf32>) {
  %r = torch.linear %x, %w : (tensor<f32>, tensor<16x8xf32>) -> tensor<16xf32>
  func.return
}
// CHECK: torch.linear: x must have at least one dimension

// -----

func.func @f(%x: tensor<1x32x1024xbf16>, %w: tensor<2048x512xbf16>) {
  %r = torch.linear %x, %w : (tensor<1x32x1024xbf16>, tensor<2048x512xbf16>) -> tensor<1x32x2048xbf16>
  func.return
}
// CHECK: torch.linear: x's last dim 1024 must equal weight's K = 512 (weight is [N, K] = [2048, 512])

// -----

func.func @f(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>, %b: tensor<8xf32>) {
  %r = torch.linear %x, %w, %b : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<8xf32>) -> tensor<4x16xf32>
  func.return
}
// CHECK: torch.linear: bias shape [8] must be [16]

// -----

func.func @f(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>) {
  %r = torch.linear %x, %w : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  func.return
}
// CHECK: torch.linear: result shape [4, 8] must be [4, 16]

// -----

func.func @f(%x: tensor<4x8xf32>, %w: tensor<16x8xbf16>) {
  %r = torch.linear %x, %w : (tensor<4x8xf32>, tensor<16x8xbf16>) -> tensor<4x16xf32>
  func.return
}
// CHECK: torch.linear: operands and result must share one element type

// -----

func.func @f(%q: tensor<16x32x128xbf16>) {
  %r = torch.scaled_dot_product_attention %q, %q, %q {is_causal = true, scale = 1.250000e-01 : f64, enable_gqa = false} : (tensor<16x32x128xbf16>, tensor<16x32x128xbf16>, tensor<16x32x128xbf16>) -> tensor<16x32x128xbf16>
  func.return
}
// CHECK: torch.scaled_dot_product_attention: q, k and v must be 4-D [B, H, S, D]

// -----

func.func @f(%q: tensor<1x16x32x128xbf16>, %k: tensor<2x16x32x128xbf16>) {
  %r = torch.scaled_dot_product_attention %q, %k, %k {is_causal = true, scale = 1.250000e-01 : f64, enable_gqa = false} : (tensor<1x16x32x128xbf16>, tensor<2x16x32x128xbf16>, tensor<2x16x32x128xbf16>) -> tensor<1x16x32x128xbf16>
  func.return
}
// CHECK: torch.scaled_dot_product_attention: batch sizes differ: q 1, k 2, v 2

// -----

func.func @f(%q: tensor<1x16x32x128xbf16>, %k: tensor<1x16x32x128xbf16>, %v: tensor<1x16x16x128xbf16>) {
  %r = torch.scaled_dot_product_attention %q, %k, %v {is_causal = false, scale = 1.250000e-01 : f64, enable_gqa = false} : (tensor<1x16x32x128xbf16>, tensor<1x16x32x128xbf16>, tensor<1x16x16x128xbf16>) -> tensor<1x16x32x128xbf16>
  func.return
}
// CHECK: torch.scaled_dot_product_attention: k [1, 16, 32, 128] and v [1, 16, 16, 128] must share heads and length

// -----

func.func @f(%q: tensor<1x16x32x128xbf16>, %k: tensor<1x16x32x64xbf16>) {
  %r = torch.scaled_dot_product_attention %q, %k, %k {is_causal = true, scale = 1.250000e-01 : f64, enable_gqa = false} : (tensor<1x16x32x128xbf16>, tensor<1x16x32x64xbf16>, tensor<1x16x32x64xbf16>) -> tensor<1x16x32x64xbf16>
  func.return
}
// CHECK: torch.scaled_dot_product_attention: head dims differ: q has 128, k has 64

// -----

func.func @f(%q: tensor<1x16x32x128xbf16>, %k: tensor<1x6x32x128xbf16>) {
  %r = torch.scaled_dot_product_attention %q, %k, %k {is_causal = true, scale = 1.250000e-01 : f64, enable_gqa = true} : (tensor<1x16x32x128xbf16>, tensor<1x6x32x128xbf16>, tensor<1x6x32x128xbf16>) -> tensor<1x16x32x128xbf16>
  func.return
}
// CHECK: torch.scaled_dot_product_attention: query heads 16 must be divisible by kv heads 6 (enable_gqa)

// -----

func.func @f(%q: tensor<1x16x32x128xbf16>, %k: tensor<1x8x32x128xbf16>) {
  %r = torch.scaled_dot_product_attention %q, %k, %k {is_causal = true, scale = 1.250000e-01 : f64, enable_gqa = false} : (tensor<1x16x32x128xbf16>, tensor<1x8x32x128xbf16>, tensor<1x8x32x128xbf16>) -> tensor<1x16x32x128xbf16>
  func.return
}
// CHECK: torch.scaled_dot_product_attention: query heads 16 must equal kv heads 8 without enable_gqa

// -----

func.func @f(%q: tensor<1x16x32x128xbf16>, %k: tensor<1x8x32x128xbf16>) {
  %r = torch.scaled_dot_product_attention %q, %k, %k {is_causal = true, scale = 1.250000e-01 : f64, enable_gqa = true} : (tensor<1x16x32x128xbf16>, tensor<1x8x32x128xbf16>, tensor<1x8x32x128xbf16>) -> tensor<1x8x32x128xbf16>
  func.return
}
// CHECK: torch.scaled_dot_product_attention: result shape [1, 8, 32, 128] must be [1, 16, 32, 128]

// -----

func.func @f(%q: tensor<1x16x32x128xbf16>, %k: tensor<1x8x32x128xf16>) {
  %r = torch.scaled_dot_product_attention %q, %k, %k {is_causal = true, scale = 1.250000e-01 : f64, enable_gqa = true} : (tensor<1x16x32x128xbf16>, tensor<1x8x32x128xf16>, tensor<1x8x32x128xf16>) -> tensor<1x16x32x128xbf16>
  func.return
}
// CHECK: torch.scaled_dot_product_attention: q, k, v and result must share one element type

// -----

func.func @f(%x: tensor<4x8xbf16>) {
  %r = torch.silu %x : (tensor<4x8xbf16>) -> tensor<4x8xf32>
  func.return
}
// CHECK: torch.silu: result type tensor<4x8xf32> must equal operand type tensor<4x8xbf16>

// -----

func.func @f(%x: tensor<4x8xf32>) {
  %r = torch.gelu %x {approximate = "erf"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return
}
// CHECK: torch.gelu: approximate must be "none" or "tanh", got "erf"

// -----

func.func @f(%a: tensor<4x8xf32>, %b: tensor<3x8xf32>) {
  %r = torch.add %a, %b : (tensor<4x8xf32>, tensor<3x8xf32>) -> tensor<4x8xf32>
  func.return
}
// CHECK: torch.add: operand shapes [4, 8] and [3, 8] do not broadcast

// -----

func.func @f(%a: tensor<4x8xf32>, %b: tensor<8xf32>) {
  %r = torch.mul %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<8xf32>
  func.return
}
// CHECK: torch.mul: result shape [8] must be the broadcast shape [4, 8]

// -----

func.func @f(%a: tensor<4x8xbf16>, %b: tensor<4x8xf16>) {
  %r = torch.div %a, %b : (tensor<4x8xbf16>, tensor<4x8xf16>) -> tensor<4x8xbf16>
  func.return
}
// CHECK: torch.div: result element type bf16 must be f32

// -----

func.func @f(%x: tensor<4x8xbf16>) {
  %r = torch.to %x : (tensor<4x8xbf16>) -> tensor<8x4xf32>
  func.return
}
// CHECK: torch.to: result shape [8, 4] must equal operand shape [4, 8]

// -----

func.func @f(%x: tensor<1x32x2048xbf16>) {
  %r = torch.view %x : (tensor<1x32x2048xbf16>) -> tensor<1x32x8x128xbf16>
  func.return
}
// CHECK: torch.view: element count changes: [1, 32, 2048] has 65536, [1, 32, 8, 128] has 32768

// -----

func.func @f(%x: tensor<4x8xbf16>) {
  %r = torch.view %x : (tensor<4x8xbf16>) -> tensor<32xf32>
  func.return
}
// CHECK: torch.view: result element type must equal operand element type

// -----

func.func @f(%x: tensor<1x32x16x128xbf16>) {
  %r = torch.transpose %x {dims = array<i64: 1, 4>} : (tensor<1x32x16x128xbf16>) -> tensor<1x16x32x128xbf16>
  func.return
}
// CHECK: torch.transpose: dims must be two axes in [0, 4), got [1, 4]

// -----

func.func @f(%x: tensor<1x32x16x128xbf16>) {
  %r = torch.transpose %x {dims = array<i64: 1, 2>} : (tensor<1x32x16x128xbf16>) -> tensor<1x32x16x128xbf16>
  func.return
}
// CHECK: torch.transpose: result shape [1, 32, 16, 128] must be [1, 16, 32, 128]

// -----

func.func @f(%x: tensor<1x32x16x128xbf16>) {
  %r = torch.transpose %x {dims = array<i64: 1, 2>} : (tensor<1x32x16x128xbf16>) -> tensor<1x16x32x128xf32>
  func.return
}
// CHECK: torch.transpose: result element type must equal operand element type

// -----

func.func @f(%x: tensor<2x3x4xf32>) {
  %r = torch.permute %x {perm = array<i64: 0, 2, 2>} : (tensor<2x3x4xf32>) -> tensor<2x4x4xf32>
  func.return
}
// CHECK: torch.permute: perm [0, 2, 2] must be a permutation of [0, 3)

// -----

func.func @f(%x: tensor<2x3x4xf32>) {
  %r = torch.permute %x {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  func.return
}
// CHECK: torch.permute: result shape [2, 3, 4] must be [4, 2, 3]

// -----

func.func @f(%x: tensor<4x8xf32>) {
  %r = torch.slice %x {dim = 2 : i64, start = 0 : i64, end = 4 : i64, step = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x4xf32>
  func.return
}
// CHECK: torch.slice: dim 2 must be in [0, 2)

// -----

func.func @f(%x: tensor<4x8xf32>) {
  %r = torch.slice %x {dim = 1 : i64, start = 0 : i64, end = 4 : i64, step = 0 : i64} : (tensor<4x8xf32>) -> tensor<4x4xf32>
  func.return
}
// CHECK: torch.slice: step 0 must be at least 1

// -----

func.func @f(%x: tensor<4x8xf32>) {
  %r = torch.slice %x {dim = 1 : i64, start = 4 : i64, end = 12 : i64, step = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return
}
// CHECK: torch.slice: need 0 <= start <= end <= 8, got start 4, end 12

// -----

func.func @f(%x: tensor<4x8xf32>) {
  %r = torch.slice %x {dim = 1 : i64, start = 0 : i64, end = 8 : i64, step = 2 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return
}
// CHECK: torch.slice: result shape [4, 8] must be [4, 4]

// -----

func.func @f(%x: tensor<4x8xf32>) {
  %r = "torch.cat"() <{dim = 0 : i64}> : () -> tensor<4x8xf32>
  func.return
}
// CHECK: torch.cat: needs at least one operand

// -----

func.func @f(%x: tensor<4x8xf32>) {
  %r = torch.cat %x, %x {dim = 2 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x16xf32>
  func.return
}
// CHECK: torch.cat: dim 2 must be in [0, 2)

// -----

func.func @f(%x: tensor<4x8xf32>, %y: tensor<3x8xf32>) {
  %r = torch.cat %x, %y {dim = 1 : i64} : (tensor<4x8xf32>, tensor<3x8xf32>) -> tensor<4x16xf32>
  func.return
}
// CHECK: torch.cat: operand shapes [4, 8], [3, 8] differ outside dim 1

// -----

func.func @f(%x: tensor<4x8xf32>) {
  %r = torch.cat %x, %x {dim = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  func.return
}
// CHECK: torch.cat: result shape [8, 8] must be [4, 16]

// -----

func.func @f(%x: tensor<4x8xf32>, %y: tensor<4x8xbf16>) {
  %r = torch.cat %x, %y {dim = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xbf16>) -> tensor<4x16xf32>
  func.return
}
// CHECK: torch.cat: operands and result must share one element type

// -----

func.func @f(%t: tensor<100xbf16>, %i: tensor<1x32xi64>) {
  %r = torch.embedding %t, %i : (tensor<100xbf16>, tensor<1x32xi64>) -> tensor<1x32xbf16>
  func.return
}
// CHECK: torch.embedding: weight must be 2-D [V, H], got [100]

// -----

func.func @f(%t: tensor<100x64xbf16>, %i: tensor<1x32xf32>) {
  %r = torch.embedding %t, %i : (tensor<100x64xbf16>, tensor<1x32xf32>) -> tensor<1x32x64xbf16>
  func.return
}
// CHECK: torch.embedding: ids must have an integer element type, got f32

// -----

func.func @f(%t: tensor<100x64xbf16>, %i: tensor<1x32xi64>) {
  %r = torch.embedding %t, %i : (tensor<100x64xbf16>, tensor<1x32xi64>) -> tensor<1x64xbf16>
  func.return
}
// CHECK: torch.embedding: result shape [1, 64] must be [1, 32, 64]

// -----

func.func @f(%t: tensor<100x64xbf16>, %i: tensor<1x32xi64>) {
  %r = torch.embedding %t, %i : (tensor<100x64xbf16>, tensor<1x32xi64>) -> tensor<1x32x64xf32>
  func.return
}
// CHECK: torch.embedding: result element type must equal weight's

// -----

func.func @f(%x: tensor<4x8xf32>) {
  %r = torch.pow_scalar %x {value = 4.000000e+00 : f64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return
}
// CHECK: torch.pow_scalar: exponent 4.0 is not supported (one of -1, -0.5, 0.5, 1, 2, 3)

// -----

func.func @f(%x: tensor<4x8xf32>) {
  %r = torch.softmax %x {dim = 0 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return
}
// CHECK: torch.softmax: dim must be the last axis (1), got 0

// -----

func.func @f(%x: tensor<4x8xf32>) {
  %r = torch.softmax %x {dim = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xbf16>
  func.return
}
// CHECK: torch.softmax: result type tensor<4x8xbf16> must equal operand type tensor<4x8xf32>

// -----

func.func @f(%x: tensor<4x8xf32>) {
  %r = torch.mean %x {dims = array<i64: 1, 0>, keepdim = false} : (tensor<4x8xf32>) -> tensor<f32>
  func.return
}
// CHECK: torch.mean: dims must be non-empty, strictly increasing axes of rank 2, got [1, 0]

// -----

func.func @f(%x: tensor<4x8xf32>) {
  %r = torch.mean %x {dims = array<i64: 1>, keepdim = true} : (tensor<4x8xf32>) -> tensor<4xf32>
  func.return
}
// CHECK: torch.mean: result must be [4, 1] of f32, got tensor<4xf32>

// -----

func.func @f(%a: tensor<4x8xf32>, %b: tensor<3x8xf32>) {
  %r = torch.maximum %a, %b : (tensor<4x8xf32>, tensor<3x8xf32>) -> tensor<4x8xf32>
  func.return
}
// CHECK: torch.maximum: operand shapes [4, 8] and [3, 8] do not broadcast

// -----

func.func @f(%a: tensor<2x4x8xbf16>, %b: tensor<2x6x3xbf16>) {
  %r = torch.matmul %a, %b : (tensor<2x4x8xbf16>, tensor<2x6x3xbf16>) -> tensor<2x4x3xbf16>
  func.return
}
// CHECK: torch.matmul: a's last dim 8 must equal b's second to last 6 (a [2, 4, 8], b [2, 6, 3])

// -----

func.func @f(%a: tensor<2x4x8xbf16>, %b: tensor<3x8x5xbf16>) {
  %r = torch.matmul %a, %b : (tensor<2x4x8xbf16>, tensor<3x8x5xbf16>) -> tensor<2x4x5xbf16>
  func.return
}
// CHECK: torch.matmul: batch dims [2] and [3] do not broadcast

// -----

func.func @f(%a: tensor<4x8xbf16>, %b: tensor<8x5xf32>) {
  %r = torch.matmul %a, %b : (tensor<4x8xbf16>, tensor<8x5xf32>) -> tensor<4x5xbf16>
  func.return
}
// CHECK: torch.matmul: operands and result must share one element type

// -----

func.func @f(%a: tensor<8xbf16>, %b: tensor<8x5xbf16>) {
  %r = torch.matmul %a, %b : (tensor<8xbf16>, tensor<8x5xbf16>) -> tensor<5xbf16>
  func.return
}
// CHECK: torch.matmul: operands must have rank >= 2, got [8] and [8, 5]

// -----

func.func @f(%x: tensor<4x8xf32>) {
  %r = torch.clamp %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return
}
// CHECK: torch.clamp: needs a min or a max bound

// -----

func.func @f(%x: tensor<4x8xf32>) {
  %r = torch.clamp %x {min = 1.000000e+00 : f64, max = -1.000000e+00 : f64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return
}
// CHECK: torch.clamp: min 1.0 must not exceed max -1.0

// -----

func.func @f(%x: tensor<4x8xf32>) {
  %r = torch.clamp %x {min = 0.000000e+00 : f64} : (tensor<4x8xf32>) -> tensor<4x8xbf16>
  func.return
}
// CHECK: torch.clamp: result type tensor<4x8xbf16> must equal operand type tensor<4x8xf32>

// -----

func.func @f(%x: tensor<4x8xf32>) {
  %r = torch.sum %x {dims = array<i64>, keepdim = false} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return
}
// CHECK: torch.sum: dims must be non-empty, strictly increasing axes of rank 2, got []

// -----

func.func @f(%x: tensor<4x8xbf16>) {
  %r = torch.amax %x {dims = array<i64: 1>, keepdim = false} : (tensor<4x8xbf16>) -> tensor<4xf32>
  func.return
}
// CHECK: torch.amax: result must be [4] of bf16, got tensor<4xf32>

// -----

func.func @f(%x: tensor<4x8xf32>) {
  %r = torch.expand %x : (tensor<4x8xf32>) -> tensor<2x8x8xf32>
  func.return
}
// CHECK: torch.expand: [4, 8] does not broadcast to [2, 8, 8]

// -----

func.func @f(%x: tensor<1x8xf32>) {
  %r = torch.expand %x : (tensor<1x8xf32>) -> tensor<4x8xbf16>
  func.return
}
// CHECK: torch.expand: result element type must equal operand element type

// -----

func.func @window_not_causal(%q: tensor<1x16x32x128xbf16>) {
  %r = torch.scaled_dot_product_attention %q, %q, %q {is_causal = false, scale = 1.250000e-01 : f64, enable_gqa = false, window = 8 : i64} : (tensor<1x16x32x128xbf16>, tensor<1x16x32x128xbf16>, tensor<1x16x32x128xbf16>) -> tensor<1x16x32x128xbf16>
  func.return
}
// CHECK: torch.scaled_dot_product_attention: a window needs is_causal (it bounds how far back a causal query looks)

// -----

func.func @window_zero(%q: tensor<1x16x32x128xbf16>) {
  %r = torch.scaled_dot_product_attention %q, %q, %q {is_causal = true, scale = 1.250000e-01 : f64, enable_gqa = false, window = 0 : i64} : (tensor<1x16x32x128xbf16>, tensor<1x16x32x128xbf16>, tensor<1x16x32x128xbf16>) -> tensor<1x16x32x128xbf16>
  func.return
}
// CHECK: torch.scaled_dot_product_attention: window must be at least 1 token, got 0
