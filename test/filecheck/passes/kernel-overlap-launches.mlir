// RUN: emmy-opt %s --split-input-file -p kernel-overlap-launches | filecheck %s

// sm_90: every forward launch after the first may start while the one before it finishes. Its
// kernel waits for that one first; the kernel before it lets it launch at its end. The
// prepare-phase launch and the first forward launch stay as they are.
builtin.module attributes {emmy.target = "sm_90"} {
  kernel.func @fold(%w: !kernel.ptr<bf16>, %wp: !kernel.ptr<bf16>) grid [4, 1, 1] block [128, 1, 1] smem 0 {
    %t = kernel.thread_id x
    %v = kernel.load %w[%t] : !kernel.ptr<bf16> -> bf16
    kernel.store %v, %wp[%t] : bf16, !kernel.ptr<bf16>
  }
  kernel.func @stats(%x: !kernel.ptr<bf16>, %s: !kernel.ptr<bf16>) grid [4, 1, 1] block [128, 1, 1] smem 0 {
    %t = kernel.thread_id x
    %v = kernel.load %x[%t] : !kernel.ptr<bf16> -> bf16
    kernel.store %v, %s[%t] : bf16, !kernel.ptr<bf16>
  }
  kernel.func @proj(%s: !kernel.ptr<bf16>, %y: !kernel.ptr<bf16>) grid [4, 1, 1] block [128, 1, 1] smem 0 {
    %t = kernel.thread_id x
    %v = kernel.load %s[%t] : !kernel.ptr<bf16> -> bf16
    kernel.store %v, %y[%t] : bf16, !kernel.ptr<bf16>
  }
  func.func @layer(%x: tensor<512xbf16> {emmy.name = "x", emmy.role = "input"}, %w: tensor<512xbf16> {emmy.name = "w", emmy.role = "param"}) -> (tensor<512xbf16>, tensor<512xbf16>) {
    %wp = kernel.empty : tensor<512xbf16>
    %s = kernel.empty : tensor<512xbf16>
    %y = kernel.empty : tensor<512xbf16>
    %z = kernel.empty : tensor<512xbf16>
    kernel.launch @fold(%w, %wp) {emmy.phase = "prepare"} : tensor<512xbf16>, tensor<512xbf16>
    kernel.launch @stats(%x, %s) : tensor<512xbf16>, tensor<512xbf16>
    kernel.launch @proj(%s, %y) : tensor<512xbf16>, tensor<512xbf16>
    kernel.launch @proj(%wp, %z) : tensor<512xbf16>, tensor<512xbf16>
    func.return %y, %z : tensor<512xbf16>, tensor<512xbf16>
  }
}

// CHECK-LABEL: kernel.func @fold
// CHECK-NEXT:    kernel.thread_id x
// CHECK-NOT:     kernel.call
// CHECK:       kernel.func @stats
// CHECK-NEXT:    kernel.thread_id x
// CHECK-NEXT:    kernel.load
// CHECK-NEXT:    kernel.store
// CHECK-NEXT:    kernel.call "emmy::allow_dependents"() : () -> ()
// CHECK-NEXT:  }
// CHECK:       kernel.func @proj
// CHECK-NEXT:    kernel.call "emmy::grid_dependency_wait"() : () -> ()
// CHECK-NEXT:    kernel.thread_id x
// CHECK-NEXT:    kernel.load
// CHECK-NEXT:    kernel.store
// CHECK-NEXT:    kernel.call "emmy::allow_dependents"() : () -> ()
// CHECK-NEXT:  }
// CHECK:       kernel.launch @fold(%{{.*}}, %{{.*}}) {emmy.phase = "prepare"}
// CHECK-NEXT:  kernel.launch @stats(%{{.*}}, %{{.*}}) :
// CHECK-NEXT:  kernel.launch @proj(%{{.*}}, %{{.*}}) {emmy.overlap} :
// CHECK-NEXT:  kernel.launch @proj(%{{.*}}, %{{.*}}) {emmy.overlap} :

// -----

// sm_80 has no programmatic dependent launch: nothing changes.
builtin.module attributes {emmy.target = "sm_80"} {
  kernel.func @a(%x: !kernel.ptr<bf16>) grid [1, 1, 1] block [32, 1, 1] smem 0 {
    %t = kernel.thread_id x
  }
  func.func @f(%x: tensor<32xbf16> {emmy.name = "x", emmy.role = "input"}) -> tensor<32xbf16> {
    %y = kernel.empty : tensor<32xbf16>
    kernel.launch @a(%x) : tensor<32xbf16>
    kernel.launch @a(%y) : tensor<32xbf16>
    func.return %y : tensor<32xbf16>
  }
}

// CHECK-LABEL: kernel.func @a
// CHECK-NOT:   kernel.call
// CHECK:       kernel.launch @a(%{{.*}}) : tensor<32xbf16>
// CHECK-NEXT:  kernel.launch @a(%{{.*}}) : tensor<32xbf16>
