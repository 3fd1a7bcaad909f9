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

// -----

// A wait the kernel's lowering put late stays there when nothing before it touches what the
// launches not yet finished write (nor writes what they read). @proj reads its input %x and
// weight %w (through a tensor map: a copy only reads its map) before the wait in its last
// k-step, and the statistics %s after it: @stats lets it start right away (first, as the first
// launch; after its own wait otherwise), and @proj's k loop runs beside it. @proj2 reads %y,
// which @proj writes, before its wait: it waits first. @proj3 reads the input before its wait,
// but the launch before it (@late, late itself) may start before @stats2 has finished, which
// writes %t that @proj3 reads early: it waits first. @clobber writes %x, which @stats3 reads,
// before its wait: it waits first. A one-wave kernel launched early keeps its shared memory
// where the launch after it waits late (@stats2: that one's blocks are to run beside it), else
// takes half an SM's (@stats3).
builtin.module attributes {emmy.target = "sm_90a"} {
  kernel.func @stats(%x: !kernel.ptr<bf16>, %s: !kernel.ptr<f32>) grid [4, 1, 1] block [128, 1, 1] smem 0 {
    %t = kernel.thread_id x
    %v = kernel.load %x[%t] : !kernel.ptr<bf16> -> bf16
    %f = arith.extf %v : bf16 to f32
    kernel.store %f, %s[%t] : f32, !kernel.ptr<f32>
  }
  kernel.func @proj(%x: !kernel.ptr<bf16>, %s: !kernel.ptr<f32>, %y: !kernel.ptr<bf16>, %wm: !kernel.tensor_map<bf16, rows 64, cols 64, stride 64, offset 0, box 64 x 64>) grid [4, 1, 1] block [128, 1, 1] smem 16384 {
    %t = kernel.thread_id x
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c3 = arith.constant 3 : index
    %c4 = arith.constant 4 : index
    %sw = kernel.shared [4096] offset 0 align 128 : !kernel.ptr<bf16, shared>
    %bar = kernel.shared [1] offset 8192 align 8 : !kernel.ptr<i64, shared>
    %rs = kernel.local [1] : !kernel.ptr<f32, local>
    kernel.call "emmy::tma_prefetch"(%wm) : (!kernel.tensor_map<bf16, rows 64, cols 64, stride 64, offset 0, box 64 x 64>) -> ()
    kernel.for %k = %c0 to %c4 step %c1 {
      %last = arith.cmpi eq, %k, %c3 : index
      kernel.if %last {
        kernel.call "emmy::grid_dependency_wait"() : () -> ()
        %sv = kernel.load %s[%t] : !kernel.ptr<f32> -> f32
        kernel.store %sv, %rs[%c0] : f32, !kernel.ptr<f32, local>
        kernel.yield
      }
      kernel.call "emmy::tma_load_2d"(%sw, %wm, %c0, %c0, %bar) : (!kernel.ptr<bf16, shared>, !kernel.tensor_map<bf16, rows 64, cols 64, stride 64, offset 0, box 64 x 64>, index, index, !kernel.ptr<i64, shared>) -> ()
      %v = kernel.load %x[%t] : !kernel.ptr<bf16> -> bf16
      kernel.yield
    }
    %r = kernel.load %rs[%c0] : !kernel.ptr<f32, local> -> f32
    %o = arith.truncf %r : f32 to bf16
    kernel.store %o, %y[%t] : bf16, !kernel.ptr<bf16>
  }
  kernel.func @proj2(%y: !kernel.ptr<bf16>, %z: !kernel.ptr<bf16>) grid [4, 1, 1] block [128, 1, 1] smem 0 {
    %t = kernel.thread_id x
    %v = kernel.load %y[%t] : !kernel.ptr<bf16> -> bf16
    kernel.call "emmy::grid_dependency_wait"() : () -> ()
    kernel.store %v, %z[%t] : bf16, !kernel.ptr<bf16>
  }
  kernel.func @stats2(%x: !kernel.ptr<bf16>, %s: !kernel.ptr<f32>) grid [4, 1, 1] block [128, 1, 1] smem 0 {
    %t = kernel.thread_id x
    %v = kernel.load %x[%t] : !kernel.ptr<bf16> -> bf16
    %f = arith.extf %v : bf16 to f32
    kernel.store %f, %s[%t] : f32, !kernel.ptr<f32>
  }
  kernel.func @late(%x: !kernel.ptr<bf16>, %s: !kernel.ptr<f32>, %y: !kernel.ptr<bf16>) grid [4, 1, 1] block [128, 1, 1] smem 0 {
    %t = kernel.thread_id x
    %v = kernel.load %x[%t] : !kernel.ptr<bf16> -> bf16
    kernel.call "emmy::grid_dependency_wait"() : () -> ()
    %sv = kernel.load %s[%t] : !kernel.ptr<f32> -> f32
    kernel.store %v, %y[%t] : bf16, !kernel.ptr<bf16>
  }
  kernel.func @proj3(%x: !kernel.ptr<f32>, %y: !kernel.ptr<bf16>, %z: !kernel.ptr<bf16>) grid [4, 1, 1] block [128, 1, 1] smem 0 {
    %t = kernel.thread_id x
    %v = kernel.load %x[%t] : !kernel.ptr<f32> -> f32
    kernel.call "emmy::grid_dependency_wait"() : () -> ()
    %w = kernel.load %y[%t] : !kernel.ptr<bf16> -> bf16
    kernel.store %w, %z[%t] : bf16, !kernel.ptr<bf16>
  }
  kernel.func @stats3(%x: !kernel.ptr<bf16>, %s: !kernel.ptr<f32>) grid [4, 1, 1] block [128, 1, 1] smem 0 {
    %t = kernel.thread_id x
    %v = kernel.load %x[%t] : !kernel.ptr<bf16> -> bf16
    %f = arith.extf %v : bf16 to f32
    kernel.store %f, %s[%t] : f32, !kernel.ptr<f32>
  }
  kernel.func @clobber(%x: !kernel.ptr<bf16>, %s: !kernel.ptr<f32>) grid [4, 1, 1] block [128, 1, 1] smem 0 {
    %t = kernel.thread_id x
    %z = arith.constant 0.0 : bf16
    kernel.store %z, %x[%t] : bf16, !kernel.ptr<bf16>
    kernel.call "emmy::grid_dependency_wait"() : () -> ()
    %sv = kernel.load %s[%t] : !kernel.ptr<f32> -> f32
  }
  func.func @layer(%x: tensor<512xbf16> {emmy.name = "x", emmy.role = "input"}, %w: tensor<64x64xbf16> {emmy.name = "w", emmy.role = "param"}) -> (tensor<512xbf16>, tensor<512xbf16>) {
    %s = kernel.empty : tensor<512xf32>
    %y = kernel.empty : tensor<512xbf16>
    %z = kernel.empty : tensor<512xbf16>
    %t = kernel.empty : tensor<512xf32>
    %u = kernel.empty : tensor<512xbf16>
    %s3 = kernel.empty : tensor<512xf32>
    kernel.launch @stats(%x, %s) : tensor<512xbf16>, tensor<512xf32>
    kernel.launch @proj(%x, %s, %y, %w) : tensor<512xbf16>, tensor<512xf32>, tensor<512xbf16>, tensor<64x64xbf16>
    kernel.launch @proj2(%y, %z) : tensor<512xbf16>, tensor<512xbf16>
    kernel.launch @stats2(%x, %t) : tensor<512xbf16>, tensor<512xf32>
    kernel.launch @late(%x, %t, %u) : tensor<512xbf16>, tensor<512xf32>, tensor<512xbf16>
    kernel.launch @proj3(%t, %u, %z) : tensor<512xf32>, tensor<512xbf16>, tensor<512xbf16>
    kernel.launch @stats3(%y, %s3) : tensor<512xbf16>, tensor<512xf32>
    kernel.launch @clobber(%y, %s3) : tensor<512xbf16>, tensor<512xf32>
    func.return %y, %z : tensor<512xbf16>, tensor<512xbf16>
  }
}

