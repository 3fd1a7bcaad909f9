// RUN: emmy-opt %s -p loop-canonicalize | filecheck %s
// The loop dialect's canonicalization alone (loop-fuse applies the same patterns between
// fusions): one function per pattern.

// FoldIndexArith: `m * 1` and `n mod 8` (n < 8) fold to the axes themselves.
// CHECK-LABEL: func.func @fold_index_arith
// CHECK-NEXT:    loop.fused @f axes [m = 4, n = 8]
// CHECK-NEXT:    ^bb0(%[[X:.*]]: tensor<4x8xf32>):
// CHECK-NEXT:      %[[M:.*]] = loop.axis "m" : index
// CHECK-NEXT:      %[[N:.*]] = loop.axis "n" : index
// CHECK-NEXT:      %[[V:.*]] = loop.load %[[X]][%[[M]], %[[N]]] : tensor<4x8xf32> -> f32
// CHECK-NEXT:      loop.store %[[V]], 0 [%[[M]], %[[N]]] : f32

// HoistInvariantOps: the load of y[m] and its exp do not depend on k: they move before the sum.
// CHECK-LABEL: func.func @hoist_invariant_ops
// CHECK:           %[[M:.*]] = loop.axis "m" : index
// CHECK-NEXT:      %[[B:.*]] = loop.load %{{.*}}[%[[M]]] : tensor<4xf32> -> f32
// CHECK-NEXT:      %[[E:.*]] = math.exp %[[B]] : f32
// CHECK-NEXT:      %{{.*}} = loop.reduce sum ["k"] : f32 {
// CHECK-NEXT:        %[[K:.*]] = loop.axis "k" : index
// CHECK-NEXT:        %[[A:.*]] = loop.load %{{.*}}[%[[M]], %[[K]]] : tensor<4x8xf32> -> f32
// CHECK-NEXT:        %[[P:.*]] = arith.addf %[[A]], %[[E]] : f32
// CHECK-NEXT:        loop.yield %[[P]] : f32

// FactorOutOfSum: sum_k(x[m, k] * y[m]) = y[m] * sum_k(x[m, k]).
// CHECK-LABEL: func.func @factor_out_of_sum
// CHECK:           %[[B:.*]] = loop.load %{{.*}} : tensor<4xf32> -> f32
// CHECK-NEXT:      %[[S:.*]] = loop.reduce sum ["k"] : f32 {
// CHECK-NEXT:        %[[K:.*]] = loop.axis "k" : index
// CHECK-NEXT:        %[[A:.*]] = loop.load %{{.*}} : tensor<4x8xbf16> -> bf16
// CHECK-NEXT:        %[[AF:.*]] = arith.extf %[[A]] : bf16 to f32
// CHECK-NEXT:        loop.yield %[[AF]] : f32
// CHECK-NEXT:      }
// CHECK-NEXT:      %[[Y:.*]] = arith.mulf %[[S]], %[[B]] : f32
// CHECK-NEXT:      loop.store %[[Y]], 0

// DropUnusedInputs: y has no load, x is passed twice: one input is left (and CseBody makes
// the two loads of x one).
// CHECK-LABEL: func.func @drop_unused_inputs
// CHECK-NEXT:    loop.fused @f axes [m = 4] ins(%x : tensor<4xf32>) -> tensor<4xf32> {
// CHECK-NEXT:    ^bb0(%[[X:.*]]: tensor<4xf32>):
// CHECK-NEXT:      %[[M:.*]] = loop.axis "m" : index
// CHECK-NEXT:      %[[A:.*]] = loop.load %[[X]][%[[M]]] : tensor<4xf32> -> f32
// CHECK-NEXT:      %{{.*}} = arith.mulf %[[A]], %[[A]] : f32

// MergeReductionAxes: k and k_1 (both 8, reductions that do not nest) become one axis k; the
// unused axis goes.
// CHECK-LABEL: func.func @merge_reduction_axes
// CHECK-NEXT:    loop.fused @f axes [m = 4, k = 8] ins(%x : tensor<4x8xf32>)
// CHECK:           loop.reduce max ["k"] : f32 {
// CHECK-NEXT:        loop.axis "k" : index
// CHECK:           loop.reduce sum ["k"] : f32 {
// CHECK-NEXT:        loop.axis "k" : index
// CHECK-NOT:     k_1

// CseBody: the second, identical reduction is the first one; the unused exp goes.
// CHECK-LABEL: func.func @cse_body
// CHECK:           %[[S:.*]] = loop.reduce sum ["k"] : f32 {
// CHECK:           }
// CHECK-NEXT:      %[[P:.*]] = arith.mulf %[[S]], %[[S]] : f32
// CHECK-NEXT:      loop.store %[[P]], 0
// CHECK-NOT:     math.exp

