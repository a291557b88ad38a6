// Three state globals of different shapes: a running sum, a one-step delay and a step counter.
module @multi {
  ml_program.global private mutable @sum(dense<0.0> : tensor<1x3xf32>) : tensor<1x3xf32>
  ml_program.global private mutable @prev(dense<0.0> : tensor<1x3xf32>) : tensor<1x3xf32>
  ml_program.global private mutable @count(dense<0.0> : tensor<1x1xf32>) : tensor<1x1xf32>
  func.func @step(%x: tensor<1x3xf32>) -> tensor<1x5xf32> {
    %s = ml_program.global_load @sum : tensor<1x3xf32>
    %p = ml_program.global_load @prev : tensor<1x3xf32>
    %c = ml_program.global_load @count : tensor<1x1xf32>
    %one = stablehlo.constant dense<1.0> : tensor<1x1xf32>
    %s2 = stablehlo.add %s, %x : tensor<1x3xf32>
    %c2 = stablehlo.add %c, %one : tensor<1x1xf32>
    %d = stablehlo.subtract %x, %p : tensor<1x3xf32>
    %cb = stablehlo.broadcast_in_dim %c2, dims = [0, 1] : (tensor<1x1xf32>) -> tensor<1x3xf32>
    %mean = stablehlo.divide %s2, %cb : tensor<1x3xf32>
    %onef = stablehlo.constant dense<1.0> : tensor<f32>
    %dd = stablehlo.reduce(%d init: %onef) applies stablehlo.multiply across dimensions = [1] : (tensor<1x3xf32>, tensor<f32>) -> tensor<1xf32>
    %dd2 = stablehlo.reshape %dd : (tensor<1xf32>) -> tensor<1x1xf32>
    %o = stablehlo.concatenate %mean, %dd2, %c2, dim = 1 : (tensor<1x3xf32>, tensor<1x1xf32>, tensor<1x1xf32>) -> tensor<1x5xf32>
    ml_program.global_store @sum = %s2 : tensor<1x3xf32>
    ml_program.global_store @prev = %x : tensor<1x3xf32>
    ml_program.global_store @count = %c2 : tensor<1x1xf32>
    return %o : tensor<1x5xf32>
  }
  func.func @reset() {
    %s = ml_program.global_load @sum : tensor<1x3xf32>
    %p = ml_program.global_load @prev : tensor<1x3xf32>
    %c = ml_program.global_load @count : tensor<1x1xf32>
    %z3 = stablehlo.constant dense<0.0> : tensor<1x3xf32>
    %z1 = stablehlo.constant dense<0.0> : tensor<1x1xf32>
    %fs = stablehlo.is_finite %s : (tensor<1x3xf32>) -> tensor<1x3xi1>
    %s1 = stablehlo.select %fs, %s, %z3 : tensor<1x3xi1>, tensor<1x3xf32>
    %s2 = stablehlo.multiply %s1, %z3 : tensor<1x3xf32>
    %fp = stablehlo.is_finite %p : (tensor<1x3xf32>) -> tensor<1x3xi1>
    %p1 = stablehlo.select %fp, %p, %z3 : tensor<1x3xi1>, tensor<1x3xf32>
    %p2 = stablehlo.multiply %p1, %z3 : tensor<1x3xf32>
    %fc = stablehlo.is_finite %c : (tensor<1x1xf32>) -> tensor<1x1xi1>
    %c1 = stablehlo.select %fc, %c, %z1 : tensor<1x1xi1>, tensor<1x1xf32>
    %c2 = stablehlo.multiply %c1, %z1 : tensor<1x1xf32>
    ml_program.global_store @sum = %s2 : tensor<1x3xf32>
    ml_program.global_store @prev = %p2 : tensor<1x3xf32>
    ml_program.global_store @count = %c2 : tensor<1x1xf32>
    return
  }
}
