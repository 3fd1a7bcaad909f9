// RUN: emmy-opt %s | emmy-opt | filecheck %s
// RUN: %emmy-roundtrip | filecheck %s

kernel.func @scale(%x: !kernel.ptr<bf16>, %y: !kernel.ptr<bf16>, %n: i32) grid [4, 1, 1] block [128, 1, 1] smem 1024 min_blocks 2 {
  %t = kernel.thread_id x
  %b = kernel.block_id x
  %c128 = arith.constant 128 : index
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %base = arith.muli %b, %c128 : index
  %i = arith.addi %base, %t : index
  %s = kernel.shared [512] offset 0 align 128 : !kernel.ptr<bf16, shared>
  %acc = kernel.local [8] : !kernel.ptr<f32, local>
  %v = kernel.load %x[%i] : !kernel.ptr<bf16> -> bf16
  %ok = arith.cmpi slt, %i, %c128 : index
  %w = kernel.load %x[%i] if %ok : !kernel.ptr<bf16> -> vector<8xbf16>
  kernel.store %w, %s[%t] if %ok : vector<8xbf16>, !kernel.ptr<bf16, shared>
  kernel.barrier
  %e = kernel.extract %w[3] : vector<8xbf16>
  %p = kernel.pack %e, %v : vector<2xbf16>
  %q = kernel.ptr_add %s, %t : !kernel.ptr<bf16, shared>
  %z = arith.constant 0.0 : f32
  %r = kernel.for %k = %c0 to %c128 step %c1 unroll 4 iter_args(%a = %z) -> (f32) {
    %f = arith.extf %v : bf16 to f32
    %g = arith.addf %a, %f : f32
    kernel.yield %g : f32
  }
  kernel.for %k = %c0 to %c128 step %c1 unroll full {
    kernel.store %r, %acc[%k] : f32, !kernel.ptr<f32, local>
  }
  %sum = kernel.call "emmy::warp_sum"(%r) : (f32) -> f32
  kernel.call "emmy::cp_async_wait<1>"() : () -> ()
  kernel.call "emmy::foo"(%q, %acc) : (!kernel.ptr<bf16, shared>, !kernel.ptr<f32, local>) -> ()
  %pair = kernel.call "emmy::load_cg<2>"(%acc, %ok) : (!kernel.ptr<f32, local>, i1) -> vector<2xf32>
  %m = kernel.if %ok -> (f32) {
    kernel.yield %sum : f32
  } else {
    kernel.yield %z : f32
  }
  kernel.if %ok {
    kernel.store %v, %y[%i] : bf16, !kernel.ptr<bf16>
  }
}
func.func @f(%x: tensor<512xbf16>) -> tensor<512xbf16> {
  %y = kernel.empty : tensor<512xbf16>
  %counters = kernel.empty zeroed : tensor<8xi32>
  %n = arith.constant 5 : i32
  kernel.launch @scale(%x, %y, %n) : tensor<512xbf16>, tensor<512xbf16>, i32
  func.return %y : tensor<512xbf16>
}

kernel.func @lam(%x: !kernel.ptr<bf16>) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %row = kernel.lambda (%i: index, %st: !kernel.fn) {
    %v = kernel.load %x[%i] : !kernel.ptr<bf16> -> bf16
    kernel.invoke %st(%i, %v) : (index, bf16) -> ()
  }
  %sq = kernel.lambda (%a: f32) -> f32 {
    %b = arith.mulf %a, %a : f32
    kernel.yield %b : f32
  }
  %one = arith.constant 1.0 : f32
  %y = kernel.invoke %sq(%one) : (f32) -> f32
  kernel.call "emmy::run_rows<4>"(%row, %sq) : (!kernel.fn, !kernel.fn) -> ()
}

