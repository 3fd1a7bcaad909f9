// The Qwen3 layer's o projection at 3000 tokens with tensor-map copies (copy = tma, wgmma_ws):
// its A side is attention's output, stored head by head ([16 heads, 3000 tokens, 128]) and read
// as 3000 x 2048, so the load indexes k / 128 and k % 128. Its map is a view in planes (16 planes
// of 3000 x 128, 384000 elements apart) and each k-step's A slab is one three-dimensional copy
// (its column within the head, the rows, the head); B stays a plain two-dimensional view.
// RUN: emmy compile Qwen/Qwen3-Embedding-0.6B --layer 0 --tokens 3000 --target sm_90a --knob 'o_proj_residual.workers=wgmma_ws' --knob 'o_proj_residual.copy=tma' --knob 'o_proj_residual.block_m=128' --knob 'o_proj_residual.block_n=256' --knob 'o_proj_residual.block_k=64' --knob 'o_proj_residual.stages=4' --knob 'o_proj_residual.warps=8' --knob 'o_proj_residual.schedule=grid' --knob 'o_proj_residual.split_k=1' --ir kernel | filecheck %s --check-prefix=KERNEL
// RUN: emmy compile Qwen/Qwen3-Embedding-0.6B --layer 0 --tokens 3000 --target sm_90a --knob 'o_proj_residual.workers=wgmma_ws' --knob 'o_proj_residual.copy=tma' --knob 'o_proj_residual.block_m=128' --knob 'o_proj_residual.block_n=256' --knob 'o_proj_residual.block_k=64' --knob 'o_proj_residual.stages=4' --knob 'o_proj_residual.warps=8' --knob 'o_proj_residual.schedule=grid' --knob 'o_proj_residual.split_k=1' -o %t.cu
// RUN: filecheck %s < %t.cu

// KERNEL: kernel.func @o_proj_residual({{.*}}!kernel.tensor_map<bf16, rows 3000, cols 128, stride 128, offset 0, planes 16 x 384000, box 128 x 64>, {{.*}}!kernel.tensor_map<bf16, rows 1024, cols 2048, stride 2048, offset 0, box 256 x 64>)

// CHECK: __global__ void __launch_bounds__(384, 1) o_proj_residual({{.*}}const __grid_constant__ CUtensorMap tma_a_{{[0-9]+}}, const __grid_constant__ CUtensorMap tma_b_{{[0-9]+}})
// CHECK: emmy::mbar_arrive_expect_tx({{.*}}, c49152_{{[0-9]+}});
// CHECK: const int [[COL:v_[0-9]+]] = (int)((unsigned)({{v_[0-9]+}}) % (unsigned)(c128_{{[0-9]+}}));
// CHECK-NEXT: const int [[HEAD:v_[0-9]+]] = (int)((unsigned)({{v_[0-9]+}}) / (unsigned)(c128_{{[0-9]+}}));
// CHECK-NEXT: emmy::tma_load_3d({{p_[0-9]+}}, tma_a_{{[0-9]+}}, [[COL]], m0_{{[0-9]+}}, [[HEAD]], {{p_[0-9]+}});
// CHECK: emmy::tma_load_2d({{p_[0-9]+}}, tma_b_{{[0-9]+}}, {{v_[0-9]+}}, n0_{{[0-9]+}}, {{p_[0-9]+}});
