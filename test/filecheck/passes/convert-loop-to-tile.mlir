// RUN: emmy-opt %s --split-input-file --verify-diagnostics -p convert-loop-to-tile | filecheck %s

// The running example on sm_90a: a contraction with a prologue reduction gets the fusion
// knob and wgmma among its workers; the body moves unchanged, the attributes are kept.
// CHECK:      builtin.module attributes {emmy.target = "sm_90a"} {
// CHECK:      %out = tile.kernel @rms_norm_qkv_proj kind "contraction" axes [m = 7, n = 64, k = 32] knobs {
// CHECK-NEXT:   block_m = #tile.knob<"block_m", [16, 32, 64, 128, 192, 256]>,
// CHECK-NEXT:   block_n = #tile.knob<"block_n", [16, 32, 64, 96, 112, 128, 160, 192, 256]>,
// CHECK-NEXT:   block_k = #tile.knob<"block_k", [16, 32, 64, 128]>,
// CHECK-NEXT:   split_k = #tile.knob<"split_k", [1, 2, 3, 4, 8, 16]>,
// CHECK-NEXT:   combine = #tile.knob<"combine", ["kernel", "last_block"]>,
// CHECK-NEXT:   split_tail = #tile.knob<"split_tail", [1, 2, 3, 4, 8]>,
// CHECK-NEXT:   stages = #tile.knob<"stages", [1, 2, 3, 4, 5, 6, 8, 12, 16]>,
// CHECK-NEXT:   workers = #tile.knob<"workers", ["thread", "mma_sync", "wgmma", "wgmma_ws"]>,
// CHECK-NEXT:   warps = #tile.knob<"warps", [1, 2, 4, 8, 12, 16]>,
// CHECK-NEXT:   schedule = #tile.knob<"schedule", ["grid", "persistent", "stream_k"]>,
// CHECK-NEXT:   copy = #tile.knob<"copy", ["cp_async", "tma"]>,
// CHECK-NEXT:   cluster = #tile.knob<"cluster", [1, 2]>,
// CHECK-NEXT:   group_m = #tile.knob<"group_m", [1, 2, 4, 8, 16, 32]>,
// CHECK-NEXT:   epilogue = #tile.knob<"epilogue", ["together", "staggered", "pingpong"]>,
// CHECK-NEXT:   slices = #tile.knob<"slices", ["rows", "cols"]>,
// CHECK-NEXT:   vector = #tile.knob<"vector", [1, 2, 4, 8]>,
// CHECK-NEXT:   fusion = #tile.knob<"fusion", ["fused", "split"]>
// CHECK-NEXT: } ins(%x, %nw, %w : tensor<7x32xbf16>, tensor<32xbf16>, tensor<64x32xbf16>) -> tensor<7x64xbf16> attributes {emmy.fused_from = ["rms_norm", "linear_qkv_proj"], emmy.fusion = "fused"} {
// CHECK-NEXT:   ^bb0(%xa: tensor<7x32xbf16>, %nwa: tensor<32xbf16>, %wa: tensor<64x32xbf16>):
// CHECK-NEXT:     %m = loop.axis "m" : index
// CHECK-NEXT:     %n = loop.axis "n" : index
// CHECK-NEXT:     %ss = loop.reduce sum ["k"] : f32 {
// CHECK:          %acc = loop.reduce sum ["k"] : f32 {
// CHECK:          loop.store %o, 0 [%m, %n] : bf16
// CHECK-NEXT:     loop.yield
// CHECK-NEXT:   }
// CHECK-NEXT:   func.return %out : tensor<7x64xbf16>
// CHECK-NOT:  loop.fused
builtin.module attributes {emmy.target = "sm_90a"} {

func.func @f(%x: tensor<7x32xbf16>, %nw: tensor<32xbf16>, %w: tensor<64x32xbf16>) -> tensor<7x64xbf16> {
  %out = loop.fused @rms_norm_qkv_proj axes [m = 7, n = 64, k = 32]
      ins(%x, %nw, %w : tensor<7x32xbf16>, tensor<32xbf16>, tensor<64x32xbf16>)
      -> tensor<7x64xbf16> attributes {emmy.fused_from = ["rms_norm", "linear_qkv_proj"], emmy.fusion = "fused"} {
  ^bb0(%xa: tensor<7x32xbf16>, %nwa: tensor<32xbf16>, %wa: tensor<64x32xbf16>):
    %m = loop.axis "m" : index
    %n = loop.axis "n" : index
    %ss = loop.reduce sum ["k"] : f32 {
      %k = loop.axis "k" : index
      %a = loop.load %xa[%m, %k] : tensor<7x32xbf16> -> bf16
      %af = arith.extf %a : bf16 to f32
      %sq = arith.mulf %af, %af : f32
      loop.yield %sq : f32
    }
    %acc = loop.reduce sum ["k"] : f32 {
      %k2 = loop.axis "k" : index
      %a2 = loop.load %xa[%m, %k2] : tensor<7x32xbf16> -> bf16
      %g = loop.load %nwa[%k2] : tensor<32xbf16> -> bf16
      %b = loop.load %wa[%n, %k2] : tensor<64x32xbf16> -> bf16
      %a2f = arith.extf %a2 : bf16 to f32
      %gf = arith.extf %g : bf16 to f32
      %bf = arith.extf %b : bf16 to f32
      %ag = arith.mulf %a2f, %gf : f32
      %p = arith.mulf %ag, %bf : f32
      loop.yield %p : f32
    }
    %inv_n = arith.constant 3.125000e-02 : f32
    %eps = arith.constant 1.000000e-06 : f32
    %mean = arith.mulf %ss, %inv_n : f32
    %v = arith.addf %mean, %eps : f32
    %r = math.rsqrt %v : f32
    %y = arith.mulf %acc, %r : f32
    %o = arith.truncf %y : f32 to bf16
    loop.store %o, 0 [%m, %n] : bf16
    loop.yield
  }
  func.return %out : tensor<7x64xbf16>
}
}

