"""--target=vulkan: SPIR-V kernels through the Vulkan backend of the runtime
shim, run on Mesa's lavapipe (the CPU Vulkan driver .ci/run installs).

The library runs in a child process (tfaot.verify.process): lavapipe's LLVM
and TensorFlow's cannot share a process.
"""
import os
import struct
import subprocess
from pathlib import Path

import pytest

import keras_conv_models
import keras_models
from sanitizers import run_checked
from toolchains import require_vulkan
from util import run

from tfaot.errors import TfaotError
from tfaot.pipeline import BuildOptions, Progress, build_model
from tfaot.verify import verify

DRIVER = Path(__file__).parent / "data" / "gpu" / "vk_driver.c"


def _lstm40():
    import keras

    keras.utils.set_random_seed(3)
    return keras.Sequential([keras.Input((None, 40)), keras.layers.LSTM(64, return_sequences=True),
                             keras.layers.Dense(12)])


def _broadcast_residual():
    """BC-ResNet's broadcast residual: each frame plus its mean over
    frequency. IREE's SPIR-V for the mean fused with the add read the
    column sums with no barrier: half the channels had the previous step's
    (lower/gpu_workarounds.py)."""
    import keras

    x = keras.Input((None, 2, 16))
    mean = keras.layers.AveragePooling2D((1, 2))(x)
    return keras.Model(x, keras.layers.Add()([x, mean]))


def _masked_gru():
    """Masking before a recurrent layer: its 'any feature not the mask
    value' is an or-reduction of booleans, which came out false on Vulkan
    for every frame (the GRU never left its initial state)."""
    import keras

    keras.utils.set_random_seed(6)
    x = keras.Input((None, 4))
    h = keras.layers.GRU(8, return_sequences=True)(keras.layers.Masking(0.0)(x))
    return keras.Model(x, h)


def _same_pools():
    """An Inception-style block: a 1x1 convolution, an AveragePooling2D
    and a MaxPooling2D padded 'same' with stride 1, and the input,
    concatenated. A fence on the max pooling before the concatenation failed
    in iree-compile's Vulkan host program ('util.buffer.subspan')."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(7)
    x = keras.Input((16, 16, 8))
    return keras.Model(x, L.concatenate([
        L.Conv2D(4, 1)(x), L.AveragePooling2D(2, strides=1, padding="same")(x),
        L.MaxPooling2D(3, strides=1, padding="same")(x), x]))


def _average_same():
    """AveragePooling2D padded 'same' with stride 1: a fence on the pooling of
    its constant counts failed in iree-compile's Vulkan host program
    ('util.buffer.subspan'); only a reduction broadcast back is fenced."""
    import keras

    x = keras.Input((16, 16, 8))
    return keras.Model(x, keras.layers.AveragePooling2D(2, strides=1, padding="same")(x))


def _pooled_conv_residual():
    """The same residual through a 1x1 convolution and a causal depthwise
    one in time, as BC-ResNet's: a fence on the reduction alone missed it
    (max error 9.2); the broadcast's operand is fenced now."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(8)
    x = keras.Input((None, 10, 16))
    m = L.AveragePooling2D((1, 10))(x)
    m = L.DepthwiseConv2D((3, 1))(L.ZeroPadding2D(((2, 0), (0, 0)))(L.Conv2D(16, 1)(m)))
    return keras.Model(x, L.Add()([x, m]))


