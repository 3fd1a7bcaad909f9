// RUN: emmy-opt %s -p decide-forks | filecheck %s
// RUN: emmy-opt %s -p 'decide-forks{pin="rms_norm_qkv_proj.block_m=64;*.workers=mma_sync;threads=256"}' | filecheck %s --check-prefix=PIN
// RUN: emmy-opt %s --pass-pipeline='builtin.module(decide-forks{pin="rms_norm_qkv_proj.block_m=64;*.workers=mma_sync;threads=256"})' | filecheck %s --check-prefix=PIN
// RUN: emmy-opt %s -p decide-forks | emmy-opt -p decide-forks | filecheck %s
// RUN: emmy-opt %s -p 'decide-forks{pin="foo.block_m=64"}' --verify-diagnostics | filecheck %s --check-prefix=NOKERNEL
// RUN: emmy-opt %s -p 'decide-forks{pin="block_m=48"}' --verify-diagnostics | filecheck %s --check-prefix=DOMAIN
// RUN: emmy-opt %s -p 'decide-forks{pin="*.blockm=64"}' --verify-diagnostics | filecheck %s --check-prefix=NOKNOB
// RUN: emmy-opt %s -p 'decide-forks{pin="rms_norm_qkv_proj.items=2"}' --verify-diagnostics | filecheck %s --check-prefix=WRONGKIND
// RUN: emmy-opt %s -p 'decide-forks{pin="block_m"}' --verify-diagnostics | filecheck %s --check-prefix=SYNTAX
// RUN: emmy-opt %s -p 'decide-forks{pin="workers=wgmma;block_m=16"}' --verify-diagnostics | filecheck %s --check-prefix=WGMMA
// RUN: emmy-opt %s -p 'decide-forks{pin="block_k=128;stages=5;block_m=256;block_n=256"}' --verify-diagnostics | filecheck %s --check-prefix=SMEM
// RUN: emmy-opt %S/../inputs/torch-layer.mlir -p 'convert-torch-to-tensor,tensor-merge-siblings,convert-tensor-to-loop,loop-fuse,loop-hoist-params,convert-loop-to-tile,decide-forks{max-launches=6}' | filecheck %s --check-prefix=BUDGET
// RUN: emmy-opt %S/../inputs/torch-layer.mlir -p 'convert-torch-to-tensor,tensor-merge-siblings,convert-tensor-to-loop,loop-fuse,loop-hoist-params,convert-loop-to-tile,decide-forks' | filecheck %s --check-prefix=NOBUDGET
// RUN: emmy-opt %inputs/decide-forks-bad-budget.mlir -p decide-forks --verify-diagnostics | filecheck %s --check-prefix=BADATTR
// RUN: emmy-opt %s -p 'decide-forks{evidence="pinned,rule"}' | filecheck %s --check-prefix=EVIDENCE
// RUN: emmy-opt %s -p 'decide-forks{evidence="gold,rule"}' --verify-diagnostics | filecheck %s --check-prefix=BADTIER
// RUN: emmy-opt %s -p 'decide-forks{evidence="pinned"}' --verify-diagnostics | filecheck %s --check-prefix=NOCOMPLETER


// The evidence tiers (option evidence): with tiers turned off, every kernel records where its
// answers came from and why each higher tier had none (emmy.evidence, a JSON string with its key);
// a plain run writes no such attribute (no evidence answered or was skipped). Bad tier lists are
// errors naming the tiers.
// CHECK-NOT:  emmy.evidence
// EVIDENCE:   tile.kernel @rms_norm_qkv_proj
// EVIDENCE:   block_m = #tile.knob<"block_m", [16, 32, 64, 128, 256] = {{[0-9]+}}, "rule",
// EVIDENCE:   emmy.evidence = "{\22key\22: \22{{[0-9a-f]+}}:{{[0-9a-f]+}}:sm_90a:v1\22, \22misses\22: {\22golden\22: \22turned off\22, \22local\22: \22turned off\22, \22nearest\22: \22turned off\22, \22prior\22: \22turned off\22}, \22skipped\22: [], \22sources\22: {}}"
// BADTIER:    error: unknown evidence tier 'gold'
// BADTIER-NEXT: valid tiers: pinned, local, golden, nearest, prior, rule
// NOCOMPLETER: error: keep 'rule' or 'prior' on: one of them must complete every schedule

