// RUN: emmy-opt %s | emmy-opt | filecheck %s
// RUN: %emmy-roundtrip | filecheck %s

cuda.module @layer {
  cuda.kernel @scale(!cuda.ptr<bf16>, !cuda.ptr<bf16>, i32, f32) grid [4, 1, 1] block [128, 1, 1] smem 0 source "extern \"C\" __global__ void __launch_bounds__(128) scale(const __nv_bfloat16* x, __nv_bfloat16* y, int n, float s) {\n}\n"
  cuda.buffer @x : tensor<512xbf16> input 0 "hidden_states"
  cuda.buffer @w : tensor<512xbf16> param 1 "layer.weight"
  cuda.buffer @ws : tensor<2x512xf32> temp
  cuda.buffer @wp : tensor<512xbf16> prepared
  cuda.buffer @counters : tensor<8xi32> zeroed
  cuda.buffer @y : tensor<512xbf16> output 0
  cuda.launch @scale(@w, @wp, 512 : i32, 2.000000e+00 : f32) grid [4, 1, 1] block [128, 1, 1] smem 0 {emmy.phase = "prepare"}
  cuda.launch @scale(@x, @y, 512 : i32, 5.000000e-01 : f32) grid [4, 1, 1] block [128, 1, 1] smem 0
  cuda.launch @scale(@w, @y, 7 : i32, 1.000000e+00 : f32) grid [4, 1, 1] block [128, 1, 1] smem 0 {emmy.overlap}
}

// CHECK:      cuda.module @layer {
// CHECK-NEXT:   cuda.kernel @scale(!cuda.ptr<bf16>, !cuda.ptr<bf16>, i32, f32) grid [4, 1, 1] block [128, 1, 1] smem 0 source "extern \22C\22 __global__ void __launch_bounds__(128) scale(const __nv_bfloat16* x, __nv_bfloat16* y, int n, float s) {\0A}\0A"
// CHECK-NEXT:   cuda.buffer @x : tensor<512xbf16> input 0 "hidden_states"
// CHECK-NEXT:   cuda.buffer @w : tensor<512xbf16> param 1 "layer.weight"
// CHECK-NEXT:   cuda.buffer @ws : tensor<2x512xf32> temp
// CHECK-NEXT:   cuda.buffer @wp : tensor<512xbf16> prepared
// CHECK-NEXT:   cuda.buffer @counters : tensor<8xi32> zeroed
// CHECK-NEXT:   cuda.buffer @y : tensor<512xbf16> output 0
// CHECK-NEXT:   cuda.launch @scale(@w, @wp, 512 : i32, 2.000000e+00 : f32) grid [4, 1, 1] block [128, 1, 1] smem 0 {emmy.phase = "prepare"}
// CHECK-NEXT:   cuda.launch @scale(@x, @y, 512 : i32, 5.000000e-01 : f32) grid [4, 1, 1] block [128, 1, 1] smem 0
// CHECK-NEXT:   cuda.launch @scale(@w, @y, 7 : i32, 1.000000e+00 : f32) grid [4, 1, 1] block [128, 1, 1] smem 0 {emmy.overlap}
// CHECK-NEXT: }

cuda.module @tma {
  cuda.kernel @k(!cuda.tensor_map<bf16, rows 64, cols 32, stride 32, offset 0, box 64 x 32>) grid [1, 1, 1] block [128, 1, 1] smem 4096 source "extern \"C\" __global__ void k(const __grid_constant__ CUtensorMap a) {\n}\n"
  cuda.buffer @x : tensor<64x32xbf16> input 0 "x"
  cuda.launch @k(@x) grid [1, 1, 1] block [128, 1, 1] smem 4096
}

// CHECK:      cuda.module @tma {
// CHECK-NEXT:   cuda.kernel @k(!cuda.tensor_map<bf16, rows 64, cols 32, stride 32, offset 0, box 64 x 32>) grid [1, 1, 1] block [128, 1, 1] smem 4096 source
// CHECK-NEXT:   cuda.buffer @x : tensor<64x32xbf16> input 0 "x"
// CHECK-NEXT:   cuda.launch @k(@x) grid [1, 1, 1] block [128, 1, 1] smem 4096
