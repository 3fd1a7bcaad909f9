// RUN: emmy-opt %s -p loop-fuse | filecheck %s
// The input is convert-tensor-to-loop's output for small tensor-stage functions.

// (a) An elementwise producer is inlined into its consumer and erased; function arguments
// stay loads.
// CHECK-LABEL: func.func @elementwise_chain
// CHECK-NEXT:    %sq = loop.fused @rms_norm axes [d0 = 4, d1 = 8] ins(%x : tensor<4x8xbf16>) -> tensor<4x8xf32> attributes {emmy.origin = "rms_norm", emmy.fused_from = ["rms_norm", "rms_norm_1"]} {
// CHECK-NEXT:    ^bb0(%[[X:.*]]: tensor<4x8xbf16>):
// CHECK-NEXT:      %[[I:.*]] = loop.axis "d0" : index
// CHECK-NEXT:      %[[J:.*]] = loop.axis "d1" : index
// CHECK-NEXT:      %[[V:.*]] = loop.load %[[X]][%[[I]], %[[J]]] : tensor<4x8xbf16> -> bf16
// CHECK-NEXT:      %[[VF:.*]] = arith.extf %[[V]] : bf16 to f32
// CHECK-NEXT:      %[[SQ:.*]] = arith.mulf %[[VF]], %[[VF]] : f32
// CHECK-NEXT:      loop.store %[[SQ]], 0 [%[[I]], %[[J]]] : f32
// CHECK-NEXT:      loop.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %sq : tensor<4x8xf32>

// (b) + (d): RMSNorm then a linear is one loop; the sum of squares is a prologue reduction,
// the row scale rsqrt(ss) moves out of the contraction, the normalized values are not stored.
// CHECK-LABEL: func.func @rmsnorm_linear
// CHECK-NEXT:    %y = loop.fused @rms_norm_qkv_proj axes [m = 4, n = 32, k = 64] ins(%w, %x, %nw : tensor<32x64xbf16>, tensor<4x64xbf16>, tensor<64xbf16>) -> tensor<4x32xbf16>
// CHECK-SAME:      emmy.fusion = "fused"
// CHECK-NEXT:    ^bb0(%[[W:.*]]: tensor<32x64xbf16>, %[[X:.*]]: tensor<4x64xbf16>, %[[NW:.*]]: tensor<64xbf16>):
// CHECK-NEXT:      %[[M:.*]] = loop.axis "m" : index
// CHECK-NEXT:      %[[N:.*]] = loop.axis "n" : index
// CHECK-NEXT:      %[[SS:.*]] = loop.reduce sum ["k"] : f32 {
// CHECK-NEXT:        %[[K:.*]] = loop.axis "k" : index
// CHECK-NEXT:        %[[A:.*]] = loop.load %[[X]][%[[M]], %[[K]]] : tensor<4x64xbf16> -> bf16
// CHECK-NEXT:        %[[AF:.*]] = arith.extf %[[A]] : bf16 to f32
// CHECK-NEXT:        %[[SQ:.*]] = arith.mulf %[[AF]], %[[AF]] : f32
// CHECK-NEXT:        loop.yield %[[SQ]] : f32
// CHECK-NEXT:      }
// CHECK-NEXT:      %[[R:.*]] = math.rsqrt %[[SS]] : f32
// CHECK-NEXT:      %[[ACC:.*]] = loop.reduce sum ["k"] : f32 {
// CHECK-NEXT:        %[[K2:.*]] = loop.axis "k" : index
// CHECK-NEXT:        %[[A2:.*]] = loop.load %[[X]][%[[M]], %[[K2]]] : tensor<4x64xbf16> -> bf16
// CHECK-NEXT:        %[[G:.*]] = loop.load %[[NW]][%[[K2]]] : tensor<64xbf16> -> bf16
// CHECK-NEXT:        %[[B:.*]] = loop.load %[[W]][%[[N]], %[[K2]]] : tensor<32x64xbf16> -> bf16
// CHECK-NEXT:        %[[A2F:.*]] = arith.extf %[[A2]] : bf16 to f32
// CHECK-NEXT:        %[[GF:.*]] = arith.extf %[[G]] : bf16 to f32
// CHECK-NEXT:        %[[AG:.*]] = arith.mulf %[[A2F]], %[[GF]] : f32
// CHECK-NEXT:        %[[BF:.*]] = arith.extf %[[B]] : bf16 to f32
// CHECK-NEXT:        %[[P:.*]] = arith.mulf %[[AG]], %[[BF]] : f32
// CHECK-NEXT:        loop.yield %[[P]] : f32
// CHECK-NEXT:      }
// CHECK-NEXT:      %[[Y:.*]] = arith.mulf %[[ACC]], %[[R]] : f32
// CHECK-NEXT:      %[[O:.*]] = arith.truncf %[[Y]] : f32 to bf16
// CHECK-NEXT:      loop.store %[[O]], 0 [%[[M]], %[[N]]] : bf16
// CHECK-NEXT:      loop.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %y : tensor<4x32xbf16>

