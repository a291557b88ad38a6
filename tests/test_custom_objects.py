"""--custom-objects FILE.py: a Keras model with its own classes (a custom
RNN cell in keras.layers.RNN, a layer with weights) builds and verifies
against Keras over 200 steps once the file that defines them is given;
without it, or with a file that fails, the error is one line naming the
class or the file's line, and nothing is written."""
import importlib.util
import json
import re
import textwrap

import pytest

from tfaot.cli import main
from tfaot.errors import TfaotError
from tfaot.frontend.load import load_model

CLASSES = textwrap.dedent('''
    import keras
    from keras import ops


    class MinimalCell(keras.layers.Layer):
        """The Keras guide's minimal RNN cell (its call takes no ``training``)."""

        def __init__(self, units, **kwargs):
            super().__init__(**kwargs)
            self.units = units
            self.state_size = units

        def build(self, input_shape):
            self.kernel = self.add_weight(shape=(input_shape[-1], self.units), name="kernel")
            self.recurrent = self.add_weight(shape=(self.units, self.units), name="recurrent",
                                             initializer="orthogonal")

        def call(self, inputs, states):
            h = ops.tanh(ops.matmul(inputs, self.kernel) + ops.matmul(states[0], self.recurrent))
            return h, [h]

        def get_config(self):
            return {**super().get_config(), "units": self.units}


    class Gain(keras.layers.Layer):
        def build(self, input_shape):
            self.gain = self.add_weight(shape=(input_shape[-1],), name="gain",
                                        initializer="random_normal")

        def call(self, x):
            return x * self.gain


    class RunningSum(keras.layers.Layer):
        def call(self, x):
            return ops.cumsum(x, axis=1)


    class Centered(keras.layers.Layer):
        def call(self, x):
            return x - ops.mean(x, axis=1, keepdims=True)
''')

KERAS2_CLASS = textwrap.dedent('''
    import tf_keras


    class Double(tf_keras.layers.Layer):
        def call(self, x):
            return x * 2.0
''')
KERAS3_CLASS = KERAS2_CLASS.replace("tf_keras.layers", "keras.layers").replace(
    "import tf_keras", "import keras")


@pytest.fixture(autouse=True)
def registries():
    """The tests register classes with Keras and tf_keras: each starts from,
    and leaves, the registries as they were."""
    import keras
    import tf_keras

    saved = [(r, dict(r)) for r in (keras.saving.get_custom_objects(),
                                     tf_keras.utils.get_custom_objects())]
    yield
    for registry, before in saved:
        registry.clear()
        registry.update(before)


def _module(path):
    spec = importlib.util.spec_from_file_location(f"user_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build_and_verify(model, classes: str, capsys) -> None:
    """Build ``model`` with ``--custom-objects classes`` and verify it: ok over 200 steps."""
    flag = ["--custom-objects", classes]
    lib = model.parent / "lib"
    assert main(["build", str(model), "-o", str(lib), "-q", *flag]) == 0
    capsys.readouterr()
    assert main(["verify", str(model), str(lib), *flag]) == 0
    out = capsys.readouterr().out
    assert "over 200 steps" in out and out.rstrip().endswith("ok"), out


@pytest.fixture
def user_model(tmp_path):
    """The classes' file and a model saved with them, loaded by the test as a
    user's own script would."""
    import keras

    classes = tmp_path / "my_classes.py"
    classes.write_text(CLASSES)
    mine = _module(classes)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((None, 5)),
                              keras.layers.RNN(mine.MinimalCell(16), return_sequences=True),
                              mine.Gain(), keras.layers.Dense(3)])
    model.save(tmp_path / "mine.keras")
    mixing = keras.Sequential([keras.Input((None, 5)), keras.layers.GRU(8, return_sequences=True),
                               mine.RunningSum(), keras.layers.Dense(3)])
    mixing.save(tmp_path / "mixing.keras")
    centered = keras.Sequential([keras.Input((None, 5)),
                                 keras.layers.GRU(8, return_sequences=True), mine.Centered(),
                                 keras.layers.Dense(3)])
    centered.save(tmp_path / "centered.keras")
    keras.saving.get_custom_objects().clear()  # (what the user's run registered)
    return tmp_path, classes


def test_a_custom_cell_and_layer_build_and_verify(user_model, capsys):
    tmp, classes = user_model
    _build_and_verify(tmp / "mine.keras", str(classes), capsys)


