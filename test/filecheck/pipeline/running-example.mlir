// The running example (input RMSNorm, then the q, k, v projections of Qwen3-Embedding-0.6B layer 0)
// becomes exactly one kernel: the three linears share their input and merge, the norm's row sum
// of squares is a prologue of the same loop, and the normalized values are never stored.
// RUN: emmy-opt %inputs/torch-running-example.mlir -p convert-torch-to-tensor,tensor-merge-siblings,convert-tensor-to-loop,loop-fuse | filecheck %s --check-prefix=LOOP
// RUN: emmy-opt %inputs/torch-running-example.mlir -p convert-torch-to-tensor,tensor-merge-siblings,convert-tensor-to-loop,loop-fuse,convert-loop-to-tile,decide-forks | filecheck %s --check-prefix=TILE

// LOOP:     func.func @layer0
// LOOP:     loop.fused @rms_norm_qkv_proj
// The sum of squares, then the contraction with the row scale hoisted out of it:
// LOOP:       loop.reduce sum ["k"]
// LOOP:       math.rsqrt
// LOOP:       loop.reduce sum ["k"]
// Only the three projections are stored:
// LOOP:       loop.store %{{.*}}, 0
// LOOP:       loop.store %{{.*}}, 1
// LOOP:       loop.store %{{.*}}, 2
// LOOP-NOT:   loop.store
// LOOP-NOT:   loop.fused
// LOOP:       func.return

// TILE:     tile.kernel @rms_norm_qkv_proj kind "contraction"
// TILE:       block_m = #tile.knob<"block_m", [{{.*}}] = {{[0-9]+}}, "rule"
// TILE:       workers = #tile.knob<"workers", ["thread", "mma_sync"] = "mma_sync", "rule"
// TILE-NOT: tile.kernel
// TILE:     func.return

// At the kernel stage the loop's two output groups (q over 2048 columns; k and v over 1024) are
// built as two parts, each normalizing the rows of its own tiles in shared memory, and run side
// by side in one kernel: blockIdx.x picks the part. k and v split the part's block columns, so
// all 64 + 64 blocks do the same work.
// RUN: emmy-opt %inputs/torch-running-example.mlir -p convert-torch-to-tensor,tensor-merge-siblings,convert-tensor-to-loop,loop-fuse,convert-loop-to-tile,decide-forks,convert-tile-to-kernel | filecheck %s --check-prefix=KERNEL
// KERNEL:     kernel.func @rms_norm_qkv_proj({{.*}}) grid [128, 1, 1]
// KERNEL:       %bid_x = kernel.block_id x
// KERNEL:       kernel.if %{{.*}} {
// KERNEL:         %bid_y = kernel.block_id y
// KERNEL:         kernel.store %{{.*}}, %q_proj[%{{.*}}]
// KERNEL:       kernel.if %{{.*}} {
// KERNEL:         kernel.store %{{.*}}, %k_proj[%{{.*}}]
// KERNEL:         kernel.store %{{.*}}, %v_proj[%{{.*}}]
// KERNEL-NOT: kernel.func
// KERNEL:     kernel.launch @rms_norm_qkv_proj(
// KERNEL-NOT: kernel.launch
