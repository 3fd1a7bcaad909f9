// RUN: emmy-opt %s -p convert-tensor-to-loop | filecheck %s
// RUN: emmy-opt %inputs/tensor-to-loop-errors.mlir --split-input-file --verify-diagnostics -p convert-tensor-to-loop | filecheck %s --check-prefix=ERR

// Elementwise ops: one axis per dim, loads, the scalar op in the element type, a store.
// Loops are named after emmy.origin (else the op name), unique in the function.
// CHECK-LABEL: func.func @elementwise
// CHECK:      %s = loop.fused @residual axes [d0 = 4, d1 = 8] ins(%a, %b : tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<4x8xbf16> attributes {emmy.origin = "residual"} {
// CHECK-NEXT: ^bb0(%[[A:.*]]: tensor<4x8xbf16>, %[[B:.*]]: tensor<4x8xbf16>):
// CHECK-NEXT:   %[[I:.*]] = loop.axis "d0" : index
// CHECK-NEXT:   %[[J:.*]] = loop.axis "d1" : index
// CHECK-NEXT:   %[[X:.*]] = loop.load %[[A]][%[[I]], %[[J]]] : tensor<4x8xbf16> -> bf16
// CHECK-NEXT:   %[[Y:.*]] = loop.load %[[B]][%[[I]], %[[J]]] : tensor<4x8xbf16> -> bf16
// CHECK-NEXT:   %[[S:.*]] = arith.addf %[[X]], %[[Y]] : bf16
// CHECK-NEXT:   loop.store %[[S]], 0 [%[[I]], %[[J]]] : bf16
// CHECK-NEXT:   loop.yield
// CHECK-NEXT: }
// CHECK:      loop.fused @cast axes [d0 = 4, d1 = 8] ins(%s : tensor<4x8xbf16>) -> tensor<4x8xf32>
// CHECK:        arith.extf %{{.*}} : bf16 to f32
// Sigmoid computes in f32 and rounds once, like the tensor op; its result is rounded to bf16,
// so its exponential and division may approximate (fastmath<afn>).
// CHECK:      loop.fused @silu axes [d0 = 4, d1 = 8]
// CHECK:        %[[XF:.*]] = arith.extf %{{.*}} : bf16 to f32
// CHECK-NEXT:   %[[N:.*]] = arith.negf %[[XF]] : f32
// CHECK-NEXT:   %[[E:.*]] = math.exp %[[N]] fastmath<afn> : f32
// CHECK-NEXT:   %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK-NEXT:   %[[D:.*]] = arith.addf %[[ONE]], %[[E]] : f32
// CHECK-NEXT:   %[[Q:.*]] = arith.divf %[[ONE]], %[[D]] fastmath<afn> : f32
// CHECK-NEXT:   %[[T:.*]] = arith.truncf %[[Q]] : f32 to bf16
// CHECK-NEXT:   loop.store %[[T]], 0
// An f32 result that is returned as f32 stays exact.
// CHECK:      loop.fused @recip axes [d0 = 4, d1 = 8]
// CHECK:        arith.divf %{{.*}}, %{{.*}} : f32
// CHECK:      func.return %r, %g : tensor<4x8xf32>, tensor<4x8xbf16>
func.func @elementwise(%a: tensor<4x8xbf16>, %b: tensor<4x8xbf16>) -> (tensor<4x8xf32>, tensor<4x8xbf16>) {
  %s = tensor.add %a, %b {emmy.origin = "residual"} : tensor<4x8xbf16>
  %c = tensor.cast %s : tensor<4x8xbf16> -> tensor<4x8xf32>
  %g = tensor.sigmoid %s {emmy.origin = "silu"} : tensor<4x8xbf16>
  %r = tensor.recip %c : tensor<4x8xf32>
  func.return %r, %g : tensor<4x8xf32>, tensor<4x8xbf16>
}

