// RUN: emmy-opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: knob 'block_m': the chosen value 64 is not in the domain [16, 32]
func.func @f() attributes {k = #tile.knob<"block_m", [16, 32] = 64, "rule", "r">} {
  func.return
}

// -----
// CHECK: knob 'workers': unknown evidence tier 'measured'; tiers: pinned, local, golden, nearest, prior, rule
func.func @f() attributes {k = #tile.knob<"workers", ["thread", "wgmma"] = "wgmma", "measured", "r">} {
  func.return
}

// -----
// CHECK: knob 'block_m': the domain is empty
func.func @f() attributes {k = #tile.knob<"block_m", []>} {
  func.return
}

// -----
// CHECK: knob 'vector': the domain mixes integers and strings
func.func @f() attributes {k = #tile.knob<"vector", [1, "two"]>} {
  func.return
}

// -----
// CHECK: knob 'vector': the domain repeats a value
func.func @f() attributes {k = #tile.knob<"vector", [1, 2, 2]>} {
  func.return
}

// -----
// CHECK: tile.kernel @e: unknown kind 'pointwise'; kinds: elementwise, reduction, contraction, attention
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = tile.kernel @e kind "pointwise" axes [i = 4] knobs {} ins(%x : tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4xf32>):
    %i = loop.axis "i" : index
    %v = loop.load %xa[%i] : tensor<4xf32> -> f32
    loop.store %v, 0 [%i] : f32
    loop.yield
  }
  func.return %y : tensor<4xf32>
}

// -----
// CHECK: tile.kernel @e: the knob under key 'vector' is named 'threads'
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = tile.kernel @e kind "elementwise" axes [i = 4] knobs {vector = #tile.knob<"threads", [64]>} ins(%x : tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4xf32>):
    %i = loop.axis "i" : index
    %v = loop.load %xa[%i] : tensor<4xf32> -> f32
    loop.store %v, 0 [%i] : f32
    loop.yield
  }
  func.return %y : tensor<4xf32>
}

// -----
// CHECK: tile.kernel @e: knob 'vector' must be a #tile.knob, got 4 : i64
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = tile.kernel @e kind "elementwise" axes [i = 4] knobs {vector = 4 : i64} ins(%x : tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4xf32>):
    %i = loop.axis "i" : index
    %v = loop.load %xa[%i] : tensor<4xf32> -> f32
    loop.store %v, 0 [%i] : f32
    loop.yield
  }
  func.return %y : tensor<4xf32>
}

// -----
// CHECK: tile.kernel @e: the block arguments (tensor<4xf16>) must mirror the inputs (tensor<4xf32>)
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = tile.kernel @e kind "elementwise" axes [i = 4] knobs {} ins(%x : tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4xf16>):
    %c = arith.constant 1.0 : f32
    %i = loop.axis "i" : index
    loop.store %c, 0 [%i] : f32
    loop.yield
  }
  func.return %y : tensor<4xf32>
}

// -----
// CHECK: loop.yield: the tile.kernel body yields nothing
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = tile.kernel @e kind "elementwise" axes [i = 4] knobs {} ins(%x : tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4xf32>):
    %i = loop.axis "i" : index
    %v = loop.load %xa[%i] : tensor<4xf32> -> f32
    loop.store %v, 0 [%i] : f32
    loop.yield %v : f32
  }
  func.return %y : tensor<4xf32>
}

// -----
// CHECK: loop.axis: axis 'j' is not an axis of the enclosing tile.kernel (axes: i)
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = tile.kernel @e kind "elementwise" axes [i = 4] knobs {} ins(%x : tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4xf32>):
    %i = loop.axis "j" : index
    %v = loop.load %xa[%i] : tensor<4xf32> -> f32
    loop.store %v, 0 [%i] : f32
    loop.yield
  }
  func.return %y : tensor<4xf32>
}