builtin.module {
  func.func @fold_index_arith(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
    %r = loop.fused @f axes [m = 4, n = 8] ins(%x : tensor<4x8xf32>) -> tensor<4x8xf32> {
    ^bb0(%xa: tensor<4x8xf32>):
      %m = loop.axis "m" : index
      %n = loop.axis "n" : index
      %c1 = arith.constant 1 : index
      %c8 = arith.constant 8 : index
      %i = arith.muli %m, %c1 : index
      %j = arith.remui %n, %c8 : index
      %v = loop.load %xa[%i, %j] : tensor<4x8xf32> -> f32
      loop.store %v, 0 [%m, %n] : f32
      loop.yield
    }
    func.return %r : tensor<4x8xf32>
  }
  func.func @hoist_invariant_ops(%x: tensor<4x8xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
    %r = loop.fused @f axes [m = 4, k = 8] ins(%x, %y : tensor<4x8xf32>, tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%xa: tensor<4x8xf32>, %ya: tensor<4xf32>):
      %m = loop.axis "m" : index
      %s = loop.reduce sum ["k"] : f32 {
        %k = loop.axis "k" : index
        %a = loop.load %xa[%m, %k] : tensor<4x8xf32> -> f32
        %b = loop.load %ya[%m] : tensor<4xf32> -> f32
        %e = math.exp %b : f32
        %p = arith.addf %a, %e : f32
        loop.yield %p : f32
      }
      loop.store %s, 0 [%m] : f32
      loop.yield
    }
    func.return %r : tensor<4xf32>
  }
  func.func @factor_out_of_sum(%x: tensor<4x8xbf16>, %y: tensor<4xf32>) -> tensor<4xf32> {
    %r = loop.fused @f axes [m = 4, k = 8] ins(%x, %y : tensor<4x8xbf16>, tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%xa: tensor<4x8xbf16>, %ya: tensor<4xf32>):
      %m = loop.axis "m" : index
      %b = loop.load %ya[%m] : tensor<4xf32> -> f32
      %s = loop.reduce sum ["k"] : f32 {
        %k = loop.axis "k" : index
        %a = loop.load %xa[%m, %k] : tensor<4x8xbf16> -> bf16
        %af = arith.extf %a : bf16 to f32
        %p = arith.mulf %af, %b : f32
        loop.yield %p : f32
      }
      loop.store %s, 0 [%m] : f32
      loop.yield
    }
    func.return %r : tensor<4xf32>
  }
  func.func @drop_unused_inputs(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
    %r = loop.fused @f axes [m = 4] ins(%x, %y, %x : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%xa: tensor<4xf32>, %ya: tensor<4xf32>, %xb: tensor<4xf32>):
      %m = loop.axis "m" : index
      %a = loop.load %xa[%m] : tensor<4xf32> -> f32
      %b = loop.load %xb[%m] : tensor<4xf32> -> f32
      %p = arith.mulf %a, %b : f32
      loop.store %p, 0 [%m] : f32
      loop.yield
    }
    func.return %r : tensor<4xf32>
  }
  func.func @merge_reduction_axes(%x: tensor<4x8xf32>) -> tensor<4xf32> {
    %r = loop.fused @f axes [m = 4, k = 8, k_1 = 8, unused = 3] ins(%x : tensor<4x8xf32>) -> tensor<4xf32> {
    ^bb0(%xa: tensor<4x8xf32>):
      %m = loop.axis "m" : index
      %mx = loop.reduce max ["k"] : f32 {
        %k = loop.axis "k" : index
        %a = loop.load %xa[%m, %k] : tensor<4x8xf32> -> f32
        loop.yield %a : f32
      }
      %s = loop.reduce sum ["k_1"] : f32 {
        %k1 = loop.axis "k_1" : index
        %a = loop.load %xa[%m, %k1] : tensor<4x8xf32> -> f32
        %d = arith.subf %a, %mx : f32
        loop.yield %d : f32
      }
      loop.store %s, 0 [%m] : f32
      loop.yield
    }
    func.return %r : tensor<4xf32>
  }
  func.func @cse_body(%x: tensor<4x8xf32>) -> tensor<4xf32> {
    %r = loop.fused @f axes [m = 4, k = 8] ins(%x : tensor<4x8xf32>) -> tensor<4xf32> {
    ^bb0(%xa: tensor<4x8xf32>):
      %m = loop.axis "m" : index
      %s1 = loop.reduce sum ["k"] : f32 {
        %k = loop.axis "k" : index
        %a = loop.load %xa[%m, %k] : tensor<4x8xf32> -> f32
        loop.yield %a : f32
      }
      %s2 = loop.reduce sum ["k"] : f32 {
        %k = loop.axis "k" : index
        %a = loop.load %xa[%m, %k] : tensor<4x8xf32> -> f32
        loop.yield %a : f32
      }
      %dead = math.exp %s1 : f32
      %p = arith.mulf %s1, %s2 : f32
      loop.store %p, 0 [%m] : f32
      loop.yield
    }
    func.return %r : tensor<4xf32>
  }
}
