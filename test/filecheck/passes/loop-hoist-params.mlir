// RUN: emmy-opt %s -p loop-hoist-params | filecheck %s
// The input is loop-fuse's output: RMSNorm fused into the projection that follows it.

// The norm weight g[k] and the projection's weight W[n, k] are both parameters: their product
// becomes a prepared tensor (a loop of the prepare phase, over n and k, rounded to bf16) and
// the contraction reads x and that tensor only.
// CHECK-LABEL: func.func @rmsnorm_linear
// CHECK-NEXT:    %rms_norm_qkv_proj_weights = loop.fused @rms_norm_qkv_proj_weights axes [n = 32, k = 64] ins(%nw, %w : tensor<64xbf16>, tensor<32x64xbf16>) -> tensor<32x64xbf16> attributes {emmy.origin = "rms_norm_qkv_proj_weights", emmy.phase = "prepare"} {
// CHECK-NEXT:    ^bb0(%[[G:.*]]: tensor<64xbf16>, %[[W:.*]]: tensor<32x64xbf16>):
// CHECK-NEXT:      %[[N:.*]] = loop.axis "n" : index
// CHECK-NEXT:      %[[K:.*]] = loop.axis "k" : index
// CHECK-NEXT:      %[[GV:.*]] = loop.load %[[G]][%[[K]]] : tensor<64xbf16> -> bf16
// CHECK-NEXT:      %[[WV:.*]] = loop.load %[[W]][%[[N]], %[[K]]] : tensor<32x64xbf16> -> bf16
// CHECK-NEXT:      %[[GF:.*]] = arith.extf %[[GV]] : bf16 to f32
// CHECK-NEXT:      %[[WF:.*]] = arith.extf %[[WV]] : bf16 to f32
// CHECK-NEXT:      %[[P:.*]] = arith.mulf %[[GF]], %[[WF]] : f32
// CHECK-NEXT:      %[[PB:.*]] = arith.truncf %[[P]] : f32 to bf16
// CHECK-NEXT:      loop.store %[[PB]], 0 [%[[N]], %[[K]]] : bf16
// CHECK-NEXT:      loop.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    %y = loop.fused @rms_norm_qkv_proj axes [m = 4, n = 32, k = 64] ins(%x, %rms_norm_qkv_proj_weights : tensor<4x64xbf16>, tensor<32x64xbf16>) -> tensor<4x32xbf16>
// CHECK-NEXT:    ^bb0(%[[X:.*]]: tensor<4x64xbf16>, %[[WP:.*]]: tensor<32x64xbf16>):
// CHECK-NEXT:      %[[M:.*]] = loop.axis "m" : index
// CHECK-NEXT:      %[[N2:.*]] = loop.axis "n" : index
// CHECK-NEXT:      %[[SS:.*]] = loop.reduce sum ["k"] : f32 {
// CHECK:           %[[R:.*]] = math.rsqrt %[[SS]] : f32
// CHECK-NEXT:      %[[ACC:.*]] = loop.reduce sum ["k"] : f32 {
// CHECK-NEXT:        %[[K2:.*]] = loop.axis "k" : index
// CHECK-NEXT:        %[[XV:.*]] = loop.load %[[X]][%[[M]], %[[K2]]] : tensor<4x64xbf16> -> bf16
// CHECK-NEXT:        %[[XF:.*]] = arith.extf %[[XV]] : bf16 to f32
// CHECK-NEXT:        %[[WPV:.*]] = loop.load %[[WP]][%[[N2]], %[[K2]]] : tensor<32x64xbf16> -> bf16
// CHECK-NEXT:        %[[WPF:.*]] = arith.extf %[[WPV]] : bf16 to f32
// CHECK-NEXT:        %[[T:.*]] = arith.mulf %[[XF]], %[[WPF]] : f32
// CHECK-NEXT:        loop.yield %[[T]] : f32
// CHECK-NEXT:      }
// CHECK-NEXT:      %{{.*}} = arith.mulf %[[ACC]], %[[R]] : f32
func.func @rmsnorm_linear(%x: tensor<4x64xbf16> {emmy.role = "input"}, %nw: tensor<64xbf16> {emmy.role = "param"}, %w: tensor<32x64xbf16> {emmy.role = "param"}) -> tensor<4x32xbf16> {
  %y = loop.fused @rms_norm_qkv_proj axes [m = 4, n = 32, k = 64] ins(%w, %x, %nw : tensor<32x64xbf16>, tensor<4x64xbf16>, tensor<64xbf16>) -> tensor<4x32xbf16> attributes {emmy.origin = "rms_norm_qkv_proj", emmy.fusion = "fused"} {
  ^bb0(%0: tensor<32x64xbf16>, %1: tensor<4x64xbf16>, %2: tensor<64xbf16>):
    %3 = loop.axis "m" : index
    %4 = loop.axis "n" : index
    %5 = loop.reduce sum ["k"] : f32 {
      %6 = loop.axis "k" : index
      %7 = loop.load %1[%3, %6] : tensor<4x64xbf16> -> bf16
      %8 = arith.extf %7 : bf16 to f32
      %9 = arith.mulf %8, %8 : f32
      loop.yield %9 : f32
    }
    %10 = math.rsqrt %5 : f32
    %11 = loop.reduce sum ["k"] : f32 {
      %12 = loop.axis "k" : index
      %13 = loop.load %1[%3, %12] : tensor<4x64xbf16> -> bf16
      %14 = loop.load %2[%12] : tensor<64xbf16> -> bf16
      %15 = loop.load %0[%4, %12] : tensor<32x64xbf16> -> bf16
      %16 = arith.extf %13 : bf16 to f32
      %17 = arith.extf %14 : bf16 to f32
      %18 = arith.mulf %16, %17 : f32
      %19 = arith.extf %15 : bf16 to f32
      %20 = arith.mulf %18, %19 : f32
      loop.yield %20 : f32
    }
    %21 = arith.mulf %11, %10 : f32
    %22 = arith.truncf %21 : f32 to bf16
    loop.store %22, 0 [%3, %4] : bf16
    loop.yield
  }
  func.return %y : tensor<4x32xbf16>
}

