"""Image models, one inference per step: tfaot f32 and int8 against LiteRT f32 and int8.

Models (Keras applications, random weights whose batch norms are calibrated
on random images, so that activations have the spread trained ones have;
no pretrained weights are downloaded): MobileNetV3Small and MobileNetV2
(alpha 0.35), 224 x 224 x 3 by default (``--size``), logits out; a small
DeepLabV3+-style segmenter (dilated convolutions, bilinear upsampling) and
a small U-Net (transposed convolutions), logits per pixel; on request
(``--models``), ResNet50, EfficientNetB0, EfficientNetV2B0, a small 3-D
U-Net (a volume of side ``--size`` / 8, one channel: Conv3D and
Conv3DTranspose, as volumetric segmenters are built) and ``pool_blocks``
(the max and average pools of ResNet, Inception and DenseNet on a map of
side ``--size`` / 4).

Each model is saved as .keras and built the way a user builds it,
``tfaot build MODEL.keras --whole-window`` with ``--weights-dtype`` f32 and
int8 (int8 convolutions where this CPU has int8 dot products: AVX-512 VNNI
or AVX-VNNI, aarch64's dot product; else they stay f32, the manifest's
weights_scheme says which), and converted to LiteRT f32 and dynamic-range
int8 (the converter's ``Optimize.DEFAULT``: what a LiteRT user deploying int8
runs). All four run one image per call, timed in turn in every repetition
(CPU µs per inference: thread time, medians; wall time too), and their max
abs error against TensorFlow over ``--images`` random images is reported.

    .venv/bin/python bench/bench_images.py [--size 224] [--repeats 7]
        [--images 10] [--models mobilenet_v3_small ... efficientnet_v2_b0 efficientnet_b0]

Needs the bench extra (ai-edge-litert); writes bench/results/images-*.json.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_streaming import (LiteRTTimer, Timer, litert_whole, time_interleaved,  # noqa: E402
                             write_results)


def mobilenet_v3_small(size: int):
    import keras

    return keras.applications.MobileNetV3Small(
        input_shape=(size, size, 3), weights=None, include_preprocessing=False,
        classifier_activation=None)


def mobilenet_v2_035(size: int):
    import keras

    return keras.applications.MobileNetV2(input_shape=(size, size, 3), alpha=0.35,
                                          weights=None, classifier_activation=None)


def resnet50(size: int):
    """ResNet50 (95 MB of f32 weights: read from memory every inference)."""
    import keras

    return keras.applications.ResNet50(input_shape=(size, size, 3), weights=None,
                                       classifier_activation=None)


def efficientnet_v2_b0(size: int):
    import keras

    return keras.applications.EfficientNetV2B0(
        input_shape=(size, size, 3), weights=None, include_preprocessing=False,
        classifier_activation=None)


def efficientnet_b0(size: int):
    """EfficientNetB0: a swish after every convolution but the projections."""
    import keras

    return keras.applications.EfficientNetB0(input_shape=(size, size, 3), weights=None,
                                             classifier_activation=None)


def deeplab_small(size: int):
    """A DeepLabV3+-style segmenter (size divisible by 4): two conv stages
    and max pools, atrous spatial pyramid pooling (dilations 6, 12 and 18,
    image pooling) at size / 4, bilinear upsampling by 2 to a low-level
    skip and by 2 to the input's size, 5 classes per pixel."""
    import keras
    from keras import layers

    def conv_bn_relu(h, filters, kernel=3, dilation=1):
        h = layers.Conv2D(filters, kernel, dilation_rate=dilation, padding="same",
                          use_bias=False)(h)
        return layers.ReLU()(layers.BatchNormalization()(h))

    x = keras.Input((size, size, 3))
    h = layers.MaxPool2D()(conv_bn_relu(x, 16))
    low = conv_bn_relu(h, 8, 1)
    h = conv_bn_relu(layers.MaxPool2D()(conv_bn_relu(h, 32)), 32)
    quarter = size // 4
    pooled = conv_bn_relu(layers.AveragePooling2D(quarter)(h), 16, 1)
    branches = [layers.UpSampling2D(quarter, interpolation="bilinear")(pooled),
                conv_bn_relu(h, 16, 1)] + [conv_bn_relu(h, 16, 3, d) for d in (6, 12, 18)]
    h = conv_bn_relu(layers.Concatenate()(branches), 16, 1)
    h = layers.UpSampling2D(2, interpolation="bilinear")(h)
    h = conv_bn_relu(conv_bn_relu(layers.Concatenate()([h, low]), 16), 16)
    h = layers.UpSampling2D(2, interpolation="bilinear")(h)
    return keras.Model(x, layers.Conv2D(5, 1)(h))


