// RUN: emmy-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = loop.fused @l axes [i = 4] ins(%x : tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4xf32>):
    %j = loop.axis "j" : index
    %v = loop.load %xa[%j] : tensor<4xf32> -> f32
    loop.store %v, 0 [%j] : f32
    loop.yield
  }
  func.return %0 : tensor<4xf32>
}
// CHECK: loop.axis: axis 'j' is not an axis of the enclosing loop.fused (axes: i)

// -----

func.func @f(%x: tensor<4x4xf32>) -> tensor<4xf32> {
  %0 = loop.fused @l axes [i = 4] ins(%x : tensor<4x4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4x4xf32>):
    %i = loop.axis "i" : index
    %v = loop.load %xa[%i] : tensor<4x4xf32> -> f32
    loop.store %v, 0 [%i] : f32
    loop.yield
  }
  func.return %0 : tensor<4xf32>
}
// CHECK: loop.load: 1 indices for a tensor of rank 2 (tensor<4x4xf32>)

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = loop.fused @l axes [i = 4] ins(%x : tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4xf32>):
    %i = loop.axis "i" : index
    %v = loop.load %xa[%i] : tensor<4xf32> -> bf16
    loop.store %v, 0 [%i] : bf16
    loop.yield
  }
  func.return %0 : tensor<4xf32>
}
// CHECK: loop.load: result type bf16 must be the element type f32

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = loop.fused @l axes [i = 4] ins(%x : tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4xf32>):
    %i = loop.axis "i" : index
    %y = loop.fused @inner axes [j = 4] ins() -> tensor<4xf32> {
      %j = loop.axis "j" : index
      %v = loop.load %xa[%j] : tensor<4xf32> -> f32
      loop.store %v, 0 [%j] : f32
      loop.yield
    }
    %c = arith.constant 0.0 : f32
    loop.store %c, 0 [%i] : f32
    loop.yield
  }
  func.return %0 : tensor<4xf32>
}
// CHECK: loop.load: the tensor must be a block argument of the enclosing loop.fused

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = loop.fused @l axes [i = 4] ins(%x : tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4xf32>):
    %i = loop.axis "i" : index
    %v = loop.load %xa[%i] : tensor<4xf32> -> f32
    loop.store %v, 1 [%i] : f32
    loop.yield
  }
  func.return %0 : tensor<4xf32>
}
// CHECK: loop.store: result number 1 out of range (loop.fused has 1)

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4x4xf32> {
  %0 = loop.fused @l axes [i = 4] ins(%x : tensor<4xf32>) -> tensor<4x4xf32> {
  ^bb0(%xa: tensor<4xf32>):
    %i = loop.axis "i" : index
    %v = loop.load %xa[%i] : tensor<4xf32> -> f32
    loop.store %v, 0 [%i] : f32
    loop.yield
  }
  func.return %0 : tensor<4x4xf32>
}
// CHECK: loop.store: 1 indices for result 0 of rank 2

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xbf16> {
  %0 = loop.fused @l axes [i = 4] ins(%x : tensor<4xf32>) -> tensor<4xbf16> {
  ^bb0(%xa: tensor<4xf32>):
    %i = loop.axis "i" : index
    %v = loop.load %xa[%i] : tensor<4xf32> -> f32
    loop.store %v, 0 [%i] : f32
    loop.yield
  }
  func.return %0 : tensor<4xbf16>
}
// CHECK: loop.store: stored value has type f32, result 0 holds bf16

// -----

func.func @f(%x: tensor<4x4xf32>) -> tensor<4xf32> {
  %0 = loop.fused @l axes [i = 4, k = 4] ins(%x : tensor<4x4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4x4xf32>):
    %i = loop.axis "i" : index
    %s = loop.reduce sum ["k"] : f32 {
      %k = loop.axis "k" : index
      %v = loop.load %xa[%i, %k] : tensor<4x4xf32> -> f32
      loop.store %v, 0 [%i] : f32
      loop.yield %v : f32
    }
    loop.store %s, 0 [%i] : f32
    loop.yield
  }
  func.return %0 : tensor<4xf32>
}
// CHECK: loop.store: must be directly in the loop.fused body, not inside a loop.reduce

// -----