// -----

// sm_80 has no wgmma; a plain matmul has no fusion knob.
// CHECK:      tile.kernel @proj kind "contraction" axes [m = 33, n = 48, k = 64] knobs {
// CHECK-NEXT:   block_m = #tile.knob<"block_m", [16, 32, 64, 128, 192, 256]>,
// CHECK-NEXT:   block_n = #tile.knob<"block_n", [16, 32, 64, 96, 112, 128, 160, 192, 256]>,
// CHECK-NEXT:   block_k = #tile.knob<"block_k", [16, 32, 64, 128]>,
// CHECK-NEXT:   split_k = #tile.knob<"split_k", [1, 2, 3, 4, 8, 16]>,
// CHECK-NEXT:   combine = #tile.knob<"combine", ["kernel", "last_block"]>,
// CHECK-NEXT:   split_tail = #tile.knob<"split_tail", [1, 2, 3, 4, 8]>,
// CHECK-NEXT:   stages = #tile.knob<"stages", [1, 2, 3, 4, 5, 6, 8, 12, 16]>,
// CHECK-NEXT:   workers = #tile.knob<"workers", ["thread", "mma_sync"]>,
// CHECK-NEXT:   warps = #tile.knob<"warps", [1, 2, 4, 8, 12, 16]>,
// CHECK-NEXT:   schedule = #tile.knob<"schedule", ["grid"]>,
// CHECK-NEXT:   copy = #tile.knob<"copy", ["cp_async"]>,
// CHECK-NEXT:   cluster = #tile.knob<"cluster", [1]>,
// CHECK-NEXT:   group_m = #tile.knob<"group_m", [1, 2, 4, 8, 16, 32]>,
// CHECK-NEXT:   epilogue = #tile.knob<"epilogue", ["together"]>,
// CHECK-NEXT:   slices = #tile.knob<"slices", ["rows"]>,
// CHECK-NEXT:   vector = #tile.knob<"vector", [1, 2, 4, 8]>
// CHECK-NEXT: } ins(%x, %w : tensor<33x64xbf16>, tensor<48x64xbf16>) -> tensor<33x48xbf16> {
builtin.module attributes {emmy.target = "sm_80"} {

func.func @f(%x: tensor<33x64xbf16>, %w: tensor<48x64xbf16>) -> tensor<33x48xbf16> {
  %out = loop.fused @proj axes [m = 33, n = 48, k = 64]
      ins(%x, %w : tensor<33x64xbf16>, tensor<48x64xbf16>) -> tensor<33x48xbf16> {
  ^bb0(%xa: tensor<33x64xbf16>, %wa: tensor<48x64xbf16>):
    %m = loop.axis "m" : index
    %n = loop.axis "n" : index
    %acc = loop.reduce sum ["k"] : f32 {
      %k = loop.axis "k" : index
      %a = loop.load %xa[%m, %k] : tensor<33x64xbf16> -> bf16
      %b = loop.load %wa[%n, %k] : tensor<48x64xbf16> -> bf16
      %af = arith.extf %a : bf16 to f32
      %bf = arith.extf %b : bf16 to f32
      %p = arith.mulf %af, %bf : f32
      loop.yield %p : f32
    }
    %o = arith.truncf %acc : f32 to bf16
    loop.store %o, 0 [%m, %n] : bf16
    loop.yield
  }
  func.return %out : tensor<33x48xbf16>
}
}