// f32 math whose every use ends in a cast to bf16 (SiLU as PyTorch computes it on bf16: in f32,
// rounded once) may approximate; the same math with an f32 use stays exact.
// CHECK-LABEL: func.func @rounded_once
// CHECK:      loop.fused @sig
// CHECK:        math.exp %{{.*}} fastmath<afn> : f32
// CHECK:        arith.divf %{{.*}}, %{{.*}} fastmath<afn> : f32
// CHECK:      loop.fused @quot
// CHECK:        arith.divf %{{.*}}, %{{.*}} fastmath<afn> : f32
// CHECK:      loop.fused @kept
// CHECK:        math.exp %{{.*}} : f32
// CHECK-NOT:    fastmath
// CHECK:      func.return
func.func @rounded_once(%x: tensor<4x8xf32>) -> (tensor<4x8xbf16>, tensor<4x8xf32>) {
  %s = tensor.sigmoid %x {emmy.origin = "sig"} : tensor<4x8xf32>
  %q = tensor.div %x, %s {emmy.origin = "quot"} : tensor<4x8xf32>
  %m = tensor.mul %x, %q : tensor<4x8xf32>
  %b = tensor.cast %m : tensor<4x8xf32> -> tensor<4x8xbf16>
  %e = tensor.exp %x {emmy.origin = "kept"} : tensor<4x8xf32>
  func.return %b, %e : tensor<4x8xbf16>, tensor<4x8xf32>
}

// Reductions: kept dims are axes, reduced dims a loop.reduce (in f32, rounded once); extent-1
// dims get no axis and are indexed by constant 0.
// CHECK-LABEL: func.func @reductions
// CHECK:      %s = loop.fused @rms_norm axes [d1 = 4, k = 8] ins(%x : tensor<1x4x8xf32>) -> tensor<1x4xf32> attributes {emmy.origin = "rms_norm"} {
// CHECK-NEXT: ^bb0(%[[X:.*]]: tensor<1x4x8xf32>):
// CHECK-NEXT:   %[[C0:.*]] = arith.constant 0 : index
// CHECK-NEXT:   %[[I:.*]] = loop.axis "d1" : index
// CHECK-NEXT:   %[[R:.*]] = loop.reduce sum ["k"] : f32 {
// CHECK-NEXT:     %[[K:.*]] = loop.axis "k" : index
// CHECK-NEXT:     %[[V:.*]] = loop.load %[[X]][%[[C0]], %[[I]], %[[K]]] : tensor<1x4x8xf32> -> f32
// CHECK-NEXT:     loop.yield %[[V]] : f32
// CHECK-NEXT:   }
// CHECK-NEXT:   loop.store %[[R]], 0 [%[[C0]], %[[I]]] : f32
// CHECK:      loop.fused @reduce_max axes [d1 = 4, k = 8] ins(%h : tensor<1x4x8xbf16>) -> tensor<4xbf16>
// CHECK:        %[[M:.*]] = loop.reduce max ["k"] : f32 {
// CHECK:          arith.extf %{{.*}} : bf16 to f32
// CHECK:        %[[MT:.*]] = arith.truncf %[[M]] : f32 to bf16
// CHECK-NEXT:   loop.store %[[MT]], 0 [%{{.*}}] : bf16
func.func @reductions(%x: tensor<1x4x8xf32>) -> (tensor<1x4xf32>, tensor<4xbf16>) {
  %s = tensor.sum %x {axes = array<i64: 2>, emmy.origin = "rms_norm"} : tensor<1x4x8xf32> -> tensor<1x4xf32>
  %h = tensor.cast %x : tensor<1x4x8xf32> -> tensor<1x4x8xbf16>
  %m = tensor.reduce_max %h {axes = array<i64: 0, 2>} : tensor<1x4x8xbf16> -> tensor<4xbf16>
  func.return %s, %m : tensor<1x4xf32>, tensor<4xbf16>
}