// A norm weight that is an input, not a parameter, stays where it is: one parameter factor
// (W) has nothing to fold with.
// CHECK-LABEL: func.func @weight_is_input
// CHECK-NOT:     emmy.phase
// CHECK:         loop.fused @linear axes [m = 4, n = 32, k = 64] ins(%w, %x, %nw : tensor<32x64xbf16>, tensor<4x64xbf16>, tensor<64xbf16>)
func.func @weight_is_input(%x: tensor<4x64xbf16> {emmy.role = "input"}, %nw: tensor<64xbf16> {emmy.role = "input"}, %w: tensor<32x64xbf16> {emmy.role = "param"}) -> tensor<4x32xbf16> {
  %y = loop.fused @linear axes [m = 4, n = 32, k = 64] ins(%w, %x, %nw : tensor<32x64xbf16>, tensor<4x64xbf16>, tensor<64xbf16>) -> tensor<4x32xbf16> {
  ^bb0(%0: tensor<32x64xbf16>, %1: tensor<4x64xbf16>, %2: tensor<64xbf16>):
    %3 = loop.axis "m" : index
    %4 = loop.axis "n" : index
    %11 = loop.reduce sum ["k"] : f32 {
      %12 = loop.axis "k" : index
      %13 = loop.load %1[%3, %12] : tensor<4x64xbf16> -> bf16
      %14 = loop.load %2[%12] : tensor<64xbf16> -> bf16
      %15 = loop.load %0[%4, %12] : tensor<32x64xbf16> -> bf16
      %16 = arith.extf %13 : bf16 to f32
      %17 = arith.extf %14 : bf16 to f32
      %18 = arith.mulf %16, %17 : f32
      %19 = arith.extf %15 : bf16 to f32
      %20 = arith.mulf %18, %19 : f32
      loop.yield %20 : f32
    }
    %22 = arith.truncf %11 : f32 to bf16
    loop.store %22, 0 [%3, %4] : bf16
    loop.yield
  }
  func.return %y : tensor<4x32xbf16>
}