// (b) epilogue: the matmul fuses into its residual add (its only user); the next matmul
// reduces over the sum's columns, so it stays a separate loop.
// CHECK-LABEL: func.func @epilogue
// CHECK-NEXT:    %s = loop.fused @o_proj_residual axes [m = 4, n = 16, k = 512] ins(%x, %a, %w : tensor<4x16xbf16>, tensor<4x512xbf16>, tensor<16x512xbf16>) -> tensor<4x16xbf16> attributes {emmy.origin = "o_proj_residual", emmy.fused_from = ["linear_o_proj", "residual"], emmy.fusion = "fused"} {
// CHECK:           %[[ACC:.*]] = loop.reduce sum ["k"] : f32 {
// CHECK:           %[[T:.*]] = arith.truncf %[[ACC]] : f32 to bf16
// CHECK-NEXT:      %[[S:.*]] = arith.addf %{{.*}}, %[[T]] : bf16
// CHECK-NEXT:      loop.store %[[S]], 0
// CHECK:         %z = loop.fused @linear_down_proj axes [m = 4, n = 8, k = 16] ins(%s, %w2 : tensor<4x16xbf16>, tensor<8x16xbf16>)
// CHECK:         func.return %s, %z

// (c) a short reduction (QK^T over 8) fuses even into the max over its columns.
// CHECK-LABEL: func.func @softmax
// CHECK-NEXT:    %e = loop.fused @attention axes [m = 4, n = 6, k = 8, k_1 = 6] ins(%q, %k : tensor<4x8xf32>, tensor<6x8xf32>) -> tensor<4x6xf32>
// CHECK:           %[[S:.*]] = loop.reduce sum ["k"] : f32 {
// CHECK:           %[[MX:.*]] = loop.reduce max ["k_1"] : f32 {
// CHECK-NEXT:        %[[KV:.*]] = loop.axis "k_1" : index
// CHECK-NEXT:        %[[S2:.*]] = loop.reduce sum ["k"] : f32 {
// CHECK:               loop.load %{{.*}}[%[[KV]], %{{.*}}] : tensor<6x8xf32> -> f32
// CHECK:             loop.yield %[[S2]] : f32
// CHECK-NEXT:      }
// CHECK-NEXT:      %[[D:.*]] = arith.subf %[[S]], %[[MX]] : f32
// CHECK-NEXT:      %[[E:.*]] = math.exp %[[D]] : f32
// CHECK-NEXT:      loop.store %[[E]], 0
// CHECK-NOT:     loop.fused
// CHECK:         func.return %e

// (g) A bias on Q inside QK^T (Qwen2's q_proj.bias[h * 8 + d]) is a parameter read at a kept
// axis (the head h) and a reduced one (d), but Q and K depend on h too: not a projection
// against weights, so the scores still fuse into the max (one attention loop, as in (c)).
// CHECK-LABEL: func.func @softmax_bias
// CHECK-NEXT:    %e = loop.fused @attention axes [h = 2, m = 4, n = 6, k = 8, k_1 = 6] ins(%q, %k, %b : tensor<4x16xf32>, tensor<6x16xf32>, tensor<16xf32>) -> tensor<2x4x6xf32>
// CHECK:           loop.reduce max ["k_1"] : f32 {
// CHECK:             loop.reduce sum ["k"] : f32 {
// CHECK:               loop.load %{{.*}} : tensor<16xf32> -> f32
// CHECK-NOT:     loop.fused
// CHECK:         func.return %e

// (e) the returned views (slices, reshapes) of a matmul absorb it, and become one loop with
// two results, each over its own column axis.
// CHECK-LABEL: func.func @split_views
// CHECK-NEXT:    %ar, %br = loop.fused @qk_proj axes [m = 4, n = 16, k = 512, d2 = 8] ins(%x, %w : tensor<4x512xbf16>, tensor<24x512xbf16>) -> (tensor<1x4x16xbf16>, tensor<1x4x8xbf16>)
// CHECK:           loop.store %{{.*}}, 0 [%[[Z:.*]], %[[M:.*]], %{{.*}}] : bf16
// CHECK-NEXT:      %[[D2:.*]] = loop.axis "d2" : index
// CHECK-NEXT:      %[[C16:.*]] = arith.constant 16 : index
// CHECK-NEXT:      %[[ROW:.*]] = arith.addi %[[D2]], %[[C16]] : index
// CHECK:             loop.load %{{.*}}[%[[ROW]], %{{.*}}] : tensor<24x512xbf16> -> bf16
// CHECK:           loop.store %{{.*}}, 1 [%[[Z]], %[[M]], %[[D2]]] : bf16
// CHECK-NOT:     loop.fused
// CHECK:         func.return %ar, %br

