// RUN: emmy-opt %s --split-input-file --verify-diagnostics | filecheck %s

kernel.func @k() grid [0, 1, 1] block [32, 1, 1] smem 0 {
}
// CHECK: kernel.func @k: grid must be three positive integers, got [0, 1, 1]

// -----
kernel.func @k() grid [1, 1, 1] block [64, 32, 1] smem 0 {
}
// CHECK: kernel.func @k: 2048 threads per block exceed 1024

// -----
kernel.func @k() grid [1, 1, 1] block [32, 1, 1] smem 300000 {
}
// CHECK: kernel.func @k: dynamic shared memory must be 0..232448 bytes, got 300000

// -----
kernel.func @k(%p: !kernel.ptr<f32, shared>) grid [1, 1, 1] block [32, 1, 1] smem 0 {
}
// CHECK: kernel.func @k: argument #0 must point to global memory, got !kernel.ptr<f32, shared>

// -----
kernel.func @k(%t: tensor<4xf32>) grid [1, 1, 1] block [32, 1, 1] smem 0 {
}
// CHECK: kernel.func @k: argument #0 must be a global pointer, a scalar or a tensor map, got tensor<4xf32>

// -----
kernel.func @k() grid [1, 1, 1] block [32, 1, 1] smem 0 min_blocks 0 {
}
// CHECK: kernel.func @k: min_blocks must be positive

// -----
kernel.func @k() grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %p = kernel.thread_id w
}
// CHECK: Expected `x`, `y`, or `z`.

// -----
kernel.func @k() grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %p = "kernel.thread_id"() <{dim = "w"}> : () -> index
}
// CHECK: "w" should be of base attribute kernel.dim

// -----
func.func @f() {
  %p = kernel.block_id x
  func.return
}
// CHECK: kernel.block_id: must be inside a kernel.func

// -----
kernel.func @k() grid [1, 1, 1] block [32, 1, 1] smem 64 {
  %s = kernel.shared [64] offset 0 align 16 : !kernel.ptr<f32, shared>
}
// CHECK: kernel.shared: bytes 0..256 exceed the kernel's 64 bytes of shared memory

// -----
kernel.func @k() grid [1, 1, 1] block [32, 1, 1] smem 1024 {
  %s = kernel.shared [4] offset 8 align 16 : !kernel.ptr<f32, shared>
}
// CHECK: kernel.shared: offset 8 is not a multiple of align 16

// -----
kernel.func @k() grid [1, 1, 1] block [32, 1, 1] smem 1024 {
  %s = kernel.shared [4] offset 0 align 12 : !kernel.ptr<f32, shared>
}
// CHECK: kernel.shared: align must be a power of two, got 12

// -----
kernel.func @k() grid [1, 1, 1] block [32, 1, 1] smem 1024 {
  %s = kernel.shared [4] offset 0 align 2 : !kernel.ptr<f32, shared>
}
// CHECK: kernel.shared: align 2 is below the element size

// -----
kernel.func @k() grid [1, 1, 1] block [32, 1, 1] smem 1024 {
  %s = kernel.shared [0] offset 0 align 16 : !kernel.ptr<f32, shared>
}
// CHECK: kernel.shared: size must be positive, got 0

// -----
kernel.func @k() grid [1, 1, 1] block [32, 1, 1] smem 1024 {
  %s = kernel.shared [4] offset 0 align 16 : !kernel.ptr<f32>
}
// CHECK: kernel.shared: result must be a shared pointer, got !kernel.ptr<f32>

// -----
kernel.func @k() grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %s = kernel.local [4] : !kernel.ptr<f32, shared>
}
// CHECK: kernel.local: result must be a local pointer, got !kernel.ptr<f32, shared>

// -----
kernel.func @k() grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %s = kernel.local [0] : !kernel.ptr<f32, local>
}
// CHECK: kernel.local: size must be positive, got 0

// -----
func.func @f() {
  %s = kernel.local [4] : !kernel.ptr<f32, local>
  func.return
}
// CHECK: kernel.local: must be inside a kernel.func

// -----
func.func @f() {
  kernel.barrier
  func.return
}
// CHECK: kernel.barrier: must be inside a kernel.func

// -----
kernel.func @k(%p: !kernel.ptr<f32>) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %t = kernel.thread_id x
  %v = kernel.load %p[%t] : !kernel.ptr<f32> -> vector<3xf32>
}
// CHECK: kernel.load: vector width must be 2, 4 or 8 elements, got vector<3xf32>

// -----
kernel.func @k(%p: !kernel.ptr<f32>) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %t = kernel.thread_id x
  %v = kernel.load %p[%t] : !kernel.ptr<f32> -> vector<8xf32>
}
// CHECK: kernel.load: one access moves at most 16 bytes, vector<8xf32> is larger