// Matmul: axes b0.., m, n, k; a sum over k of extf(a) * extf(b) in f32, then truncf.
// CHECK-LABEL: func.func @matmuls
// CHECK:      %c = loop.fused @linear_q_proj axes [m = 4, n = 8, k = 16] ins(%a, %w : tensor<4x16xbf16>, tensor<8x16xbf16>) -> tensor<4x8xbf16> attributes {emmy.origin = "linear_q_proj"} {
// CHECK-NEXT: ^bb0(%[[A:.*]]: tensor<4x16xbf16>, %[[W:.*]]: tensor<8x16xbf16>):
// CHECK-NEXT:   %[[M:.*]] = loop.axis "m" : index
// CHECK-NEXT:   %[[N:.*]] = loop.axis "n" : index
// CHECK-NEXT:   %[[ACC:.*]] = loop.reduce sum ["k"] : f32 {
// CHECK-NEXT:     %[[K:.*]] = loop.axis "k" : index
// CHECK-NEXT:     %[[X:.*]] = loop.load %[[A]][%[[M]], %[[K]]] : tensor<4x16xbf16> -> bf16
// CHECK-NEXT:     %[[Y:.*]] = loop.load %[[W]][%[[N]], %[[K]]] : tensor<8x16xbf16> -> bf16
// CHECK-NEXT:     %[[XF:.*]] = arith.extf %[[X]] : bf16 to f32
// CHECK-NEXT:     %[[YF:.*]] = arith.extf %[[Y]] : bf16 to f32
// CHECK-NEXT:     %[[P:.*]] = arith.mulf %[[XF]], %[[YF]] : f32
// CHECK-NEXT:     loop.yield %[[P]] : f32
// CHECK-NEXT:   }
// CHECK-NEXT:   %[[O:.*]] = arith.truncf %[[ACC]] : f32 to bf16
// CHECK-NEXT:   loop.store %[[O]], 0 [%[[M]], %[[N]]] : bf16
// CHECK:      %d = loop.fused @attention axes [b0 = 2, m = 4, n = 5, k = 6]
// CHECK:          %{{.*}} = loop.load %{{.*}}[%[[B0:.*]], %[[M2:.*]], %[[K2:.*]]] : tensor<2x4x6xf32> -> f32
// CHECK-NEXT:     %{{.*}} = loop.load %{{.*}}[%[[B0]], %[[K2]], %{{.*}}] : tensor<2x6x5xf32> -> f32
func.func @matmuls(%a: tensor<4x16xbf16>, %w: tensor<8x16xbf16>, %p: tensor<2x4x6xf32>, %v: tensor<2x6x5xf32>) -> (tensor<4x8xbf16>, tensor<2x4x5xf32>) {
  %c = tensor.matmul %a, %w {transpose_rhs, emmy.origin = "linear_q_proj"} : (tensor<4x16xbf16>, tensor<8x16xbf16>) -> tensor<4x8xbf16>
  %d = tensor.matmul %p, %v {emmy.origin = "attention"} : (tensor<2x4x6xf32>, tensor<2x6x5xf32>) -> tensor<2x4x5xf32>
  func.return %c, %d : tensor<4x8xbf16>, tensor<2x4x5xf32>
}