// The launch budget (max-launches): Qwen3's layer at 32 tokens on sm_90 takes 9 launches per call
// with the rules' answers (the down projection's parts added by a combine kernel, the row
// statistics of q/k/v and gate/up and attention's K rows in kernels of their own); a budget of 6
// trades the combine kernel for the last block of each tile first, then statistics kernels in
// order (q/k/v's, attention's), until it fits, and says so. No budget: no trade.
// BUDGET:     tile.kernel @rms_norm_qkv_proj
// BUDGET:     fusion = #tile.knob<"fusion", ["fused", "split"] = "fused", "rule", "launch budget: @layer0 would make 8 launches per call, 6 allowed: fused: what a kernel of its own computed first (row statistics, rotated K rows) computed in this one">
// BUDGET:     tile.kernel @attention
// BUDGET:     "launch budget: @layer0 would make 7 launches per call, 6 allowed: fused: what a kernel of its own computed first (row statistics, rotated K rows) computed in this one"
// BUDGET:     tile.kernel @rms_norm_gate_up_proj_silu
// BUDGET-NOT: launch budget
// BUDGET:     tile.kernel @down_proj_residual
// BUDGET:     combine = #tile.knob<"combine", ["kernel", "last_block"] = "last_block", "rule", "launch budget: @layer0 would make 9 launches per call, 6 allowed: the last of each tile's {{[0-9]+}} blocks adds the parts, no _combine kernel">
// NOBUDGET-NOT: launch budget
// NOBUDGET:     tile.kernel @down_proj_residual
// NOBUDGET:     combine = #tile.knob<"combine", ["kernel", "last_block"] = "kernel", "rule", "a kernel of its own adds the {{[0-9]+}} parts and runs the epilogue">
// NOBUDGET-NOT: launch budget

// Every knob is decided by the default rules (tier "rule") with a reason; a value recorded in the
// IR (the golden threads of @g) is kept with its tier; domains are unchanged.
// CHECK:      tile.kernel @rms_norm_qkv_proj kind "contraction" axes [m = 512, n = 4096, k = 1024] knobs {
// CHECK-NEXT:   block_m = #tile.knob<"block_m", [16, 32, 64, 128, 256] = {{[0-9]+}}, "rule", "M=512 N=4096: {{[0-9]+}} tiles of {{[^"]*}} on 132 SMs {{[^"]*}}">
// CHECK-NEXT:   block_n = #tile.knob<"block_n", [16, 32, 64, 96, 112, 128, 160, 192, 256] = {{[0-9]+}}, "rule",
// CHECK-NEXT:   block_k = #tile.knob<"block_k", [16, 32, 64, 128] = {{[0-9]+}}, "rule",
// CHECK-NEXT:   split_k = #tile.knob<"split_k", [1, 2, 3, 4, 8, 16] = {{[0-9]+}}, "rule",
// CHECK-NEXT:   combine = #tile.knob<"combine", ["kernel", "last_block"] = "kernel", "rule",
// CHECK-NEXT:   stages = #tile.knob<"stages", [1, 2, 3, 4, 5, 6, 8, 12, 16] = {{[0-9]+}}, "rule",
// CHECK-NEXT:   workers = #tile.knob<"workers", ["thread", "mma_sync", "wgmma"] = "wgmma", "rule", "sm_90a has wgmma and M=512 fills 64-row warpgroup tiles">
// CHECK-NEXT:   warps = #tile.knob<"warps", [1, 2, 4, 8, 16] = {{[0-9]+}}, "rule",
// CHECK-NEXT:   vector = #tile.knob<"vector", [1, 2, 4, 8] = 8, "rule", "16-byte accesses along k=1024">
// CHECK-NEXT:   fusion = #tile.knob<"fusion", ["fused", "split"] = "{{fused|split}}", "rule",
// CHECK-NEXT: } ins(%x, %nw, %w
// CHECK:      tile.kernel @silu_mul kind "elementwise" axes [m = 7, n = 3072] knobs {
// CHECK-NEXT:   threads = #tile.knob<"threads", [64, 128, 256, 512, 1024] = 128, "golden", "golden/sm_90a/qwen3.json">
// CHECK-NEXT:   vector = #tile.knob<"vector", [1, 2, 4, 8] = 8, "rule",
// CHECK-NEXT:   items = #tile.knob<"items", [1, 2, 4, 8] = {{[0-9]+}}, "rule",
// CHECK-NEXT: } ins(%g
// CHECK-NOT:  #tile.knob<"{{[a-z_]+}}", [{{[^]]*}}]>

// Pins win over the rules and over recorded evidence; a kernel-specific pin touches only its kernel.
// PIN:      block_m = #tile.knob<"block_m", [16, 32, 64, 128, 256] = 64, "pinned", "pin 'rms_norm_qkv_proj.block_m=64'">
// PIN:      workers = #tile.knob<"workers", ["thread", "mma_sync", "wgmma"] = "mma_sync", "pinned", "pin '*.workers=mma_sync'">
// PIN:      threads = #tile.knob<"threads", [64, 128, 256, 512, 1024] = 256, "pinned", "pin 'threads=256'">

