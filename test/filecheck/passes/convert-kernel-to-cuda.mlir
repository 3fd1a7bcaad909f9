// RUN: emmy-opt %s --split-input-file --verify-diagnostics -p convert-kernel-to-cuda | filecheck %s

// Buffers from the function (inputs and params by PyTorch name, the returned buffer an output,
// the rest temps), launches in order, and every kernel written as CUDA C++.
builtin.module attributes {emmy.target = "sm_90"} {
  kernel.func @scale(%x: !kernel.ptr<bf16>, %y: !kernel.ptr<f32>, %n: i32) grid [4, 1, 1] block [128, 1, 1] smem 1024 {
    %c128 = arith.constant 128 : index
    %t = kernel.thread_id x
    %b = kernel.block_id x
    %base = arith.muli %b, %c128 : index
    %i = arith.addi %base, %t : index
    %s = kernel.shared [256] offset 0 align 16 : !kernel.ptr<f32, shared>
    %v = kernel.load %x[%i] : !kernel.ptr<bf16> -> bf16
    %f = arith.extf %v : bf16 to f32
    %e = math.exp %f : f32
    kernel.store %e, %s[%t] : f32, !kernel.ptr<f32, shared>
    kernel.barrier
    %w = kernel.load %s[%t] : !kernel.ptr<f32, shared> -> f32
    %r = kernel.call "emmy::warp_sum<32>"(%w) : (f32) -> f32
    kernel.store %r, %y[%i] : f32, !kernel.ptr<f32>
  }
  kernel.func @cast(%y: !kernel.ptr<f32>, %z: !kernel.ptr<bf16>) grid [1, 1, 1] block [512, 1, 1] smem 0 {
    %t = kernel.thread_id x
    %c2 = arith.constant 2 : index
    %i = arith.muli %t, %c2 : index
    %v = kernel.load %y[%i] : !kernel.ptr<f32> -> vector<2xf32>
    %a = kernel.extract %v[0] : vector<2xf32>
    %b = kernel.extract %v[1] : vector<2xf32>
    %ab = arith.truncf %a : f32 to bf16
    %bb = arith.truncf %b : f32 to bf16
    %p = kernel.pack %ab, %bb : vector<2xbf16>
    kernel.store %p, %z[%i] : vector<2xbf16>, !kernel.ptr<bf16>
  }
  func.func @layer(%x: tensor<512xbf16> {emmy.name = "hidden_states", emmy.role = "input"}, %w: tensor<8xbf16> {emmy.name = "mlp.weight", emmy.role = "param"}) -> tensor<512xbf16> {
    %y = kernel.empty : tensor<512xf32>
    %z = kernel.empty : tensor<512xbf16>
    %n = arith.constant 512 : i32
    kernel.launch @scale(%x, %y, %n) : tensor<512xbf16>, tensor<512xf32>, i32
    kernel.launch @cast(%y, %z) : tensor<512xf32>, tensor<512xbf16>
    func.return %z : tensor<512xbf16>
  }
}

// CHECK:      builtin.module attributes {emmy.target = "sm_90"} {
// CHECK-NEXT:   cuda.module @layer {
// CHECK-NEXT:     cuda.kernel @scale(!cuda.ptr<bf16>, !cuda.ptr<f32>, i32) grid [4, 1, 1] block [128, 1, 1] smem 1024 source "extern \22C\22 __global__ void __launch_bounds__(128) scale(const __nv_bfloat16* __restrict__ x_0, float* __restrict__ y_1, const int n_2) {
// CHECK-SAME:       __nv_bfloat16 v_{{[0-9]+}} = x_0[i_{{[0-9]+}}];
// CHECK-SAME:       expf(f_{{[0-9]+}})
// CHECK-SAME:       __syncthreads();
// CHECK-SAME:       emmy::warp_sum<32>(w_{{[0-9]+}})
// CHECK-NEXT:     cuda.kernel @cast(!cuda.ptr<f32>, !cuda.ptr<bf16>) grid [1, 1, 1] block [512, 1, 1] smem 0 source "extern \22C\22 __global__ void __launch_bounds__(512) cast(const float* __restrict__ y_0, __nv_bfloat16* __restrict__ z_1) {
// CHECK-SAME:       *reinterpret_cast<const emmy::Vec<float, 2>*>(y_0 + i_{{[0-9]+}})
// CHECK-SAME:       __float2bfloat16_rn(a_{{[0-9]+}})
// CHECK-SAME:       *reinterpret_cast<emmy::Vec<__nv_bfloat16, 2>*>(z_1 + i_{{[0-9]+}}) = p_{{[0-9]+}};
// CHECK-NEXT:     cuda.buffer @hidden_states : tensor<512xbf16> input 0 "hidden_states"
// CHECK-NEXT:     cuda.buffer @mlp_weight : tensor<8xbf16> param 1 "mlp.weight"
// CHECK-NEXT:     cuda.buffer @y : tensor<512xf32> temp
// CHECK-NEXT:     cuda.buffer @z : tensor<512xbf16> output 0
// CHECK-NEXT:     cuda.launch @scale(@hidden_states, @y, 512 : i32) grid [4, 1, 1] block [128, 1, 1] smem 1024
// CHECK-NEXT:     cuda.launch @cast(@y, @z) grid [1, 1, 1] block [512, 1, 1] smem 0
// CHECK-NEXT:   }
// CHECK-NEXT: }

