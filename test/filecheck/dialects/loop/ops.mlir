// RUN: emmy-opt %s | emmy-opt | filecheck %s
// RUN: %emmy-roundtrip | filecheck %s

// The running example: RMSNorm's sum of squares and the q/k/v contraction in one loop.
// CHECK-LABEL: func.func @rmsnorm_qkv
func.func @rmsnorm_qkv(%x: tensor<512x1024xbf16>, %nw: tensor<1024xbf16>, %w: tensor<4096x1024xbf16>) -> tensor<512x4096xbf16> {
  // CHECK:      %out = loop.fused @rms_norm_qkv_proj axes [m = 512, n = 4096, k = 1024] ins(%x, %nw, %w : tensor<512x1024xbf16>, tensor<1024xbf16>, tensor<4096x1024xbf16>) -> tensor<512x4096xbf16> attributes {emmy.fused_from = ["rms_norm", "linear_qkv_proj"], emmy.fusion = "fused"} {
  // CHECK-NEXT: ^bb0(%xa: tensor<512x1024xbf16>, %nwa: tensor<1024xbf16>, %wa: tensor<4096x1024xbf16>):
  // CHECK-NEXT:   %m = loop.axis "m" : index
  // CHECK-NEXT:   %n = loop.axis "n" : index
  // CHECK-NEXT:   %ss = loop.reduce sum ["k"] : f32 {
  // CHECK-NEXT:     %k = loop.axis "k" : index
  // CHECK-NEXT:     %a = loop.load %xa[%m, %k] : tensor<512x1024xbf16> -> bf16
  // CHECK-NEXT:     %af = arith.extf %a : bf16 to f32
  // CHECK-NEXT:     %sq = arith.mulf %af, %af : f32
  // CHECK-NEXT:     loop.yield %sq : f32
  // CHECK-NEXT:   }
  // CHECK-NEXT:   %acc = loop.reduce sum ["k"] : f32 {
  // CHECK:          %p = arith.mulf %ag, %bf : f32
  // CHECK-NEXT:     loop.yield %p : f32
  // CHECK-NEXT:   }
  // CHECK:        loop.store %o, 0 [%m, %n] : bf16
  // CHECK-NEXT:   loop.yield
  // CHECK-NEXT: }
  %out = loop.fused @rms_norm_qkv_proj axes [m = 512, n = 4096, k = 1024]
      ins(%x, %nw, %w : tensor<512x1024xbf16>, tensor<1024xbf16>, tensor<4096x1024xbf16>)
      -> tensor<512x4096xbf16> attributes {emmy.fused_from = ["rms_norm", "linear_qkv_proj"], emmy.fusion = "fused"} {
  ^bb0(%xa: tensor<512x1024xbf16>, %nwa: tensor<1024xbf16>, %wa: tensor<4096x1024xbf16>):
    %m = loop.axis "m" : index
    %n = loop.axis "n" : index
    %ss = loop.reduce sum ["k"] : f32 {
      %k = loop.axis "k" : index
      %a = loop.load %xa[%m, %k] : tensor<512x1024xbf16> -> bf16
      %af = arith.extf %a : bf16 to f32
      %sq = arith.mulf %af, %af : f32
      loop.yield %sq : f32
    }
    %acc = loop.reduce sum ["k"] : f32 {
      %k2 = loop.axis "k" : index
      %a2 = loop.load %xa[%m, %k2] : tensor<512x1024xbf16> -> bf16
      %g = loop.load %nwa[%k2] : tensor<1024xbf16> -> bf16
      %b = loop.load %wa[%n, %k2] : tensor<4096x1024xbf16> -> bf16
      %a2f = arith.extf %a2 : bf16 to f32
      %gf = arith.extf %g : bf16 to f32
      %bf = arith.extf %b : bf16 to f32
      %ag = arith.mulf %a2f, %gf : f32
      %p = arith.mulf %ag, %bf : f32
      loop.yield %p : f32
    }
    %inv_n = arith.constant 9.765625e-04 : f32
    %eps = arith.constant 9.999999e-07 : f32
    %mean = arith.mulf %ss, %inv_n : f32
    %v = arith.addf %mean, %eps : f32
    %r = math.rsqrt %v : f32
    %y = arith.mulf %acc, %r : f32
    %o = arith.truncf %y : f32 to bf16
    loop.store %o, 0 [%m, %n] : bf16
    loop.yield
  }
  func.return %out : tensor<512x4096xbf16>
}

// Two results, a max nested around a sum, index arithmetic, a select.
// CHECK-LABEL: func.func @nested
func.func @nested(%s: tensor<2x8x8xf32>) -> (tensor<2x8xf32>, tensor<2x8x8xf32>) {
  // CHECK:      %r, %r_1 = loop.fused @softmax_stats axes [h = 2, q = 8, kv = 8, d = 8] ins(%s : tensor<2x8x8xf32>) -> (tensor<2x8xf32>, tensor<2x8x8xf32>) {
  // CHECK:        %mx = loop.reduce max ["kv"] : f32 {
  // CHECK:          %inner = loop.reduce sum ["d"] : f32 {
  // CHECK:          %half = arith.divui %kv, %c2 : index
  // CHECK:        loop.store %mx, 0 [%h, %q] : f32
  // CHECK-NEXT:   loop.store %sel, 1 [%h, %q, %kv2] : f32
  %r:2 = loop.fused @softmax_stats axes [h = 2, q = 8, kv = 8, d = 8] ins(%s : tensor<2x8x8xf32>) -> (tensor<2x8xf32>, tensor<2x8x8xf32>) {
  ^bb0(%sa: tensor<2x8x8xf32>):
    %h = loop.axis "h" : index
    %q = loop.axis "q" : index
    %mx = loop.reduce max ["kv"] : f32 {
      %kv = loop.axis "kv" : index
      %inner = loop.reduce sum ["d"] : f32 {
        %d = loop.axis "d" : index
        %e = loop.load %sa[%h, %kv, %d] : tensor<2x8x8xf32> -> f32
        loop.yield %e : f32
      }
      %c2 = arith.constant 2 : index
      %half = arith.divui %kv, %c2 : index
      %e2 = loop.load %sa[%h, %q, %half] : tensor<2x8x8xf32> -> f32
      %t = arith.addf %inner, %e2 : f32
      loop.yield %t : f32
    }
    %kv2 = loop.axis "kv" : index
    %lt = arith.cmpi ult, %kv2, %q : index
    %e3 = loop.load %sa[%h, %q, %kv2] : tensor<2x8x8xf32> -> f32
    %ninf = arith.constant 0xFF800000 : f32
    %sel = arith.select %lt, %e3, %ninf : f32
    loop.store %mx, 0 [%h, %q] : f32
    loop.store %sel, 1 [%h, %q, %kv2] : f32
    loop.yield
  }
  func.return %r#0, %r#1 : tensor<2x8xf32>, tensor<2x8x8xf32>
}

// A rank-0 result and no inputs.
// CHECK-LABEL: func.func @splat
func.func @splat() -> tensor<f32> {
  // CHECK:      loop.fused @splat axes [] ins() -> tensor<f32> {
  // CHECK-NEXT:   %c = arith.constant 1.500000e+00 : f32
  // CHECK-NEXT:   loop.store %c, 0 [] : f32
  %0 = loop.fused @splat axes [] ins() -> tensor<f32> {
    %c = arith.constant 1.5 : f32
    loop.store %c, 0 [] : f32
    loop.yield
  }
  func.return %0 : tensor<f32>
}