// (f) Reduction axes of one extent get one name each per role: the keys around a nested
// reduction (the max and P x V of attention), the head dim inside one. Merged by name order
// alone, P x V's keys took the head dim's name and the reverse.
// CHECK-LABEL: func.func @nested_axes
// CHECK:         loop.fused @attention axes [m = 4, k = 8, k_1 = 8]
// CHECK:           loop.reduce max ["k"] : f32 {
// CHECK:             loop.reduce sum ["k_1"] : f32 {
// CHECK:           loop.reduce sum ["k"] : f32 {
// CHECK:             loop.reduce sum ["k_1"] : f32 {


// (c) not into a projection: a short reduction read inside a contraction against weights would
// be evaluated again for every output column (n), so the two loops stay apart (at one token the
// whole attention once sat inside o_proj's sum: 14 ms on an H200).
// CHECK-LABEL: func.func @short_into_projection
// CHECK-NEXT:    %p = loop.fused @scores axes [m = 4, j = 64, d = 8]
// CHECK:           loop.reduce sum ["d"]
// CHECK:         %y = loop.fused @linear_o_proj axes [m = 4, n = 16, k = 64] ins(%p, %w
// CHECK-NOT:       loop.reduce sum ["d
// CHECK:           loop.reduce sum ["k"]
// CHECK-NOT:       loop.reduce
// CHECK:         func.return %y
builtin.module {
  func.func @elementwise_chain(%x: tensor<4x8xbf16>) -> tensor<4x8xf32> {
    %xf = loop.fused @rms_norm axes [d0 = 4, d1 = 8] ins(%x : tensor<4x8xbf16>) -> tensor<4x8xf32> attributes {emmy.origin = "rms_norm"} {
    ^bb0(%0: tensor<4x8xbf16>):
      %1 = loop.axis "d0" : index
      %2 = loop.axis "d1" : index
      %3 = loop.load %0[%1, %2] : tensor<4x8xbf16> -> bf16
      %4 = arith.extf %3 : bf16 to f32
      loop.store %4, 0 [%1, %2] : f32
      loop.yield
    }
    %sq = loop.fused @rms_norm_1 axes [d0 = 4, d1 = 8] ins(%xf : tensor<4x8xf32>) -> tensor<4x8xf32> attributes {emmy.origin = "rms_norm"} {
    ^bb0(%0: tensor<4x8xf32>):
      %1 = loop.axis "d0" : index
      %2 = loop.axis "d1" : index
      %3 = loop.load %0[%1, %2] : tensor<4x8xf32> -> f32
      %4 = arith.mulf %3, %3 : f32
      loop.store %4, 0 [%1, %2] : f32
      loop.yield
    }
    func.return %sq : tensor<4x8xf32>
  }
  func.func @rmsnorm_linear(%x: tensor<4x64xbf16>, %nw: tensor<64xbf16>, %w: tensor<32x64xbf16>) -> tensor<4x32xbf16> {
    %xf = loop.fused @rms_norm axes [d0 = 4, d1 = 64] ins(%x : tensor<4x64xbf16>) -> tensor<4x64xf32> attributes {emmy.origin = "rms_norm"} {
    ^bb0(%0: tensor<4x64xbf16>):
      %1 = loop.axis "d0" : index
      %2 = loop.axis "d1" : index
      %3 = loop.load %0[%1, %2] : tensor<4x64xbf16> -> bf16
      %4 = arith.extf %3 : bf16 to f32
      loop.store %4, 0 [%1, %2] : f32
      loop.yield
    }
    %sq = loop.fused @rms_norm_1 axes [d0 = 4, d1 = 64] ins(%xf : tensor<4x64xf32>) -> tensor<4x64xf32> attributes {emmy.origin = "rms_norm"} {
    ^bb0(%0: tensor<4x64xf32>):
      %1 = loop.axis "d0" : index
      %2 = loop.axis "d1" : index
      %3 = loop.load %0[%1, %2] : tensor<4x64xf32> -> f32
      %4 = arith.mulf %3, %3 : f32
      loop.store %4, 0 [%1, %2] : f32
      loop.yield
    }
    %ss = loop.fused @rms_norm_2 axes [d0 = 4, k = 64] ins(%sq : tensor<4x64xf32>) -> tensor<4xf32> attributes {emmy.origin = "rms_norm"} {
    ^bb0(%0: tensor<4x64xf32>):
      %1 = loop.axis "d0" : index
      %2 = loop.reduce sum ["k"] : f32 {
        %3 = loop.axis "k" : index
        %4 = loop.load %0[%1, %3] : tensor<4x64xf32> -> f32
        loop.yield %4 : f32
      }
      loop.store %2, 0 [%1] : f32
      loop.yield
    }
    %r = loop.fused @rms_norm_3 axes [d0 = 4] ins(%ss : tensor<4xf32>) -> tensor<4xf32> attributes {emmy.origin = "rms_norm"} {
    ^bb0(%0: tensor<4xf32>):
      %1 = loop.axis "d0" : index
      %2 = loop.load %0[%1] : tensor<4xf32> -> f32
      %3 = math.rsqrt %2 : f32
      loop.store %3, 0 [%1] : f32
      loop.yield
    }
    %rb = loop.fused @rms_norm_4 axes [d0 = 4, d1 = 64] ins(%r : tensor<4xf32>) -> tensor<4x64xf32> attributes {emmy.origin = "rms_norm"} {
    ^bb0(%0: tensor<4xf32>):
      %1 = loop.axis "d0" : index
      %2 = loop.axis "d1" : index
      %3 = loop.load %0[%1] : tensor<4xf32> -> f32
      loop.store %3, 0 [%1, %2] : f32
      loop.yield
    }
    %n = loop.fused @rms_norm_5 axes [d0 = 4, d1 = 64] ins(%xf, %rb : tensor<4x64xf32>, tensor<4x64xf32>) -> tensor<4x64xf32> attributes {emmy.origin = "rms_norm"} {
    ^bb0(%0: tensor<4x64xf32>, %1: tensor<4x64xf32>):
      %2 = loop.axis "d0" : index
      %3 = loop.axis "d1" : index
      %4 = loop.load %0[%2, %3] : tensor<4x64xf32> -> f32
      %5 = loop.load %1[%2, %3] : tensor<4x64xf32> -> f32
      %6 = arith.mulf %4, %5 : f32
      loop.store %6, 0 [%2, %3] : f32
      loop.yield
    }
    %nb = loop.fused @rms_norm_6 axes [d0 = 4, d1 = 64] ins(%n : tensor<4x64xf32>) -> tensor<4x64xbf16> attributes {emmy.origin = "rms_norm"} {
    ^bb0(%0: tensor<4x64xf32>):
      %1 = loop.axis "d0" : index
      %2 = loop.axis "d1" : index
      %3 = loop.load %0[%1, %2] : tensor<4x64xf32> -> f32
      %4 = arith.truncf %3 : f32 to bf16
      loop.store %4, 0 [%1, %2] : bf16
      loop.yield
    }
    %wb = loop.fused @rms_norm_7 axes [d0 = 4, d1 = 64] ins(%nw : tensor<64xbf16>) -> tensor<4x64xbf16> attributes {emmy.origin = "rms_norm"} {
    ^bb0(%0: tensor<64xbf16>):
      %1 = loop.axis "d0" : index
      %2 = loop.axis "d1" : index
      %3 = loop.load %0[%2] : tensor<64xbf16> -> bf16
      loop.store %3, 0 [%1, %2] : bf16
      loop.yield
    }
    %h = loop.fused @rms_norm_8 axes [d0 = 4, d1 = 64] ins(%nb, %wb : tensor<4x64xbf16>, tensor<4x64xbf16>) -> tensor<4x64xbf16> attributes {emmy.origin = "rms_norm"} {
    ^bb0(%0: tensor<4x64xbf16>, %1: tensor<4x64xbf16>):
      %2 = loop.axis "d0" : index
      %3 = loop.axis "d1" : index
      %4 = loop.load %0[%2, %3] : tensor<4x64xbf16> -> bf16
      %5 = loop.load %1[%2, %3] : tensor<4x64xbf16> -> bf16
      %6 = arith.mulf %4, %5 : bf16
      loop.store %6, 0 [%2, %3] : bf16
      loop.yield
    }
    %y = loop.fused @linear_qkv_proj axes [m = 4, n = 32, k = 64] ins(%h, %w : tensor<4x64xbf16>, tensor<32x64xbf16>) -> tensor<4x32xbf16> attributes {emmy.origin = "linear_qkv_proj"} {
    ^bb0(%0: tensor<4x64xbf16>, %1: tensor<32x64xbf16>):
      %2 = loop.axis "m" : index
      %3 = loop.axis "n" : index
      %4 = loop.reduce sum ["k"] : f32 {
        %5 = loop.axis "k" : index
        %6 = loop.load %0[%2, %5] : tensor<4x64xbf16> -> bf16
        %7 = loop.load %1[%3, %5] : tensor<32x64xbf16> -> bf16
        %8 = arith.extf %6 : bf16 to f32
        %9 = arith.extf %7 : bf16 to f32
        %10 = arith.mulf %8, %9 : f32
        loop.yield %10 : f32
      }
      %11 = arith.truncf %4 : f32 to bf16
      loop.store %11, 0 [%2, %3] : bf16
      loop.yield
    }
    func.return %y : tensor<4x32xbf16>
  }
  func.func @epilogue(%a: tensor<4x512xbf16>, %w: tensor<16x512xbf16>, %x: tensor<4x16xbf16>, %w2: tensor<8x16xbf16>) -> (tensor<4x16xbf16>, tensor<4x8xbf16>) {
    %y = loop.fused @linear_o_proj axes [m = 4, n = 16, k = 512] ins(%a, %w : tensor<4x512xbf16>, tensor<16x512xbf16>) -> tensor<4x16xbf16> attributes {emmy.origin = "linear_o_proj"} {
    ^bb0(%0: tensor<4x512xbf16>, %1: tensor<16x512xbf16>):
      %2 = loop.axis "m" : index
      %3 = loop.axis "n" : index
      %4 = loop.reduce sum ["k"] : f32 {
        %5 = loop.axis "k" : index
        %6 = loop.load %0[%2, %5] : tensor<4x512xbf16> -> bf16
        %7 = loop.load %1[%3, %5] : tensor<16x512xbf16> -> bf16
        %8 = arith.extf %6 : bf16 to f32
        %9 = arith.extf %7 : bf16 to f32
        %10 = arith.mulf %8, %9 : f32
        loop.yield %10 : f32
      }
      %11 = arith.truncf %4 : f32 to bf16
      loop.store %11, 0 [%2, %3] : bf16
      loop.yield
    }
    %s = loop.fused @residual axes [d0 = 4, d1 = 16] ins(%x, %y : tensor<4x16xbf16>, tensor<4x16xbf16>) -> tensor<4x16xbf16> attributes {emmy.origin = "residual"} {
    ^bb0(%0: tensor<4x16xbf16>, %1: tensor<4x16xbf16>):
      %2 = loop.axis "d0" : index
      %3 = loop.axis "d1" : index
      %4 = loop.load %0[%2, %3] : tensor<4x16xbf16> -> bf16
      %5 = loop.load %1[%2, %3] : tensor<4x16xbf16> -> bf16
      %6 = arith.addf %4, %5 : bf16
      loop.store %6, 0 [%2, %3] : bf16
      loop.yield
    }
    %z = loop.fused @linear_down_proj axes [m = 4, n = 8, k = 16] ins(%s, %w2 : tensor<4x16xbf16>, tensor<8x16xbf16>) -> tensor<4x8xbf16> attributes {emmy.origin = "linear_down_proj"} {
    ^bb0(%0: tensor<4x16xbf16>, %1: tensor<8x16xbf16>):
      %2 = loop.axis "m" : index
      %3 = loop.axis "n" : index
      %4 = loop.reduce sum ["k"] : f32 {
        %5 = loop.axis "k" : index
        %6 = loop.load %0[%2, %5] : tensor<4x16xbf16> -> bf16
        %7 = loop.load %1[%3, %5] : tensor<8x16xbf16> -> bf16
        %8 = arith.extf %6 : bf16 to f32
        %9 = arith.extf %7 : bf16 to f32
        %10 = arith.mulf %8, %9 : f32
        loop.yield %10 : f32
      }
      %11 = arith.truncf %4 : f32 to bf16
      loop.store %11, 0 [%2, %3] : bf16
      loop.yield
    }
    func.return %s, %z : tensor<4x16xbf16>, tensor<4x8xbf16>
  }
  func.func @softmax(%q: tensor<4x8xf32>, %k: tensor<6x8xf32>) -> tensor<4x6xf32> {
    %s = loop.fused @attention axes [m = 4, n = 6, k = 8] ins(%q, %k : tensor<4x8xf32>, tensor<6x8xf32>) -> tensor<4x6xf32> attributes {emmy.origin = "attention"} {
    ^bb0(%0: tensor<4x8xf32>, %1: tensor<6x8xf32>):
      %2 = loop.axis "m" : index
      %3 = loop.axis "n" : index
      %4 = loop.reduce sum ["k"] : f32 {
        %5 = loop.axis "k" : index
        %6 = loop.load %0[%2, %5] : tensor<4x8xf32> -> f32
        %7 = loop.load %1[%3, %5] : tensor<6x8xf32> -> f32
        %8 = arith.mulf %6, %7 : f32
        loop.yield %8 : f32
      }
      loop.store %4, 0 [%2, %3] : f32
      loop.yield
    }
    %m = loop.fused @attention_1 axes [d0 = 4, k = 6] ins(%s : tensor<4x6xf32>) -> tensor<4xf32> attributes {emmy.origin = "attention"} {
    ^bb0(%0: tensor<4x6xf32>):
      %1 = loop.axis "d0" : index
      %2 = loop.reduce max ["k"] : f32 {
        %3 = loop.axis "k" : index
        %4 = loop.load %0[%1, %3] : tensor<4x6xf32> -> f32
        loop.yield %4 : f32
      }
      loop.store %2, 0 [%1] : f32
      loop.yield
    }
    %mb = loop.fused @attention_2 axes [d0 = 4, d1 = 6] ins(%m : tensor<4xf32>) -> tensor<4x6xf32> attributes {emmy.origin = "attention"} {
    ^bb0(%0: tensor<4xf32>):
      %1 = loop.axis "d0" : index
      %2 = loop.axis "d1" : index
      %3 = loop.load %0[%1] : tensor<4xf32> -> f32
      loop.store %3, 0 [%1, %2] : f32
      loop.yield
    }
    %d = loop.fused @attention_3 axes [d0 = 4, d1 = 6] ins(%s, %mb : tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32> attributes {emmy.origin = "attention"} {
    ^bb0(%0: tensor<4x6xf32>, %1: tensor<4x6xf32>):
      %2 = loop.axis "d0" : index
      %3 = loop.axis "d1" : index
      %4 = loop.load %0[%2, %3] : tensor<4x6xf32> -> f32
      %5 = loop.load %1[%2, %3] : tensor<4x6xf32> -> f32
      %6 = arith.subf %4, %5 : f32
      loop.store %6, 0 [%2, %3] : f32
      loop.yield
    }
    %e = loop.fused @attention_4 axes [d0 = 4, d1 = 6] ins(%d : tensor<4x6xf32>) -> tensor<4x6xf32> attributes {emmy.origin = "attention"} {
    ^bb0(%0: tensor<4x6xf32>):
      %1 = loop.axis "d0" : index
      %2 = loop.axis "d1" : index
      %3 = loop.load %0[%1, %2] : tensor<4x6xf32> -> f32
      %4 = math.exp %3 : f32
      loop.store %4, 0 [%1, %2] : f32
      loop.yield
    }
    func.return %e : tensor<4x6xf32>
  }
  func.func @softmax_bias(%q: tensor<4x16xf32>, %k: tensor<6x16xf32>, %b: tensor<16xf32> {emmy.name = "q_proj.bias", emmy.role = "param"}) -> tensor<2x4x6xf32> {
    %s = loop.fused @attention axes [h = 2, m = 4, n = 6, k = 8] ins(%q, %k, %b : tensor<4x16xf32>, tensor<6x16xf32>, tensor<16xf32>) -> tensor<2x4x6xf32> attributes {emmy.origin = "attention"} {
    ^bb0(%0: tensor<4x16xf32>, %1: tensor<6x16xf32>, %2: tensor<16xf32>):
      %3 = loop.axis "h" : index
      %4 = loop.axis "m" : index
      %5 = loop.axis "n" : index
      %6 = loop.reduce sum ["k"] : f32 {
        %7 = loop.axis "k" : index
        %8 = arith.constant 8 : index
        %9 = arith.muli %3, %8 : index
        %10 = arith.addi %9, %7 : index
        %11 = loop.load %0[%4, %10] : tensor<4x16xf32> -> f32
        %12 = loop.load %2[%10] : tensor<16xf32> -> f32
        %13 = arith.addf %11, %12 : f32
        %14 = loop.load %1[%5, %10] : tensor<6x16xf32> -> f32
        %15 = arith.mulf %13, %14 : f32
        loop.yield %15 : f32
      }
      loop.store %6, 0 [%3, %4, %5] : f32
      loop.yield
    }
    %m = loop.fused @attention_1 axes [d0 = 2, d1 = 4, k = 6] ins(%s : tensor<2x4x6xf32>) -> tensor<2x4xf32> attributes {emmy.origin = "attention"} {
    ^bb0(%0: tensor<2x4x6xf32>):
      %1 = loop.axis "d0" : index
      %2 = loop.axis "d1" : index
      %3 = loop.reduce max ["k"] : f32 {
        %4 = loop.axis "k" : index
        %5 = loop.load %0[%1, %2, %4] : tensor<2x4x6xf32> -> f32
        loop.yield %5 : f32
      }
      loop.store %3, 0 [%1, %2] : f32
      loop.yield
    }
    %e = loop.fused @attention_2 axes [d0 = 2, d1 = 4, d2 = 6] ins(%s, %m : tensor<2x4x6xf32>, tensor<2x4xf32>) -> tensor<2x4x6xf32> attributes {emmy.origin = "attention"} {
    ^bb0(%0: tensor<2x4x6xf32>, %1: tensor<2x4xf32>):
      %2 = loop.axis "d0" : index
      %3 = loop.axis "d1" : index
      %4 = loop.axis "d2" : index
      %5 = loop.load %0[%2, %3, %4] : tensor<2x4x6xf32> -> f32
      %6 = loop.load %1[%2, %3] : tensor<2x4xf32> -> f32
      %7 = arith.subf %5, %6 : f32
      %8 = math.exp %7 : f32
      loop.store %8, 0 [%2, %3, %4] : f32
      loop.yield
    }
    func.return %e : tensor<2x4x6xf32>
  }
  func.func @split_views(%x: tensor<4x512xbf16>, %w: tensor<24x512xbf16>) -> (tensor<1x4x16xbf16>, tensor<1x4x8xbf16>) {
    %y = loop.fused @linear_qk_proj axes [m = 4, n = 24, k = 512] ins(%x, %w : tensor<4x512xbf16>, tensor<24x512xbf16>) -> tensor<4x24xbf16> attributes {emmy.origin = "linear_qk_proj"} {
    ^bb0(%0: tensor<4x512xbf16>, %1: tensor<24x512xbf16>):
      %2 = loop.axis "m" : index
      %3 = loop.axis "n" : index
      %4 = loop.reduce sum ["k"] : f32 {
        %5 = loop.axis "k" : index
        %6 = loop.load %0[%2, %5] : tensor<4x512xbf16> -> bf16
        %7 = loop.load %1[%3, %5] : tensor<24x512xbf16> -> bf16
        %8 = arith.extf %6 : bf16 to f32
        %9 = arith.extf %7 : bf16 to f32
        %10 = arith.mulf %8, %9 : f32
        loop.yield %10 : f32
      }
      %11 = arith.truncf %4 : f32 to bf16
      loop.store %11, 0 [%2, %3] : bf16
      loop.yield
    }
    %a = loop.fused @linear_qk_proj_1 axes [d0 = 4, d1 = 16] ins(%y : tensor<4x24xbf16>) -> tensor<4x16xbf16> attributes {emmy.origin = "linear_qk_proj"} {
    ^bb0(%0: tensor<4x24xbf16>):
      %1 = loop.axis "d0" : index
      %2 = loop.axis "d1" : index
      %3 = loop.load %0[%1, %2] : tensor<4x24xbf16> -> bf16
      loop.store %3, 0 [%1, %2] : bf16
      loop.yield
    }
    %b = loop.fused @linear_qk_proj_2 axes [d0 = 4, d1 = 8] ins(%y : tensor<4x24xbf16>) -> tensor<4x8xbf16> attributes {emmy.origin = "linear_qk_proj"} {
    ^bb0(%0: tensor<4x24xbf16>):
      %1 = loop.axis "d0" : index
      %2 = loop.axis "d1" : index
      %3 = arith.constant 16 : index
      %4 = arith.addi %2, %3 : index
      %5 = loop.load %0[%1, %4] : tensor<4x24xbf16> -> bf16
      loop.store %5, 0 [%1, %2] : bf16
      loop.yield
    }
    %ar = loop.fused @linear_q_proj axes [d1 = 4, d2 = 16] ins(%a : tensor<4x16xbf16>) -> tensor<1x4x16xbf16> attributes {emmy.origin = "linear_q_proj"} {
    ^bb0(%0: tensor<4x16xbf16>):
      %1 = arith.constant 0 : index
      %2 = loop.axis "d1" : index
      %3 = loop.axis "d2" : index
      %4 = loop.load %0[%2, %3] : tensor<4x16xbf16> -> bf16
      loop.store %4, 0 [%1, %2, %3] : bf16
      loop.yield
    }
    %br = loop.fused @linear_k_proj axes [d1 = 4, d2 = 8] ins(%b : tensor<4x8xbf16>) -> tensor<1x4x8xbf16> attributes {emmy.origin = "linear_k_proj"} {
    ^bb0(%0: tensor<4x8xbf16>):
      %1 = arith.constant 0 : index
      %2 = loop.axis "d1" : index
      %3 = loop.axis "d2" : index
      %4 = loop.load %0[%2, %3] : tensor<4x8xbf16> -> bf16
      loop.store %4, 0 [%1, %2, %3] : bf16
      loop.yield
    }
    func.return %ar, %br : tensor<1x4x16xbf16>, tensor<1x4x8xbf16>
  }
  func.func @nested_axes(%q: tensor<4x8xf32>, %kk: tensor<8x8xf32>, %v: tensor<8x8xf32>) -> tensor<4xf32> {
    %o = loop.fused @scores axes [m = 4, k = 8, k_1 = 8, k_2 = 8, k_3 = 8] ins(%q, %kk, %v : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<4xf32> attributes {emmy.origin = "attention"} {
    ^bb0(%0: tensor<4x8xf32>, %1: tensor<8x8xf32>, %2: tensor<8x8xf32>):
      %m = loop.axis "m" : index
      %mx = loop.reduce max ["k"] : f32 {
        %j = loop.axis "k" : index
        %s = loop.reduce sum ["k_1"] : f32 {
          %d = loop.axis "k_1" : index
          %a = loop.load %0[%m, %d] : tensor<4x8xf32> -> f32
          %b = loop.load %1[%j, %d] : tensor<8x8xf32> -> f32
          %p = arith.mulf %a, %b : f32
          loop.yield %p : f32
        }
        loop.yield %s : f32
      }
      %pv = loop.reduce sum ["k_3"] : f32 {
        %j2 = loop.axis "k_3" : index
        %s2 = loop.reduce sum ["k_2"] : f32 {
          %d2 = loop.axis "k_2" : index
          %a2 = loop.load %0[%m, %d2] : tensor<4x8xf32> -> f32
          %b2 = loop.load %2[%j2, %d2] : tensor<8x8xf32> -> f32
          %p2 = arith.mulf %a2, %b2 : f32
          loop.yield %p2 : f32
        }
        loop.yield %s2 : f32
      }
      %r = arith.addf %mx, %pv : f32
      loop.store %r, 0 [%m] : f32
      loop.yield
    }
    func.return %o : tensor<4xf32>
  }
  func.func @short_into_projection(%a: tensor<4x8xf32>, %b: tensor<64x8xf32>, %w: tensor<16x64xbf16> {emmy.name = "o_proj.weight", emmy.role = "param"}) -> tensor<4x16xbf16> {
    %p = loop.fused @scores axes [m = 4, j = 64, d = 8] ins(%a, %b : tensor<4x8xf32>, tensor<64x8xf32>) -> tensor<4x64xf32> attributes {emmy.origin = "scores"} {
    ^bb0(%0: tensor<4x8xf32>, %1: tensor<64x8xf32>):
      %2 = loop.axis "m" : index
      %3 = loop.axis "j" : index
      %4 = loop.reduce sum ["d"] : f32 {
        %5 = loop.axis "d" : index
        %6 = loop.load %0[%2, %5] : tensor<4x8xf32> -> f32
        %7 = loop.load %1[%3, %5] : tensor<64x8xf32> -> f32
        %8 = arith.mulf %6, %7 : f32
        loop.yield %8 : f32
      }
      loop.store %4, 0 [%2, %3] : f32
      loop.yield
    }
    %y = loop.fused @linear_o_proj axes [m = 4, n = 16, k = 64] ins(%p, %w : tensor<4x64xf32>, tensor<16x64xbf16>) -> tensor<4x16xbf16> attributes {emmy.origin = "linear_o_proj"} {
    ^bb0(%0: tensor<4x64xf32>, %1: tensor<16x64xbf16>):
      %2 = loop.axis "m" : index
      %3 = loop.axis "n" : index
      %4 = loop.reduce sum ["k"] : f32 {
        %5 = loop.axis "k" : index
        %6 = loop.load %0[%2, %5] : tensor<4x64xf32> -> f32
        %7 = loop.load %1[%3, %5] : tensor<16x64xbf16> -> bf16
        %8 = arith.extf %7 : bf16 to f32
        %9 = arith.mulf %6, %8 : f32
        loop.yield %9 : f32
      }
      %10 = arith.truncf %4 : f32 to bf16
      loop.store %10, 0 [%2, %3] : bf16
      loop.yield
    }
    func.return %y : tensor<4x16xbf16>
  }
}
