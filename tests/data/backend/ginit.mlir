// Non-splat initial value: the state starts at [1, 2, 3, 4] and decays toward the input.
module @ginit {
  ml_program.global private mutable @s(dense<[[1.0, 2.0, 3.0, 4.0]]> : tensor<1x4xf32>) : tensor<1x4xf32>
  func.func @step(%x: tensor<1x4xf32>) -> tensor<1x4xf32> {
    %s = ml_program.global_load @s : tensor<1x4xf32>
    %half = stablehlo.constant dense<0.5> : tensor<1x4xf32>
    %a = stablehlo.multiply %s, %half : tensor<1x4xf32>
    %n = stablehlo.add %a, %x : tensor<1x4xf32>
    ml_program.global_store @s = %n : tensor<1x4xf32>
    %o = stablehlo.multiply %n, %s : tensor<1x4xf32>
    return %o : tensor<1x4xf32>
  }
  func.func @reset() {
    %s = ml_program.global_load @s : tensor<1x4xf32>
    %f = stablehlo.is_finite %s : (tensor<1x4xf32>) -> tensor<1x4xi1>
    %z = stablehlo.constant dense<0.0> : tensor<1x4xf32>
    %init = stablehlo.constant dense<[[1.0, 2.0, 3.0, 4.0]]> : tensor<1x4xf32>
    %a = stablehlo.select %f, %s, %z : tensor<1x4xi1>, tensor<1x4xf32>
    %m = stablehlo.multiply %a, %z : tensor<1x4xf32>
    %r = stablehlo.add %m, %init : tensor<1x4xf32>
    ml_program.global_store @s = %r : tensor<1x4xf32>
    return
  }
}