// NOKERNEL:  error: pin 'foo.block_m=64': no kernel named 'foo'; kernels: rms_norm_qkv_proj, silu_mul
// DOMAIN:    error: pin 'block_m=48': block_m=48 is not in the domain of rms_norm_qkv_proj.block_m: [16, 32, 64, 128, 256]
// NOKNOB:    error: pin '*.blockm=64': unknown knob 'blockm'; knobs: block_k, block_kv, block_m, block_n, block_q, cluster, combine, copy, epilogue, fusion, group_m, items, rows_per_block, schedule, siblings, slices, split_k, split_kv, split_tail, stages, threads, vector, warps, workers
// WRONGKIND: error: pin 'rms_norm_qkv_proj.items=2': kernel 'rms_norm_qkv_proj' (contraction) has no knob 'items'; its knobs: block_m, block_n, block_k, split_k, combine, stages, workers, warps, vector, fusion
// SYNTAX:    error: pin 'block_m': expected KERNEL.KNOB=VALUE, *.KNOB=VALUE or KNOB=VALUE (items separated by ';')
// WGMMA:     error: kernel 'rms_norm_qkv_proj': the pinned values workers=wgmma, block_m=16 are illegal on sm_90a:
// WGMMA-NEXT:  wgmma: block_m=16 is not a multiple of 64
// SMEM:      error: kernel 'rms_norm_qkv_proj': the pinned values block_k=128, stages=5, block_m=256, block_n=256 are illegal on sm_90a:
// SMEM-NEXT:   shared memory: stages=5 x (block_m=256 + block_n=256) x block_k=128 x 2 bytes = 640.0 KB exceeds the 227.0 KB a block may use on sm_90a

builtin.module attributes {emmy.target = "sm_90a"} {
  func.func @f(%x: tensor<512x1024xbf16>, %nw: tensor<1024xbf16>, %w: tensor<4096x1024xbf16>) -> tensor<512x4096xbf16> {
    %out = tile.kernel @rms_norm_qkv_proj kind "contraction" axes [m = 512, n = 4096, k = 1024] knobs {block_m = #tile.knob<"block_m", [16, 32, 64, 128, 256]>, block_n = #tile.knob<"block_n", [16, 32, 64, 96, 112, 128, 160, 192, 256]>, block_k = #tile.knob<"block_k", [16, 32, 64, 128]>, split_k = #tile.knob<"split_k", [1, 2, 3, 4, 8, 16]>, combine = #tile.knob<"combine", ["kernel", "last_block"]>, stages = #tile.knob<"stages", [1, 2, 3, 4, 5, 6, 8, 12, 16]>, workers = #tile.knob<"workers", ["thread", "mma_sync", "wgmma"]>, warps = #tile.knob<"warps", [1, 2, 4, 8, 16]>, vector = #tile.knob<"vector", [1, 2, 4, 8]>, fusion = #tile.knob<"fusion", ["fused", "split"]>} ins(%x, %nw, %w : tensor<512x1024xbf16>, tensor<1024xbf16>, tensor<4096x1024xbf16>) -> tensor<512x4096xbf16> attributes {emmy.fused_from = ["rms_norm", "linear_qkv_proj"], emmy.fusion = "fused"} {
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
      %inv_n = arith.constant 0.0009765625 : f32
      %eps = arith.constant 1.000000e-06 : f32
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
  func.func @g(%g: tensor<7x6144xbf16>) -> tensor<7x3072xbf16> {
    %out = tile.kernel @silu_mul kind "elementwise" axes [m = 7, n = 3072] knobs {threads = #tile.knob<"threads", [64, 128, 256, 512, 1024] = 128, "golden", "golden/sm_90a/qwen3.json">, vector = #tile.knob<"vector", [1, 2, 4, 8]>, items = #tile.knob<"items", [1, 2, 4, 8]>} ins(%g : tensor<7x6144xbf16>) -> tensor<7x3072xbf16> {
    ^bb0(%ga: tensor<7x6144xbf16>):
      %m = loop.axis "m" : index
      %n = loop.axis "n" : index
      %cN = arith.constant 3072 : index
      %nu = arith.addi %n, %cN : index
      %a = loop.load %ga[%m, %n] : tensor<7x6144xbf16> -> bf16
      %b = loop.load %ga[%m, %nu] : tensor<7x6144xbf16> -> bf16
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
    func.return %out : tensor<7x3072xbf16>
  }
}

// A recorded budget that is not an integer.
// BADATTR: error: decide-forks: the module's emmy.max_launches must be an integer, not "eight"