def unet_small(size: int):
    """A U-Net (size divisible by 8): three stages of two 3 x 3 convolutions
    and a max pool, up-convolutions (Conv2DTranspose 2 x 2, stride 2) with
    the skips concatenated, 2 classes per pixel."""
    import keras
    from keras import layers

    def twice(h, filters):
        for _ in range(2):
            h = layers.Conv2D(filters, 3, padding="same", activation="relu")(h)
        return h

    x = keras.Input((size, size, 3))
    skips, h = [], x
    for filters in (8, 16, 32):
        h = twice(h, filters)
        skips.append(h)
        h = layers.MaxPool2D()(h)
    h = twice(h, 64)
    for filters, skip in zip((32, 16, 8), skips[::-1]):
        h = layers.Conv2DTranspose(filters, 2, strides=2)(h)
        h = twice(layers.Concatenate()([h, skip]), filters)
    return keras.Model(x, layers.Conv2D(2, 1)(h))


def unet3d_small(size: int):
    """A 3-D U-Net on a volume of side size / 8 (divisible by 4), one
    channel: two stages of two 3 x 3 x 3 convolutions and a 2 x 2 x 2
    convolution of stride 2 (as V-Net downsamples: LiteRT has no 3-D max
    pool), up-convolutions (Conv3DTranspose 2 x 2 x 2, stride 2) with the skips
    concatenated, 2 classes per voxel."""
    import keras
    from keras import layers

    def twice(h, filters):
        for _ in range(2):
            h = layers.Conv3D(filters, 3, padding="same", activation="relu")(h)
        return h

    side = size // 8
    x = keras.Input((side, side, side, 1))
    skips, h = [], x
    for filters in (8, 16):
        h = twice(h, filters)
        skips.append(h)
        h = layers.Conv3D(filters, 2, strides=2, activation="relu")(h)
    h = twice(h, 32)
    for filters, skip in zip((16, 8), skips[::-1]):
        h = layers.Conv3DTranspose(filters, 2, strides=2)(h)
        h = twice(layers.Concatenate()([h, skip]), filters)
    return keras.Model(x, layers.Conv3D(2, 1)(h))


def pool_blocks(size: int):
    """The pools of image classifiers on a map of side size / 4, 64
    channels: ResNet's stem pool (3 x 3, stride 2, 'same'), an Inception
    block (a 3 x 3 'same' average pool and max pool of stride 1 beside a
    pointwise convolution, concatenated), a DenseNet transition (pointwise
    convolution, 2 x 2 average pool), logits."""
    import keras
    from keras import layers

    side = size // 4
    x = keras.Input((side, side, 64))
    h = layers.MaxPooling2D(3, strides=2, padding="same")(x)
    h = layers.Concatenate()([
        layers.Conv2D(64, 1)(layers.AveragePooling2D(3, strides=1, padding="same")(h)),
        layers.MaxPooling2D(3, strides=1, padding="same")(h), layers.Conv2D(64, 1)(h)])
    h = layers.AveragePooling2D(2)(layers.Conv2D(96, 1, activation="relu")(h))
    return keras.Model(x, layers.Dense(10)(layers.GlobalAveragePooling2D()(h)))


MODELS = {"mobilenet_v3_small": mobilenet_v3_small, "mobilenet_v2_035": mobilenet_v2_035,
          "deeplab_small": deeplab_small, "unet_small": unet_small, "resnet50": resnet50,
          "efficientnet_v2_b0": efficientnet_v2_b0, "efficientnet_b0": efficientnet_b0,
          "unet3d_small": unet3d_small, "pool_blocks": pool_blocks}
#: what a run measures unless --models says otherwise (ResNet50 and
#: EfficientNetV2B0 take minutes to convert and build: on request)
DEFAULT_MODELS = ["mobilenet_v3_small", "mobilenet_v2_035", "deeplab_small", "unet_small"]


def calibrated(factory, size: int):
    """The model with its batch norms' statistics those of random images
    (momentum 0 for one training call), so that layers neither blow up nor
    vanish as they would with the initial statistics."""
    import keras

    keras.utils.set_random_seed(1)
    model = factory(size)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.momentum = 0.0
    images = np.random.default_rng(2).standard_normal(
        (16, *model.inputs[0].shape[1:])).astype(np.float32)
    model(images, training=True)
    return model