def test_without_the_file_the_class_is_named(user_model, capsys):
    tmp, _ = user_model
    assert main(["build", str(tmp / "mine.keras"), "-o", str(tmp / "lib"), "-q"]) == 1
    err = capsys.readouterr().err
    assert "'MinimalCell'" in err and "--custom-objects FILE.py" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp / "lib").exists(), err


def test_a_custom_layer_that_needs_later_frames_is_refused_by_name(user_model, capsys):
    """Each frame minus the mean over the whole sequence: neither the layer
    probe nor the model's traced graph streams it."""
    tmp, classes = user_model
    assert main(["build", str(tmp / "centered.keras"), "-o", str(tmp / "lib"),
                 "--custom-objects", str(classes)]) == 1
    err = capsys.readouterr().err
    assert "(Centered) mixes time steps" in err, err
    assert not (tmp / "lib").exists()


def test_a_custom_running_sum_streams_from_its_graph(user_model, capsys):
    """A cumulative sum over time mixes time steps, which the layer probe
    refuses, but only earlier ones: the model's traced graph streams it as
    a running sum (pipeline._graph_of_keras), and it verifies."""
    tmp, classes = user_model
    _build_and_verify(tmp / "mixing.keras", str(classes), capsys)


@pytest.mark.parametrize("content,expect", [
    ("import keras\n\nraise ValueError('no GPU here')\n", "broken.py, line 3: ValueError: "
                                                          "no GPU here"),
    ("def f(:\n", "broken.py, line 1: SyntaxError"),
    (None, "broken.py: not a Python file (.py)"),
])
def test_a_file_that_fails_is_one_line_naming_it(user_model, capsys, content, expect):
    tmp, _ = user_model
    broken = tmp / "broken.py"
    if content is not None:
        broken.write_text(content)
    assert main(["build", str(tmp / "mine.keras"), "-o", str(tmp / "lib"), "-q",
                 "--custom-objects", str(broken)]) == 1
    err = capsys.readouterr().err
    assert expect in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp / "lib").exists()


def test_a_keras2_file_takes_its_class_in_both_forms(tmp_path, capsys):
    """tfaot builds a Keras 2 file as a Keras 3 model and verify runs it in
    tf_keras: one file gives each form of the class, of one name."""
    import tf_keras

    k2, k3 = tmp_path / "k2.py", tmp_path / "k3.py"
    k2.write_text(KERAS2_CLASS)
    k3.write_text(KERAS3_CLASS)
    tf_keras.utils.set_random_seed(0)
    model = tf_keras.Sequential([tf_keras.layers.InputLayer((None, 4)),
                                 tf_keras.layers.GRU(8, return_sequences=True),
                                 _module(k2).Double(), tf_keras.layers.Dense(2)])
    model.save(tmp_path / "old.h5")
    _build_and_verify(tmp_path / "old.h5", f"{k2},{k3}", capsys)


def test_a_keras2_file_with_its_class_in_tf_keras_only_builds_from_its_graph(tmp_path, capsys):
    """Keras 3 cannot rebuild it without a Keras 3 form of the class (it was
    refused); tf_keras loads it and its traced graph streams (the way a
    model trained quantization-aware with tfmot, whose classes only tf_keras
    has, is built)."""
    import tf_keras

    k2 = tmp_path / "k2.py"
    k2.write_text(KERAS2_CLASS)
    tf_keras.utils.set_random_seed(0)
    model = tf_keras.Sequential([tf_keras.layers.InputLayer((None, 4)),
                                 tf_keras.layers.GRU(8, return_sequences=True),
                                 _module(k2).Double(), tf_keras.layers.Dense(2)])
    model.save(tmp_path / "old.h5")
    lib = tmp_path / "lib"
    assert main(["build", str(tmp_path / "old.h5"), "-o", str(lib), "--custom-objects",
                 str(k2)]) == 0
    err = capsys.readouterr().err
    assert "built from the graph tf_keras traces: the model's 'Double' is a Keras 2" in err, err
    assert json.loads((lib / "old.json").read_text())["stream"]["mode"] == "prefix"
    assert main(["verify", str(tmp_path / "old.h5"), str(lib), "--custom-objects", str(k2)]) == 0
    out = capsys.readouterr().out
    assert "over 200 steps" in out and out.rstrip().endswith("ok"), out


