// A module whose recorded launch budget is not an integer (test/filecheck/passes/decide-forks.mlir, BADATTR).
builtin.module attributes {emmy.max_launches = "eight"} {
  func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
    func.return %a : tensor<4xf32>
  }
}