def build(path: Path, out: Path, weights_dtype: str) -> tuple[Path, str, int]:
    """``tfaot build`` of the saved model, whole window; the manifest's
    int8 scheme (empty for f32) and context size."""
    from tfaot.pipeline import BuildOptions, Progress, build_model

    lib = build_model(str(path), BuildOptions(out_dir=out, fixed_window="whole",
                                              weights_dtype=weights_dtype),
                      Progress(False)).path
    manifest = json.loads(next(lib.glob("*.json")).read_text())
    return lib, manifest.get("weights_scheme", ""), manifest["ctx_size"]


def max_errors(model, timers, images: int) -> list[float]:
    """Max abs error against TensorFlow of each runner over ``images`` images."""
    xs = np.random.default_rng(3).standard_normal(
        (images, 1, *model.inputs[0].shape[1:])).astype(np.float32)
    want = np.asarray(model.predict(xs[:, 0], verbose=0))
    errors = []
    for timer in timers:
        if isinstance(timer, LiteRTTimer):
            got = np.concatenate([timer.output(x).reshape(1, -1) for x in xs])
        else:
            timer.lib.reset()
            got = timer.lib.step_n(xs).reshape(images, -1)
        errors.append(float(np.abs(got - want.reshape(images, -1)).max()))
    return errors


RUNNERS = ["tfaot f32", "tfaot int8", "LiteRT f32", "LiteRT int8"]


def measure(name: str, tmp: Path, args) -> dict:
    model = calibrated(MODELS[name], args.size)
    path = tmp / f"{name}.keras"
    model.save(path)
    f32, _, f32_ctx = build(path, tmp / f"{name}_f32", "f32")
    int8, scheme, int8_ctx = build(path, tmp / f"{name}_int8", "int8")
    calls = args.calls
    timers = [Timer(f32, calls), Timer(int8, calls), LiteRTTimer(litert_whole(model), calls),
              LiteRTTimer(litert_whole(model, int8=True), calls)]
    times = time_interleaved(timers, args.repeats)
    errors = max_errors(model, timers, args.images)
    return {"model": name, "size": args.size, "params": int(model.count_params()),
            "int8_convolutions": "qconv" in scheme, "weights_scheme": scheme,
            "ctx bytes tfaot f32": f32_ctx, "ctx bytes tfaot int8": int8_ctx,
            **{f"us {r}": t[0] for r, t in zip(RUNNERS, times)},
            **{f"wall us {r}": t[1] for r, t in zip(RUNNERS, times)},
            **{f"err {r}": e for r, e in zip(RUNNERS, errors)}}


def print_table(rows: list[dict]) -> None:
    header = (f"{'model':<20} {'int8 convs':>10} "
              + " ".join(f"{'µs ' + r:>16}" for r in RUNNERS)
              + f" {'f32/LiteRT':>10} {'int8/LiteRT int8':>16} {'wall int8/int8':>14} "
              + " ".join(f"{'err ' + r:>16}" for r in RUNNERS)
              + f" {'ctx KB f32':>10} {'ctx KB int8':>11}")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['model']:<20} {'yes' if r['int8_convolutions'] else 'no':>10} "
              + " ".join(f"{r['us ' + k]:>16.0f}" for k in RUNNERS)
              + f" {r['us tfaot f32'] / r['us LiteRT f32']:>10.2f}"
              f" {r['us tfaot int8'] / r['us LiteRT int8']:>16.2f}"
              f" {r['wall us tfaot int8'] / r['wall us LiteRT int8']:>14.2f} "
              + " ".join(f"{r['err ' + k]:>16.2e}" for k in RUNNERS)
              + f" {r['ctx bytes tfaot f32'] / 1024:>10.0f} {r['ctx bytes tfaot int8'] / 1024:>11.0f}")
    print("CPU µs per inference (thread time), medians of the interleaved repetitions; "
          "LiteRT: ai-edge-litert, XNNPACK, 1 thread; err: max abs error against "
          "TensorFlow; ctx: tfaot's context (state, input, temporaries)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=224, help="image height and width")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=20, help="inferences per timed pass")
    parser.add_argument("--images", type=int, default=10,
                        help="random images the errors are measured on")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=DEFAULT_MODELS)
    args = parser.parse_args(argv)

    from tfaot.frontend.tfenv import quiet_tensorflow

    quiet_tensorflow()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            rows.append(measure(name, Path(tmp), args))
            print(f"measured {name}", file=sys.stderr, flush=True)
    print_table(rows)
    write_results("images", rows, repeats=args.repeats, calls=args.calls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
