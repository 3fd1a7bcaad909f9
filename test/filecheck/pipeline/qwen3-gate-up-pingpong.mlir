// The Qwen3 layer's gate/up projection at 3000 tokens with epilogue = pingpong: two consumer
// warpgroups that each multiply and store whole 64 x (2 x 128) tiles (one 64 x 256 wgmma per
// k16 for gate and up side by side), taking the persistent block's tiles in turn: warpgroup 0
// the block's 1st, 3rd, ... (stride 2 x 132), warpgroup 1 the 2nd, 4th, ... The producer stages
// every tile in order. A warpgroup waits for its turn at the k loop (barrier 13 + w; warpgroup
// 0's first tile does not wait) and hands it on once it has waited on its last slot, so the
// two wait on the slots in the order they are filled; then it stores its tile, staged in its own
// room of shared memory (barrier 10 + w), while the other multiplies. One warpgroup (its four
// warps, one arrival each) frees a slot; it holds all 128 accumulators a thread, with 232 registers the producer
// hands over (PINGPONG_* in emmy/schedule/contraction.py).
// RUN: emmy compile Qwen/Qwen3-Embedding-0.6B --layer 0 --tokens 3000 --target sm_90a --knob 'rms_norm_gate_up_proj_silu.epilogue=pingpong' --knob 'rms_norm_gate_up_proj_silu.block_m=64' --knob 'rms_norm_gate_up_proj_silu.block_n=128' --knob 'rms_norm_gate_up_proj_silu.warps=8' --knob 'rms_norm_gate_up_proj_silu.schedule=persistent' --knob 'rms_norm_gate_up_proj_silu.cluster=1' --knob 'rms_norm_gate_up_proj_silu.fusion=split' --knob 'rms_norm_gate_up_proj_silu.copy=tma' --knob 'rms_norm_gate_up_proj_silu.group_m=1' --knob 'rms_norm_gate_up_proj_silu.stages=4' -o %t.cu
// RUN: filecheck %s < %t.cu
// RUN: not emmy compile Qwen/Qwen3-Embedding-0.6B --layer 0 --tokens 3000 --target sm_90a --knob 'rms_norm_gate_up_proj_silu.epilogue=pingpong' --knob 'rms_norm_gate_up_proj_silu.block_m=128' --knob 'rms_norm_gate_up_proj_silu.block_n=128' --knob 'rms_norm_gate_up_proj_silu.warps=8' 2>&1 | filecheck %s --check-prefix=REGS
// RUN: not emmy compile Qwen/Qwen3-Embedding-0.6B --layer 0 --tokens 3000 --target sm_90a --knob 'rms_norm_gate_up_proj_silu.epilogue=pingpong' --knob 'rms_norm_gate_up_proj_silu.schedule=grid' 2>&1 | filecheck %s --check-prefix=GRID

// CHECK: __global__ void __launch_bounds__(384, 1) rms_norm_gate_up_proj_silu(
// CHECK: emmy::mbar_init({{p_[0-9]+}}, c4_{{[0-9]+}});
// CHECK: const bool [[PRODUCER:p_[0-9]+]] = tid_{{[0-9]+}} >= c256_{{[0-9]+}};
// CHECK-NEXT: if ([[PRODUCER]]) {
// CHECK-NEXT: emmy::regs_lower<40>();
// CHECK: for (int t_{{[0-9]+}} = bid_x_{{[0-9]+}}; t_{{[0-9]+}} < c1128_{{[0-9]+}}; t_{{[0-9]+}} += c132_{{[0-9]+}}) {
// CHECK: const bool [[CONSUMER:p_[0-9]+]] = tid_{{[0-9]+}} < c256_{{[0-9]+}};
// CHECK-NEXT: if ([[CONSUMER]]) {
// CHECK-NEXT: emmy::regs_raise<232>();
// CHECK: for (int t_{{[0-9]+}} = bid_x_{{[0-9]+}}; t_{{[0-9]+}} < c1128_{{[0-9]+}}; t_{{[0-9]+}} += c264_{{[0-9]+}}) {
// CHECK: emmy::named_barrier<256>(c13_{{[0-9]+}});
// CHECK: emmy::wgmma::tile<256, 64, 64, 256>(
// CHECK: emmy::warp_arrive(
// CHECK: emmy::named_barrier_arrive<256>(c14_{{[0-9]+}});
// CHECK: reinterpret_cast<__nv_bfloat16*>(emmy_smem + [[ROOM0:[0-9]+]]);
// CHECK-NEXT: emmy::named_barrier<128>(c10_{{[0-9]+}});
// CHECK: for (int t_{{[0-9]+}} = v_{{[0-9]+}}; t_{{[0-9]+}} < c1128_{{[0-9]+}}; t_{{[0-9]+}} += c264_{{[0-9]+}}) {
// CHECK: emmy::named_barrier<256>(c14_{{[0-9]+}});
// CHECK: emmy::wgmma::tile<256, 64, 64, 256>(
// CHECK: emmy::named_barrier_arrive<256>(c13_{{[0-9]+}});
// CHECK-NOT: emmy_smem + [[ROOM0]])
// CHECK: reinterpret_cast<__nv_bfloat16*>(emmy_smem + {{[0-9]+}});
// CHECK-NEXT: emmy::named_barrier<128>(c11_{{[0-9]+}});

// REGS: error: kernel 'rms_norm_gate_up_proj_silu': the pinned values {{.*}} are illegal on sm_90a:
// REGS: registers: 2 x block_m=128 x block_n=128 fp32 accumulators over one warpgroup's 128 threads (epilogue=pingpong) is 256 per thread, over the 192 that fit in 232 registers

// GRID: error: kernel 'rms_norm_gate_up_proj_silu': the pinned values {{.*}} are illegal on sm_90a:
// GRID: epilogue=pingpong takes turns between tiles of a persistent block: it needs schedule=persistent (schedule=grid)