// -----

// Attention (with grouped K/V heads and a causal mask) on sm_90.
// CHECK:      tile.kernel @attention kind "attention" axes [b = 1, h = 4, q = 8, kv = 8, d = 16, e = 16] knobs {
// CHECK-NEXT:   block_q = #tile.knob<"block_q", [16, 32, 64, 128, 192]>,
// CHECK-NEXT:   block_kv = #tile.knob<"block_kv", [16, 32, 64, 128]>,
// CHECK-NEXT:   workers = #tile.knob<"workers", ["mma_sync"]>,
// CHECK-NEXT:   stages = #tile.knob<"stages", [1, 2, 3]>,
// CHECK-NEXT:   warps = #tile.knob<"warps", [1, 2, 4, 8, 12]>,
// CHECK-NEXT:   copy = #tile.knob<"copy", ["cp_async"]>,
// CHECK-NEXT:   schedule = #tile.knob<"schedule", ["grid"]>,
// CHECK-NEXT:   split_kv = #tile.knob<"split_kv", [1]>,
// CHECK-NEXT:   fusion = #tile.knob<"fusion", ["fused", "split", "epilogue"]>
// CHECK-NEXT: } ins(%q, %k, %v : tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>) -> tensor<1x8x4x16xbf16> {
// CHECK:        %mx = loop.reduce max ["kv"] : f32 {
builtin.module attributes {emmy.target = "sm_90"} {

func.func @f(%q: tensor<1x4x8x16xbf16>, %k: tensor<1x2x8x16xbf16>, %v: tensor<1x2x8x16xbf16>) -> tensor<1x8x4x16xbf16> {
  %out = loop.fused @attention axes [b = 1, h = 4, q = 8, kv = 8, d = 16, e = 16]
      ins(%q, %k, %v : tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>) -> tensor<1x8x4x16xbf16> {
  ^bb0(%qa: tensor<1x4x8x16xbf16>, %ka: tensor<1x2x8x16xbf16>, %va: tensor<1x2x8x16xbf16>):
    %b = loop.axis "b" : index
    %h = loop.axis "h" : index
    %qi = loop.axis "q" : index
    %e = loop.axis "e" : index
    %grp = arith.constant 2 : index
    %hk = arith.divui %h, %grp : index
    %scale = arith.constant 2.500000e-01 : f32
    %zero = arith.constant 0.000000e+00 : f32
    %mx = loop.reduce max ["kv"] : f32 {
      %kv1 = loop.axis "kv" : index
      %dot1 = loop.reduce sum ["d"] : f32 {
        %d1 = loop.axis "d" : index
        %x1 = loop.load %qa[%b, %h, %qi, %d1] : tensor<1x4x8x16xbf16> -> bf16
        %y1 = loop.load %ka[%b, %hk, %kv1, %d1] : tensor<1x2x8x16xbf16> -> bf16
        %xf1 = arith.extf %x1 : bf16 to f32
        %yf1 = arith.extf %y1 : bf16 to f32
        %p1 = arith.mulf %xf1, %yf1 : f32
        loop.yield %p1 : f32
      }
      %s1 = arith.mulf %dot1, %scale : f32
      %ok1 = arith.cmpi ule, %kv1, %qi : index
      %ninf1 = arith.constant 0xFF800000 : f32
      %sc1 = arith.select %ok1, %s1, %ninf1 : f32
      loop.yield %sc1 : f32
    }
    %l = loop.reduce sum ["kv"] : f32 {
      %kv2 = loop.axis "kv" : index
      %dot2 = loop.reduce sum ["d"] : f32 {
        %d2 = loop.axis "d" : index
        %x2 = loop.load %qa[%b, %h, %qi, %d2] : tensor<1x4x8x16xbf16> -> bf16
        %y2 = loop.load %ka[%b, %hk, %kv2, %d2] : tensor<1x2x8x16xbf16> -> bf16
        %xf2 = arith.extf %x2 : bf16 to f32
        %yf2 = arith.extf %y2 : bf16 to f32
        %p2 = arith.mulf %xf2, %yf2 : f32
        loop.yield %p2 : f32
      }
      %s2 = arith.mulf %dot2, %scale : f32
      %ok2 = arith.cmpi ule, %kv2, %qi : index
      %ninf2 = arith.constant 0xFF800000 : f32
      %sc2 = arith.select %ok2, %s2, %ninf2 : f32
      %t2 = arith.subf %sc2, %mx : f32
      %ex2 = math.exp %t2 : f32
      loop.yield %ex2 : f32
    }
    %acc = loop.reduce sum ["kv"] : f32 {
      %kv3 = loop.axis "kv" : index
      %dot3 = loop.reduce sum ["d"] : f32 {
        %d3 = loop.axis "d" : index
        %x3 = loop.load %qa[%b, %h, %qi, %d3] : tensor<1x4x8x16xbf16> -> bf16
        %y3 = loop.load %ka[%b, %hk, %kv3, %d3] : tensor<1x2x8x16xbf16> -> bf16
        %xf3 = arith.extf %x3 : bf16 to f32
        %yf3 = arith.extf %y3 : bf16 to f32
        %p3 = arith.mulf %xf3, %yf3 : f32
        loop.yield %p3 : f32
      }
      %s3 = arith.mulf %dot3, %scale : f32
      %ok3 = arith.cmpi ule, %kv3, %qi : index
      %ninf3 = arith.constant 0xFF800000 : f32
      %sc3 = arith.select %ok3, %s3, %ninf3 : f32
      %t3 = arith.subf %sc3, %mx : f32
      %ex3 = math.exp %t3 : f32
      %pn = arith.divf %ex3, %l : f32
      %vv = loop.load %va[%b, %hk, %kv3, %e] : tensor<1x2x8x16xbf16> -> bf16
      %vf = arith.extf %vv : bf16 to f32
      %pv = arith.mulf %pn, %vf : f32
      loop.yield %pv : f32
    }
    %o = arith.truncf %acc : f32 to bf16
    loop.store %o, 0 [%b, %qi, %h, %e] : bf16
    loop.yield
  }
  func.return %out : tensor<1x8x4x16xbf16>
}
}