def test_a_keras2_lambda_reads_the_constants_of_the_users_file(tmp_path, capsys):
    """A Keras 2 file whose Lambda's code reads a constant of the training
    script (DTLN's frame length and step): the file given with
    --custom-objects gives its constants too (it failed "cannot load the
    Keras model: it uses the layer 'Double'", the class the file gave,
    hiding tf_keras' own error); without the constant, tf_keras' error."""
    import tf_keras

    k2 = tmp_path / "k2.py"
    k2.write_text(KERAS2_CLASS + "\n\nSCALE = 0.5\n\n\ndef scaled(x):\n    return x * SCALE\n")
    user = _module(k2)
    tf_keras.utils.set_random_seed(0)
    model = tf_keras.Sequential([tf_keras.layers.InputLayer((None, 4)),
                                 tf_keras.layers.GRU(8, return_sequences=True), user.Double(),
                                 tf_keras.layers.Lambda(user.scaled), tf_keras.layers.Dense(2)])
    model.save(tmp_path / "old.h5")
    flags = ["--custom-objects", str(k2), "--allow-lambda"]
    lib = tmp_path / "lib"
    assert main(["build", str(tmp_path / "old.h5"), "-o", str(lib), "-q", *flags]) == 0
    assert main(["verify", str(tmp_path / "old.h5"), str(lib), *flags]) == 0
    assert capsys.readouterr().out.rstrip().endswith("ok")
    k2.write_text(KERAS2_CLASS)
    import keras

    for registry in (keras.saving.get_custom_objects(), tf_keras.utils.get_custom_objects()):
        registry.pop("SCALE")  # (as a fresh process would start)
    assert main(["build", str(tmp_path / "old.h5"), "-o", str(tmp_path / "lib2"), "-q",
                 *flags]) == 1
    assert "Keras 2 (tf_keras) cannot load it: name 'SCALE' is not defined" in \
        capsys.readouterr().err


def test_a_quantization_aware_model_without_tfmot_says_what_to_install(tmp_path):
    """tfmot's classes (here a stand-in of the name, which tf_keras cannot
    load either) are named with the package that has them."""
    import tf_keras

    class QuantizeLayer(tf_keras.layers.Layer):
        def call(self, x):
            return x

    tf_keras.Sequential([tf_keras.layers.InputLayer((None, 4)), QuantizeLayer(),
                         tf_keras.layers.Dense(2)]).save(tmp_path / "qat.h5")
    with pytest.raises(TfaotError, match=r"qat.h5: the model was trained quantization-aware "
                       r"with tensorflow_model_optimization .*pip install "
                       r"tensorflow-model-optimization"):
        load_model(tmp_path / "qat.h5")


SUBCLASSED = textwrap.dedent('''
    import keras
    from keras import ops


    @keras.saving.register_keras_serializable(package="user")
    class Tagger(keras.Model):
        """A subclassed model: its layer graph is in call."""

        def __init__(self, units=12, classes=3, static=False, broken=False, **kwargs):
            super().__init__(**kwargs)
            self.units, self.classes = units, classes
            self.static, self.broken = static, broken
            self.rnn = keras.layers.GRU(units, return_sequences=True)
            self.head = keras.layers.Dense(classes)

        def call(self, x):
            h = self.rnn(x)
            if self.static:  # needs the sequence's length as a number
                h = h / float(int(x.shape[1]))
            if self.broken:  # (set after the model was built: its code fails)
                raise ValueError("this call cannot run")
            return self.head(ops.relu(h))

        def get_config(self):
            return {**super().get_config(), "units": self.units, "classes": self.classes,
                    "static": self.static, "broken": self.broken}
''')


@pytest.fixture
def subclassed(tmp_path):
    import numpy as np

    classes = tmp_path / "tagger.py"
    classes.write_text(SUBCLASSED)
    user = _module(classes)
    for name, kwargs in (("tagger", {}), ("static", {"static": True}), ("broken", {}),
                         ("unbuilt", {})):
        model = user.Tagger(**kwargs)
        if name != "unbuilt":
            model(np.zeros((1, 7, 5), np.float32))  # built on a 7-frame sequence
        model.broken = name == "broken"
        model.save(tmp_path / f"{name}.keras")
    return tmp_path, classes


def test_a_subclassed_model_streams_and_verifies_against_its_own_call(subclassed, capsys):
    """Traced into a functional model of its layers, with an open time axis
    (it was built on 7 frames); verify runs the class's own call."""
    from tfaot.verify.keras_reference import keras_reference_model

    tmp, classes = subclassed
    _build_and_verify(tmp / "tagger.keras", str(classes), capsys)
    loaded = load_model(tmp / "tagger.keras")
    assert loaded.keras_model.inputs[0].shape == (1, None, 5)  # the time axis open
    reference = keras_reference_model(loaded)
    assert [type(layer).__name__ for layer in reference.layers][-1] == "Tagger"