// -----
// Loops with loop-carried values, branches with results, lambdas.
builtin.module {
  kernel.func @loops(%x: !kernel.ptr<f32>, %o: !kernel.ptr<f32>) grid [1, 1, 1] block [32, 1, 1] smem 0 {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c8 = arith.constant 8 : index
    %z = arith.constant 0.0 : f32
    %t = kernel.thread_id x
    %s = kernel.for %i = %c0 to %c8 step %c1 unroll 4 iter_args(%acc = %z) -> (f32) {
      %v = kernel.load %x[%i] : !kernel.ptr<f32> -> f32
      %a = arith.addf %acc, %v : f32
      kernel.yield %a : f32
    }
    %c = arith.cmpi eq, %t, %c0 : index
    %m = kernel.if %c -> (f32) {
      kernel.yield %s : f32
    } else {
      kernel.yield %z : f32
    }
    %sq = kernel.lambda (%a: f32) -> f32 {
      %b = arith.mulf %a, %a : f32
      kernel.yield %b : f32
    }
    %r = kernel.invoke %sq(%m) : (f32) -> f32
    kernel.store %r, %o[%t] if %c : f32, !kernel.ptr<f32>
  }
  func.func @f(%x: tensor<8xf32>) -> tensor<32xf32> {
    %o = kernel.empty : tensor<32xf32>
    kernel.launch @loops(%x, %o) : tensor<8xf32>, tensor<32xf32>
    func.return %o : tensor<32xf32>
  }
}

// CHECK:      cuda.kernel @loops(!cuda.ptr<f32>, !cuda.ptr<f32>) grid [1, 1, 1] block [32, 1, 1] smem 0 source "
// CHECK-SAME:   float acc_{{[0-9]+}} = z_{{[0-9]+}};\0A  #pragma unroll 4\0A  for (int i_{{[0-9]+}} = c0_{{[0-9]+}}; i_{{[0-9]+}} < c8_{{[0-9]+}}; i_{{[0-9]+}} += c1_{{[0-9]+}}) {
// CHECK-SAME:   acc_{{[0-9]+}} = a_{{[0-9]+}};
// CHECK-SAME:   float m_{{[0-9]+}};\0A  if (c_{{[0-9]+}}) {\0A    m_{{[0-9]+}} = acc_{{[0-9]+}};\0A  } else {\0A    m_{{[0-9]+}} = z_{{[0-9]+}};\0A  }
// CHECK-SAME:   auto sq_{{[0-9]+}} = [&](const float a_{{[0-9]+}}) -> float {
// CHECK-SAME:   emmy::store_if<float>(o_1, t_{{[0-9]+}}, c_{{[0-9]+}}, r_{{[0-9]+}});
// CHECK:      cuda.buffer @x : tensor<8xf32> input 0 "x"
// CHECK-NEXT: cuda.buffer @o : tensor<32xf32> output 0

