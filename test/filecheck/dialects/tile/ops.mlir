// RUN: emmy-opt %s | emmy-opt | filecheck %s
// RUN: %emmy-roundtrip | filecheck %s

// The running example as a tile.kernel: some knobs decided, some not, attributes kept.
// CHECK-LABEL: func.func @rmsnorm_qkv
func.func @rmsnorm_qkv(%x: tensor<512x1024xbf16>, %nw: tensor<1024xbf16>, %w: tensor<4096x1024xbf16>) -> tensor<512x4096xbf16> {
  // CHECK:      %out = tile.kernel @rms_norm_qkv_proj kind "contraction" axes [m = 512, n = 4096, k = 1024] knobs {
  // CHECK-NEXT:     block_m = #tile.knob<"block_m", [16, 32, 64, 128] = 64, "rule", "M=512 fills 132 SMs with 64x128 tiles">,
  // CHECK-NEXT:     split_k = #tile.knob<"split_k", [1, 2, 4]>,
  // CHECK-NEXT:     workers = #tile.knob<"workers", ["thread", "mma_sync", "wgmma"] = "wgmma", "pinned", "pin '*.workers=wgmma'">,
  // CHECK-NEXT:     fusion = #tile.knob<"fusion", ["fused", "split"]>
  // CHECK-NEXT:   } ins(%x, %nw, %w : tensor<512x1024xbf16>, tensor<1024xbf16>, tensor<4096x1024xbf16>) -> tensor<512x4096xbf16> attributes {emmy.fused_from = ["rms_norm", "linear_qkv_proj"], emmy.fusion = "fused"} {
  // CHECK-NEXT: ^bb0(%xa: tensor<512x1024xbf16>, %nwa: tensor<1024xbf16>, %wa: tensor<4096x1024xbf16>):
  // CHECK-NEXT:   %m = loop.axis "m" : index
  // CHECK-NEXT:   %n = loop.axis "n" : index
  // CHECK-NEXT:   %ss = loop.reduce sum ["k"] : f32 {
  // CHECK:        %acc = loop.reduce sum ["k"] : f32 {
  // CHECK:          loop.yield %p : f32
  // CHECK-NEXT:   }
  // CHECK:        %r = math.rsqrt %v : f32
  // CHECK-NEXT:   %y = arith.mulf %acc, %r : f32
  // CHECK-NEXT:   %o = arith.truncf %y : f32 to bf16
  // CHECK-NEXT:   loop.store %o, 0 [%m, %n] : bf16
  // CHECK-NEXT:   loop.yield
  // CHECK-NEXT: }
  // CHECK-NEXT: func.return %out : tensor<512x4096xbf16>
  %out = tile.kernel @rms_norm_qkv_proj kind "contraction" axes [m = 512, n = 4096, k = 1024]
      knobs {block_m = #tile.knob<"block_m", [16, 32, 64, 128] = 64, "rule", "M=512 fills 132 SMs with 64x128 tiles">,
             split_k = #tile.knob<"split_k", [1, 2, 4]>,
             workers = #tile.knob<"workers", ["thread", "mma_sync", "wgmma"] = "wgmma", "pinned", "pin '*.workers=wgmma'">,
             fusion = #tile.knob<"fusion", ["fused", "split"]>}
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

// Two results, no knobs, a rank-0 result.
// CHECK-LABEL: func.func @two_results
func.func @two_results(%s: tensor<2x8xf32>) -> (tensor<2xf32>, tensor<f32>) {
  // CHECK:      %{{.*}}, %{{.*}} = tile.kernel @row_max kind "reduction" axes [h = 2, q = 8] knobs {} ins(%s : tensor<2x8xf32>) -> (tensor<2xf32>, tensor<f32>) {
  // CHECK-NEXT: ^bb0(%sa: tensor<2x8xf32>):
  // CHECK-NEXT:   %h = loop.axis "h" : index
  // CHECK-NEXT:   %mx = loop.reduce max ["q"] : f32 {
  // CHECK:        loop.store %mx, 0 [%h] : f32
  // CHECK-NEXT:   %c = arith.constant 1.500000e+00 : f32
  // CHECK-NEXT:   loop.store %c, 1 [] : f32
  // CHECK-NEXT:   loop.yield
  %r:2 = tile.kernel @row_max kind "reduction" axes [h = 2, q = 8] knobs {} ins(%s : tensor<2x8xf32>) -> (tensor<2xf32>, tensor<f32>) {
  ^bb0(%sa: tensor<2x8xf32>):
    %h = loop.axis "h" : index
    %mx = loop.reduce max ["q"] : f32 {
      %q = loop.axis "q" : index
      %e = loop.load %sa[%h, %q] : tensor<2x8xf32> -> f32
      loop.yield %e : f32
    }
    loop.store %mx, 0 [%h] : f32
    %c = arith.constant 1.5 : f32
    loop.store %c, 1 [] : f32
    loop.yield
  }
  func.return %r#0, %r#1 : tensor<2xf32>, tensor<f32>
}

// No inputs, no axes; every tier spelled out.
// CHECK-LABEL: func.func @splat
func.func @splat() -> tensor<f32> {
  // CHECK:      %{{.*}} = tile.kernel @splat kind "elementwise" axes [] knobs {
  // CHECK-NEXT:     threads = #tile.knob<"threads", [64, 128] = 64, "local", "a">,
  // CHECK-NEXT:     vector = #tile.knob<"vector", [1] = 1, "golden", "b">,
  // CHECK-NEXT:     items = #tile.knob<"items", [1, 2] = 2, "nearest", "c">,
  // CHECK-NEXT:     x = #tile.knob<"x", [3] = 3, "prior", "d">
  // CHECK-NEXT:   } ins() -> tensor<f32> {
  // CHECK-NEXT:   %c = arith.constant 1.500000e+00 : f32
  // CHECK-NEXT:   loop.store %c, 0 [] : f32
  // CHECK-NEXT:   loop.yield
  %0 = tile.kernel @splat kind "elementwise" axes []
      knobs {threads = #tile.knob<"threads", [64, 128] = 64, "local", "a">, vector = #tile.knob<"vector", [1] = 1, "golden", "b">,
             items = #tile.knob<"items", [1, 2] = 2, "nearest", "c">, x = #tile.knob<"x", [3] = 3, "prior", "d">}
      ins() -> tensor<f32> {
    %c = arith.constant 1.5 : f32
    loop.store %c, 0 [] : f32
    loop.yield
  }
  func.return %0 : tensor<f32>
}