def _squeeze_excite():
    """EfficientNet's squeeze-and-excitation gate: a mean over the image
    through two 1x1 convolutions and a sigmoid, broadcast back. Fenced as a
    row reduction (a convolution's), every EfficientNet failed in
    iree-compile's Vulkan host program ('util.buffer.subspan')."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(9)
    x = keras.Input((12, 12, 3))
    h = L.Conv2D(16, 3, padding="same", activation="swish")(x)
    s = L.Conv2D(4, 1, activation="swish")(L.GlobalAveragePooling2D(keepdims=True)(h))
    h = L.Multiply()([h, L.Conv2D(16, 1, activation="sigmoid")(s)])
    return keras.Model(x, L.Dense(5)(L.GlobalAveragePooling2D()(L.Conv2D(8, 1)(h))))


MODELS = {
    "lstm40": _lstm40,
    "squeeze_excite": _squeeze_excite,
    "pooled_conv_residual": _pooled_conv_residual,
    "same_pools": _same_pools,
    "average_same": _average_same,
    "broadcast_residual": _broadcast_residual,
    "masked_gru": _masked_gru,
    "stacked_lstm_last": lambda: keras_models.build("lstm_impl2_stacked_last"),
    "gru_seq": lambda: keras_models.build("gru_reset_after_seq_td"),
    "dense_stateless": lambda: keras_models.build("dense"),
    "ds_cnn_window": keras_conv_models.ds_cnn,
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """name -> (model file, output folder), built once for the module."""
    require_vulkan()
    tmp = tmp_path_factory.mktemp("vulkan")
    out = {}
    for name, factory in MODELS.items():
        path = tmp / f"{name}.keras"
        factory().save(path)
        lib = tmp / f"{name}_vk"
        build_model(str(path), BuildOptions(out_dir=lib, name="vkm" if name == "lstm40" else None,
                                            target="vulkan"), Progress(enabled=False))
        out[name] = (path, lib)
    return out


@pytest.mark.parametrize("name", list(MODELS))
def test_vulkan_build_matches_tensorflow(built, name):
    path, lib = built[name]
    results = verify(str(path), lib, steps=120, seed=0, tol=1e-5)
    assert results and all(r.ok for r in results), results
    assert all(r.steps >= 100 for r in results), results


def test_manifest_and_footprint_describe_the_gpu_build(built):
    import json

    _, lib = built["lstm40"]
    manifest = json.loads((lib / "vkm.json").read_text())
    assert manifest["target"] == "vulkan"
    assert manifest["kernel_library"] is None and "dl" in manifest["link_libs"]
    fp = manifest["footprint"]
    # Device memory holds the arena: at least the LSTM and Dense weights (f32).
    weights = 4 * (40 * 256 + 64 * 256 + 256 + 64 * 12 + 12)
    assert fp["device_bytes"] >= weights and fp["executable_bytes"] > 0
    header = (lib / "vkm.h").read_text()
    assert "VKM_ERR_DEVICE" in header and "GPU" in header
    assert not (lib / "src" / "vkm_kernels.o").exists()
    assert (lib / "src" / "tfrt_vulkan.c").exists()


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_threads_reset_and_state_under_sanitizers(built, tmp_path, cc):
    """Two contexts in two threads give the one-context results bit for bit;
    reset and get/set_state mid-stream too; -Wall -Wextra -Werror, ASan+UBSan.
    Memory the Vulkan driver keeps at exit is the driver's (it varies with
    the CPU and Mesa's version); a leak of tfaot's own code fails."""
    _, lib = built["lstm40"]
    exe = tmp_path / f"drv_{cc}"
    run([cc, "-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
         "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
         "-I", lib / "src", DRIVER, lib / "src" / "vkm.c", "-o", exe, "-ldl", "-lm",
         "-lpthread"])
    proc = run_checked([exe, "check"])
    assert "ALL OK" in proc.stdout, proc.stdout


def test_without_a_driver_init_reports_the_device_status(built, tmp_path):
    _, lib = built["lstm40"]
    exe = tmp_path / "drv"
    run(["gcc", "-std=c11", "-O1", "-I", lib / "src", DRIVER, lib / "src" / "vkm.c", "-o", exe,
         "-ldl", "-lm", "-lpthread"])
    env = dict(os.environ, VK_ICD_FILENAMES="/nonexistent/icd.json",
               VK_DRIVER_FILES="/nonexistent/icd.json")
    proc = subprocess.run([exe, "nodevice"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "init without a driver: 14" in proc.stdout


def test_init_on_a_live_context_does_not_leak_the_device(built, tmp_path):
    """Issue 20: each extra init used to leak 3.3 MB (the whole device)."""
    _, lib = built["lstm40"]
    exe = tmp_path / "drv"
    run(["gcc", "-std=c11", "-O1", "-I", lib / "src", DRIVER, lib / "src" / "vkm.c", "-o", exe,
         "-ldl", "-lm", "-lpthread"])
    proc = subprocess.run([exe, "reinit"], capture_output=True, text=True)
    assert proc.returncode == 0 and "ALL OK" in proc.stdout, proc.stdout + proc.stderr


def test_static_library_links_without_vulkan(built, tmp_path):
    """The library opens the loader itself: linking needs -ldl -lm, not -lvulkan."""
    _, lib = built["lstm40"]
    exe = tmp_path / "linked"
    run(["gcc", "-std=c11", "-I", lib, DRIVER, lib / "libvkm.a", "-o", exe, "-ldl", "-lm",
         "-lpthread"])
    needed = run(["readelf", "-d", exe]).stdout
    assert "libvulkan" not in needed


# ---- build-time pieces, no driver needed ------------------------------------------


def test_weights_become_mutable_globals_with_setters():
    from tfaot.lower.weight_globals import INLINE_MAX_BYTES, weights_to_globals

    big = ", ".join(f"{i}.0" for i in range(128))  # 512 bytes: hoisted
    small = ", ".join(f"{i}.0" for i in range(8))  # 32 bytes: stays inlined
    text = f"""
module {{
  func.func @step(%x: tensor<128xf32>) -> tensor<128xf32> {{
    %w = stablehlo.constant dense<[{big}]> : tensor<128xf32>
    %s = stablehlo.constant dense<[{small}]> : tensor<8xf32>
    %y = stablehlo.add %x, %w : tensor<128xf32>
    return %y : tensor<128xf32>
  }}
}}"""
    assert 32 <= INLINE_MAX_BYTES < 512
    out, count = weights_to_globals(text)
    assert count == 1
    assert "ml_program.global private mutable @tfaot_weight0" in out
    assert "ml_program.global_load @tfaot_weight0" in out
    assert "func.func @tfaot_set_weight0" in out and "ml_program.global_store" in out
    assert "dense<[0.000000e+00, 1.000000e+00, 2.000000e+00, 3.000000e+00" in out


def test_vke1_reader_rejects_what_the_shim_cannot_run(built):
    """The reader parses a real container and names the executable when the
    header is wrong."""
    from tfaot.package.gpu_kernels import vulkan_pipelines

    _, lib = built["lstm40"]
    text = (lib / "src" / "vkm.c").read_text()
    start = text.index("vulkan_spirv_fb")
    body = text[text.index("{", start) + 1:text.index("};", start)]
    data = bytes(int(b, 16) for b in body.replace("\n", " ").split(",") if b.strip())
    pipelines = vulkan_pipelines(data, "@vulkan_spirv_fb")
    assert len(pipelines) == 1 and pipelines[0].binding_count >= 2
    p = pipelines[0]
    words = struct.unpack_from("<I", data, p.spirv_offset)[0]
    assert words == 0x07230203  # SPIR-V magic where the table says
    assert data[p.entry_offset:].split(b"\0")[0].decode() == p.entry
    with pytest.raises(TfaotError, match="@bad.*not a version-0 VKE1"):
        vulkan_pipelines(b"XXXX" + data[4:], "@bad")