// Parameters g[k] and h[n]: their product would span n and k, larger than either; no fold.
// CHECK-LABEL: func.func @no_blow_up
// CHECK-NOT:     emmy.phase
// CHECK:         loop.fused @scaled axes [m = 4, n = 32, k = 64] ins(%x, %g, %h : tensor<4x64xbf16>, tensor<64xbf16>, tensor<32xbf16>)
func.func @no_blow_up(%x: tensor<4x64xbf16> {emmy.role = "input"}, %g: tensor<64xbf16> {emmy.role = "param"}, %h: tensor<32xbf16> {emmy.role = "param"}) -> tensor<4x32xbf16> {
  %y = loop.fused @scaled axes [m = 4, n = 32, k = 64] ins(%x, %g, %h : tensor<4x64xbf16>, tensor<64xbf16>, tensor<32xbf16>) -> tensor<4x32xbf16> {
  ^bb0(%0: tensor<4x64xbf16>, %1: tensor<64xbf16>, %2: tensor<32xbf16>):
    %3 = loop.axis "m" : index
    %4 = loop.axis "n" : index
    %11 = loop.reduce sum ["k"] : f32 {
      %12 = loop.axis "k" : index
      %13 = loop.load %0[%3, %12] : tensor<4x64xbf16> -> bf16
      %14 = loop.load %1[%12] : tensor<64xbf16> -> bf16
      %15 = loop.load %2[%4] : tensor<32xbf16> -> bf16
      %16 = arith.extf %13 : bf16 to f32
      %17 = arith.extf %14 : bf16 to f32
      %18 = arith.mulf %16, %17 : f32
      %19 = arith.extf %15 : bf16 to f32
      %20 = arith.mulf %18, %19 : f32
      loop.yield %20 : f32
    }
    %22 = arith.truncf %11 : f32 to bf16
    loop.store %22, 0 [%3, %4] : bf16
    loop.yield
  }
  func.return %y : tensor<4x32xbf16>
}

// The loop's axes put k before the column axis d (as for a second output after fusion): the
// prepared tensor still keeps the reduced axis innermost, [d, k], contiguous along k.
// CHECK-LABEL: func.func @k_before_columns
// CHECK-NEXT:    %linear_weights = loop.fused @linear_weights axes [d = 32, k = 64] ins(%nw, %w : tensor<64xbf16>, tensor<32x64xbf16>) -> tensor<32x64xbf16>
// CHECK:           loop.store %{{.*}}, 0 [%[[D:.*]], %[[K:.*]]] : bf16
// CHECK:         loop.fused @linear axes [m = 4, k = 64, d = 32] ins(%x, %linear_weights : tensor<4x64xbf16>, tensor<32x64xbf16>)
// CHECK:           loop.load %{{.*}}[%{{.*}}, %{{.*}}] : tensor<32x64xbf16> -> bf16
func.func @k_before_columns(%x: tensor<4x64xbf16> {emmy.role = "input"}, %nw: tensor<64xbf16> {emmy.role = "param"}, %w: tensor<32x64xbf16> {emmy.role = "param"}) -> tensor<4x32xbf16> {
  %y = loop.fused @linear axes [m = 4, k = 64, d = 32] ins(%w, %x, %nw : tensor<32x64xbf16>, tensor<4x64xbf16>, tensor<64xbf16>) -> tensor<4x32xbf16> {
  ^bb0(%0: tensor<32x64xbf16>, %1: tensor<4x64xbf16>, %2: tensor<64xbf16>):
    %3 = loop.axis "m" : index
    %4 = loop.axis "d" : index
    %11 = loop.reduce sum ["k"] : f32 {
      %12 = loop.axis "k" : index
      %13 = loop.load %1[%3, %12] : tensor<4x64xbf16> -> bf16
      %14 = loop.load %2[%12] : tensor<64xbf16> -> bf16
      %15 = loop.load %0[%4, %12] : tensor<32x64xbf16> -> bf16
      %16 = arith.extf %13 : bf16 to f32
      %17 = arith.extf %14 : bf16 to f32
      %18 = arith.mulf %16, %17 : f32
      %19 = arith.extf %15 : bf16 to f32
      %20 = arith.mulf %18, %19 : f32
      loop.yield %20 : f32
    }
    %22 = arith.truncf %11 : f32 to bf16
    loop.store %22, 0 [%3, %4] : bf16
    loop.yield
  }
  func.return %y : tensor<4x32xbf16>
}
