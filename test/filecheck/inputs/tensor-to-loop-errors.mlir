// Inputs convert-tensor-to-loop rejects, one per message (test/filecheck/passes/convert-tensor-to-loop.mlir, ERR).

builtin.module {
  func.func @ints(%a: tensor<4xi64>, %b: tensor<4xi64>) -> tensor<4xi64> {
    %s = tensor.add %a, %b : tensor<4xi64>
    func.return %s : tensor<4xi64>
  }
}

// -----
builtin.module {
  func.func @cast(%a: tensor<4xf32>) -> tensor<4xindex> {
    %s = tensor.cast %a : tensor<4xf32> -> tensor<4xindex>
    func.return %s : tensor<4xindex>
  }
}

// -----
builtin.module {
  func.func @left(%a: tensor<4xf32>) -> tensor<4xf32> {
    %h = tensor.cast %a : tensor<4xf32> -> tensor<4xf32>
    %s = torch.relu %h : (tensor<4xf32>) -> tensor<4xf32>
    func.return %s : tensor<4xf32>
  }
}
