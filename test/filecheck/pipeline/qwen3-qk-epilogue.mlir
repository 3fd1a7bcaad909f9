// The Qwen3 layer with attention's fusion = epilogue pinned: the q/k/v projection computes the
// per-head RMSNorm and rotary embedding of Q and K in its staged epilogue (its tiles hold whole
// heads: decide-forks answers block_n = 128 where the rules chose 32, and split_k = 1), taking the
// norm weights and rotary tables as extra arguments; no prologue kernel; the flash kernel reads
// Q, K and V as direct rows (modes 0). The first run is the rules' alone (`--evidence pinned,rule`),
// so that what the shipped golden files hold does not change what it checks.
// RUN: emmy compile Qwen/Qwen3-Embedding-0.6B --layer 0 --tokens 65 --target sm_90a --evidence pinned,rule --knob 'attention.fusion=epilogue' -o %t.cu --explain | filecheck %s --check-prefix=EXPLAIN
// RUN: filecheck %s < %t.cu
// RUN: emmy compile Qwen/Qwen3-Embedding-0.6B --layer 0 --tokens 3000 --target sm_90a --knob 'attention.fusion=epilogue' --knob 'attention.workers=wgmma_ws' --knob 'attention.copy=tma' --knob 'attention.block_q=128' --knob 'attention.warps=8' --knob 'attention.block_kv=128' --knob 'attention.stages=2' -o %t1.cu
// RUN: filecheck %s --check-prefix=WS < %t1.cu
// RUN: not emmy compile Qwen/Qwen3-Embedding-0.6B --layer 0 --tokens 65 --target sm_90a --knob 'attention.fusion=epilogue' --knob 'rms_norm_qkv_proj.block_n=64' 2>&1 | filecheck %s --check-prefix=PINNED

// EXPLAIN: rms_norm_qkv_proj {{ +}}block_n {{ +}}128 {{ +}}rule {{.*}}block_n=128: whole heads of 128 columns for @attention's fusion=epilogue
// EXPLAIN: rms_norm_qkv_proj {{ +}}split_k {{ +}}1 {{ +}}rule {{.*}}split_k=1 for @attention's fusion=epilogue
// EXPLAIN: attention {{ +}}fusion {{ +}}epilogue {{ +}}pinned

// CHECK: rms_norm_qkv_proj(
// CHECK-SAME: __nv_bfloat16* __restrict__ qkv_proj
// CHECK-SAME: const __nv_bfloat16* __restrict__ qk_in0
// CHECK-SAME: const __nv_bfloat16* __restrict__ qk_in4
// A thread's 8 columns are the same in every round of the staged epilogue's loop, so the branch on
// which operand's head they are in (Q's, K's, or V's plain columns) is taken once, around a loop of
// its own; a head's row sum of squares is shuffled among its 16 lanes alone.
// CHECK: if ([[Q:v_[0-9]+]]) {
// CHECK-NEXT: #pragma unroll
// CHECK-NEXT: for (int c_
// CHECK: emmy::lane_group_sum<16>(
// CHECK: if ([[K:v_[0-9]+]]) {
// CHECK-NEXT: #pragma unroll
// CHECK-NEXT: for (int c_
// CHECK: emmy::lane_group_sum<16>(
// CHECK: = [[HANDLED:v_[0-9]+]] ? c1_{{[0-9]+}} : c0_
// CHECK: #pragma unroll
// CHECK-NEXT: for (int c_
// CHECK-NOT: lane_group_sum
// CHECK-NOT: attention_prep
// CHECK: emmy::attention::run<128, 64, 64, 4, 2, 0, 0, 0, 0, 0, 0, 1, 1>(

// The warp-specialized flash kernel: plain Q rows, K and V through tensor maps of the rewritten
// q/k/v rows (row length 4096).
// WS-NOT: attention_prep
// WS: emmy::attention::run<128, 128, 128, 8, 2, 0, 0, 3, 4096, 3, 4096, 2, 1, 24, 240>(

// PINNED: tile.kernel @attention: fusion=epilogue is pinned, but @rms_norm_qkv_proj cannot compute Q and K in its epilogue: {{.*}}block_n a multiple of the head dim 128
