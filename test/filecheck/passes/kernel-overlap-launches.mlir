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

// -----

// sm_90a (132 SMs of 228 KiB): a kernel launched early with one wave of blocks or fewer, whose
// shared memory would let two of them share an SM, takes half an SM's (116736 bytes), so its
// blocks spread over the SMs instead of packing two to each SM the earlier kernel left first.
// More blocks than SMs, more than half an SM's, or launched first: unchanged.
builtin.module attributes {emmy.target = "sm_90a"} {
  kernel.func @first(%x: !kernel.ptr<bf16>) grid [128, 1, 1] block [384, 1, 1] smem 98304 {
    %t = kernel.thread_id x
  }
  kernel.func @one_wave(%x: !kernel.ptr<bf16>) grid [16, 8, 1] block [384, 1, 1] smem 98304 {
    %t = kernel.thread_id x
  }
  kernel.func @two_waves(%x: !kernel.ptr<bf16>) grid [32, 8, 1] block [384, 1, 1] smem 98304 {
    %t = kernel.thread_id x
  }
  kernel.func @reduction(%x: !kernel.ptr<bf16>) grid [64, 1, 1] block [256, 1, 1] smem 16 {
    %t = kernel.thread_id x
  }
  kernel.func @large(%x: !kernel.ptr<bf16>) grid [132, 1, 1] block [384, 1, 1] smem 196608 {
    %t = kernel.thread_id x
  }
  func.func @f(%x: tensor<32xbf16> {emmy.name = "x", emmy.role = "input"}) -> tensor<32xbf16> {
    %y = kernel.empty : tensor<32xbf16>
    kernel.launch @first(%x) : tensor<32xbf16>
    kernel.launch @one_wave(%y) : tensor<32xbf16>
    kernel.launch @two_waves(%y) : tensor<32xbf16>
    kernel.launch @reduction(%y) : tensor<32xbf16>
    kernel.launch @large(%y) : tensor<32xbf16>
    func.return %y : tensor<32xbf16>
  }
}

// CHECK-LABEL: kernel.func @first(%{{.*}}: !kernel.ptr<bf16>) grid [128, 1, 1] block [384, 1, 1] smem 98304 {
// CHECK:       kernel.func @one_wave(%{{.*}}: !kernel.ptr<bf16>) grid [16, 8, 1] block [384, 1, 1] smem 116736 {
// CHECK:       kernel.func @two_waves(%{{.*}}: !kernel.ptr<bf16>) grid [32, 8, 1] block [384, 1, 1] smem 98304 {
// CHECK:       kernel.func @reduction(%{{.*}}: !kernel.ptr<bf16>) grid [64, 1, 1] block [256, 1, 1] smem 116736 {
// CHECK:       kernel.func @large(%{{.*}}: !kernel.ptr<bf16>) grid [132, 1, 1] block [384, 1, 1] smem 196608 {