func.func @f(%x: tensor<4x4xf32>) -> tensor<4xf32> {
  %0 = loop.fused @l axes [i = 4, k = 4] ins(%x : tensor<4x4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4x4xf32>):
    %i = loop.axis "i" : index
    %s = loop.reduce sum ["k"] : f32 {
      %k = loop.axis "k" : index
      %v = loop.load %xa[%i, %k] : tensor<4x4xf32> -> f32
      %h = arith.truncf %v : f32 to bf16
      loop.yield %h : bf16
    }
    loop.store %s, 0 [%i] : f32
    loop.yield
  }
  func.return %0 : tensor<4xf32>
}
// CHECK: loop.reduce: the region yields bf16, the result type is f32

// -----

func.func @f(%x: tensor<4x4xf32>) -> tensor<4xf32> {
  %0 = loop.fused @l axes [i = 4, k = 4] ins(%x : tensor<4x4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4x4xf32>):
    %i = loop.axis "i" : index
    %s = loop.reduce sum ["k"] : f32 {
      %k = loop.axis "k" : index
      %v = loop.load %xa[%i, %k] : tensor<4x4xf32> -> f32
      loop.yield %v, %v : f32, f32
    }
    loop.store %s, 0 [%i] : f32
    loop.yield
  }
  func.return %0 : tensor<4xf32>
}
// CHECK: loop.yield: a loop.reduce region yields one value, got 2

// -----

func.func @f(%x: tensor<4x4xf32>) -> tensor<4xf32> {
  %0 = loop.fused @l axes [i = 4, k = 4] ins(%x : tensor<4x4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4x4xf32>):
    %i = loop.axis "i" : index
    %s = loop.reduce sum ["k"] : f32 {
      %t = loop.reduce max ["k"] : f32 {
        %k = loop.axis "k" : index
        %v = loop.load %xa[%i, %k] : tensor<4x4xf32> -> f32
        loop.yield %v : f32
      }
      loop.yield %t : f32
    }
    loop.store %s, 0 [%i] : f32
    loop.yield
  }
  func.return %0 : tensor<4xf32>
}
// CHECK: loop.reduce: axis 'k' is already reduced by an enclosing loop.reduce

// -----

func.func @f(%x: tensor<4x4xf32>) -> tensor<4xf32> {
  %0 = loop.fused @l axes [i = 4, k = 4] ins(%x : tensor<4x4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4x4xf32>):
    %i = loop.axis "i" : index
    %s = loop.reduce sum ["j"] : f32 {
      %k = loop.axis "k" : index
      %v = loop.load %xa[%i, %k] : tensor<4x4xf32> -> f32
      loop.yield %v : f32
    }
    loop.store %s, 0 [%i] : f32
    loop.yield
  }
  func.return %0 : tensor<4xf32>
}
// CHECK: loop.reduce: axis 'j' is not an axis of the enclosing loop.fused (axes: i, k)

// -----

func.func @f(%x: tensor<4x4xf32>) -> tensor<4xf32> {
  %0 = loop.fused @l axes [i = 4, k = 4] ins(%x : tensor<4x4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4x4xf32>):
    %i = loop.axis "i" : index
    %s = loop.reduce prod ["k"] : f32 {
      %k = loop.axis "k" : index
      %v = loop.load %xa[%i, %k] : tensor<4x4xf32> -> f32
      loop.yield %v : f32
    }
    loop.store %s, 0 [%i] : f32
    loop.yield
  }
  func.return %0 : tensor<4xf32>
}
// CHECK: loop.reduce: kind must be sum or max, got 'prod'

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = loop.fused @l axes [i = 4, i = 2] ins(%x : tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4xf32>):
    %i = loop.axis "i" : index
    %v = loop.load %xa[%i] : tensor<4xf32> -> f32
    loop.store %v, 0 [%i] : f32
    loop.yield
  }
  func.return %0 : tensor<4xf32>
}
// CHECK: loop.axes: axis names must be unique, got ['i', 'i']

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = loop.fused @l axes [i = 0] ins(%x : tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4xf32>):
    %i = loop.axis "i" : index
    %v = loop.load %xa[%i] : tensor<4xf32> -> f32
    loop.store %v, 0 [%i] : f32
    loop.yield
  }
  func.return %0 : tensor<4xf32>
}
// CHECK: loop.axes: axis 'i' has extent 0, must be >= 1

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = loop.fused @l axes [i = 4] ins(%x : tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4xbf16>):
    %i = loop.axis "i" : index
    %v = loop.load %xa[%i] : tensor<4xbf16> -> bf16
    %w = arith.extf %v : bf16 to f32
    loop.store %w, 0 [%i] : f32
    loop.yield
  }
  func.return %0 : tensor<4xf32>
}
// CHECK: loop.fused: block argument 0 has type tensor<4xbf16>, input 0 is tensor<4xf32>

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = loop.fused @l axes [i = 4] ins(%x : tensor<4xf32>) -> tensor<4xf32> {
  ^bb0:
    %c = arith.constant 0.0 : f32
    %i = loop.axis "i" : index
    loop.store %c, 0 [%i] : f32
    loop.yield
  }
  func.return %0 : tensor<4xf32>
}
// CHECK: loop.fused: the body has 0 block arguments for 1 inputs

