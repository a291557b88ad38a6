// Running sum of the inputs.
module @acc {
  ml_program.global private mutable @s(dense<0.0> : tensor<1x4xf32>) : tensor<1x4xf32>
  func.func @step(%x: tensor<1x4xf32>) -> tensor<1x4xf32> {
    %s = ml_program.global_load @s : tensor<1x4xf32>
    %n = stablehlo.add %s, %x : tensor<1x4xf32>
    ml_program.global_store @s = %n : tensor<1x4xf32>
    return %n : tensor<1x4xf32>
  }
  func.func @reset() {
    %s = ml_program.global_load @s : tensor<1x4xf32>
    %f = stablehlo.is_finite %s : (tensor<1x4xf32>) -> tensor<1x4xi1>
    %z = stablehlo.constant dense<0.0> : tensor<1x4xf32>
    %a = stablehlo.select %f, %s, %z : tensor<1x4xi1>, tensor<1x4xf32>
    %m = stablehlo.multiply %a, %z : tensor<1x4xf32>
    %r = stablehlo.add %m, %z : tensor<1x4xf32>
    ml_program.global_store @s = %r : tensor<1x4xf32>
    return
  }
}