// -----

// A softmax is a reduction (sm_86).
// CHECK:      tile.kernel @softmax kind "reduction" axes [m = 4, n = 16, k = 16] knobs {
// CHECK-NEXT:   rows_per_block = #tile.knob<"rows_per_block", [1, 2, 4, 8, 16]>,
// CHECK-NEXT:   threads = #tile.knob<"threads", [32, 64, 128, 256, 512, 1024]>,
// CHECK-NEXT:   vector = #tile.knob<"vector", [1, 2, 4, 8]>
// CHECK-NEXT: } ins(%x : tensor<4x16xf32>) -> tensor<4x16xf32> {
builtin.module attributes {emmy.target = "sm_86"} {

func.func @f(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %out = loop.fused @softmax axes [m = 4, n = 16, k = 16]
      ins(%x : tensor<4x16xf32>) -> tensor<4x16xf32> {
  ^bb0(%xa: tensor<4x16xf32>):
    %m = loop.axis "m" : index
    %n = loop.axis "n" : index
    %mx = loop.reduce max ["k"] : f32 {
      %k = loop.axis "k" : index
      %a = loop.load %xa[%m, %k] : tensor<4x16xf32> -> f32
      loop.yield %a : f32
    }
    %sum = loop.reduce sum ["k"] : f32 {
      %k2 = loop.axis "k" : index
      %a2 = loop.load %xa[%m, %k2] : tensor<4x16xf32> -> f32
      %t = arith.subf %a2, %mx : f32
      %ex = math.exp %t : f32
      loop.yield %ex : f32
    }
    %xv = loop.load %xa[%m, %n] : tensor<4x16xf32> -> f32
    %t3 = arith.subf %xv, %mx : f32
    %e3 = math.exp %t3 : f32
    %o = arith.divf %e3, %sum : f32
    loop.store %o, 0 [%m, %n] : f32
    loop.yield
  }
  func.return %out : tensor<4x16xf32>
}
}

