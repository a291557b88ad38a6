// Stores a plain constant into a state global in reset(): hits the inline-dynamic
// dropped-constant bug (iree-notes 1.4); the backend must refuse it at build time.
module @null_constant {
  ml_program.global private mutable @s(dense<0.0> : tensor<1x4xf32>) : tensor<1x4xf32>
  func.func @step(%x: tensor<1x4xf32>) -> tensor<1x4xf32> {
    %s = ml_program.global_load @s : tensor<1x4xf32>
    %n = stablehlo.add %s, %x : tensor<1x4xf32>
    ml_program.global_store @s = %n : tensor<1x4xf32>
    return %n : tensor<1x4xf32>
  }
  func.func @reset() {
    %z = stablehlo.constant dense<[[1.0, 2.0, 3.0, 4.0]]> : tensor<1x4xf32>
    ml_program.global_store @s = %z : tensor<1x4xf32>
    return
  }
}
