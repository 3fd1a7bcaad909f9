// The Qwen3 layer's attention at 3000 tokens with the warp-specialized schedule pinned
// (workers = wgmma_ws, sm_90a): the prologue kernel materializes the normalized, rotated Q and K
// rows (fusion = split), and the main kernel has a producer warpgroup besides its 8 computing
// warps (384 threads) on plain Q rows (mode 0) and K and V through tensor maps (mode 3). The
// blocks loop, one per SM, over the query blocks (schedule = persistent): the barriers set up
// once (ws_begin), then each role's loop (ws_tiles, attention.cuh) takes the 384 query blocks
// from the tile counter (the kernel's last argument) and calls a lambda holding its
// emmy::attention::run_ws per query block, the producer's (role 0) first (pinned here: the
// golden entries of Qwen3's attention, measured with one block per query block, answer `grid`
// at these lengths). Pinned to
// schedule = grid, one block per query block calls emmy::attention::run with WGMMA = 2. The last
// template argument (STAGED_OUT = 1): the output stores bf16(O / l), so O goes out through shared memory.
// RUN: emmy compile Qwen/Qwen3-Embedding-0.6B --layer 0 --tokens 3000 --target sm_90a --knob 'attention.workers=wgmma_ws' --knob 'attention.fusion=split' --knob 'attention.copy=tma' --knob 'attention.block_q=128' --knob 'attention.warps=8' --knob 'attention.block_kv=128' --knob 'attention.stages=2' --knob 'attention.schedule=persistent' -o %t.cu
// RUN: filecheck %s < %t.cu
// RUN: emmy compile Qwen/Qwen3-Embedding-0.6B --layer 0 --tokens 3000 --target sm_90a --knob 'attention.workers=wgmma_ws' --knob 'attention.fusion=split' --knob 'attention.copy=tma' --knob 'attention.block_q=128' --knob 'attention.warps=8' --knob 'attention.block_kv=128' --knob 'attention.stages=2' --knob 'attention.schedule=grid' -o %t2.cu
// RUN: filecheck %s --check-prefix=GRID < %t2.cu
// RUN: emmy compile Qwen/Qwen3-Embedding-0.6B --layer 0 --tokens 1000 --target sm_90a --knob 'attention.workers=wgmma_ws' --knob 'attention.fusion=split' --knob 'attention.copy=tma' --knob 'attention.block_q=64' --knob 'attention.warps=4' --knob 'attention.block_kv=64' --knob 'attention.stages=3' --knob 'attention.schedule=persistent' -o %t1.cu
// RUN: filecheck %s --check-prefix=ONE < %t1.cu
// RUN: emmy compile Qwen/Qwen3-Embedding-0.6B --layer 0 --tokens 32768 --target sm_90a -o %t3.cu
// RUN: filecheck %s --check-prefix=SECTION < %t3.cu
// RUN: not emmy compile Qwen/Qwen3-Embedding-0.6B --layer 0 --tokens 1000 --target sm_90a --knob 'attention.workers=wgmma_ws' --knob 'attention.fusion=fused' 2>&1 | filecheck %s --check-prefix=FUSED
// RUN: not emmy compile Qwen/Qwen3-Embedding-0.6B --layer 0 --tokens 1000 --target sm_90a --knob 'attention.workers=wgmma' --knob 'attention.schedule=persistent' 2>&1 | filecheck %s --check-prefix=PERSISTENT