// -----
kernel.func @k(%p: !kernel.ptr<f32>) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %t = kernel.thread_id x
  %v = kernel.load %p[%t] : !kernel.ptr<f32> -> vector<4xbf16>
}
// CHECK: kernel.load: vector element type bf16 is not the pointer's f32

// -----
kernel.func @k(%p: !kernel.ptr<f32>) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %t = kernel.thread_id x
  %v = kernel.load %p[%t] : !kernel.ptr<f32> -> bf16
}
// CHECK: kernel.load: value type bf16 is not the pointer's element type f32

// -----
kernel.func @k(%p: !kernel.ptr<f32>, %v: bf16) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %t = kernel.thread_id x
  kernel.store %v, %p[%t] : bf16, !kernel.ptr<f32>
}
// CHECK: kernel.store: value type bf16 is not the pointer's element type f32

// -----
kernel.func @k(%v: vector<4xf32>) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %e = kernel.extract %v[4] : vector<4xf32>
}
// CHECK: kernel.extract: lane 4 is outside vector<4xf32>

// -----
kernel.func @k(%a: f32) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %v = kernel.pack %a, %a, %a : vector<2xf32>
}
// CHECK: kernel.pack: 3 elements do not make a vector<2xf32>

// -----
kernel.func @k(%a: f32) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %r = kernel.call "std::abs"(%a) : (f32) -> f32
}
// CHECK: kernel.call: callee must be a device-library name starting with 'emmy::', got 'std::abs'

// -----
kernel.func @k(%a: f32) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %r:2 = kernel.call "emmy::two"(%a) : (f32) -> (f32, f32)
}
// CHECK: kernel.call: at most one result

// -----
kernel.func @k(%a: f32) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %r = kernel.call "emmy::rows"(%a) : (f32) -> tensor<4xf32>
}
// CHECK: kernel.call: result must be a scalar, a vector of scalars or a pointer, got tensor<4xf32>

// -----
kernel.func @k(%a: f32) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %c0 = arith.constant 0 : index
  %r = kernel.for %i = %c0 to %c0 step %c0 iter_args(%x = %a) -> (f32) {
    %c = arith.constant 0 : i32
    kernel.yield %c : i32
  }
}
// CHECK: kernel.for: kernel.yield must give one value per iter_arg, of its type

// -----
kernel.func @k(%c: i1, %a: f32) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %r = kernel.if %c -> (f32) {
    kernel.yield %a : f32
  }
}
// CHECK: kernel.if: an if with results needs an else region

// -----
kernel.func @k(%c: i1, %a: f32, %b: i32) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %r = kernel.if %c -> (f32) {
    kernel.yield %a : f32
  } else {
    kernel.yield %b : i32
  }
}
// CHECK: kernel.if: kernel.yield must give one value per result, of its type

// -----
func.func @f(%a: f32) {
  "kernel.yield"(%a) : (f32) -> ()
}
// CHECK: kernel.yield: must end a kernel.for, kernel.if or kernel.lambda body

// -----
kernel.func @k() grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %t = kernel.empty : tensor<4xf32>
}
// CHECK: kernel.empty: is host code; it cannot be inside a kernel.func

// -----
func.func @f(%x: tensor<4xf32>) {
  kernel.launch @missing(%x) : tensor<4xf32>
  func.return
}
// CHECK: kernel.launch: no kernel.func named @missing

// -----
kernel.func @k(%p: !kernel.ptr<f32>) grid [1, 1, 1] block [32, 1, 1] smem 0 {
}
func.func @f(%x: tensor<4xf32>) {
  kernel.launch @k(%x, %x) : tensor<4xf32>, tensor<4xf32>
  func.return
}
// CHECK: kernel.launch: @k takes 1 arguments, 2 given

// -----
kernel.func @k(%p: !kernel.ptr<f32>) grid [1, 1, 1] block [32, 1, 1] smem 0 {
}
func.func @f(%x: tensor<4xbf16>) {
  kernel.launch @k(%x) : tensor<4xbf16>
  func.return
}
// CHECK: kernel.launch: argument #0 of @k must be a tensor of f32, got tensor<4xbf16>

// -----
kernel.func @k(%n: i32) grid [1, 1, 1] block [32, 1, 1] smem 0 {
}
func.func @f(%x: i64) {
  kernel.launch @k(%x) : i64
  func.return
}
// CHECK: kernel.launch: argument #0 of @k must be i32, got i64

// -----
func.func @f(%p: !kernel.ptr<f32, global2>) {
  func.return
}
// CHECK: !kernel.ptr: memory space must be one of global, shared, local, got 'global2'

// -----
kernel.func @k() grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %f = kernel.lambda (%t: tensor<4xf32>) {
  }
}
// CHECK: kernel.lambda: argument type tensor<4xf32> is not a scalar, pointer or !kernel.fn

