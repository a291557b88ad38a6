"""Oversized models are refused before compiling, in one line with the sizes
and the flag that overrides; nothing of the input's size is ever allocated."""
import resource

import pytest

from tfaot.cli import main


@pytest.fixture(scope="module")
def huge_input(tmp_path_factory):
    """A fixed input of 1x100000x12000 floats (4.5 GiB) into a small Dense."""
    import keras

    model = keras.Sequential([keras.Input((100000, 12000), batch_size=1),
                              keras.layers.Dense(4), keras.layers.GlobalAveragePooling1D()])
    path = tmp_path_factory.mktemp("huge") / "huge.keras"
    model.save(path)
    return path


def _mapped_bytes() -> int:
    """The address space this process maps now (/proc/self/statm: pages)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * resource.getpagesize()


def _refused(capsys, argv) -> str:
    assert main([str(a) for a in argv]) == 1
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert lines[-1].startswith("tfaot: error: "), err
    assert "internal error" not in err and "Traceback" not in err, err
    return lines[-1]


def test_whole_window_of_a_huge_input_is_refused_with_its_size(huge_input, tmp_path, capsys):
    # The Keras stage once made tf.zeros of the whole input (ResourceExhaustedError);
    # tracing on specs needs none of it: allow 2 GiB more address space than
    # this process already maps (after other tests that is several GiB), well
    # below the input's 4.5 GiB.
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (_mapped_bytes() + (2 << 30), hard))
    try:
        line = _refused(capsys, ["build", huge_input, "-o", tmp_path / "out", "--whole-window"])
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    assert "4.47 GiB" in line and "--max-context-bytes 5G" in line and "--allow-large" in line
    assert list(tmp_path.iterdir()) == []


def test_context_over_what_a_cortex_m_holds_is_refused_even_when_allowed(huge_input, tmp_path,
                                                                         capsys):
    line = _refused(capsys, ["build", huge_input, "-o", tmp_path / "out", "--whole-window",
                             "--triple", "thumbv7em-none-eabihf", "--cpu", "cortex-m4",
                             "--allow-large"])
    assert "4.47 GiB" in line and "Cortex-M" in line
    assert list(tmp_path.iterdir()) == []


def test_weights_over_the_limit_are_refused_before_loading(huge_input, tmp_path, capsys):
    line = _refused(capsys, ["build", huge_input, "-o", tmp_path / "out",
                             "--max-weight-bytes", "1K"])
    assert "--max-weight-bytes" in line and "1 KiB" in line
    assert list(tmp_path.iterdir()) == []


def test_sizes_are_said_before_compiling(huge_input, tmp_path, capsys):
    assert main(["build", str(huge_input), "-o", str(tmp_path / "out"), "--whole-window",
                 "--max-context-bytes", "1M"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    note = next(i for i, line in enumerate(lines) if "context at least 4.47 GiB" in line)
    assert "weights" in lines[note] and "over the 1 MiB limit" in lines[-1]
    assert not any(line.startswith("tfaot: compile") for line in lines)


def test_parse_size():
    from tfaot.sizes import parse_size, size_text

    assert parse_size("1048576") == 1 << 20
    assert parse_size("1.5G") == 3 << 29 and parse_size("64MiB") == 64 << 20
    assert size_text(3 << 29) == "1.5 GiB" and size_text(12) == "12 B"
    with pytest.raises(ValueError):
        parse_size("-1G")


def test_limits_hold_for_the_built_library(tmp_path, capsys):
    """--max-context-bytes and --max-weight-bytes hold for what is built:
    the compiler's temporaries come on top of the state the check before
    compiling knows (a context over the limit was built), and int8 weights
    are a quarter of the f32 ones it knows (they were refused as f32)."""
    import keras

    from tfaot import harness

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((None, 20), batch_size=1), keras.layers.LSTM(32),
                              keras.layers.Dense(5)])
    path = tmp_path / "lstm.keras"
    model.save(path)
    line = _refused(capsys, ["build", path, "-o", tmp_path / "small",
                             "--max-context-bytes", "1000"])
    assert "built, the context" in line and "over the 1000 B limit" in line, line
    assert not (tmp_path / "small").exists()
    # f32 weights: 4 (20 + 32) 32 + 4 * 32 + 32 * 5 + 5 floats, 27.8 KiB; int8: about 7.5 KiB
    line = _refused(capsys, ["build", path, "-o", tmp_path / "f32", "--max-weight-bytes", "12K"])
    assert "over the 12 KiB weight limit" in line, line  # (its files, before loading)
    assert main(["build", str(path), "-o", str(tmp_path / "int8"), "--max-weight-bytes", "12K",
                 "--weights-dtype=int8"]) == 0
    assert harness.load(tmp_path / "int8").manifest["footprint"]["weight_bytes"] <= 12 << 10