// -----

func.func @f(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0:2 = loop.fused @l axes [i = 4] ins(%x : tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%xa: tensor<4xf32>):
    %i = loop.axis "i" : index
    %v = loop.load %xa[%i] : tensor<4xf32> -> f32
    loop.store %v, 0 [%i] : f32
    loop.yield
  }
  func.return %0#0, %0#1 : tensor<4xf32>, tensor<4xf32>
}
// CHECK: loop.fused: result 1 is never stored

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = loop.fused @l axes [i = 4] ins(%x : tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4xf32>):
    %i = loop.axis "i" : index
    %v = loop.load %xa[%i] : tensor<4xf32> -> f32
    loop.store %v, 0 [%i] : f32
    loop.yield %v : f32
  }
  func.return %0 : tensor<4xf32>
}
// CHECK: loop.yield: the loop.fused body yields nothing

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = loop.fused @l axes [i = 4] ins(%x : tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4xf32>):
    %i = loop.axis "i" : index
    %v = loop.load %xa[%i] : tensor<4xf32> -> f32
    loop.store %v, 0 [%i] : f32
  }
  func.return %0 : tensor<4xf32>
}
// CHECK: Operation loop.store terminates block in single-block region but is not a terminator

// -----

func.func @f() -> index {
  %i = loop.axis "i" : index
  func.return %i : index
}
// CHECK: loop.axis: must be inside a loop.fused body (or another op that owns named axes)

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = loop.fused @l axes [i.j = 4] ins(%x : tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4xf32>):
    %i = loop.axis "i.j" : index
    %v = loop.load %xa[%i] : tensor<4xf32> -> f32
    loop.store %v, 0 [%i] : f32
    loop.yield
  }
  func.return %0 : tensor<4xf32>
}
// CHECK: loop.axes: axis name 'i.j' is not an identifier

// -----

func.func @f(%x: tensor<4x4xf32>) -> tensor<4xf32> {
  %0 = loop.fused @l axes [i = 4, k = 4] ins(%x : tensor<4x4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4x4xf32>):
    %i = loop.axis "i" : index
    %s = loop.reduce sum [] : f32 {
      %k = loop.axis "k" : index
      %v = loop.load %xa[%i, %k] : tensor<4x4xf32> -> f32
      loop.yield %v : f32
    }
    loop.store %s, 0 [%i] : f32
    loop.yield
  }
  func.return %0 : tensor<4xf32>
}
// CHECK: loop.reduce: needs at least one axis

// -----

func.func @f(%x: tensor<4x4xf32>) -> tensor<4xf32> {
  %0 = loop.fused @l axes [i = 4, k = 4] ins(%x : tensor<4x4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4x4xf32>):
    %i = loop.axis "i" : index
    %s = loop.reduce sum ["k", "k"] : f32 {
      %k = loop.axis "k" : index
      %v = loop.load %xa[%i, %k] : tensor<4x4xf32> -> f32
      loop.yield %v : f32
    }
    loop.store %s, 0 [%i] : f32
    loop.yield
  }
  func.return %0 : tensor<4xf32>
}
// CHECK: loop.reduce: axes must be distinct, got ['k', 'k']

// -----

func.func @f(%x: tensor<4x4xf32>) -> tensor<4xf32> {
  %0 = loop.fused @l axes [i = 4, k = 4] ins(%x : tensor<4x4xf32>) -> tensor<4xf32> {
  ^bb0(%xa: tensor<4x4xf32>):
    %i = loop.axis "i" : index
    %s = loop.reduce sum ["k"] : f32 {
    ^bb0(%a: f32):
      %k = loop.axis "k" : index
      %v = loop.load %xa[%i, %k] : tensor<4x4xf32> -> f32
      loop.yield %v : f32
    }
    loop.store %s, 0 [%i] : f32
    loop.yield
  }
  func.return %0 : tensor<4xf32>
}
// CHECK: loop.reduce: the region takes no block arguments