// -----
// Masked accesses without a branch: a masked load from a whole buffer (an argument, a shared
// allocation) reads element 0 in place of a masked-off one and selects zero (emmy::load_or), and
// a masked store to an argument is one predicated store (emmy::store_if), so an unrolled loop of
// them is straight code whose loads can all be in flight at once. A pointer moved into a buffer
// keeps the guarded load (its element 0 need not exist), a store to shared memory its `if`.
builtin.module {
  kernel.func @masked(%x: !kernel.ptr<bf16>, %o: !kernel.ptr<bf16>) grid [1, 1, 1] block [32, 1, 1] smem 64 {
    %c8 = arith.constant 8 : index
    %t = kernel.thread_id x
    %ok = arith.cmpi ult, %t, %c8 : index
    %s = kernel.shared [32] offset 0 align 16 : !kernel.ptr<bf16, shared>
    %a = kernel.load %x[%t] if %ok : !kernel.ptr<bf16> -> bf16
    %p = kernel.ptr_add %x, %c8 : !kernel.ptr<bf16>
    %b = kernel.load %p[%t] if %ok : !kernel.ptr<bf16> -> bf16
    kernel.store %a, %s[%t] if %ok : bf16, !kernel.ptr<bf16, shared>
    %c = kernel.load %s[%t] if %ok : !kernel.ptr<bf16, shared> -> bf16
    %d = arith.addf %b, %c : bf16
    kernel.store %d, %o[%t] if %ok : bf16, !kernel.ptr<bf16>
  }
  func.func @f(%x: tensor<64xbf16>) -> tensor<32xbf16> {
    %o = kernel.empty : tensor<32xbf16>
    kernel.launch @masked(%x, %o) : tensor<64xbf16>, tensor<32xbf16>
    func.return %o : tensor<32xbf16>
  }
}

// CHECK:      cuda.kernel @masked(!cuda.ptr<bf16>, !cuda.ptr<bf16>)
// CHECK-SAME:   const __nv_bfloat16 a_{{[0-9]+}} = emmy::load_or<__nv_bfloat16>(x_0, t_{{[0-9]+}}, ok_{{[0-9]+}}, __float2bfloat16_rn(0.0f));
// CHECK-SAME:   const __nv_bfloat16* const p_{{[0-9]+}} = x_0 + c8_{{[0-9]+}};
// CHECK-SAME:   const __nv_bfloat16 b_{{[0-9]+}} = (ok_{{[0-9]+}} ? p_{{[0-9]+}}[t_{{[0-9]+}}] : __float2bfloat16_rn(0.0f));
// CHECK-SAME:   if (ok_{{[0-9]+}}) s_{{[0-9]+}}[t_{{[0-9]+}}] = a_{{[0-9]+}};
// CHECK-SAME:   const __nv_bfloat16 c_{{[0-9]+}} = emmy::load_or<__nv_bfloat16>(s_{{[0-9]+}}, t_{{[0-9]+}}, ok_{{[0-9]+}}, __float2bfloat16_rn(0.0f));
// CHECK-SAME:   emmy::store_if<__nv_bfloat16>(o_1, t_{{[0-9]+}}, ok_{{[0-9]+}}, d_{{[0-9]+}});

// -----
// A function returning one of its arguments cannot be a launch sequence.
builtin.module {
  func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
    func.return %x : tensor<8xf32>
  }
}
// CHECK: convert-kernel-to-cuda: @f result #0 is not a buffer written by a kernel

// -----
// A zeroed buffer (counters the kernels leave at zero) becomes a `zeroed` cuda.buffer.
builtin.module {
  kernel.func @k(%c: !kernel.ptr<i32>, %y: !kernel.ptr<f32>) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  }
  func.func @f() -> tensor<8xf32> {
    %c = kernel.empty zeroed : tensor<4xi32>
    %y = kernel.empty : tensor<8xf32>
    kernel.launch @k(%c, %y) : tensor<4xi32>, tensor<8xf32>
    func.return %y : tensor<8xf32>
  }
}
// CHECK:      cuda.buffer @c : tensor<4xi32> zeroed
// CHECK-NEXT: cuda.buffer @y : tensor<8xf32> output 0