TOKEN_TAGGER = textwrap.dedent('''
    import keras


    @keras.saving.register_keras_serializable(package="user")
    class TokenTagger(keras.Model):
        """Token ids -> Embedding -> LSTM -> Dense, in call."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.emb = keras.layers.Embedding(40, 6)
            self.rnn = keras.layers.LSTM(8, return_sequences=True)
            self.head = keras.layers.Dense(3)

        def call(self, x):
            return self.head(self.rnn(self.emb(x)))
''')


def test_a_subclassed_token_model_takes_int32_ids_over_open_time(tmp_path, capsys):
    """Built on (1, 7) int32 ids, it was traced on a float (1, 7) input (the
    build config keeps no dtype): the library took floats, unchecked, and
    verify failed with an internal error (the 7 frames fixed). (batch, time)
    into an Embedding is now int32 ids over an open time axis."""
    import json

    import numpy as np

    classes = tmp_path / "tokens.py"
    classes.write_text(TOKEN_TAGGER)
    model = _module(classes).TokenTagger()
    model(np.zeros((1, 7), np.int32))
    model.save(tmp_path / "tokens.keras")
    _build_and_verify(tmp_path / "tokens.keras", str(classes), capsys)
    manifest = json.loads((tmp_path / "lib" / "tokens.json").read_text())
    assert manifest["inputs"][0]["dtype"] == "int32", manifest["inputs"]
    assert manifest["stream"]["mode"] == "prefix", manifest["stream"]


def test_a_subclassed_model_whose_call_needs_its_length_keeps_it(subclassed, capsys):
    """A call that needs the sequence's length as a number cannot be traced
    over an open time axis (it was refused): it takes the 7 frames it was
    built with, as a functional model of that length (a tagger of a fixed
    window: one whole inference per step)."""
    from tfaot.frontend.load import load_model

    tmp, classes = subclassed
    flag = ["--custom-objects", str(classes)]
    assert main(["build", str(tmp / "static.keras"), "-o", str(tmp / "lib"), "-q", *flag]) == 0
    assert main(["verify", str(tmp / "static.keras"), str(tmp / "lib"), *flag]) == 0
    assert capsys.readouterr().out.rstrip().endswith("sequences of 7 frames (tolerance 1e-05): ok")
    assert load_model(tmp / "static.keras").keras_model.inputs[0].shape == (1, 7, 5)


ATTENTION = textwrap.dedent('''
    import keras


    @keras.saving.register_keras_serializable(package="user")
    class Encoder(keras.Model):
        """Self-attention over the window, pooled: a classifier in call."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.proj = keras.layers.Dense(16)
            self.mha = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8)
            self.norm = keras.layers.LayerNormalization()
            self.pool = keras.layers.GlobalAveragePooling1D()
            self.head = keras.layers.Dense(3)

        def call(self, x):
            h = self.proj(x)
            return self.head(self.pool(self.norm(h + self.mha(h, h))))
''')


@pytest.mark.parametrize("flags", [[], ["--whole-window"]])
def test_a_subclassed_attention_model_takes_its_built_length(tmp_path, capsys, flags):
    """Traced over an open time axis, attention was refused ("give the input a
    fixed length"), and --whole-window said the axis was open: neither could
    be followed for a subclassed model. It is traced again at the 20 frames
    it was built with (a sliding window recomputed each step, or one whole
    inference per step), the note says why, and verify traces it so too."""
    import json

    import numpy as np

    classes = tmp_path / "encoder.py"
    classes.write_text(ATTENTION)
    model = _module(classes).Encoder()
    model(np.zeros((1, 20, 8), np.float32))
    model.save(tmp_path / "encoder.keras")
    lib = tmp_path / "lib"
    assert main(["build", str(tmp_path / "encoder.keras"), "-o", str(lib),
                 "--custom-objects", str(classes), *flags]) == 0
    err = capsys.readouterr().err
    why = "--whole-window was asked" if flags else r"layer 'multi_head_attention\w*' \(Multi"
    assert re.search(f"the subclassed model takes the 20 frames it was built with, because {why}",
                     err), err
    manifest = json.loads((lib / "encoder.json").read_text())
    assert manifest["keras_fixed_time"] is True
    assert manifest["inputs"][0]["shape"] == ([1, 20, 8] if flags else [1, 8])
    assert main(["verify", str(tmp_path / "encoder.keras"), str(lib),
                 "--custom-objects", str(classes)]) == 0
    assert capsys.readouterr().out.rstrip().endswith("ok")


