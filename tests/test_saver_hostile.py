"""``kl.train.Saver`` used carelessly: aliased variables, bad paths, hostile manifests, and
errors that must name the file, the variable and the fix."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
from runtime_helpers import make_registry

import kernloom as kl
import kernloom.plugin as klp


@pytest.fixture(scope="module")
def registry() -> klp.Registry:
    return make_registry()


def _model(registry: klp.Registry) -> tuple[kl.Graph, kl.Variable, kl.Variable, kl.train.Saver]:
    g = kl.Graph(registry)
    with g.as_default():
        a = kl.Variable(np.full(3, 7.0, np.float32), name="a")
        b = kl.Variable(np.full(3, 8.0, np.float32), name="b")
        saver = kl.train.Saver()
    return g, a, b, saver


def _write_checkpoint(path: Path, members: dict[str, np.ndarray], entries: list[dict]) -> None:
    manifest = {"format": "kernloom-checkpoint", "version": 1, "variables": entries}
    members = {**members, "__manifest__": np.frombuffer(json.dumps(manifest).encode(), np.uint8)}
    with zipfile.ZipFile(path, "w") as archive:
        for key, value in members.items():
            with archive.open(f"{key}.npy", "w") as member:
                np.lib.format.write_array(member, value, allow_pickle=False)


def _entry(name: str, key: str, dtype: str = "float32") -> dict:
    return {"name": name, "key": key, "dtype": dtype, "shape": [3]}


def _assert_unchanged(sess: kl.Session, a: kl.Variable, b: kl.Variable) -> None:
    got_a, got_b = sess.run([a.value(), b.value()])
    np.testing.assert_array_equal(got_a, 7.0)
    np.testing.assert_array_equal(got_b, 8.0)


def test_one_variable_under_two_checkpoint_names_is_refused(registry: klp.Registry) -> None:
    # TensorFlow: "The same saveable will be restored with two names". Restoring it would
    # assign the variable twice, from two saved values, in one step.
    g, a, _, _ = _model(registry)
    with (
        g.as_default(),
        pytest.raises(kl.InvalidArgumentError, match=r"'a' is in var_list under 2 names"),
    ):
        kl.train.Saver({"x": a, "y": a})


def test_variables_of_another_graph_are_named(registry: klp.Registry) -> None:
    _, a, _, _ = _model(registry)
    g2, c, _, _ = _model(registry)
    with pytest.raises(kl.InvalidArgumentError, match=r"\['c'\] are in another graph"):
        kl.train.Saver({"a": a, "c": c})
    with pytest.raises(kl.InvalidArgumentError, match=r"\['a'\] are in another graph than graph="):
        kl.train.Saver([a], graph=g2)


def test_a_none_path_is_a_clear_error(registry: klp.Registry, tmp_path: Path) -> None:
    # tf.train.latest_checkpoint returns None when there is none; TF: "Can't load save_path
    # when it is None" (a ValueError).
    g, a, b, saver = _model(registry)
    with kl.Session(g) as s:
        s.run(kl.variables_initializer([a, b]))
        for call in (saver.save, saver.restore):
            with pytest.raises(ValueError, match=r"save_path is None"):
                call(s, None)  # type: ignore[arg-type]
        _assert_unchanged(s, a, b)


def test_an_unopenable_checkpoint_path_is_an_error_naming_it(
    registry: klp.Registry, tmp_path: Path
) -> None:
    g, _, _, saver = _model(registry)
    loop = tmp_path / "loop.npz"
    os.symlink(loop, loop)
    too_long = tmp_path / ("m" * 300)
    with kl.Session(g) as s:
        with pytest.raises(kl.InvalidArgumentError, match=r"loop.npz: too many levels"):
            saver.restore(s, loop)
        with pytest.raises(kl.InvalidArgumentError, match=r"mmmm: file name too long"):
            saver.restore(s, too_long)
        with pytest.raises(kl.NotFoundError, match=r"no such checkpoint file; check the path"):
            saver.restore(s, tmp_path / "absent.npz")


def test_mismatch_errors_say_how_to_fix_them(registry: klp.Registry, tmp_path: Path) -> None:
    g, a, b, saver = _model(registry)
    path = tmp_path / "other.npz"
    _write_checkpoint(
        path,
        {"v0": np.ones(3, np.float64), "v1": np.ones(3, np.float32)},
        [_entry("a", "v0", "float64"), _entry("c", "v1")],
    )
    with kl.Session(g) as s:
        s.run(kl.variables_initializer([a, b]))
        with pytest.raises(kl.InvalidArgumentError) as caught:
            saver.restore(s, path)
        message = str(caught.value)
        assert "other.npz" in message and "nothing was restored" in message
        assert "'a': the checkpoint holds float64, the variable is float32" in message
        assert "dtype=kl.float64" in message
        assert "'b': not in the checkpoint" in message
        assert "kl.train.Saver(var_list=" in message
        assert "the checkpoint holds ['a', 'c']" in message
        _assert_unchanged(s, a, b)


def test_a_shape_mismatch_says_which_shape_to_build(registry: klp.Registry, tmp_path: Path) -> None:
    g, a, b, saver = _model(registry)
    path = tmp_path / "shape.npz"
    entries = [_entry("a", "v0"), {**_entry("b", "v1"), "shape": [2, 2]}]
    _write_checkpoint(
        path, {"v0": np.ones(3, np.float32), "v1": np.ones((2, 2), np.float32)}, entries
    )
    with kl.Session(g) as s:
        s.run(kl.variables_initializer([a, b]))
        with pytest.raises(kl.InvalidArgumentError, match=r"create it with shape \[2, 2\]"):
            saver.restore(s, path)
        _assert_unchanged(s, a, b)


def test_a_manifest_naming_a_variable_twice_is_not_a_checkpoint(
    registry: klp.Registry, tmp_path: Path
) -> None:
    g, a, b, saver = _model(registry)
    path = tmp_path / "twice.npz"
    _write_checkpoint(
        path,
        {"v0": np.ones(3, np.float32), "v1": np.full(3, 5, np.float32)},
        [_entry("a", "v0"), _entry("a", "v1"), _entry("b", "v1")],
    )
    with kl.Session(g) as s:
        s.run(kl.variables_initializer([a, b]))
        with pytest.raises(
            kl.InvalidArgumentError, match=r"twice.npz: not a valid kernloom checkpoint.*'a'"
        ):
            saver.restore(s, path)
        _assert_unchanged(s, a, b)


def test_a_member_of_no_kl_dtype_is_not_a_checkpoint(
    registry: klp.Registry, tmp_path: Path
) -> None:
    wide = np.dtype(np.longdouble)
    if wide.name in {d.name for d in kl.all_dtypes()}:
        pytest.skip("long double is float64 on this platform")
    g, a, b, saver = _model(registry)
    path = tmp_path / "wide.npz"
    _write_checkpoint(path, {"v0": np.ones(3, wide)}, [_entry("a", "v0", wide.name)])
    with kl.Session(g) as s:
        s.run(kl.variables_initializer([a, b]))
        with pytest.raises(
            kl.InvalidArgumentError, match=rf"wide.npz: not a valid .*{wide.name}, not a kl dtype"
        ):
            saver.restore(s, path)
        _assert_unchanged(s, a, b)


def test_each_saver_builds_its_nodes_under_one_scope(registry: klp.Registry) -> None:
    g, _, _, first = _model(registry)
    with g.as_default():
        second = kl.train.Saver()
    assert first.restore_op.name == "save/restore_all"
    assert second.restore_op.name == "save_1/restore_all"


def test_saving_to_a_too_long_file_name_is_a_kernloom_error(
    registry: klp.Registry, tmp_path: Path
) -> None:
    g, a, b, saver = _model(registry)
    with kl.Session(g) as s:
        s.run(kl.variables_initializer([a, b]))
        with pytest.raises(kl.KernloomError, match=r"file name too long"):
            saver.save(s, tmp_path / ("m" * 300))


def test_saving_to_a_long_but_valid_file_name_works(registry: klp.Registry, tmp_path: Path) -> None:
    g, a, b, saver = _model(registry)
    path = tmp_path / ("m" * 245)
    with kl.Session(g) as s:
        s.run(kl.variables_initializer([a, b]))
        saver.save(s, path)
        saver.restore(s, path)
        _assert_unchanged(s, a, b)


def test_a_bool_dtype_mismatch_spells_the_kl_name(registry: klp.Registry, tmp_path: Path) -> None:
    g, a, b, saver = _model(registry)
    path = tmp_path / "flags.npz"
    entries = [_entry("a", "v0", "bool"), _entry("b", "v1")]
    _write_checkpoint(path, {"v0": np.ones(3, bool), "v1": np.ones(3, np.float32)}, entries)
    with kl.Session(g) as s:
        s.run(kl.variables_initializer([a, b]))
        with pytest.raises(kl.InvalidArgumentError, match=r"create it with dtype=kl\.bool_\)"):
            saver.restore(s, path)
        assert kl.bool_.name == "bool"
        _assert_unchanged(s, a, b)


def test_global_step_is_appended_to_the_file_name_as_tensorflow_s(
    registry: klp.Registry, tmp_path: Path
) -> None:
    """``save(sess, path, global_step=...)``: an int, a scalar integer tensor or a variable,
    read in the session; the returned path is the file written, and restores."""
    g, a, b, saver = _model(registry)
    with g.as_default():
        step = kl.Variable(np.int64(7), name="step")
    with kl.Session(g) as s:
        s.run(kl.variables_initializer([a, b, step]))
        assert saver.save(s, tmp_path / "model", global_step=3) == str(tmp_path / "model-3")
        assert saver.save(s, tmp_path / "model", global_step=step) == str(tmp_path / "model-7")
        doubled = step.value() * 2
        written = saver.save(s, str(tmp_path / "model"), global_step=doubled)
        assert written == str(tmp_path / "model-14") and Path(written).is_file()
        saver.restore(s, written)
        _assert_unchanged(s, a, b)
        for bad in (1.5, True, np.array([1, 2])):
            with pytest.raises(kl.InvalidArgumentError, match="global_step must be an integer"):
                saver.save(s, tmp_path / "model", global_step=bad)