// CHECK: __global__ void __launch_bounds__(256) attention_prep(
// CHECK: emmy::attention::materialize<128, 2, 128, 8, 4>
// CHECK: __global__ void __launch_bounds__(384, 1) attention(
// CHECK-SAME: const __grid_constant__ CUtensorMap tma_k
// CHECK-SAME: const __grid_constant__ CUtensorMap tma_v
// CHECK-SAME: int* __restrict__ [[COUNTER:tile_counter_[0-9]+]]
// CHECK: emmy::attention::ws_begin<128, 128, 128, 8, 2>(
// CHECK: auto [[NEXTB:fn_[0-9]+]] = [&](const int {{t_[0-9]+}}) -> int {
// CHECK: auto [[NEXTQ:fn_[0-9]+]] = [&](const int {{t_[0-9]+}}) -> __nv_bfloat16* {
// CHECK: if (
// CHECK-NEXT: emmy::attention::ws_role<128, 128, 128, 8, 2, 0, 24, 240>();
// CHECK-NEXT: auto [[TILE0:fn_[0-9]+]] = [&](const int {{t_[0-9]+}}, const int [[RING0:ring_[0-9]+]], const int [[I0:i_[0-9]+]]) -> int {
// CHECK: emmy::attention::run_ws<128, 128, 128, 8, 2, 0, 0, 3, 128, 3, 4096, 0, 1>({{.*}}, [[RING0]], {{smem_[0-9]+}}, [[I0]], [[NEXTB]], [[NEXTQ]]);
// CHECK: emmy::attention::ws_tiles<128, 128, 128, 8, 2, 0>([[TILE0]], {{c384_[0-9]+}}, [[COUNTER]], {{smem_[0-9]+}});
// CHECK: emmy::attention::ws_role<128, 128, 128, 8, 2, 1, 24, 240>();
// CHECK: emmy::attention::run_ws<128, 128, 128, 8, 2, 0, 0, 3, 128, 3, 4096, 1, 1>(
// CHECK: emmy::attention::ws_tiles<128, 128, 128, 8, 2, 1>({{fn_[0-9]+}}, {{c384_[0-9]+}}, [[COUNTER]], {{smem_[0-9]+}});
// CHECK: cudaLaunchKernelEx(&config, attention,
// CHECK-SAME: (int*)attention_counters)

// GRID: __global__ void __launch_bounds__(384, 1) attention(
// GRID-NOT: ws_begin
// GRID: emmy::attention::run<128, 128, 128, 8, 2, 0, 0, 3, 128, 3, 4096, 2, 1, 24, 240>(

// At 32768 tokens the K and V rows of Qwen3's 8 key-value heads (16 MB each) exceed the H200's
// 60 MB of L2: the blocks take the heads in L2 sections of 2 key-value heads, 4 query heads
// (AttentionPlan.section), the 256 query blocks of a section's 4 heads (1024 blocks) longest
// first, head fastest, before the next section's. The block's place in that order is its
// linear index x + 16 y (the grid is still 16 heads x 256 query blocks).
// SECTION: __global__ void __launch_bounds__(384, 1) attention(
// SECTION: const int [[Y:v_[0-9]+]] = {{bid_y_[0-9]+}} * {{c16_[0-9]+}};
// SECTION-NEXT: const int [[T:v_[0-9]+]] = {{bid_x_[0-9]+}} + [[Y]];
// SECTION-NEXT: const int [[SEC:v_[0-9]+]] = (int)((unsigned)([[T]]) / (unsigned)({{c1024_[0-9]+}}));
// SECTION-NEXT: const int [[FIRST:v_[0-9]+]] = [[SEC]] * [[C4:c4_[0-9]+]];
// SECTION-NEXT: const int [[LOCAL:v_[0-9]+]] = (int)((unsigned)([[T]]) % (unsigned)({{c1024_[0-9]+}}));
// SECTION-NEXT: const int [[HEAD:v_[0-9]+]] = (int)((unsigned)([[LOCAL]]) % (unsigned)([[C4]]));
// SECTION-NEXT: const int [[ROW:v_[0-9]+]] = [[FIRST]] + [[HEAD]];
// SECTION-NEXT: const int [[RANK:v_[0-9]+]] = (int)((unsigned)([[LOCAL]]) / (unsigned)([[C4]]));
// SECTION-NEXT: const int {{q_block_[0-9]+}} = {{c255_[0-9]+}} - [[RANK]];

// One consumer warpgroup: 256 threads, 3 stages.
// ONE: __global__ void __launch_bounds__(256, 1) attention(
// ONE: emmy::attention::run_ws<128, 64, 64, 4, 3, 0, 0, 3, 128, 3, 4096, 1, 1>(

// Computed Q and K without the prologue kernel: no legal schedule, and why.
// FUSED: kernel 'attention': no legal schedule on sm_90a with workers=wgmma_ws, fusion=fused
// FUSED: workers=wgmma_ws needs plain rows of Q, K and V, and q, k computed (normalized, rotated) in the kernel: use fusion=split

// schedule = persistent loops the warp-specialized kernel only.
// PERSISTENT: error: kernel 'attention': the pinned values workers=wgmma, schedule=persistent are illegal on sm_90a:
// PERSISTENT-NEXT: schedule=persistent loops the warp-specialized kernel over query blocks: it needs workers=wgmma_ws, not wgmma