// CHECK:      kernel.func @scale(%x: !kernel.ptr<bf16>, %y: !kernel.ptr<bf16>, %n: i32) grid [4, 1, 1] block [128, 1, 1] smem 1024 min_blocks 2 {
// CHECK-NEXT:   %t = kernel.thread_id x
// CHECK-NEXT:   %b = kernel.block_id x
// CHECK:        %s = kernel.shared [512] offset 0 align 128 : !kernel.ptr<bf16, shared>
// CHECK-NEXT:   %acc = kernel.local [8] : !kernel.ptr<f32, local>
// CHECK-NEXT:   %v = kernel.load %x[%i] : !kernel.ptr<bf16> -> bf16
// CHECK-NEXT:   %ok = arith.cmpi slt, %i, %c128 : index
// CHECK-NEXT:   %w = kernel.load %x[%i] if %ok : !kernel.ptr<bf16> -> vector<8xbf16>
// CHECK-NEXT:   kernel.store %w, %s[%t] if %ok : vector<8xbf16>, !kernel.ptr<bf16, shared>
// CHECK-NEXT:   kernel.barrier
// CHECK-NEXT:   %e = kernel.extract %w[3] : vector<8xbf16>
// CHECK-NEXT:   %p = kernel.pack %e, %v : vector<2xbf16>
// CHECK-NEXT:   %q = kernel.ptr_add %s, %t : !kernel.ptr<bf16, shared>
// CHECK-NEXT:   %z = arith.constant 0.000000e+00 : f32
// CHECK-NEXT:   %r = kernel.for %k = %c0 to %c128 step %c1 unroll 4 iter_args(%a = %z) -> (f32) {
// CHECK-NEXT:     %f = arith.extf %v : bf16 to f32
// CHECK-NEXT:     %g = arith.addf %a, %f : f32
// CHECK-NEXT:     kernel.yield %g : f32
// CHECK-NEXT:   }
// CHECK-NEXT:   kernel.for %k_1 = %c0 to %c128 step %c1 unroll full {
// CHECK-NEXT:     kernel.store %r, %acc[%k_1] : f32, !kernel.ptr<f32, local>
// CHECK-NEXT:   }
// CHECK-NEXT:   %sum = kernel.call "emmy::warp_sum"(%r) : (f32) -> f32
// CHECK-NEXT:   kernel.call "emmy::cp_async_wait<1>"() : () -> ()
// CHECK-NEXT:   kernel.call "emmy::foo"(%q, %acc) : (!kernel.ptr<bf16, shared>, !kernel.ptr<f32, local>) -> ()
// CHECK-NEXT:   %pair = kernel.call "emmy::load_cg<2>"(%acc, %ok) : (!kernel.ptr<f32, local>, i1) -> vector<2xf32>
// CHECK-NEXT:   %m = kernel.if %ok -> (f32) {
// CHECK-NEXT:     kernel.yield %sum : f32
// CHECK-NEXT:   } else {
// CHECK-NEXT:     kernel.yield %z : f32
// CHECK-NEXT:   }
// CHECK-NEXT:   kernel.if %ok {
// CHECK-NEXT:     kernel.store %v, %y[%i] : bf16, !kernel.ptr<bf16>
// CHECK-NEXT:   }
// CHECK-NEXT: }
// CHECK-NEXT: func.func @f(%x: tensor<512xbf16>) -> tensor<512xbf16> {
// CHECK-NEXT:   %y = kernel.empty : tensor<512xbf16>
// CHECK-NEXT:   %counters = kernel.empty zeroed : tensor<8xi32>
// CHECK-NEXT:   %n = arith.constant 5 : i32
// CHECK-NEXT:   kernel.launch @scale(%x, %y, %n) : tensor<512xbf16>, tensor<512xbf16>, i32
// CHECK-NEXT:   func.return %y : tensor<512xbf16>
// CHECK-NEXT: }
// CHECK-NEXT: kernel.func @lam(%x: !kernel.ptr<bf16>) grid [1, 1, 1] block [32, 1, 1] smem 0 {
// CHECK-NEXT:   %row = kernel.lambda (%i: index, %st: !kernel.fn) {
// CHECK-NEXT:     %v = kernel.load %x[%i] : !kernel.ptr<bf16> -> bf16
// CHECK-NEXT:     kernel.invoke %st(%i, %v) : (index, bf16) -> ()
// CHECK-NEXT:   }
// CHECK-NEXT:   %sq = kernel.lambda (%a: f32) -> f32 {
// CHECK-NEXT:     %b = arith.mulf %a, %a : f32
// CHECK-NEXT:     kernel.yield %b : f32
// CHECK-NEXT:   }
// CHECK-NEXT:   %one = arith.constant 1.000000e+00 : f32
// CHECK-NEXT:   %y = kernel.invoke %sq(%one) : (f32) -> f32
// CHECK-NEXT:   kernel.call "emmy::run_rows<4>"(%row, %sq) : (!kernel.fn, !kernel.fn) -> ()
// CHECK-NEXT: }

