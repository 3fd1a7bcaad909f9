// RUN: emmy-opt %s --split-input-file --verify-diagnostics | filecheck %s

cuda.module @m {
  cuda.kernel @k() grid [0, 1, 1] block [32, 1, 1] smem 0 source " k("
}
// CHECK: cuda.kernel @k: grid must be three positive integers, got [0, 1, 1]

// -----
cuda.module @m {
  cuda.kernel @k() grid [1, 1, 1] block [32, 1, 1] smem 0 source "void other() {}"
}
// CHECK: cuda.kernel @k: source does not define k(...)

// -----
cuda.module @m {
  cuda.buffer @x : tensor<4xf32> weights 0
}
// CHECK: cuda.buffer @x: role must be one of input, param, output, temp, prepared, zeroed, got 'weights'

// -----
cuda.module @m {
  cuda.buffer @x : tensor<4xf32> temp 3
}
// CHECK: cuda.buffer @x: inputs, params and outputs have a position, temps, prepared and zeroed buffers none

// -----
cuda.module @m {
  cuda.buffer @x : tensor<4xf32> output 0 "y"
}
// CHECK: cuda.buffer @x: only inputs and params have a PyTorch name

// -----
cuda.module @m {
  cuda.launch @k() grid [1, 1, 1] block [32, 1, 1] smem 0
}
// CHECK: cuda.launch @k: no cuda.kernel named @k

// -----
cuda.module @m {
  cuda.kernel @k(!cuda.ptr<f32>) grid [1, 1, 1] block [32, 1, 1] smem 0 source " k("
  cuda.launch @k() grid [1, 1, 1] block [32, 1, 1] smem 0
}
// CHECK: cuda.launch @k: the kernel takes 1 arguments, 0 given

// -----
cuda.module @m {
  cuda.kernel @k(!cuda.ptr<f32>) grid [1, 1, 1] block [32, 1, 1] smem 0 source " k("
  cuda.launch @k(3 : i32) grid [1, 1, 1] block [32, 1, 1] smem 0
}
// CHECK: cuda.launch @k: argument #0 must be a buffer

// -----
cuda.module @m {
  cuda.kernel @k(!cuda.ptr<f32>) grid [1, 1, 1] block [32, 1, 1] smem 0 source " k("
  cuda.launch @k(@nope) grid [1, 1, 1] block [32, 1, 1] smem 0
}
// CHECK: cuda.launch @k: no cuda.buffer named @nope

// -----
cuda.module @m {
  cuda.kernel @k(!cuda.ptr<f32>) grid [1, 1, 1] block [32, 1, 1] smem 0 source " k("
  cuda.buffer @x : tensor<4xbf16> temp
  cuda.launch @k(@x) grid [1, 1, 1] block [32, 1, 1] smem 0
}
// CHECK: cuda.launch @k: argument #0 must hold f32, @x holds bf16

// -----
cuda.module @m {
  cuda.kernel @k(i32) grid [1, 1, 1] block [32, 1, 1] smem 0 source " k("
  cuda.launch @k(1.000000e+00 : f32) grid [1, 1, 1] block [32, 1, 1] smem 0
}
// CHECK: cuda.launch @k: argument #0 must be a i32 value

// -----
cuda.module @m {
  cuda.kernel @k() grid [1, 1, 1] block [32, 1, 1] smem 0 source " k("
  cuda.launch @k() grid [2, 1, 1] block [32, 1, 1] smem 0
}
// CHECK: cuda.launch @k: grid differs from the kernel's

// -----
cuda.module @m {
  func.func @f() {
    func.return
  }
}
// CHECK: cuda.module @m: holds only cuda.kernel, cuda.buffer and cuda.launch, got func.func

// -----
cuda.module @m {
  cuda.kernel @k(!cuda.ptr<f32>) grid [1, 1, 1] block [32, 1, 1] smem 0 source " k("
  cuda.buffer @x : tensor<4xf32> prepared
  cuda.launch @k(@x) grid [1, 1, 1] block [32, 1, 1] smem 0 {emmy.phase = "once"}
}
// CHECK: cuda.launch @k: emmy.phase must be "prepare" (or absent for the forward phase)

// -----
cuda.module @m {
  cuda.kernel @k(!cuda.ptr<f32>) grid [1, 1, 1] block [32, 1, 1] smem 0 source " k("
  cuda.buffer @x : tensor<4xf32> input 0 "x"
  cuda.launch @k(@x) grid [1, 1, 1] block [32, 1, 1] smem 0 {emmy.phase = "prepare"}
}
// CHECK: cuda.launch @k: a prepare-phase launch reads parameters and writes prepared buffers only; @x is input

// -----
cuda.module @m {
  cuda.kernel @k(!cuda.ptr<f32>) grid [1, 1, 1] block [32, 1, 1] smem 0 source " k("
  cuda.buffer @x : tensor<4xf32> input 0 "x"
  cuda.launch @k(@x) grid [1, 1, 1] block [32, 1, 1] smem 0 {emmy.overlap = true}
}
// CHECK: cuda.launch @k: emmy.overlap is a unit attribute (no value), got true

// -----
cuda.module @m {
  cuda.kernel @k(!cuda.ptr<f32>) grid [1, 1, 1] block [32, 1, 1] smem 0 source " k("
  cuda.buffer @x : tensor<4xf32> prepared
  cuda.launch @k(@x) grid [1, 1, 1] block [32, 1, 1] smem 0 {emmy.phase = "prepare", emmy.overlap}
}
// CHECK: cuda.launch @k: a prepare-phase launch does not overlap the one before it (emmy.overlap)

// -----
cuda.module @m {
  cuda.kernel @k(!cuda.tensor_map<bf16, rows 64, cols 32, stride 32, offset 0, box 64 x 32>) grid [1, 1, 1] block [32, 1, 1] smem 0 source "extern \"C\" __global__ void k(const __grid_constant__ CUtensorMap a) {}"
  cuda.buffer @x : tensor<32x32xbf16> input 0 "x"
  cuda.launch @k(@x) grid [1, 1, 1] block [32, 1, 1] smem 0
}
// CHECK: cuda.launch @k: argument #0 (a tensor map of @x) the view ends at element 2048, past the 1024 elements of tensor<32x32xbf16>

// -----
cuda.module @m {
  cuda.kernel @k(!cuda.tensor_map<bf16, rows 64, cols 32, stride 32, offset 0, box 64 x 40>) grid [1, 1, 1] block [32, 1, 1] smem 0 source "extern \"C\" __global__ void k(const __grid_constant__ CUtensorMap a) {}"
}
// CHECK: !cuda.tensor_map: box rows must be 32, 64 or 128 bytes (16, 32 or 64 bf16), got 40 elements

// -----
cuda.module @m {
  cuda.kernel @k() grid [1, 1, 1] block [32, 1, 1] smem -1 source " k("
}
// CHECK: cuda.kernel @k: smem must not be negative

// -----
cuda.module @m {
  cuda.kernel @"k-1"() grid [1, 1, 1] block [32, 1, 1] smem 0 source " k-1("
}
// CHECK: cuda.kernel @k-1: the name must be a C identifier

// -----
cuda.module @m {
  cuda.buffer @"x-1" : tensor<4xf32> temp
}
// CHECK: cuda.buffer @x-1: the name must be a C identifier

// -----
cuda.launch @k() grid [1, 1, 1] block [32, 1, 1] smem 0
// CHECK: cuda.launch @k: must be inside a cuda.module