// Layout ops are copies whose load indices carry the index arithmetic.
// CHECK-LABEL: func.func @layout
// Reshape (split 8 into 2x4): d1 * 4 + d2.
// CHECK:      %r = loop.fused @reshape axes [d0 = 4, d1 = 2, d2 = 4]
// CHECK:        %[[C4:.*]] = arith.constant 4 : index
// CHECK-NEXT:   %[[T:.*]] = arith.muli %[[D1:.*]], %[[C4]] : index
// CHECK-NEXT:   %[[F:.*]] = arith.addi %[[T]], %[[D2:.*]] : index
// CHECK-NEXT:   loop.load %{{.*}}[%{{.*}}, %[[F]]] : tensor<4x8xbf16> -> bf16
// Transpose: operand axis perm[i] reads result axis i.
// CHECK:      %t = loop.fused @transpose axes [d0 = 2, d1 = 4, d2 = 4]
// CHECK:        %[[TA:.*]] = loop.axis "d0" : index
// CHECK-NEXT:   %[[TB:.*]] = loop.axis "d1" : index
// CHECK-NEXT:   %[[TC:.*]] = loop.axis "d2" : index
// CHECK-NEXT:   loop.load %{{.*}}[%[[TB]], %[[TA]], %[[TC]]] : tensor<4x2x4xbf16> -> bf16
// Broadcast: the new axis d1 is not read.
// CHECK:      %b = loop.fused @broadcast axes [d0 = 4, d1 = 4, d2 = 8]
// CHECK:        %[[BA:.*]] = loop.axis "d0" : index
// CHECK-NEXT:   %[[BB:.*]] = loop.axis "d1" : index
// CHECK-NEXT:   %[[BC:.*]] = loop.axis "d2" : index
// CHECK-NEXT:   %[[BV:.*]] = loop.load %{{.*}}[%[[BA]], %[[BC]]] : tensor<4x8xbf16> -> bf16
// CHECK-NEXT:   loop.store %[[BV]], 0 [%[[BA]], %[[BB]], %[[BC]]] : bf16
// Reshape (merge 4x8 into 32): divui / remui.
// CHECK:      %f = loop.fused @reshape_1 axes [d0 = 4, d1 = 32]
// CHECK:        %[[C8:.*]] = arith.constant 8 : index
// CHECK-NEXT:   %[[Q:.*]] = arith.divui %[[FD:.*]], %[[C8]] : index
// CHECK-NEXT:   %[[R:.*]] = arith.remui %[[FD]], %[[C8]] : index
// CHECK-NEXT:   loop.load %{{.*}}[%{{.*}}, %[[Q]], %[[R]]] : tensor<4x4x8xbf16> -> bf16
// Slice: start + stride * i.
// CHECK:      %s = loop.fused @slice axes [d0 = 4, d1 = 4]
// CHECK:        %[[SC2:.*]] = arith.constant 2 : index
// CHECK-NEXT:   %[[SM:.*]] = arith.muli %{{.*}}, %[[SC2]] : index
// CHECK-NEXT:   %[[SC1:.*]] = arith.constant 1 : index
// CHECK-NEXT:   %[[SI:.*]] = arith.addi %[[SM]], %[[SC1]] : index
// CHECK-NEXT:   loop.load %{{.*}}[%{{.*}}, %[[SI]]] : tensor<4x8xbf16> -> bf16
// Concat: a select between in-range loads.
// CHECK:      %c = loop.fused @rope axes [d0 = 4, d1 = 12] ins(%s, %x : tensor<4x4xbf16>, tensor<4x8xbf16>)
// CHECK:        %[[CJ:.*]] = loop.axis "d1" : index
// CHECK-NEXT:   %[[CC4:.*]] = arith.constant 4 : index
// CHECK-NEXT:   %[[L0:.*]] = arith.remui %[[CJ]], %[[CC4]] : index
// CHECK-NEXT:   %[[V0:.*]] = loop.load %{{.*}}[%{{.*}}, %[[L0]]] : tensor<4x4xbf16> -> bf16
// CHECK-NEXT:   %[[SH:.*]] = arith.addi %[[CJ]], %[[CC4]] : index
// CHECK-NEXT:   %[[CC8:.*]] = arith.constant 8 : index
// CHECK-NEXT:   %[[L1:.*]] = arith.remui %[[SH]], %[[CC8]] : index
// CHECK-NEXT:   %[[V1:.*]] = loop.load %{{.*}}[%{{.*}}, %[[L1]]] : tensor<4x8xbf16> -> bf16
// CHECK-NEXT:   %[[LT:.*]] = arith.cmpi ult, %[[CJ]], %[[CC4]] : index
// CHECK-NEXT:   %[[SEL:.*]] = arith.select %[[LT]], %[[V0]], %[[V1]] : bf16
// CHECK-NEXT:   loop.store %[[SEL]], 0
func.func @layout(%x: tensor<4x8xbf16>) -> (tensor<2x4x4xbf16>, tensor<4x32xbf16>, tensor<4x12xbf16>) {
  %r = tensor.reshape %x : tensor<4x8xbf16> -> tensor<4x2x4xbf16>
  %t = tensor.transpose %r {perm = array<i64: 1, 0, 2>} : tensor<4x2x4xbf16> -> tensor<2x4x4xbf16>
  %b = tensor.broadcast %x {dims = array<i64: 0, 2>} : tensor<4x8xbf16> -> tensor<4x4x8xbf16>
  %f = tensor.reshape %b : tensor<4x4x8xbf16> -> tensor<4x32xbf16>
  %s = tensor.slice %x {starts = array<i64: 0, 1>, sizes = array<i64: 4, 4>, strides = array<i64: 1, 2>} : tensor<4x8xbf16> -> tensor<4x4xbf16>
  %c = tensor.concat %s, %x {axis = 1 : i64, emmy.origin = "rope"} : (tensor<4x4xbf16>, tensor<4x8xbf16>) -> tensor<4x12xbf16>
  func.return %t, %f, %c : tensor<2x4x4xbf16>, tensor<4x32xbf16>, tensor<4x12xbf16>
}