// -----
// Results are plain buffers, never counters.
builtin.module {
  kernel.func @k(%c: !kernel.ptr<i32>) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  }
  func.func @f() -> tensor<4xi32> {
    %c = kernel.empty zeroed : tensor<4xi32>
    kernel.launch @k(%c) : tensor<4xi32>
    func.return %c : tensor<4xi32>
  }
}
// CHECK: convert-kernel-to-cuda: @f result #0 is a zeroed buffer (counters); results are plain buffers

// -----
// Tensors index with 32-bit ints.
builtin.module {
  func.func @f(%x: tensor<65536x65536xbf16>) {
    func.return
  }
}
// CHECK: convert-kernel-to-cuda: argument #0 of @f has 4294967296 elements; kernels index with 32-bit ints (at most 2147483647)

// -----
// A tensor map parameter becomes a !cuda.tensor_map one, passed by value to the kernel, and the
// launch names the buffer the host encodes it from; a cluster shows in the kernel's signature.
builtin.module attributes {emmy.target = "sm_90a"} {
  kernel.func @copy(%m: !kernel.tensor_map<bf16, rows 64, cols 32, stride 32, offset 0, box 64 x 32>, %y: !kernel.ptr<bf16>) grid [1, 2, 1] block [128, 1, 1] smem 4096 cluster [1, 2, 1] {
    kernel.call "emmy::tma_prefetch"(%m) : (!kernel.tensor_map<bf16, rows 64, cols 32, stride 32, offset 0, box 64 x 32>) -> ()
    kernel.call "emmy::cluster_sync"() : () -> ()
  }
  func.func @f(%x: tensor<64x32xbf16> {emmy.name = "x", emmy.role = "input"}) -> tensor<8xbf16> {
    %y = kernel.empty : tensor<8xbf16>
    kernel.launch @copy(%x, %y) : tensor<64x32xbf16>, tensor<8xbf16>
    func.return %y : tensor<8xbf16>
  }
}
// CHECK:      cuda.kernel @copy(!cuda.tensor_map<bf16, rows 64, cols 32, stride 32, offset 0, box 64 x 32>, !cuda.ptr<bf16>) grid [1, 2, 1] block [128, 1, 1] smem 4096 source "extern \22C\22 __global__ void __launch_bounds__(128) __cluster_dims__(1, 2, 1) copy(const __grid_constant__ CUtensorMap
// CHECK:      cuda.launch @copy(@x, @y) grid [1, 2, 1] block [128, 1, 1] smem 4096

// -----
// The pass's own errors, one case each.
builtin.module {
  func.func @f(%n: i32) -> tensor<8xf32> {
    %y = kernel.empty : tensor<8xf32>
    func.return %y : tensor<8xf32>
  }
}
// CHECK: error: convert-kernel-to-cuda: @f argument #0 is not a tensor (i32)

// -----
builtin.module {
  func.func @f(%x: tensor<8xf32> {emmy.role = "output"}) -> tensor<8xf32> {
    %y = kernel.empty : tensor<8xf32>
    func.return %y : tensor<8xf32>
  }
}
// CHECK: error: convert-kernel-to-cuda: @f argument #0 has emmy.role 'output' (input or param expected)

// -----
builtin.module {
  func.func @f() -> tensor<8xf32> {
    %y = kernel.empty zeroed : tensor<8xf32>
    func.return %y : tensor<8xf32>
  }
}
// CHECK: error: convert-kernel-to-cuda: @f result #0 is a zeroed buffer (counters); results are plain buffers

// -----
builtin.module {
  func.func @f() -> tensor<8xf32> {
    %y = kernel.empty : tensor<8xf32>
    %z = arith.constant 1.0 : f32
    %w = arith.addf %z, %z : f32
    func.return %y : tensor<8xf32>
  }
}
// CHECK: error: convert-kernel-to-cuda: @f holds 'arith.addf'; the kernel stage's host code has only kernel.empty and kernel.launch

// -----
builtin.module {
  kernel.func @"k-1"(%y: !kernel.ptr<f32>) grid [1, 1, 1] block [32, 1, 1] smem 0 {
  }
  func.func @f() -> tensor<8xf32> {
    %y = kernel.empty : tensor<8xf32>
    kernel.launch @"k-1"(%y) : tensor<8xf32>
    func.return %y : tensor<8xf32>
  }
}
// CHECK: error: convert-kernel-to-cuda: kernel name 'k-1' is not a C identifier