// -----

// No emmy.target: sm_90. An elementwise kernel.
// CHECK:      builtin.module {
// CHECK:      tile.kernel @silu_mul kind "elementwise" axes [m = 4, n = 16] knobs {
// CHECK-NEXT:   threads = #tile.knob<"threads", [64, 128, 256, 512, 1024]>,
// CHECK-NEXT:   vector = #tile.knob<"vector", [1, 2, 4, 8]>,
// CHECK-NEXT:   items = #tile.knob<"items", [1, 2, 4, 8]>
// CHECK-NEXT: } ins(%g : tensor<4x32xbf16>) -> tensor<4x16xbf16> {
builtin.module {

func.func @f(%g: tensor<4x32xbf16>) -> tensor<4x16xbf16> {
  %out = loop.fused @silu_mul axes [m = 4, n = 16]
      ins(%g : tensor<4x32xbf16>) -> tensor<4x16xbf16> {
  ^bb0(%ga: tensor<4x32xbf16>):
    %m = loop.axis "m" : index
    %n = loop.axis "n" : index
    %cN = arith.constant 16 : index
    %nu = arith.addi %n, %cN : index
    %a = loop.load %ga[%m, %n] : tensor<4x32xbf16> -> bf16
    %b = loop.load %ga[%m, %nu] : tensor<4x32xbf16> -> bf16
    %af = arith.extf %a : bf16 to f32
    %na = arith.negf %af : f32
    %e = math.exp %na : f32
    %one = arith.constant 1.000000e+00 : f32
    %den = arith.addf %e, %one : f32
    %s = arith.divf %af, %den : f32
    %bf = arith.extf %b : bf16 to f32
    %y = arith.mulf %s, %bf : f32
    %o = arith.truncf %y : f32 to bf16
    loop.store %o, 0 [%m, %n] : bf16
    loop.yield
  }
  func.return %out : tensor<4x16xbf16>
}
}

// -----

// CHECK: error: module attribute emmy.target: unknown target 'sm_70'; valid targets: sm_80, sm_86, sm_89, sm_90, sm_90a
builtin.module attributes {emmy.target = "sm_70"} {

func.func @f(%g: tensor<4x32xbf16>) -> tensor<4x16xbf16> {
  %out = loop.fused @silu_mul axes [m = 4, n = 16]
      ins(%g : tensor<4x32xbf16>) -> tensor<4x16xbf16> {
  ^bb0(%ga: tensor<4x32xbf16>):
    %m = loop.axis "m" : index
    %n = loop.axis "n" : index
    %cN = arith.constant 16 : index
    %nu = arith.addi %n, %cN : index
    %a = loop.load %ga[%m, %n] : tensor<4x32xbf16> -> bf16
    %b = loop.load %ga[%m, %nu] : tensor<4x32xbf16> -> bf16
    %af = arith.extf %a : bf16 to f32
    %na = arith.negf %af : f32
    %e = math.exp %na : f32
    %one = arith.constant 1.000000e+00 : f32
    %den = arith.addf %e, %one : f32
    %s = arith.divf %af, %den : f32
    %bf = arith.extf %b : bf16 to f32
    %y = arith.mulf %s, %bf : f32
    %o = arith.truncf %y : f32 to bf16
    loop.store %o, 0 [%m, %n] : bf16
    loop.yield
  }
  func.return %out : tensor<4x16xbf16>
}
}