// CHECK-LABEL: kernel.func @stats(
// CHECK-NEXT:    kernel.call "emmy::allow_dependents"() : () -> ()
// CHECK-NEXT:    kernel.thread_id x
// CHECK-NOT:     kernel.call
// CHECK:       kernel.func @proj(
// CHECK-NEXT:    kernel.thread_id x
// CHECK-NOT:     kernel.call "emmy::grid_dependency_wait"
// CHECK:           kernel.if %{{.*}} {
// CHECK-NEXT:        kernel.call "emmy::grid_dependency_wait"() : () -> ()
// CHECK-NEXT:        kernel.load %{{.*}} : !kernel.ptr<f32> -> f32
// CHECK:         kernel.call "emmy::allow_dependents"() : () -> ()
// CHECK-NEXT:  }
// CHECK:       kernel.func @proj2(
// CHECK-NEXT:    kernel.call "emmy::grid_dependency_wait"() : () -> ()
// CHECK-NEXT:    kernel.thread_id x
// CHECK-NEXT:    kernel.load
// CHECK-NEXT:    kernel.store
// CHECK-NEXT:    kernel.call "emmy::allow_dependents"() : () -> ()
// CHECK-NEXT:  }
// CHECK:       kernel.func @stats2({{.*}}) grid [4, 1, 1] block [128, 1, 1] smem 0 {
// CHECK-NEXT:    kernel.call "emmy::grid_dependency_wait"() : () -> ()
// CHECK-NEXT:    kernel.call "emmy::allow_dependents"() : () -> ()
// CHECK-NEXT:    kernel.thread_id x
// CHECK:       kernel.func @late(
// CHECK-NEXT:    kernel.thread_id x
// CHECK-NEXT:    kernel.load
// CHECK-NEXT:    kernel.call "emmy::grid_dependency_wait"() : () -> ()
// CHECK:         kernel.call "emmy::allow_dependents"() : () -> ()
// CHECK-NEXT:  }
// CHECK:       kernel.func @proj3(
// CHECK-NEXT:    kernel.call "emmy::grid_dependency_wait"() : () -> ()
// CHECK-NEXT:    kernel.thread_id x
// CHECK-NEXT:    kernel.load
// CHECK-NEXT:    kernel.load
// CHECK:       kernel.func @stats3({{.*}}) grid [4, 1, 1] block [128, 1, 1] smem 116736 {
// CHECK-NEXT:    kernel.call "emmy::grid_dependency_wait"() : () -> ()
// CHECK-NEXT:    kernel.thread_id x
// CHECK:         kernel.call "emmy::allow_dependents"() : () -> ()
// CHECK-NEXT:  }
// CHECK:       kernel.func @clobber(
// CHECK-NEXT:    kernel.call "emmy::grid_dependency_wait"() : () -> ()
// CHECK-NEXT:    kernel.thread_id x
// CHECK-NEXT:    arith.constant
// CHECK-NEXT:    kernel.store
// CHECK-NEXT:    kernel.load
