// Control flow: a stablehlo.while over 3 iterations and a stablehlo.if on a
// data-dependent flag (becomes VM branches, block arguments and a byte load).
module @ctrl {
  ml_program.global private mutable @s(dense<0.0> : tensor<1x4xf32>) : tensor<1x4xf32>
  func.func @step(%x: tensor<1x4xf32>) -> tensor<1x4xf32> {
    %s = ml_program.global_load @s : tensor<1x4xf32>
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %n = stablehlo.constant dense<3> : tensor<i32>
    %one = stablehlo.constant dense<1> : tensor<i32>
    %half = stablehlo.constant dense<0.5> : tensor<1x4xf32>
    %r:2 = stablehlo.while(%i = %c0, %y = %x) : tensor<i32>, tensor<1x4xf32>
     cond {
      %lt = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    } do {
      %y1 = stablehlo.multiply %y, %half : tensor<1x4xf32>
      %y2 = stablehlo.add %y1, %s : tensor<1x4xf32>
      %i1 = stablehlo.add %i, %one : tensor<i32>
      stablehlo.return %i1, %y2 : tensor<i32>, tensor<1x4xf32>
    }
    %zf = stablehlo.constant dense<0.0> : tensor<f32>
    %sum = stablehlo.reduce(%x init: %zf) applies stablehlo.add across dimensions = [0, 1] : (tensor<1x4xf32>, tensor<f32>) -> tensor<f32>
    %p = stablehlo.compare GT, %sum, %zf : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %out = "stablehlo.if"(%p) ({
      %two = stablehlo.constant dense<2.0> : tensor<1x4xf32>
      %d = stablehlo.multiply %r#1, %two : tensor<1x4xf32>
      stablehlo.return %d : tensor<1x4xf32>
    }, {
      %m = stablehlo.negate %r#1 : tensor<1x4xf32>
      stablehlo.return %m : tensor<1x4xf32>
    }) : (tensor<i1>) -> tensor<1x4xf32>
    %st = stablehlo.tanh %r#1 : tensor<1x4xf32>
    ml_program.global_store @s = %st : tensor<1x4xf32>
    return %out : tensor<1x4xf32>
  }
  func.func @reset() {
    %s = ml_program.global_load @s : tensor<1x4xf32>
    %f = stablehlo.is_finite %s : (tensor<1x4xf32>) -> tensor<1x4xi1>
    %z = stablehlo.constant dense<0.0> : tensor<1x4xf32>
    %a = stablehlo.select %f, %s, %z : tensor<1x4xi1>, tensor<1x4xf32>
    %m = stablehlo.multiply %a, %z : tensor<1x4xf32>
    ml_program.global_store @s = %m : tensor<1x4xf32>
    return
  }
}
