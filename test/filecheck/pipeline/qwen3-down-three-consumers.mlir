// The Qwen3 layer's down projection at 3000 tokens in 192-row tiles: three consumer warpgroups
// of 64 rows each (warps = 12) and the producer warpgroup, 512 threads. ptxas starts each
// thread at 128 registers (65536 / 512), too few for 96 accumulators and the rest, so the
// producer gives registers back with setmaxnreg and the consumers take them (56 and 152:
// WS3_PRODUCER_REGS, WS3_CONSUMER_REGS in emmy/schedule/contraction.py). A slot is free once
// all 12 consumer warps have released it (one arrival a warp, emmy::warp_arrive). Each warpgroup multiplies its own 64-row slice of
// A against the whole 128-column B tile.
// RUN: emmy compile Qwen/Qwen3-Embedding-0.6B --layer 0 --tokens 3000 --target sm_90a --knob 'down_proj_residual.workers=wgmma_ws' --knob 'down_proj_residual.copy=tma' --knob 'down_proj_residual.block_m=192' --knob 'down_proj_residual.block_n=128' --knob 'down_proj_residual.block_k=64' --knob 'down_proj_residual.stages=4' --knob 'down_proj_residual.warps=12' --knob 'down_proj_residual.schedule=grid' --knob 'down_proj_residual.split_k=1' -o %t.cu
// RUN: filecheck %s < %t.cu
// RUN: not emmy compile Qwen/Qwen3-Embedding-0.6B --layer 0 --tokens 3000 --target sm_90a --knob 'down_proj_residual.workers=wgmma_ws' --knob 'down_proj_residual.block_m=192' --knob 'down_proj_residual.warps=12' --knob 'down_proj_residual.block_n=256' 2>&1 | filecheck %s --check-prefix=WIDE

// CHECK: __global__ void __launch_bounds__(512, 1) down_proj_residual(
// CHECK: emmy::mbar_init({{p_[0-9]+}}, c12_{{[0-9]+}});
// CHECK: const bool [[PRODUCER:p_[0-9]+]] = tid_{{[0-9]+}} >= c384_{{[0-9]+}};
// CHECK-NEXT: if ([[PRODUCER]]) {
// CHECK-NEXT: emmy::regs_lower<56>();
// CHECK: const bool [[CONSUMER:p_[0-9]+]] = tid_{{[0-9]+}} < c384_{{[0-9]+}};
// CHECK-NEXT: if ([[CONSUMER]]) {
// CHECK-NEXT: emmy::regs_raise<152>();
// CHECK: emmy::wgmma::tile<128, 64, 192, 128>(
// CHECK: emmy::warp_arrive(

// WIDE: error: kernel 'down_proj_residual': the pinned values {{.*}} are illegal on sm_90a:
// WIDE: registers: block_m=192 x block_n=256 fp32 accumulators over 384 threads is 128 per thread, over the 112 that fit in 152 registers
