// RUN: emmy-opt %s | emmy-opt | filecheck %s
// RUN: %emmy-roundtrip | filecheck %s
// RUN: emmy-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

// CHECK-LABEL: func.func @elementwise
func.func @elementwise(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK-NEXT: %add = tensor.add %a, %b {emmy.origin = "residual"} : tensor<4x8xf32>
  // CHECK-NEXT: %sub = tensor.sub %add, %b : tensor<4x8xf32>
  // CHECK-NEXT: %mul = tensor.mul %sub, %b : tensor<4x8xf32>
  // CHECK-NEXT: %div = tensor.div %mul, %b : tensor<4x8xf32>
  // CHECK-NEXT: %max = tensor.max %div, %b : tensor<4x8xf32>
  // CHECK-NEXT: %min = tensor.min %max, %b : tensor<4x8xf32>
  // GENERIC: %add = "tensor.add"(%a, %b) {emmy.origin = "residual"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %add = tensor.add %a, %b {emmy.origin = "residual"} : tensor<4x8xf32>
  %sub = tensor.sub %add, %b : tensor<4x8xf32>
  %mul = tensor.mul %sub, %b : tensor<4x8xf32>
  %div = tensor.div %mul, %b : tensor<4x8xf32>
  %max = tensor.max %div, %b : tensor<4x8xf32>
  %min = tensor.min %max, %b : tensor<4x8xf32>
  // CHECK-NEXT: %neg = tensor.neg %min : tensor<4x8xf32>
  // CHECK-NEXT: %exp = tensor.exp %neg : tensor<4x8xf32>
  // CHECK-NEXT: %rsqrt = tensor.rsqrt %exp : tensor<4x8xf32>
  // CHECK-NEXT: %sqrt = tensor.sqrt %rsqrt : tensor<4x8xf32>
  // CHECK-NEXT: %tanh = tensor.tanh %sqrt : tensor<4x8xf32>
  // CHECK-NEXT: %erf = tensor.erf %tanh : tensor<4x8xf32>
  // CHECK-NEXT: %sig = tensor.sigmoid %erf : tensor<4x8xf32>
  // CHECK-NEXT: %rec = tensor.recip %sig {emmy.origin = "silu"} : tensor<4x8xf32>
  // GENERIC: %rec = "tensor.recip"(%sig) {emmy.origin = "silu"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %neg = tensor.neg %min : tensor<4x8xf32>
  %exp = tensor.exp %neg : tensor<4x8xf32>
  %rsqrt = tensor.rsqrt %exp : tensor<4x8xf32>
  %sqrt = tensor.sqrt %rsqrt : tensor<4x8xf32>
  %tanh = tensor.tanh %sqrt : tensor<4x8xf32>
  %erf = tensor.erf %tanh : tensor<4x8xf32>
  %sig = tensor.sigmoid %erf : tensor<4x8xf32>
  %rec = tensor.recip %sig {emmy.origin = "silu"} : tensor<4x8xf32>
  func.return %rec : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @casts_and_constants
func.func @casts_and_constants(%x: tensor<4x8xbf16>) -> tensor<4x8xbf16> {
  // CHECK-NEXT: %xf = tensor.cast %x : tensor<4x8xbf16> -> tensor<4x8xf32>
  // CHECK-NEXT: %n = tensor.splat 0.0009765625 : tensor<4x8xf32>
  // CHECK-NEXT: %e = tensor.splat 1.000000e-06 {emmy.origin = "rms_norm"} : tensor<4x8xf32>
  // CHECK-NEXT: %m = tensor.splat -3.000000e+00 : tensor<4x8xf32>
  // CHECK-NEXT: %i = tensor.splat {value = 0xfff0000000000000 : f64} : tensor<4x8xf32>
  // CHECK-NEXT: %y = tensor.cast %xf : tensor<4x8xf32> -> tensor<4x8xbf16>
  // GENERIC: %n = "tensor.splat"() <{value = 0.0009765625 : f64}> : () -> tensor<4x8xf32>
  %xf = tensor.cast %x : tensor<4x8xbf16> -> tensor<4x8xf32>
  %n = tensor.splat 9.765625e-04 : tensor<4x8xf32>
  %e = tensor.splat 1.0e-06 {emmy.origin = "rms_norm"} : tensor<4x8xf32>
  %m = tensor.splat -3 : tensor<4x8xf32>
  %i = tensor.splat {value = 0xFFF0000000000000 : f64} : tensor<4x8xf32>
  %y = tensor.cast %xf : tensor<4x8xf32> -> tensor<4x8xbf16>
  func.return %y : tensor<4x8xbf16>
}

// CHECK-LABEL: func.func @reductions
func.func @reductions(%x: tensor<512x1024xf32>, %s: tensor<1x16x32x32xf32>) -> tensor<512xf32> {
  // CHECK-NEXT: %sum = tensor.sum %x {axes = array<i64: 1>} : tensor<512x1024xf32> -> tensor<512xf32>
  // CHECK-NEXT: %all = tensor.sum %x {axes = array<i64: 0, 1>} : tensor<512x1024xf32> -> tensor<f32>
  // CHECK-NEXT: %mx = tensor.reduce_max %s {axes = array<i64: 3>, emmy.origin = "attention"} : tensor<1x16x32x32xf32> -> tensor<1x16x32xf32>
  // GENERIC: %sum = "tensor.sum"(%x) <{axes = array<i64: 1>}> : (tensor<512x1024xf32>) -> tensor<512xf32>
  %sum = tensor.sum %x {axes = array<i64: 1>} : tensor<512x1024xf32> -> tensor<512xf32>
  %all = tensor.sum %x {axes = array<i64: 0, 1>} : tensor<512x1024xf32> -> tensor<f32>
  %mx = tensor.reduce_max %s {emmy.origin = "attention", axes = array<i64: 3>} : tensor<1x16x32x32xf32> -> tensor<1x16x32xf32>
  func.return %sum : tensor<512xf32>
}

// CHECK-LABEL: func.func @matmuls
func.func @matmuls(%a: tensor<512x1024xbf16>, %b: tensor<4096x1024xbf16>, %q: tensor<1x16x32x128xbf16>, %k: tensor<1x16x32x128xbf16>, %p: tensor<1x16x32x32xbf16>) -> tensor<512x4096xbf16> {
  // CHECK-NEXT: %c = tensor.matmul %a, %b {transpose_rhs} : (tensor<512x1024xbf16>, tensor<4096x1024xbf16>) -> tensor<512x4096xbf16>
  // CHECK-NEXT: %s = tensor.matmul %q, %k {transpose_rhs} : (tensor<1x16x32x128xbf16>, tensor<1x16x32x128xbf16>) -> tensor<1x16x32x32xf32>
  // CHECK-NEXT: %o = tensor.matmul %p, %k : (tensor<1x16x32x32xbf16>, tensor<1x16x32x128xbf16>) -> tensor<1x16x32x128xbf16>
  // GENERIC: %c = "tensor.matmul"(%a, %b) <{transpose_rhs}> : (tensor<512x1024xbf16>, tensor<4096x1024xbf16>) -> tensor<512x4096xbf16>
  // GENERIC: %o = "tensor.matmul"(%p, %k) : (tensor<1x16x32x32xbf16>, tensor<1x16x32x128xbf16>) -> tensor<1x16x32x128xbf16>
  %c = tensor.matmul %a, %b {transpose_rhs} : (tensor<512x1024xbf16>, tensor<4096x1024xbf16>) -> tensor<512x4096xbf16>
  %s = tensor.matmul %q, %k {transpose_rhs} : (tensor<1x16x32x128xbf16>, tensor<1x16x32x128xbf16>) -> tensor<1x16x32x32xf32>
  %o = tensor.matmul %p, %k : (tensor<1x16x32x32xbf16>, tensor<1x16x32x128xbf16>) -> tensor<1x16x32x128xbf16>
  func.return %c : tensor<512x4096xbf16>
}

// CHECK-LABEL: func.func @layout
func.func @layout(%x: tensor<1x32x1024xbf16>, %w: tensor<1024xbf16>, %k: tensor<1x8x32x128xbf16>, %ids: tensor<1x32xi64>, %t: tensor<100x64xbf16>) -> tensor<32x1024xbf16> {
  // CHECK-NEXT: %r = tensor.reshape %x : tensor<1x32x1024xbf16> -> tensor<32x1024xbf16>
  // CHECK-NEXT: %b = tensor.broadcast %w {dims = array<i64: 1>} : tensor<1024xbf16> -> tensor<32x1024xbf16>
  // CHECK-NEXT: %g = tensor.broadcast %k {dims = array<i64: 0, 1, 3, 4>} : tensor<1x8x32x128xbf16> -> tensor<1x8x2x32x128xbf16>
  // CHECK-NEXT: %tr = tensor.transpose %x {perm = array<i64: 0, 2, 1>} : tensor<1x32x1024xbf16> -> tensor<1x1024x32xbf16>
  // CHECK-NEXT: %sl = tensor.slice %r {starts = array<i64: 0, 512>, sizes = array<i64: 32, 256>, strides = array<i64: 1, 2>} : tensor<32x1024xbf16> -> tensor<32x256xbf16>
  // CHECK-NEXT: %cat = tensor.concat %sl, %sl {axis = 1 : i64} : (tensor<32x256xbf16>, tensor<32x256xbf16>) -> tensor<32x512xbf16>
  // CHECK-NEXT: %gr = tensor.gather_rows %t, %ids : (tensor<100x64xbf16>, tensor<1x32xi64>) -> tensor<1x32x64xbf16>
  // GENERIC: %sl = "tensor.slice"(%r) <{starts = array<i64: 0, 512>, sizes = array<i64: 32, 256>, strides = array<i64: 1, 2>}> : (tensor<32x1024xbf16>) -> tensor<32x256xbf16>
  // GENERIC: %cat = "tensor.concat"(%sl, %sl) <{axis = 1 : i64}> : (tensor<32x256xbf16>, tensor<32x256xbf16>) -> tensor<32x512xbf16>
  %r = tensor.reshape %x : tensor<1x32x1024xbf16> -> tensor<32x1024xbf16>
  %b = tensor.broadcast %w {dims = array<i64: 1>} : tensor<1024xbf16> -> tensor<32x1024xbf16>
  %g = tensor.broadcast %k {dims = array<i64: 0, 1, 3, 4>} : tensor<1x8x32x128xbf16> -> tensor<1x8x2x32x128xbf16>
  %tr = tensor.transpose %x {perm = array<i64: 0, 2, 1>} : tensor<1x32x1024xbf16> -> tensor<1x1024x32xbf16>
  %sl = tensor.slice %r {starts = array<i64: 0, 512>, sizes = array<i64: 32, 256>, strides = array<i64: 1, 2>} : tensor<32x1024xbf16> -> tensor<32x256xbf16>
  %cat = tensor.concat %sl, %sl {axis = 1 : i64} : (tensor<32x256xbf16>, tensor<32x256xbf16>) -> tensor<32x512xbf16>
  %gr = tensor.gather_rows %t, %ids : (tensor<100x64xbf16>, tensor<1x32xi64>) -> tensor<1x32x64xbf16>
  func.return %r : tensor<32x1024xbf16>
}

// CHECK-LABEL: func.func @mask
func.func @mask(%s: tensor<1x16x32x32xf32>, %t: tensor<16x4x8xf32>) -> tensor<1x16x32x32xf32> {
  // CHECK-NEXT: %m = tensor.causal_mask %s : tensor<1x16x32x32xf32>
  // CHECK-NEXT: %o = tensor.causal_mask %t {offset = 4 : i64} : tensor<16x4x8xf32>
  // CHECK-NEXT: %w = tensor.causal_mask %s {window = 8 : i64} : tensor<1x16x32x32xf32>
  // GENERIC: %o = "tensor.causal_mask"(%t) <{offset = 4 : i64}> : (tensor<16x4x8xf32>) -> tensor<16x4x8xf32>
  // GENERIC: %w = "tensor.causal_mask"(%s) <{window = 8 : i64}> : (tensor<1x16x32x32xf32>) -> tensor<1x16x32x32xf32>
  %m = tensor.causal_mask %s : tensor<1x16x32x32xf32>
  %o = tensor.causal_mask %t {offset = 4 : i64} : tensor<16x4x8xf32>
  %w = tensor.causal_mask %s {window = 8 : i64} : tensor<1x16x32x32xf32>
  func.return %m : tensor<1x16x32x32xf32>
}