// -----
kernel.func @k(%a: f32) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %f = kernel.lambda (%x: f32) -> f32 {
    %c = arith.constant 0 : i32
    kernel.yield %c : i32
  }
}
// CHECK: kernel.lambda: kernel.yield must give one value per result, of its type

// -----
kernel.func @k(%a: i32) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %f = kernel.lambda (%x: f32) -> f32 {
    kernel.yield %x : f32
  }
  %y = kernel.invoke %f(%a) : (i32) -> f32
}
// CHECK: kernel.invoke: arguments do not match the lambda's parameters

// -----
kernel.func @k(%a: f32) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %f = kernel.lambda (%x: f32) -> f32 {
    kernel.yield %x : f32
  }
  kernel.invoke %f(%a) : (f32) -> ()
}
// CHECK: kernel.invoke: results do not match the lambda's

// -----
func.func @f() {
  %f = kernel.lambda () {
  }
  func.return
}
// CHECK: kernel.lambda: must be inside a kernel.func

// -----
kernel.func @k() grid [1, 1, 1] block [32, 1, 1] smem 0 {
  "kernel.return"() : () -> ()
  "kernel.return"() : () -> ()
}
// CHECK: kernel.return

// -----
func.func @f(%p: !kernel.tensor_map<f32, rows 64, cols 32, stride 32, offset 0, box 64 x 32>) {
  func.return
}
// CHECK: !kernel.tensor_map: element type must be bf16, got f32

// -----
func.func @f(%p: !kernel.tensor_map<bf16, rows 64, cols 64, stride 32, offset 0, box 64 x 32>) {
  func.return
}
// CHECK: !kernel.tensor_map: rows of 64 elements cannot be 32 elements apart

// -----
func.func @f(%p: !kernel.tensor_map<bf16, rows 0, cols 32, stride 32, offset 0, box 64 x 32>) {
  func.return
}
// CHECK: !kernel.tensor_map: the view must have rows and columns, got 0 x 32

// -----
func.func @f(%p: !kernel.tensor_map<bf16, rows 64, cols 32, stride 36, offset 4, box 64 x 32>) {
  func.return
}
// CHECK: !kernel.tensor_map: stride and offset must be multiples of 16 bytes (8 bf16), got stride 36, offset 4

// -----
func.func @f(%p: !kernel.tensor_map<bf16, rows 64, cols 32, stride 32, offset 0, box 64 x 24>) {
  func.return
}
// CHECK: !kernel.tensor_map: box rows must be 32, 64 or 128 bytes (16, 32 or 64 bf16), got 24 elements

// -----
func.func @f(%p: !kernel.tensor_map<bf16, rows 512, cols 32, stride 32, offset 0, box 512 x 32>) {
  func.return
}
// CHECK: !kernel.tensor_map: a box has 1 to 256 rows, got 512

// -----
func.func @f(%p: !kernel.tensor_map<bf16, rows 64, cols 96, stride 96, offset 0, planes 4 x 6144, box 64 x 64>) {
  func.return
}
// CHECK: !kernel.tensor_map: with planes, the plane stride must be a multiple of 16 bytes (8 bf16) and the columns a multiple of the box's, got plane stride 6144, 96 columns, boxes of 64

// -----
func.func @f(%p: !kernel.tensor_map<bf16, rows 64, cols 32, stride 32, offset 0, planes 0 x 0, box 64 x 32>) {
  func.return
}
// CHECK: !kernel.tensor_map: a view has at least one plane, got 0

// -----
func.func @f(%p: !kernel.tensor_map<bf16, rows 64, cols 32, stride 32, offset 0, planes 1 x 64, box 64 x 32>) {
  func.return
}
// CHECK: !kernel.tensor_map: one plane has no plane stride, got 64

// -----
kernel.func @k(%a: !kernel.tensor_map<bf16, rows 64, cols 32, stride 32, offset 0, box 64 x 32>) grid [1, 1, 1] block [32, 1, 1] smem 0 {
}
func.func @f(%x: tensor<32x32xbf16>) {
  kernel.launch @k(%x) : tensor<32x32xbf16>
  func.return
}
// CHECK: kernel.launch: argument #0 of @k (a tensor map) the view ends at element 2048, past the 1024 elements of tensor<32x32xbf16>

// -----
kernel.func @k(%a: !kernel.tensor_map<bf16, rows 64, cols 32, stride 32, offset 0, box 64 x 32>) grid [1, 1, 1] block [32, 1, 1] smem 0 {
}
func.func @f(%x: tensor<64x32xf32>) {
  kernel.launch @k(%x) : tensor<64x32xf32>
  func.return
}
// CHECK: kernel.launch: argument #0 of @k (a tensor map) must be a tensor of bf16, got tensor<64x32xf32>