// Causal mask: a select on an index comparison; gather_rows: load the id, index_cast, load
// the row; splat: a constant.
// CHECK-LABEL: func.func @misc
// CHECK:      %m = loop.fused @attention axes [d0 = 2, d1 = 4, d2 = 6]
// CHECK:        %[[Q:.*]] = loop.axis "d1" : index
// CHECK-NEXT:   %[[KV:.*]] = loop.axis "d2" : index
// CHECK-NEXT:   %[[V:.*]] = loop.load
// CHECK-NEXT:   %[[C2:.*]] = arith.constant 2 : index
// CHECK-NEXT:   %[[QO:.*]] = arith.addi %[[Q]], %[[C2]] : index
// CHECK-NEXT:   %[[GT:.*]] = arith.cmpi sgt, %[[KV]], %[[QO]] : index
// CHECK-NEXT:   %[[NINF:.*]] = arith.constant 0xff800000 : f32
// CHECK-NEXT:   %[[SEL:.*]] = arith.select %[[GT]], %[[NINF]], %[[V]] : f32
// With a window, a select for the keys before it, inside the causal one (which stays outermost:
// the attention analysis finds the causal mask there): q + 2 - 4 + 1 = q - 1.
// CHECK:      %w = loop.fused @window axes [d0 = 2, d1 = 4, d2 = 6]
// CHECK:        %[[WQ:.*]] = loop.axis "d1" : index
// CHECK-NEXT:   %[[WKV:.*]] = loop.axis "d2" : index
// CHECK-NEXT:   %[[WV:.*]] = loop.load
// CHECK-NEXT:   %[[C1:.*]] = arith.constant 1 : index
// CHECK-NEXT:   %[[LO:.*]] = arith.subi %[[WQ]], %[[C1]] : index
// CHECK-NEXT:   %[[LT:.*]] = arith.cmpi slt, %[[WKV]], %[[LO]] : index
// CHECK-NEXT:   %[[NINF1:.*]] = arith.constant 0xff800000 : f32
// CHECK-NEXT:   %[[GONE:.*]] = arith.select %[[LT]], %[[NINF1]], %[[WV]] : f32
// CHECK-NEXT:   %[[C2W:.*]] = arith.constant 2 : index
// CHECK-NEXT:   %[[QO2:.*]] = arith.addi %[[WQ]], %[[C2W]] : index
// CHECK-NEXT:   %[[GT2:.*]] = arith.cmpi sgt, %[[WKV]], %[[QO2]] : index
// CHECK-NEXT:   %[[NINF2:.*]] = arith.constant 0xff800000 : f32
// CHECK-NEXT:   arith.select %[[GT2]], %[[NINF2]], %[[GONE]] : f32
// CHECK:      %e = loop.fused @embedding axes [d1 = 3, d2 = 8] ins(%ids, %table : tensor<1x3xi64>, tensor<10x8xbf16>)
// CHECK:        %[[ID:.*]] = loop.load %{{.*}}[%{{.*}}, %{{.*}}] : tensor<1x3xi64> -> i64
// CHECK-NEXT:   %[[ROW:.*]] = arith.index_cast %[[ID]] : i64 to index
// CHECK-NEXT:   loop.load %{{.*}}[%[[ROW]], %{{.*}}] : tensor<10x8xbf16> -> bf16
// CHECK:      %c = loop.fused @splat axes [d1 = 4] ins() -> tensor<1x4xf32>
// CHECK:        %[[CST:.*]] = arith.constant 0.0009765625 : f32
// CHECK-NEXT:   loop.store %[[CST]], 0 [%{{.*}}, %{{.*}}] : f32
// CHECK-NOT:  tensor.
func.func @misc(%s: tensor<2x4x6xf32>, %table: tensor<10x8xbf16>, %ids: tensor<1x3xi64>) -> (tensor<2x4x6xf32>, tensor<1x3x8xbf16>, tensor<1x4xf32>, tensor<2x4x6xf32>) {
  %m = tensor.causal_mask %s {offset = 2 : i64, emmy.origin = "attention"} : tensor<2x4x6xf32>
  %w = tensor.causal_mask %s {offset = 2 : i64, window = 4 : i64, emmy.origin = "window"} : tensor<2x4x6xf32>
  %e = tensor.gather_rows %table, %ids {emmy.origin = "embedding"} : (tensor<10x8xbf16>, tensor<1x3xi64>) -> tensor<1x3x8xbf16>
  %c = tensor.splat 9.765625e-04 : tensor<1x4xf32>
  func.return %m, %e, %c, %w : tensor<2x4x6xf32>, tensor<1x3x8xbf16>, tensor<1x4xf32>, tensor<2x4x6xf32>
}

// The pass's errors (inputs in test/filecheck/inputs/tensor-to-loop-errors.mlir).
// ERR: error: convert-tensor-to-loop: tensor.add on element type i64 is not supported (floats only)
// ERR: error: convert-tensor-to-loop: cannot convert f32 to index
// ERR: error: convert-tensor-to-loop: @left still holds torch.relu (no loop lowering for it)