@pytest.mark.parametrize("name,expect", [
    ("broken", "the subclassed model 'Tagger' cannot be traced into layers"),
    ("unbuilt", "the subclassed model 'Tagger' was saved before it was built"),
])
def test_a_subclassed_model_that_cannot_be_traced_is_one_line(subclassed, capsys, name,
                                                              expect):
    tmp, classes = subclassed
    assert main(["build", str(tmp / f"{name}.keras"), "-o", str(tmp / "lib"), "-q",
                 "--custom-objects", str(classes)]) == 1
    err = capsys.readouterr().err
    assert expect in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp / "lib").exists()


BLOCKS = textwrap.dedent('''
    import keras


    class ResidualGRU(keras.layers.Layer):
        """A block: a GRU and a projection, with a residual."""

        def __init__(self, units, **kwargs):
            super().__init__(**kwargs)
            self.units = units
            self.gru = keras.layers.GRU(units, return_sequences=True)
            self.proj = keras.layers.Dense(units)

        def build(self, input_shape):
            self.gru.build(input_shape)
            self.proj.build(tuple(input_shape[:-1]) + (self.units,))

        def call(self, x):
            return x + self.proj(self.gru(x))

        def get_config(self):
            return {**super().get_config(), "units": self.units}


    class Stack(keras.layers.Layer):
        """A block of blocks."""

        def __init__(self, units, **kwargs):
            super().__init__(**kwargs)
            self.units = units
            self.first, self.second = ResidualGRU(units), ResidualGRU(units)

        def build(self, input_shape):
            self.first.build(input_shape)
            self.second.build(input_shape)

        def call(self, x):
            return self.second(self.first(x))

        def get_config(self):
            return {**super().get_config(), "units": self.units}


    class MyLSTM(keras.layers.LSTM):
        """A subclass of a Keras layer: streamed by tfaot's LSTM rule, not inlined."""
''')


@pytest.mark.parametrize("form", ["functional", pytest.param("sequential", marks=pytest.mark.slow)])
def test_custom_blocks_of_layers_stream_inside_a_model(tmp_path, capsys, form):
    """Custom layers holding a GRU (and a block of two of them) are inlined
    into their layers' calls, so the GRUs stream; verify runs the model as
    written, blocks whole."""
    import keras

    from tfaot.frontend.load import load_model

    classes = tmp_path / "blocks.py"
    classes.write_text(BLOCKS)
    user = _module(classes)
    keras.utils.set_random_seed(0)
    layers = [user.ResidualGRU(8), user.Stack(8), user.MyLSTM(6, return_sequences=True),
              keras.layers.Dense(3)]
    if form == "functional":
        x = keras.Input((None, 8))
        y = x
        for layer in layers:
            y = layer(y)
        model = keras.Model(x, y)
    else:
        model = keras.Sequential([keras.Input((None, 8)), *layers])
    model.save(tmp_path / "blocks.keras")
    _build_and_verify(tmp_path / "blocks.keras", str(classes), capsys)
    inlined = [type(layer).__name__ for layer in load_model(tmp_path / "blocks.keras")
               .keras_model.layers]
    assert inlined.count("GRU") == 3 and "MyLSTM" in inlined and "Stack" not in inlined, inlined


def test_inlined_blocks_take_names_the_model_has(tmp_path, capsys):
    """A block's layers and ops are named as they load and run ("dense",
    "add"), after the model's own layers kept their saved names: inlining
    such a block beside a plain Dense or Add layer was an internal error
    (Keras: 'The name "dense" is used 2 times in the model'). The block's
    clashing names now take its own as a prefix."""
    import keras

    classes = tmp_path / "blocks.py"
    classes.write_text(BLOCKS)
    user = _module(classes)
    keras.backend.clear_session()  # (names count from zero: "dense", "add")
    keras.utils.set_random_seed(0)
    x = keras.Input((None, 8))
    h = keras.layers.Add()([x, keras.layers.Dense(8)(x)])
    model = keras.Model(x, keras.layers.Dense(3)(user.ResidualGRU(8)(h)))
    assert {"dense", "add"} <= {layer.name for layer in model.layers}
    model.save(tmp_path / "clash.keras")
    keras.backend.clear_session()  # a new process: names count from zero again
    _build_and_verify(tmp_path / "clash.keras", str(classes), capsys)


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
def test_a_custom_weight_constraint_needs_no_file(tmp_path, capsys, suffix):
    """A weight constraint acts only in training: a Keras 3 archive (or
    legacy .h5) whose Dense clips its weights with an unregistered class of
    the script that trained it loads without it ("Cannot deserialize object
    of type `WeightClip`" before), and builds and verifies."""
    import keras

    class WeightClip(keras.constraints.Constraint):
        def __init__(self, c=2.0):
            self.c = c

        def __call__(self, w):
            return keras.ops.clip(w, -self.c, self.c)

        def get_config(self):
            return {"c": self.c}

    x = keras.Input((None, 8))
    path = tmp_path / f"clipped{suffix}"
    keras.Model(x, keras.layers.Dense(4, kernel_constraint=WeightClip(0.5),
                                      kernel_regularizer="l2")(x)).save(path)
    model = load_model(path).keras_model
    assert model.layers[-1].kernel_constraint is None
    assert main(["build", str(path), "-o", str(tmp_path / "lib"), "-q"]) == 0
    assert main(["verify", str(path), str(tmp_path / "lib"), "--steps", "100"]) == 0
    assert capsys.readouterr().out.strip().endswith(": ok")