// -----
kernel.func @k() grid [4, 3, 1] block [32, 1, 1] smem 0 cluster [1, 2, 1] {
}
// CHECK: kernel.func @k: cluster [1, 2, 1] does not divide grid [4, 3, 1]

// -----
kernel.func @k() grid [16, 1, 1] block [32, 1, 1] smem 0 cluster [16, 1, 1] {
}
// CHECK: kernel.func @k: cluster must be three positive integers of at most 8 blocks in all, got [16, 1, 1]

// -----
func.func @f(%p: !kernel.ptr<tensor<4xf32>>) {
  func.return
}
// CHECK: !kernel.ptr: element type must be a scalar type, got tensor<4xf32>

// -----
func.func @f() {
  "kernel.return"() : () -> ()
}
// CHECK: kernel.return: must end a kernel.func body

// -----
func.func @f() {
  %s = kernel.shared [4] offset 0 align 16 : !kernel.ptr<f32, shared>
  func.return
}
// CHECK: kernel.shared: must be inside a kernel.func

// -----
kernel.func @k() grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %c0 = arith.constant 0 : index
  "kernel.for"(%c0, %c0, %c0) ({
  ^bb0(%i: i32):
    "kernel.yield"() : () -> ()
  }) : (index, index, index) -> ()
}
// CHECK: kernel.for: the body's first argument must be the index induction variable

// -----
kernel.func @k(%a: f32) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %c0 = arith.constant 0 : index
  %r = "kernel.for"(%c0, %c0, %c0, %a) ({
  ^bb0(%i: index, %x: i32):
    "kernel.yield"(%a) : (f32) -> ()
  }) : (index, index, index, f32) -> f32
}
// CHECK: kernel.for: body arguments must match the iter_args types

// -----
kernel.func @k(%a: f32) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %c0 = arith.constant 0 : index
  %r = "kernel.for"(%c0, %c0, %c0, %a) ({
  ^bb0(%i: index, %x: f32):
    "kernel.yield"(%x) : (f32) -> ()
  }) : (index, index, index, f32) -> i32
}
// CHECK: kernel.for: results must match the iter_args types

// -----
kernel.func @k() grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %c0 = arith.constant 0 : index
  kernel.for %i = %c0 to %c0 step %c0 unroll -1 {
  }
}
// CHECK: kernel.for: unroll must be 'full' or a positive count

// -----
kernel.func @k(%p: !kernel.ptr<f32>) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %t = kernel.thread_id x
  %q = "kernel.ptr_add"(%p, %t) : (!kernel.ptr<f32>, index) -> !kernel.ptr<f32, shared>
}
// CHECK:      result 'result' at position 0 does not verify:
// CHECK-NEXT: attribute !kernel.ptr<f32> expected from variable 'POINTER', but got !kernel.ptr<f32, shared>

// -----
kernel.func @k(%v: vector<4xf32>) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %e = "kernel.extract"(%v) <{lane = 0 : i64}> : (vector<4xf32>) -> i32
}
// CHECK:      result 'result' at position 0 does not verify:
// CHECK-NEXT: attribute f32 expected from variable 'ELEMENT', but got i32

// -----
kernel.func @k(%a: f32, %b: i32) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %v = "kernel.pack"(%a, %b) : (f32, i32) -> vector<2xf32>
}
// CHECK:      operand 'elements' at positions 0 to 1 does not verify:
// CHECK-NEXT: attribute f32 expected from variable 'ELEMENT', but got i32

// -----
func.func @f(%a: f32) {
  %r = kernel.call "emmy::warp_sum"(%a) : (f32) -> f32
  func.return
}
// CHECK: kernel.call: must be inside a kernel.func

// -----
kernel.func @k() grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %f = "kernel.lambda"() <{ret_types = [f32, f32]}> ({
  ^bb0:
    "kernel.yield"() : () -> ()
  }) : () -> !kernel.fn
}
// CHECK: kernel.lambda: at most one result

// -----
kernel.func @k(%a: f32) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %f = kernel.lambda (%x: f32) -> f32 {
    kernel.yield %x : f32
  }
  %y:2 = "kernel.invoke"(%f, %a) : (!kernel.fn, f32) -> (f32, f32)
}
// CHECK: kernel.invoke: at most one result

// -----
kernel.func @k(%a: i32) grid [1, 1, 1] block [32, 1, 1] smem 0 {
}
kernel.func @h(%x: i32) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  kernel.launch @k(%x) : i32
}
// CHECK: kernel.launch: is host code; it cannot be inside a kernel.func

// -----
kernel.func @k() grid [1, 1, 1] block [32, 1, 1] smem 0 {
  "kernel.func"() <{sym_name = "inner", grid = array<i64: 1, 1, 1>, block = array<i64: 32, 1, 1>, smem = 0 : i64}> ({
    "kernel.return"() : () -> ()
  }) : () -> ()
}
// CHECK: kernel.func @inner: kernels cannot be nested
