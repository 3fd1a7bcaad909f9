// A whole Qwen3 decoder layer (Qwen3-Embedding-0.6B layer 0, 32 tokens) lowers to five kernels:
// RMSNorm + q/k/v, attention (q/k norms and rotary embedding inlined, causal, grouped heads),
// o_proj + residual, RMSNorm + gate/up + SiLU*up, down_proj + residual.
// RUN: emmy-opt %inputs/torch-layer.mlir -p convert-torch-to-tensor,tensor-merge-siblings | filecheck %s --check-prefix=TENSOR
// RUN: emmy-opt %inputs/torch-layer.mlir -p convert-torch-to-tensor,tensor-merge-siblings,convert-tensor-to-loop,loop-fuse,convert-loop-to-tile,decide-forks | filecheck %s
// RUN: emmy-opt %inputs/torch-layer.mlir -p convert-torch-to-tensor,tensor-merge-siblings,convert-tensor-to-loop,loop-fuse,convert-loop-to-tile,decide-forks | filecheck %s --check-prefix=DECIDED

// Every knob is decided (an undecided knob ends right after its domain):
// DECIDED: tile.kernel
// DECIDED-NOT: ]>

// TENSOR-NOT: torch.
// TENSOR:     tensor.matmul {{.*}}emmy.origin = "linear_qkv_proj"
// TENSOR:     tensor.matmul {{.*}}emmy.origin = "linear_o_proj"
// TENSOR:     tensor.matmul {{.*}}emmy.origin = "linear_gate_up_proj"
// TENSOR:     tensor.matmul {{.*}}emmy.origin = "linear_down_proj"

// CHECK:     tile.kernel @rms_norm_qkv_proj kind "contraction" axes [m = 32, n = 4096, k = 1024]
// CHECK:     tile.kernel @attention kind "attention"
// CHECK:     tile.kernel @o_proj_residual kind "contraction"
// CHECK:     tile.kernel @rms_norm_gate_up_proj_silu kind "contraction"
// CHECK:     tile.kernel @down_proj_residual kind "contraction"
// CHECK-NOT: tile.kernel
// CHECK:     func.return

// The same layer lowered to the cuda stage, with one cuda.kernel per kernel, launched in order
// (at 32 tokens the rules split down_proj's 3072-long reduction eight ways: a combine kernel adds
// the partial sums).
// RUN: emmy-opt %inputs/torch-layer.mlir -p convert-torch-to-tensor,tensor-merge-siblings,convert-tensor-to-loop,loop-fuse,convert-loop-to-tile,decide-forks,convert-tile-to-kernel,convert-kernel-to-cuda | filecheck %s --check-prefix=CUDA
// CUDA:     cuda.module @layer0
// CUDA:     cuda.kernel @rms_norm_qkv_proj
// CUDA:     cuda.kernel @attention
// CUDA:     cuda.kernel @o_proj_residual
// CUDA:     cuda.kernel @rms_norm_gate_up_proj_silu
// CUDA:     cuda.kernel @down_proj_residual
// CUDA:     cuda.launch @rms_norm_qkv_proj
// CUDA:     cuda.launch @attention
// CUDA:     cuda.launch @o_proj_residual
// CUDA:     cuda.launch @rms_norm_gate_up_proj_silu
// CUDA:     cuda.launch @down_proj_residual
// CUDA:     cuda.launch @down_proj_residual_combine
// CUDA-NOT: cuda.launch
