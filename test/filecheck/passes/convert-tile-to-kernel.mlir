// RUN: emmy-opt %s --split-input-file --verify-diagnostics -p convert-tile-to-kernel | filecheck %s

// An elementwise kernel: 16-byte vector loads and stores, a tail mask, items unrolled.
builtin.module attributes {emmy.target = "sm_90a"} {
  func.func @f(%g: tensor<7x6144xbf16> {emmy.name = "g", emmy.role = "input"}) -> tensor<7x3072xbf16> {
    %y = tile.kernel @silu_mul kind "elementwise" axes [m = 7, n = 3072]
        knobs {threads = #tile.knob<"threads", [64, 128, 256, 512, 1024] = 128, "pinned", "test">,
               vector = #tile.knob<"vector", [1, 2, 4, 8] = 8, "pinned", "test">,
               items = #tile.knob<"items", [1, 2, 4, 8] = 2, "pinned", "test">}
        ins(%g : tensor<7x6144xbf16>) -> tensor<7x3072xbf16> {
    ^bb0(%ga: tensor<7x6144xbf16>):
      %m = loop.axis "m" : index
      %n = loop.axis "n" : index
      %c3072 = arith.constant 3072 : index
      %n2 = arith.addi %n, %c3072 : index
      %a = loop.load %ga[%m, %n] : tensor<7x6144xbf16> -> bf16
      %b = loop.load %ga[%m, %n2] : tensor<7x6144xbf16> -> bf16
      %af = arith.extf %a : bf16 to f32
      %bf = arith.extf %b : bf16 to f32
      %ng = arith.negf %af : f32
      %e = math.exp %ng : f32
      %one = arith.constant 1.0 : f32
      %d = arith.addf %e, %one : f32
      %s = arith.divf %af, %d : f32
      %p = arith.mulf %s, %bf : f32
      %r = arith.truncf %p : f32 to bf16
      loop.store %r, 0 [%m, %n] : bf16
      loop.yield
    }
    func.return %y : tensor<7x3072xbf16>
  }
}

// CHECK-LABEL: kernel.func @silu_mul(%ga: !kernel.ptr<bf16>, %y: !kernel.ptr<bf16>) grid [11, 1, 1] block [128, 1, 1] smem 0 {
// CHECK:         %tid = kernel.thread_id x
// CHECK-NEXT:    %bid_x = kernel.block_id x
// CHECK-NEXT:    kernel.for %item = %c0 to %c2 step %c1 unroll full {
// CHECK:           %[[MASK:.*]] = arith.cmpi slt, %{{.*}}, %c2688 : index
// CHECK:           %{{.*}} = kernel.load %ga[%{{.*}}] if %[[MASK]] : !kernel.ptr<bf16> -> vector<8xbf16>
// CHECK:           %e = math.exp %ng : f32
// CHECK:           %[[V:.*]] = kernel.pack %r, %r_1, %r_2, %r_3, %r_4, %r_5, %r_6, %r_7 : vector<8xbf16>
// CHECK:           kernel.store %[[V]], %y[%{{.*}}] if %[[MASK]] : vector<8xbf16>, !kernel.ptr<bf16>
// CHECK-LABEL: func.func @f(
// CHECK-NEXT:    %y = kernel.empty : tensor<7x3072xbf16>
// CHECK-NEXT:    kernel.launch @silu_mul(%g, %y) : tensor<7x6144xbf16>, tensor<7x3072xbf16>
// CHECK-NEXT:    func.return %y : tensor<7x3072xbf16>

// -----
// A row reduction (RMSNorm): 128 threads per row, a group sum, then the row's outputs.
builtin.module attributes {emmy.target = "sm_90"} {
  func.func @f(%x: tensor<7x1024xbf16> {emmy.name = "x", emmy.role = "input"}, %w: tensor<1024xbf16> {emmy.name = "w", emmy.role = "param"}) -> tensor<7x1024xbf16> {
    %y = tile.kernel @rms_norm kind "reduction" axes [m = 7, n = 1024, k = 1024]
        knobs {rows_per_block = #tile.knob<"rows_per_block", [1, 2, 4, 8, 16] = 2, "pinned", "test">,
               threads = #tile.knob<"threads", [32, 64, 128, 256, 512, 1024] = 256, "pinned", "test">,
               vector = #tile.knob<"vector", [1, 2, 4, 8] = 8, "pinned", "test">}
        ins(%x, %w : tensor<7x1024xbf16>, tensor<1024xbf16>) -> tensor<7x1024xbf16> {
    ^bb0(%xa: tensor<7x1024xbf16>, %wa: tensor<1024xbf16>):
      %m = loop.axis "m" : index
      %n = loop.axis "n" : index
      %ss = loop.reduce sum ["k"] : f32 {
        %k = loop.axis "k" : index
        %a = loop.load %xa[%m, %k] : tensor<7x1024xbf16> -> bf16
        %af = arith.extf %a : bf16 to f32
        %sq = arith.mulf %af, %af : f32
        loop.yield %sq : f32
      }
      %inv = arith.constant 9.765625e-04 : f32
      %eps = arith.constant 1.0e-06 : f32
      %ms = arith.mulf %ss, %inv : f32
      %v = arith.addf %ms, %eps : f32
      %r = math.rsqrt %v : f32
      %xn = loop.load %xa[%m, %n] : tensor<7x1024xbf16> -> bf16
      %xf = arith.extf %xn : bf16 to f32
      %h = arith.mulf %xf, %r : f32
      %hb = arith.truncf %h : f32 to bf16
      %wn = loop.load %wa[%n] : tensor<1024xbf16> -> bf16
      %o = arith.mulf %wn, %hb : bf16
      loop.store %o, 0 [%m, %n] : bf16
      loop.yield
    }
    func.return %y : tensor<7x1024xbf16>
  }
}

// CHECK-LABEL: kernel.func @rms_norm(%xa: !kernel.ptr<bf16>, %wa: !kernel.ptr<bf16>, %y: !kernel.ptr<bf16>) grid [4, 1, 1] block [256, 1, 1] smem 32 {
// CHECK:         %scratch = kernel.shared [8] offset 0 align 16 : !kernel.ptr<f32, shared>
// CHECK:         %{{.*}} = kernel.for %chunk = %c0 to %c1 step %c1 iter_args(%{{.*}} = %{{.*}}) -> (f32) {
// CHECK:           kernel.load %xa[%{{.*}}] if %{{.*}} : !kernel.ptr<bf16> -> vector<8xbf16>
// CHECK:         %ss = kernel.call "emmy::group_sum<128>"(%{{.*}}, %scratch) : (f32, !kernel.ptr<f32, shared>) -> f32
// CHECK:         kernel.for %col = %c0 to %c1 step %c1 {
// CHECK:           %r = math.rsqrt %v : f32
// CHECK:           kernel.store %{{.*}}, %y[%{{.*}}] if %{{.*}} : vector<8xbf16>, !kernel.ptr<bf16>
// CHECK:         kernel.launch @rms_norm(%x, %w, %y) : tensor<7x1024xbf16>, tensor<1024xbf16>, tensor<7x1024xbf16>

// -----
// RMSNorm fused into a matmul on mma.sync: row statistics in shared memory; x and the norm weight
// copied raw with cp.async and the A side (x * rstd * w) computed from them in shared memory; B
// copied with cp.async; a 2-stage pipeline; warp tiles of 32x32.
builtin.module attributes {emmy.target = "sm_90"} {
  func.func @f(%x: tensor<64x128xbf16> {emmy.name = "x", emmy.role = "input"}, %nw: tensor<128xbf16> {emmy.name = "nw", emmy.role = "param"}, %w: tensor<64x128xbf16> {emmy.name = "w", emmy.role = "param"}) -> tensor<64x64xbf16> {
    %out = tile.kernel @rms_norm_qkv_proj kind "contraction" axes [m = 64, n = 64, k = 128]
      knobs {block_m = #tile.knob<"block_m", [16, 32, 64, 128, 256] = 64, "pinned", "test">, block_n = #tile.knob<"block_n", [16, 32, 64, 96, 128, 192, 256] = 64, "pinned", "test">, block_k = #tile.knob<"block_k", [16, 32, 64, 128] = 64, "pinned", "test">, split_k = #tile.knob<"split_k", [1, 2, 3, 4, 8, 16] = 1, "pinned", "test">, stages = #tile.knob<"stages", [1, 2, 3, 4, 5] = 2, "pinned", "test">, workers = #tile.knob<"workers", ["thread", "mma_sync", "wgmma"] = "mma_sync", "pinned", "test">, warps = #tile.knob<"warps", [1, 2, 4, 8, 16] = 4, "pinned", "test">, vector = #tile.knob<"vector", [1, 2, 4, 8] = 8, "pinned", "test">, fusion = #tile.knob<"fusion", ["fused", "split"] = "fused", "pinned", "test">}
      ins(%x, %nw, %w : tensor<64x128xbf16>, tensor<128xbf16>, tensor<64x128xbf16>) -> tensor<64x64xbf16> attributes {emmy.fusion = "fused"} {
    ^bb0(%xa: tensor<64x128xbf16>, %nwa: tensor<128xbf16>, %wa: tensor<64x128xbf16>):
      %m = loop.axis "m" : index
      %n = loop.axis "n" : index
      %ss = loop.reduce sum ["k"] : f32 {
        %k = loop.axis "k" : index
        %a = loop.load %xa[%m, %k] : tensor<64x128xbf16> -> bf16
        %af = arith.extf %a : bf16 to f32
        %sq = arith.mulf %af, %af : f32
        loop.yield %sq : f32
      }
      %inv_n = arith.constant 7.812500e-03 : f32
      %eps = arith.constant 9.999999e-07 : f32
      %mean = arith.mulf %ss, %inv_n : f32
      %v = arith.addf %mean, %eps : f32
      %r = math.rsqrt %v : f32
      %acc = loop.reduce sum ["k"] : f32 {
        %k2 = loop.axis "k" : index
        %a2 = loop.load %xa[%m, %k2] : tensor<64x128xbf16> -> bf16
        %g = loop.load %nwa[%k2] : tensor<128xbf16> -> bf16
        %b = loop.load %wa[%n, %k2] : tensor<64x128xbf16> -> bf16
        %a2f = arith.extf %a2 : bf16 to f32
        %xr = arith.mulf %a2f, %r : f32
        %xrb = arith.truncf %xr : f32 to bf16
        %h = arith.mulf %g, %xrb : bf16
        %hf = arith.extf %h : bf16 to f32
        %bf = arith.extf %b : bf16 to f32
        %p = arith.mulf %hf, %bf : f32
        loop.yield %p : f32
      }
      %o = arith.truncf %acc : f32 to bf16
      loop.store %o, 0 [%m, %n] : bf16
      loop.yield
    }
    func.return %out : tensor<64x64xbf16>
  }
}


// CHECK-LABEL: kernel.func @rms_norm_qkv_proj(%xa: !kernel.ptr<bf16>, %nwa: !kernel.ptr<bf16>, %wa: !kernel.ptr<bf16>, %out: !kernel.ptr<bf16>) grid [1, 1, 1] block [128, 1, 1] smem 49664 min_blocks 4 {
// CHECK:         %sA = kernel.shared [8192] offset 0 align 128 : !kernel.ptr<bf16, shared>
// CHECK-NEXT:    %sB = kernel.shared [8192] offset 16384 align 128 : !kernel.ptr<bf16, shared>
// CHECK-NEXT:    %raw0 = kernel.shared [8192] offset 32768 align 128 : !kernel.ptr<bf16, shared>
// CHECK-NEXT:    %raw1 = kernel.shared [128] offset 49152 align 128 : !kernel.ptr<bf16, shared>
// CHECK-NEXT:    %rs = kernel.shared [64] offset 49408 align 16 : !kernel.ptr<f32, shared>
// CHECK:         kernel.for %rr = %c0 to %c16 step %c1 {
// CHECK:           %ss = kernel.call "emmy::warp_sum<32>"(%{{.*}}) : (f32) -> f32
// CHECK:           kernel.store %ss, %rs[%{{.*}}] if %{{.*}} : f32, !kernel.ptr<f32, shared>
// CHECK:         kernel.barrier
// CHECK:         %acc = kernel.local [32] : !kernel.ptr<f32, local>
// CHECK:         kernel.for %s = %c0 to %c1 step %c1 unroll full {
// CHECK:           kernel.call "emmy::tile_offset<64, 64>"
// CHECK:           kernel.call "emmy::cp_async16"(%{{.*}}, %{{.*}}, %{{.*}}) : (!kernel.ptr<bf16, shared>, !kernel.ptr<bf16>, i1) -> ()
// CHECK:           kernel.call "emmy::tile_offset<64, 1>"
// CHECK:           kernel.call "emmy::cp_async_commit"() : () -> ()
// CHECK:         kernel.for %kt = %c0 to %c2 step %c1 {
// CHECK-NEXT:      kernel.call "emmy::cp_async_wait<0>"() : () -> ()
// CHECK-NEXT:      kernel.barrier
// CHECK:           kernel.call "emmy::cp_async_commit"() : () -> ()
// CHECK:           %r = math.rsqrt %v : f32
// CHECK:           kernel.store %{{.*}}, %{{.*}}[%c0] : vector<8xbf16>, !kernel.ptr<bf16, shared>
// CHECK:           kernel.barrier
// CHECK:           kernel.call "emmy::mma::warp_tile<32, 32, 64, 64, 64>"(%{{.*}}, %{{.*}}, %acc) : (!kernel.ptr<bf16, shared>, !kernel.ptr<bf16, shared>, !kernel.ptr<f32, local>) -> ()
// The epilogue reads no tensor: evaluated on the fragments, its bf16 results staged.
// CHECK:         %sC = kernel.shared [4608] offset 0 align 16 : !kernel.ptr<bf16, shared>
// CHECK:         kernel.for %mi = %c0 to %c2 step %c1 unroll full {
// CHECK:           %{{.*}} = kernel.load %acc[%{{.*}}] : !kernel.ptr<f32, local> -> f32
// CHECK:           kernel.store %{{.*}}, %sC[%{{.*}}] : vector<2xbf16>, !kernel.ptr<bf16, shared>
// CHECK:         kernel.barrier
// CHECK:         kernel.for %c{{.*}} = %c0 to %c{{.*}} step %c1 unroll full {
// CHECK:           %{{.*}} = kernel.load %sC[%{{.*}}] : !kernel.ptr<bf16, shared> -> vector<8xbf16>
// CHECK:           kernel.store %{{.*}}, %out[%{{.*}}] : vector<8xbf16>, !kernel.ptr<bf16>
// CHECK:         kernel.launch @rms_norm_qkv_proj(%x, %nw, %w, %out)

// -----
// The same on wgmma with split_k = 2: a statistics kernel, partial sums in a workspace, a
// combine kernel running the epilogue; one group of wgmmas stays in flight.
builtin.module attributes {emmy.target = "sm_90a"} {
  func.func @f(%x: tensor<64x256xbf16> {emmy.name = "x", emmy.role = "input"}, %nw: tensor<256xbf16> {emmy.name = "nw", emmy.role = "param"}, %w: tensor<64x256xbf16> {emmy.name = "w", emmy.role = "param"}) -> tensor<64x64xbf16> {
    %out = tile.kernel @rms_norm_qkv_proj kind "contraction" axes [m = 64, n = 64, k = 256]
      knobs {block_m = #tile.knob<"block_m", [16, 32, 64, 128, 256] = 64, "pinned", "test">, block_n = #tile.knob<"block_n", [16, 32, 64, 96, 128, 192, 256] = 64, "pinned", "test">, block_k = #tile.knob<"block_k", [16, 32, 64, 128] = 64, "pinned", "test">, split_k = #tile.knob<"split_k", [1, 2, 3, 4, 8, 16] = 2, "pinned", "test">, stages = #tile.knob<"stages", [1, 2, 3, 4, 5] = 3, "pinned", "test">, workers = #tile.knob<"workers", ["thread", "mma_sync", "wgmma"] = "wgmma", "pinned", "test">, warps = #tile.knob<"warps", [1, 2, 4, 8, 16] = 4, "pinned", "test">, vector = #tile.knob<"vector", [1, 2, 4, 8] = 8, "pinned", "test">, fusion = #tile.knob<"fusion", ["fused", "split"] = "fused", "pinned", "test">}
      ins(%x, %nw, %w : tensor<64x256xbf16>, tensor<256xbf16>, tensor<64x256xbf16>) -> tensor<64x64xbf16> attributes {emmy.fusion = "fused"} {
    ^bb0(%xa: tensor<64x256xbf16>, %nwa: tensor<256xbf16>, %wa: tensor<64x256xbf16>):
      %m = loop.axis "m" : index
      %n = loop.axis "n" : index
      %ss = loop.reduce sum ["k"] : f32 {
        %k = loop.axis "k" : index
        %a = loop.load %xa[%m, %k] : tensor<64x256xbf16> -> bf16
        %af = arith.extf %a : bf16 to f32
        %sq = arith.mulf %af, %af : f32
        loop.yield %sq : f32
      }
      %inv_n = arith.constant 3.906250e-03 : f32
      %eps = arith.constant 9.999999e-07 : f32
      %mean = arith.mulf %ss, %inv_n : f32
      %v = arith.addf %mean, %eps : f32
      %r = math.rsqrt %v : f32
      %acc = loop.reduce sum ["k"] : f32 {
        %k2 = loop.axis "k" : index
        %a2 = loop.load %xa[%m, %k2] : tensor<64x256xbf16> -> bf16
        %g = loop.load %nwa[%k2] : tensor<256xbf16> -> bf16
        %b = loop.load %wa[%n, %k2] : tensor<64x256xbf16> -> bf16
        %a2f = arith.extf %a2 : bf16 to f32
        %xr = arith.mulf %a2f, %r : f32
        %xrb = arith.truncf %xr : f32 to bf16
        %h = arith.mulf %g, %xrb : bf16
        %hf = arith.extf %h : bf16 to f32
        %bf = arith.extf %b : bf16 to f32
        %p = arith.mulf %hf, %bf : f32
        loop.yield %p : f32
      }
      %o = arith.truncf %acc : f32 to bf16
      loop.store %o, 0 [%m, %n] : bf16
      loop.yield
    }
    func.return %out : tensor<64x64xbf16>
  }
}


// CHECK-LABEL: kernel.func @rms_norm_qkv_proj_stats(%xa: !kernel.ptr<bf16>, %nwa: !kernel.ptr<bf16>, %wa: !kernel.ptr<bf16>, %stats: !kernel.ptr<f32>) grid [8, 1, 1] block [256, 1, 1] smem 16 {
// CHECK:         %ss = kernel.call "emmy::warp_sum<32>"
// CHECK:         kernel.store %ss, %stats[%{{.*}}] if %{{.*}} : f32, !kernel.ptr<f32>
// CHECK-LABEL: kernel.func @rms_norm_qkv_proj(%xa: !kernel.ptr<bf16>, %nwa: !kernel.ptr<bf16>, %wa: !kernel.ptr<bf16>, %stats: !kernel.ptr<f32>, %ws: !kernel.ptr<f32>) grid [1, 1, 2] block [128, 1, 1] smem 75136 min_blocks 3 {
// CHECK:         %sA = kernel.shared [12288] offset 0 align 1024 : !kernel.ptr<bf16, shared>
// CHECK:         kernel.for %kt = %{{.*}} to %{{.*}} step %c1 {
// CHECK:           kernel.call "emmy::fence_proxy_async"() : () -> ()
// CHECK-NEXT:      kernel.barrier
// CHECK:           kernel.call "emmy::wgmma::tile<64, 64, 64, 64>"(%{{.*}}, %{{.*}}, %acc) : (!kernel.ptr<bf16, shared>, !kernel.ptr<bf16, shared>, !kernel.ptr<f32, local>) -> ()
// CHECK-NEXT:      kernel.call "emmy::wgmma::wait<1>"() : () -> ()
// CHECK:         kernel.call "emmy::wgmma::wait<0>"() : () -> ()
// CHECK:         kernel.store %{{.*}}, %ws[%{{.*}}] if %{{.*}} : vector<2xf32>, !kernel.ptr<f32>
// CHECK-LABEL: kernel.func @rms_norm_qkv_proj_combine(%xa: !kernel.ptr<bf16>, %nwa: !kernel.ptr<bf16>, %wa: !kernel.ptr<bf16>, %stats: !kernel.ptr<f32>, %ws: !kernel.ptr<f32>, %out: !kernel.ptr<bf16>) grid [8, 1, 1] block [256, 1, 1] smem 0 {
// CHECK:         kernel.load %ws[%{{.*}}] : !kernel.ptr<f32> -> vector<2xf32>
// CHECK:         kernel.store %{{.*}}, %out[%{{.*}}] : vector<2xbf16>, !kernel.ptr<bf16>
// CHECK-LABEL: func.func @f(
// CHECK-NEXT:    %out = kernel.empty : tensor<64x64xbf16>
// CHECK-NEXT:    %rms_norm_qkv_proj_tmp = kernel.empty : tensor<1x64xf32>
// CHECK-NEXT:    %rms_norm_qkv_proj_tmp_1 = kernel.empty : tensor<2x1x1x64x64xf32>
// CHECK-NEXT:    kernel.launch @rms_norm_qkv_proj_stats(%x, %nw, %w, %rms_norm_qkv_proj_tmp)
// CHECK-NEXT:    kernel.launch @rms_norm_qkv_proj(%x, %nw, %w, %rms_norm_qkv_proj_tmp, %rms_norm_qkv_proj_tmp_1)
// CHECK-NEXT:    kernel.launch @rms_norm_qkv_proj_combine(%x, %nw, %w, %rms_norm_qkv_proj_tmp, %rms_norm_qkv_proj_tmp_1, %out)
// CHECK-NEXT:    func.return %out : tensor<64x64xbf16>

// -----
// The same with combine = last_block: no combine kernel. Each block takes a ticket on its tile's
// counters (a zeroed buffer); all but the last write their partial sums to the workspace and
// publish them, the last waits for them, adds the parts in part order and runs the epilogue.
builtin.module attributes {emmy.target = "sm_90a"} {
  func.func @f(%x: tensor<64x256xbf16> {emmy.name = "x", emmy.role = "input"}, %nw: tensor<256xbf16> {emmy.name = "nw", emmy.role = "param"}, %w: tensor<64x256xbf16> {emmy.name = "w", emmy.role = "param"}) -> tensor<64x64xbf16> {
    %out = tile.kernel @rms_norm_qkv_proj kind "contraction" axes [m = 64, n = 64, k = 256]
      knobs {block_m = #tile.knob<"block_m", [16, 32, 64, 128, 256] = 64, "pinned", "test">, block_n = #tile.knob<"block_n", [16, 32, 64, 96, 128, 192, 256] = 64, "pinned", "test">, block_k = #tile.knob<"block_k", [16, 32, 64, 128] = 64, "pinned", "test">, split_k = #tile.knob<"split_k", [1, 2, 3, 4, 8, 16] = 2, "pinned", "test">, combine = #tile.knob<"combine", ["kernel", "last_block"] = "last_block", "pinned", "test">, stages = #tile.knob<"stages", [1, 2, 3, 4, 5] = 3, "pinned", "test">, workers = #tile.knob<"workers", ["thread", "mma_sync", "wgmma"] = "wgmma", "pinned", "test">, warps = #tile.knob<"warps", [1, 2, 4, 8, 16] = 4, "pinned", "test">, vector = #tile.knob<"vector", [1, 2, 4, 8] = 8, "pinned", "test">, fusion = #tile.knob<"fusion", ["fused", "split"] = "fused", "pinned", "test">}
      ins(%x, %nw, %w : tensor<64x256xbf16>, tensor<256xbf16>, tensor<64x256xbf16>) -> tensor<64x64xbf16> attributes {emmy.fusion = "fused"} {
    ^bb0(%xa: tensor<64x256xbf16>, %nwa: tensor<256xbf16>, %wa: tensor<64x256xbf16>):
      %m = loop.axis "m" : index
      %n = loop.axis "n" : index
      %ss = loop.reduce sum ["k"] : f32 {
        %k = loop.axis "k" : index
        %a = loop.load %xa[%m, %k] : tensor<64x256xbf16> -> bf16
        %af = arith.extf %a : bf16 to f32
        %sq = arith.mulf %af, %af : f32
        loop.yield %sq : f32
      }
      %inv_n = arith.constant 3.906250e-03 : f32
      %eps = arith.constant 9.999999e-07 : f32
      %mean = arith.mulf %ss, %inv_n : f32
      %v = arith.addf %mean, %eps : f32
      %r = math.rsqrt %v : f32
      %acc = loop.reduce sum ["k"] : f32 {
        %k2 = loop.axis "k" : index
        %a2 = loop.load %xa[%m, %k2] : tensor<64x256xbf16> -> bf16
        %g = loop.load %nwa[%k2] : tensor<256xbf16> -> bf16
        %b = loop.load %wa[%n, %k2] : tensor<64x256xbf16> -> bf16
        %a2f = arith.extf %a2 : bf16 to f32
        %xr = arith.mulf %a2f, %r : f32
        %xrb = arith.truncf %xr : f32 to bf16
        %h = arith.mulf %g, %xrb : bf16
        %hf = arith.extf %h : bf16 to f32
        %bf = arith.extf %b : bf16 to f32
        %p = arith.mulf %hf, %bf : f32
        loop.yield %p : f32
      }
      %o = arith.truncf %acc : f32 to bf16
      loop.store %o, 0 [%m, %n] : bf16
      loop.yield
    }
    func.return %out : tensor<64x64xbf16>
  }
}


// CHECK-LABEL: kernel.func @rms_norm_qkv_proj(%xa: !kernel.ptr<bf16>, %nwa: !kernel.ptr<bf16>, %wa: !kernel.ptr<bf16>, %stats: !kernel.ptr<f32>, %ws: !kernel.ptr<f32>, %counters: !kernel.ptr<i32>, %out: !kernel.ptr<bf16>) grid [1, 1, 2]
// CHECK:         kernel.call "emmy::wgmma::wait<0>"() : () -> ()
// CHECK:         %{{.*}} = kernel.call "emmy::split_ticket"(%counters, %tile, %{{.*}}, %{{.*}}) : (!kernel.ptr<i32>, index, index, i1) -> index
// CHECK-NEXT:    %last = kernel.call "emmy::block_or"(%{{.*}}) : (index) -> index
// CHECK:         kernel.if %{{.*}} {
// CHECK:           kernel.store %{{.*}}, %ws[%{{.*}}] : vector<4xf32>, !kernel.ptr<f32>
// CHECK:           kernel.call "emmy::fence_gpu"() : () -> ()
// CHECK-NEXT:      kernel.barrier
// CHECK:             kernel.call "emmy::split_publish"(%counters, %tile) : (!kernel.ptr<i32>, index) -> ()
// CHECK:         kernel.if %{{.*}} {
// CHECK:             kernel.call "emmy::split_wait"(%counters, %tile, %{{.*}}) : (!kernel.ptr<i32>, index, index) -> ()
// CHECK:           kernel.call "emmy::load_cg<4>"(%{{.*}}, %{{.*}}) : (!kernel.ptr<f32>, i1) -> vector<4xf32>
// CHECK:           kernel.store %{{.*}}, %out[%{{.*}}]
// CHECK-NOT:   kernel.func @rms_norm_qkv_proj_combine
// CHECK-LABEL: func.func @f(
// CHECK-NEXT:    %out = kernel.empty : tensor<64x64xbf16>
// CHECK-NEXT:    %rms_norm_qkv_proj_tmp = kernel.empty : tensor<1x64xf32>
// CHECK-NEXT:    %rms_norm_qkv_proj_tmp_1 = kernel.empty : tensor<2x1x1x4096xf32>
// CHECK-NEXT:    %rms_norm_qkv_proj_counters = kernel.empty zeroed : tensor<2xi32>
// CHECK-NEXT:    kernel.launch @rms_norm_qkv_proj_stats(%x, %nw, %w, %rms_norm_qkv_proj_tmp)
// CHECK-NEXT:    kernel.launch @rms_norm_qkv_proj(%x, %nw, %w, %rms_norm_qkv_proj_tmp, %rms_norm_qkv_proj_tmp_1, %rms_norm_qkv_proj_counters, %out)
// CHECK-NEXT:    func.return %out : tensor<64x64xbf16>

// -----
// Knobs must be decided first.
builtin.module {
  func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
    %y = tile.kernel @copy kind "elementwise" axes [i = 4] knobs {threads = #tile.knob<"threads", [64, 128]>}
        ins(%x : tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%xa: tensor<4xf32>):
      %i = loop.axis "i" : index
      %v = loop.load %xa[%i] : tensor<4xf32> -> f32
      loop.store %v, 0 [%i] : f32
      loop.yield
    }
    func.return %y : tensor<4xf32>
  }
}
// CHECK: tile.kernel @copy: knobs threads are undecided (run decide-forks first)

// -----
// A plain matmul on warp-specialized wgmma with tensor-map copies: both operands are 2-D views
// (rows past M = 200 and the k tail of K = 200 arrive as zeros), one producer thread announces a
// slot's bytes and issues one copy per operand, the consumers only wait and multiply; the launch
// binds each map to its tensor.
builtin.module attributes {emmy.target = "sm_90a"} {
  func.func @f(%x: tensor<200x200xbf16> {emmy.name = "x", emmy.role = "input"}, %w: tensor<128x200xbf16> {emmy.name = "w", emmy.role = "param"}) -> tensor<200x128xbf16> {
    %out = tile.kernel @proj kind "contraction" axes [m = 200, n = 128, k = 200]
      knobs {block_m = #tile.knob<"block_m", [16, 32, 64, 128, 256] = 128, "pinned", "test">, block_n = #tile.knob<"block_n", [16, 32, 64, 96, 128, 192, 256] = 128, "pinned", "test">, block_k = #tile.knob<"block_k", [16, 32, 64, 128] = 64, "pinned", "test">, split_k = #tile.knob<"split_k", [1, 2, 3, 4, 8, 16] = 1, "pinned", "test">, stages = #tile.knob<"stages", [1, 2, 3, 4, 5] = 3, "pinned", "test">, workers = #tile.knob<"workers", ["thread", "mma_sync", "wgmma", "wgmma_ws"] = "wgmma_ws", "pinned", "test">, warps = #tile.knob<"warps", [1, 2, 4, 8, 16] = 8, "pinned", "test">, copy = #tile.knob<"copy", ["cp_async", "tma"] = "tma", "pinned", "test">, vector = #tile.knob<"vector", [1, 2, 4, 8] = 8, "pinned", "test">}
      ins(%x, %w : tensor<200x200xbf16>, tensor<128x200xbf16>) -> tensor<200x128xbf16> {
    ^bb0(%xa: tensor<200x200xbf16>, %wa: tensor<128x200xbf16>):
      %m = loop.axis "m" : index
      %n = loop.axis "n" : index
      %acc = loop.reduce sum ["k"] : f32 {
        %k = loop.axis "k" : index
        %a = loop.load %xa[%m, %k] : tensor<200x200xbf16> -> bf16
        %b = loop.load %wa[%n, %k] : tensor<128x200xbf16> -> bf16
        %af = arith.extf %a : bf16 to f32
        %bf = arith.extf %b : bf16 to f32
        %p = arith.mulf %af, %bf : f32
        loop.yield %p : f32
      }
      %o = arith.truncf %acc : f32 to bf16
      loop.store %o, 0 [%m, %n] : bf16
      loop.yield
    }
    func.return %out : tensor<200x128xbf16>
  }
}
// CHECK-LABEL: kernel.func @proj(%xa: !kernel.ptr<bf16>, %wa: !kernel.ptr<bf16>, %out: !kernel.ptr<bf16>, %tma_a: !kernel.tensor_map<bf16, rows 200, cols 200, stride 200, offset 0, box 128 x 64>, %tma_b: !kernel.tensor_map<bf16, rows 128, cols 200, stride 200, offset 0, box 128 x 64>) grid [1, 2, 1] block [384, 1, 1]
// CHECK:         kernel.call "emmy::mbar_init"(%{{.*}}, %c1) : (!kernel.ptr<i64, shared>, index) -> ()
// CHECK:         kernel.call "emmy::tma_prefetch"(%tma_a) : (!kernel.tensor_map<bf16, rows 200, cols 200, stride 200, offset 0, box 128 x 64>) -> ()
// CHECK:         kernel.for %kt = %c0 to %c4 step %c1 {
// CHECK:           kernel.call "emmy::mbar_arrive_expect_tx"(%{{.*}}, %c32768) : (!kernel.ptr<i64, shared>, index) -> ()
// CHECK:           kernel.call "emmy::tma_load_2d"(%{{.*}}, %tma_a, %{{.*}}, %m0, %{{.*}})
// CHECK:           kernel.call "emmy::tma_load_2d"(%{{.*}}, %tma_b, %{{.*}}, %n0, %{{.*}})
// CHECK:         kernel.for %kt_1 = %c0 to %c4 step %c1 {
// CHECK-NOT:       emmy::cp_async
// CHECK:           kernel.call "emmy::wgmma::tile<128, 64, 128, 128>"
// CHECK:         kernel.launch @proj(%x, %w, %out, %x, %w) : tensor<200x200xbf16>, tensor<128x200xbf16>, tensor<200x128xbf16>, tensor<200x200xbf16>, tensor<128x200xbf16>

// -----
// slices = cols: the warpgroups slice block_n (64 columns each, from the B tile's row 64 * warpgroup),
// the A tile is the wgmma's B operand (N = block_m = 32), and the transposed fragments go to the
// staged tile one bf16 at a time before 16-byte stores by rows.
builtin.module attributes {emmy.target = "sm_90a"} {
  func.func @f(%x: tensor<32x64xbf16> {emmy.name = "x", emmy.role = "input"}, %w: tensor<128x64xbf16> {emmy.name = "w", emmy.role = "param"}) -> tensor<32x128xbf16> {
    %y = tile.kernel @proj kind "contraction" axes [m = 32, n = 128, k = 64]
        knobs {block_m = #tile.knob<"block_m", [16, 32, 64, 128, 256] = 32, "pinned", "test">, block_n = #tile.knob<"block_n", [16, 32, 64, 128, 256] = 128, "pinned", "test">, block_k = #tile.knob<"block_k", [16, 32, 64, 128] = 64, "pinned", "test">, split_k = #tile.knob<"split_k", [1, 2] = 1, "pinned", "test">, stages = #tile.knob<"stages", [1, 2, 3, 4] = 2, "pinned", "test">, workers = #tile.knob<"workers", ["thread", "mma_sync", "wgmma"] = "wgmma", "pinned", "test">, warps = #tile.knob<"warps", [1, 2, 4, 8] = 8, "pinned", "test">, slices = #tile.knob<"slices", ["rows", "cols"] = "cols", "pinned", "test">, vector = #tile.knob<"vector", [1, 2, 4, 8] = 8, "pinned", "test">}
        ins(%x, %w : tensor<32x64xbf16>, tensor<128x64xbf16>) -> tensor<32x128xbf16> {
    ^bb0(%xa: tensor<32x64xbf16>, %wa: tensor<128x64xbf16>):
      %m = loop.axis "m" : index
      %n = loop.axis "n" : index
      %acc = loop.reduce sum ["k"] : f32 {
        %k = loop.axis "k" : index
        %a = loop.load %xa[%m, %k] : tensor<32x64xbf16> -> bf16
        %b = loop.load %wa[%n, %k] : tensor<128x64xbf16> -> bf16
        %af = arith.extf %a : bf16 to f32
        %bf = arith.extf %b : bf16 to f32
        %p = arith.mulf %af, %bf : f32
        loop.yield %p : f32
      }
      %r = arith.truncf %acc : f32 to bf16
      loop.store %r, 0 [%m, %n] : bf16
      loop.yield
    }
    func.return %y : tensor<32x128xbf16>
  }
}

// CHECK-LABEL: kernel.func @proj(%xa: !kernel.ptr<bf16>, %wa: !kernel.ptr<bf16>, %y: !kernel.ptr<bf16>) grid [1, 1, 1] block [256, 1, 1]
// CHECK:         %sA = kernel.shared [4096] offset 0 align 1024 : !kernel.ptr<bf16, shared>
// CHECK-NEXT:    %sB = kernel.shared [16384] offset 8192 align 1024 : !kernel.ptr<bf16, shared>
// CHECK:         %acc = kernel.local [16] : !kernel.ptr<f32, local>
// CHECK:           %[[SLOT:.*]] = arith.remui %kt, %c2 : index
// CHECK-NEXT:      %[[AOFF:.*]] = arith.muli %[[SLOT]], %c2048 : index
// CHECK-NEXT:      %[[A:.*]] = kernel.ptr_add %sA, %[[AOFF]] : !kernel.ptr<bf16, shared>
// CHECK-NEXT:      %[[BOFF:.*]] = arith.muli %[[SLOT]], %c8192 : index
// CHECK-NEXT:      %[[B:.*]] = kernel.ptr_add %sB, %[[BOFF]] : !kernel.ptr<bf16, shared>
// CHECK-NEXT:      %[[WG:.*]] = arith.divui %tid, %c128 : index
// CHECK-NEXT:      %[[C0:.*]] = arith.muli %[[WG]], %c64 : index
// CHECK-NEXT:      %[[OFF:.*]] = arith.muli %[[C0]], %c64 : index
// CHECK-NEXT:      %[[SLICE:.*]] = kernel.ptr_add %[[B]], %[[OFF]] : !kernel.ptr<bf16, shared>
// CHECK-NEXT:      kernel.call "emmy::wgmma::tile<32, 64, 128, 32>"(%[[SLICE]], %[[A]], %acc)
// CHECK:         %sC = kernel.shared [4352] offset 0 align 16 : !kernel.ptr<bf16, shared>
// CHECK:           kernel.store %r, %sC[%{{.*}}] : bf16, !kernel.ptr<bf16, shared>
// CHECK:           kernel.store %r_1, %sC[%{{.*}}] : bf16, !kernel.ptr<bf16, shared>
// CHECK:         %{{.*}} = kernel.load %sC[%{{.*}}] : !kernel.ptr<bf16, shared> -> vector<8xbf16>
// CHECK:         kernel.store %{{.*}}, %y[%{{.*}}] : vector<8xbf16>, !kernel.ptr<bf16>

// -----
// slices = cols with cluster = 2: the pair lines up along n (cluster [2, 1, 1]) and shares the A tile
// (the wgmma's B operand here): each block copies its half of A's rows (a box of block_m / 2 rows at
// m0 + rank * 32, into rows rank * 32 on of the slot) and multicasts it to both (mask 3); B whole.
builtin.module attributes {emmy.target = "sm_90a"} {
  func.func @f(%x: tensor<64x64xbf16> {emmy.name = "x", emmy.role = "input"}, %w: tensor<256x64xbf16> {emmy.name = "w", emmy.role = "param"}) -> tensor<64x256xbf16> {
    %y = tile.kernel @proj kind "contraction" axes [m = 64, n = 256, k = 64]
        knobs {block_m = #tile.knob<"block_m", [16, 32, 64, 128, 256] = 64, "pinned", "test">, block_n = #tile.knob<"block_n", [16, 32, 64, 128, 256] = 128, "pinned", "test">, block_k = #tile.knob<"block_k", [16, 32, 64, 128] = 64, "pinned", "test">, split_k = #tile.knob<"split_k", [1, 2] = 1, "pinned", "test">, stages = #tile.knob<"stages", [1, 2, 3, 4] = 2, "pinned", "test">, workers = #tile.knob<"workers", ["thread", "mma_sync", "wgmma", "wgmma_ws"] = "wgmma_ws", "pinned", "test">, warps = #tile.knob<"warps", [1, 2, 4, 8] = 8, "pinned", "test">, copy = #tile.knob<"copy", ["cp_async", "tma"] = "tma", "pinned", "test">, cluster = #tile.knob<"cluster", [1, 2] = 2, "pinned", "test">, slices = #tile.knob<"slices", ["rows", "cols"] = "cols", "pinned", "test">, vector = #tile.knob<"vector", [1, 2, 4, 8] = 8, "pinned", "test">}
        ins(%x, %w : tensor<64x64xbf16>, tensor<256x64xbf16>) -> tensor<64x256xbf16> {
    ^bb0(%xa: tensor<64x64xbf16>, %wa: tensor<256x64xbf16>):
      %m = loop.axis "m" : index
      %n = loop.axis "n" : index
      %acc = loop.reduce sum ["k"] : f32 {
        %k = loop.axis "k" : index
        %a = loop.load %xa[%m, %k] : tensor<64x64xbf16> -> bf16
        %b = loop.load %wa[%n, %k] : tensor<256x64xbf16> -> bf16
        %af = arith.extf %a : bf16 to f32
        %bf = arith.extf %b : bf16 to f32
        %p = arith.mulf %af, %bf : f32
        loop.yield %p : f32
      }
      %r = arith.truncf %acc : f32 to bf16
      loop.store %r, 0 [%m, %n] : bf16
      loop.yield
    }
    func.return %y : tensor<64x256xbf16>
  }
}

// CHECK-LABEL: kernel.func @proj(%xa: !kernel.ptr<bf16>, %wa: !kernel.ptr<bf16>, %y: !kernel.ptr<bf16>, %tma_a: !kernel.tensor_map<bf16, rows 64, cols 64, stride 64, offset 0, box 32 x 64>, %tma_b: !kernel.tensor_map<bf16, rows 256, cols 64, stride 64, offset 0, box 128 x 64>) grid [2, 1, 1] block [384, 1, 1] smem {{[0-9]+}} min_blocks 1 cluster [2, 1, 1]
// CHECK:         kernel.call "emmy::mbar_init"(%{{.*}}, %c16) : (!kernel.ptr<i64, shared>, index) -> ()
// CHECK:         kernel.call "emmy::cluster_sync"() : () -> ()
// CHECK:           kernel.call "emmy::mbar_arrive_expect_tx"(%[[BAR:.*]], %c24576) : (!kernel.ptr<i64, shared>, index) -> ()
// CHECK-NEXT:      %[[RANK:.*]] = kernel.call "emmy::cluster_rank"() : () -> index
// CHECK:           %[[HALF:.*]] = arith.muli %[[RANK]], %c32 : index
// CHECK-NEXT:      %[[ROW:.*]] = arith.addi %m0, %[[HALF]] : index
// CHECK-NEXT:      %[[SKIP:.*]] = arith.muli %[[RANK]], %c2048 : index
// CHECK-NEXT:      %[[DST:.*]] = kernel.ptr_add %{{.*}}, %[[SKIP]] : !kernel.ptr<bf16, shared>
// CHECK:           kernel.call "emmy::tma_load_2d_multicast"(%[[DST]], %tma_a, %{{.*}}, %[[ROW]], %[[BAR]], %c3)
// CHECK:           kernel.call "emmy::tma_load_2d"(%{{.*}}, %tma_b, %{{.*}}, %n0, %[[BAR]])
// CHECK:           kernel.call "emmy::cluster_arrive<2>"