TEXT_GENERATOR = textwrap.dedent('''
    import keras

    START = {start!r}


    @keras.saving.register_keras_serializable(package="user")
    class Generator(keras.Model):
        """tensorflow.org's text generation model, written for Keras 3: its
        GRU starts from a zero state sized by the input's batch."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.emb = keras.layers.Embedding(30, 8)
            self.gru = keras.layers.GRU(16, return_sequences=True, return_state=True)
            self.head = keras.layers.Dense(30)

        def call(self, x):
            h = self.emb(x)
            if START == "zeros":
                state = self.gru.get_initial_state(keras.ops.shape(h)[0])
            else:  # a state of the model's own, the same for every sequence
                state = [keras.ops.full((keras.ops.shape(h)[0], 16), 0.5)]
            h, _ = self.gru(h, initial_state=state)
            return self.head(h)
''')


@pytest.mark.parametrize("start", ["zeros", "halves"])
def test_a_subclassed_model_sizing_a_state_by_its_batch_is_traced_at_batch_one(tmp_path,
                                                                              capsys, start):
    """Built (fit) in batches of 4, it was traced at batch 4: the library
    took one sequence and returned 4, and verify refused it. Traced at the
    library's batch of 1, it builds and verifies. Its initial state is then
    a value, not a tensor of the sequence: it streams one token a step (it
    took the whole 10-token sequence a step), from zeros or from the
    model's own state."""
    import numpy as np

    classes = tmp_path / "generator.py"
    classes.write_text(TEXT_GENERATOR.format(start=start))
    model = _module(classes).Generator()
    model(np.zeros((4, 10), np.int32))
    model.save(tmp_path / "generator.keras")
    _build_and_verify(tmp_path / "generator.keras", str(classes), capsys)
    from tfaot import harness

    lib = harness.load(tmp_path / "lib")
    assert lib.output_shape[0] == 1
    assert lib.manifest["stream"]["mode"] == "prefix"
    assert lib.manifest["inputs"][0]["shape"] == [1]


TF_CALL = textwrap.dedent('''
    import keras
    import tensorflow as tf


    @keras.saving.register_keras_serializable(package="user")
    class Padded(keras.Model):
        """A call written with TensorFlow functions (tf.shape), as
        tensorflow.org's tutorials write them."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.gru = keras.layers.GRU(4, return_sequences=True)

        def call(self, x):
            state = tf.zeros([tf.shape(x)[0], 4])
            return self.gru(x, initial_state=state)
''')


def test_a_call_made_of_tensorflow_functions_says_what_to_use(tmp_path, capsys):
    """tf.shape on the symbolic input: Keras' message ends where its example
    begins ("You are likely doing something like: ```"), and so did the
    build's; now it says what to write instead, or to export the model."""
    import numpy as np

    classes = tmp_path / "padded.py"
    classes.write_text(TF_CALL)
    model = _module(classes).Padded()
    model(np.zeros((1, 5, 3), np.float32))
    model.save(tmp_path / "padded.keras")
    assert main(["build", str(tmp_path / "padded.keras"), "-o", str(tmp_path / "lib"), "-q",
                 "--custom-objects", str(classes)]) == 1
    err = capsys.readouterr().err
    assert "calls a TensorFlow function (tf.*) on the symbolic input, where Keras needs " \
           "keras.ops" in err and "model.export(dir)" in err and "```" not in err, err
