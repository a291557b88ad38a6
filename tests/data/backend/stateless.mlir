// No state: an image model's form (one inference per step), whose @reset
// has nothing to do.
module @stateless {
  func.func @step(%x: tensor<1x4xf32>) -> tensor<1x4xf32> {
    %two = stablehlo.constant dense<2.0> : tensor<1x4xf32>
    %one = stablehlo.constant dense<1.0> : tensor<1x4xf32>
    %d = stablehlo.multiply %x, %two : tensor<1x4xf32>
    %y = stablehlo.add %d, %one : tensor<1x4xf32>
    return %y : tensor<1x4xf32>
  }
  func.func @reset() {
    return
  }
}