// A tensor map parameter: the launch binds it to a tensor, the kernel copies boxes of its view.
kernel.func @tma(%a: !kernel.tensor_map<bf16, rows 64, cols 32, stride 32, offset 0, box 64 x 32>) grid [1, 1, 1] block [128, 1, 1] smem 4096 {
  kernel.call "emmy::tma_prefetch"(%a) : (!kernel.tensor_map<bf16, rows 64, cols 32, stride 32, offset 0, box 64 x 32>) -> ()
}
func.func @g(%x: tensor<64x32xbf16>) {
  kernel.launch @tma(%x) : tensor<64x32xbf16>
  func.return
}
// CHECK:      kernel.func @tma(%a: !kernel.tensor_map<bf16, rows 64, cols 32, stride 32, offset 0, box 64 x 32>) grid [1, 1, 1] block [128, 1, 1] smem 4096 {
// CHECK-NEXT:   kernel.call "emmy::tma_prefetch"(%a) : (!kernel.tensor_map<bf16, rows 64, cols 32, stride 32, offset 0, box 64 x 32>) -> ()
// CHECK-NEXT: }
// CHECK-NEXT: func.func @g(%x: tensor<64x32xbf16>) {
// CHECK-NEXT:   kernel.launch @tma(%x) : tensor<64x32xbf16>

// A thread block cluster of two blocks along y.
kernel.func @pair() grid [4, 2, 1] block [128, 1, 1] smem 0 cluster [1, 2, 1] {
  kernel.call "emmy::cluster_sync"() : () -> ()
}
// CHECK:      kernel.func @pair() grid [4, 2, 1] block [128, 1, 1] smem 0 cluster [1, 2, 1] {
// CHECK-NEXT:   kernel.call "emmy::cluster_sync"() : () -> ()

// A view in planes (three dimensions): attention's output [heads, tokens, head dim] read as
// tokens x (heads * head dim); one plane prints no `planes`.
kernel.func @tma3(%a: !kernel.tensor_map<bf16, rows 3000, cols 128, stride 128, offset 0, planes 16 x 384000, box 128 x 64>, %b: !kernel.tensor_map<bf16, rows 64, cols 32, stride 32, offset 0, planes 1 x 0, box 64 x 32>) grid [1, 1, 1] block [128, 1, 1] smem 4096 {
  kernel.call "emmy::tma_prefetch"(%a) : (!kernel.tensor_map<bf16, rows 3000, cols 128, stride 128, offset 0, planes 16 x 384000, box 128 x 64>) -> ()
}
// CHECK:      kernel.func @tma3(%a: !kernel.tensor_map<bf16, rows 3000, cols 128, stride 128, offset 0, planes 16 x 384000, box 128 x 64>, %b: !kernel.tensor_map<bf16, rows 64, cols 32, stride 32, offset 0, box 64 x 32>)

// A launch without arguments prints no type list; discardable attributes sit before the types.
kernel.func @none() grid [1, 1, 1] block [32, 1, 1] smem 0 {
  %t = kernel.thread_id z {note = 1 : i64}
}
func.func @h(%x: tensor<4xf32>) {
  kernel.launch @none()
  kernel.launch @none() {emmy.overlap}
  func.return
}
// CHECK:      kernel.func @none() grid [1, 1, 1] block [32, 1, 1] smem 0 {
// CHECK-NEXT:   %t = kernel.thread_id z {note = 1 : i64}
// CHECK-NEXT: }
// CHECK-NEXT: func.func @h(%x: tensor<4xf32>) {
// CHECK-NEXT:   kernel.launch @none()
// CHECK-NEXT:   kernel.launch @none() {emmy.overlap}
// CHECK-NEXT:   func.return
