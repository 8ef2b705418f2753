"""Checkpoints: ``kl.train.Saver`` saves a session's variables and restores them, in a safe
format, atomically, with restore validated against names, dtypes and shapes."""

from __future__ import annotations

import errno
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runtime_helpers import make_registry

import kernloom as kl
import kernloom.plugin as klp
from kernloom.train import read_checkpoint_manifest


@pytest.fixture(scope="module")
def registry() -> klp.Registry:
    return make_registry()


def _model(
    registry: klp.Registry, *, w_shape: tuple[int, ...] = (2, 3), w_dtype: object = kl.float32
):
    g = kl.Graph(registry)
    with g.as_default():
        w = kl.Variable(np.zeros(w_shape, kl.as_dtype(w_dtype).numpy_dtype), name="w")
        b = kl.Variable(np.zeros(3, np.float64), name="layer/b")
        step = kl.Variable(np.array(0, np.int64), name="step")
        flag = kl.Variable(np.array([False, True]), name="flag")
        init = kl.variables_initializer()
        saver = kl.train.Saver()
    return g, (w, b, step, flag), init, saver


def test_save_then_restore_round_trips_every_dtype_into_another_session(
    registry: klp.Registry, tmp_path: Path
) -> None:
    g, (w, b, step, flag), init, saver = _model(registry)
    wv = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    path = tmp_path / "model.ckpt.npz"
    with kl.Session(g) as s:
        s.run(init)
        s.run([w.assign(wv), b.assign_add(np.full(3, 0.1)), step.assign(np.array(41, np.int64))])
        s.run(flag.assign(np.array([True, False])))
        assert saver.save(s, path) == str(path)
    with kl.Session(g) as fresh:  # never initialised: restore is what sets the values
        saver.restore(fresh, path)
        got_w, got_b, got_step, got_flag = fresh.run(
            [w.value(), b.value(), step.value(), flag.value()]
        )
    np.testing.assert_array_equal(got_w, wv)
    np.testing.assert_array_equal(got_b, np.full(3, 0.1))
    assert got_step.dtype == np.int64 and int(got_step) == 41
    np.testing.assert_array_equal(got_flag, [True, False])
    # The file is a plain npz that numpy reads without pickle, with a JSON manifest.
    manifest = {e["name"]: e for e in read_checkpoint_manifest(path)}
    assert manifest["w"]["dtype"] == "float32" and manifest["w"]["shape"] == [2, 3]
    assert manifest["layer/b"]["dtype"] == "float64"
    with np.load(path, allow_pickle=False) as archive:
        np.testing.assert_array_equal(archive[manifest["w"]["key"]], wv)
    # No temporary left: the checkpoint and the state file that records it.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint", "model.ckpt.npz"]


def test_a_saver_of_some_variables_under_its_own_names(
    registry: klp.Registry, tmp_path: Path
) -> None:
    g, (w, b, _, _), init, _ = _model(registry)
    with g.as_default():
        partial = kl.train.Saver({"weights": w})
    with kl.Session(g) as s:
        s.run(init)
        s.run(w.assign(np.ones((2, 3), np.float32)))
        partial.save(s, tmp_path / "w.npz")
        s.run(w.assign(np.zeros((2, 3), np.float32)))
        s.run(b.assign(np.full(3, 5.0)))
        partial.restore(s, tmp_path / "w.npz")
        np.testing.assert_array_equal(s.run(w.value()), 1)
        np.testing.assert_array_equal(s.run(b.value()), 5)  # not covered: untouched
    assert partial.names == ["weights"]


def test_restore_lists_every_mismatch_and_changes_nothing(
    registry: klp.Registry, tmp_path: Path
) -> None:
    g, _, init, saver = _model(registry)
    with kl.Session(g) as s:
        s.run(init)
        saver.save(s, tmp_path / "a.npz")
    g2 = kl.Graph(registry)
    with g2.as_default():
        w = kl.Variable(np.full((3, 2), 9.0, np.float32), name="w")  # shape differs
        step = kl.Variable(np.array(0, np.int32), name="step")  # dtype differs
        kl.Variable(np.zeros(3, np.float64), name="layer/b")  # matches
        kl.Variable(np.zeros(1, np.float32), name="extra")  # not in the checkpoint
        init2 = kl.variables_initializer()
        saver2 = kl.train.Saver()
    with kl.Session(g2) as s:
        s.run(init2)
        with pytest.raises(kl.InvalidArgumentError) as caught:
            saver2.restore(s, tmp_path / "a.npz")
        message = str(caught.value)
        assert "3 mismatch(es)" in message and "nothing was restored" in message
        assert "'w': the checkpoint holds shape [2, 3], the variable has shape (3, 2)" in message
        assert "'step': the checkpoint holds int64, the variable is int32" in message
        assert "'extra': not in the checkpoint" in message
        np.testing.assert_array_equal(s.run(w.value()), 9)  # unchanged
        assert int(s.run(step.value())) == 0


def test_saving_needs_initialised_variables_and_the_saver_s_graph(
    registry: klp.Registry, tmp_path: Path
) -> None:
    g, _, _, saver = _model(registry)
    with (
        kl.Session(g) as s,
        pytest.raises(
            kl.InvalidArgumentError,
            match=r"\['w', 'layer/b', 'step', 'flag'\] were never initialised",
        ),
    ):
        saver.save(s, tmp_path / "x.npz")
    other, _, _, _ = _model(registry)
    with kl.Session(other) as s, pytest.raises(kl.InvalidArgumentError, match=r"another graph"):
        saver.save(s, tmp_path / "x.npz")
    with pytest.raises(TypeError, match=r"sess must be a kl\.Session"):
        saver.save("session", tmp_path / "x.npz")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="var_list must be"):
        kl.train.Saver(var_list="w")  # type: ignore[arg-type]
    with pytest.raises(kl.InvalidArgumentError, match=r"has no kl\.Variable"):
        kl.train.Saver(graph=kl.Graph(registry))
    assert not (tmp_path / "x.npz").exists()


def _saved(registry: klp.Registry, path: Path) -> tuple[kl.Graph, kl.train.Saver, kl.Variable]:
    g, (w, *_), init, saver = _model(registry)
    with kl.Session(g) as s:
        s.run(init)
        s.run(w.assign(np.ones((2, 3), np.float32)))
        saver.save(s, path)
    return g, saver, w


def test_a_failed_save_leaves_the_previous_checkpoint(
    registry: klp.Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "model.npz"
    g, saver, w = _saved(registry, path)
    before = path.read_bytes()
    state_before = (tmp_path / "checkpoint").read_bytes()

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with kl.Session(g) as s:
        s.run(w.initializer)
        s.run(w.assign(np.full((2, 3), 7.0, np.float32)))
        for v in kl.global_variables(g):
            s.run(v.initializer)
        monkeypatch.setattr(os, "fsync", full_disk)
        # kernloom.fileio's error: an OSError and a KernloomError naming the file.
        with pytest.raises(OSError, match=r"model.npz: no space left") as info:
            saver.save(s, path)
        assert isinstance(info.value, kl.KernloomError)
        monkeypatch.undo()
    assert path.read_bytes() == before
    assert (tmp_path / "checkpoint").read_bytes() == state_before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint", "model.npz"]
    with kl.Session(g) as s:
        for v in kl.global_variables(g):
            s.run(v.initializer)
        with pytest.raises(kl.KernloomError, match=r"missing/m.npz"):
            saver.save(s, tmp_path / "missing" / "m.npz")


HOSTILE = {
    "empty": b"",
    "npy": None,  # one .npy array, not an archive
    "text": b"not a checkpoint",
    "truncated": None,  # the first half of a real one
    "pickle": None,  # an npz whose member is a pickled object array
    "manifest_not_json": None,
    "manifest_wrong_format": None,
    "manifest_bad_entry": None,
}


def _write_npz(path: Path, members: dict[str, np.ndarray], *, pickle: bool = False) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for key, value in members.items():
            with archive.open(f"{key}.npy", "w") as member:
                np.lib.format.write_array(member, value, allow_pickle=pickle)


def _json_bytes(value: object) -> np.ndarray:
    return np.frombuffer(json.dumps(value).encode(), dtype=np.uint8)


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_hostile_checkpoint_is_a_clear_error_naming_the_file(
    registry: klp.Registry, tmp_path: Path, kind: str
) -> None:
    good = tmp_path / "good.npz"
    g, saver, _ = _saved(registry, good)
    bad = tmp_path / f"{kind}.npz"
    if HOSTILE[kind] is not None:
        bad.write_bytes(HOSTILE[kind])  # type: ignore[arg-type]
    elif kind == "npy":
        with open(bad, "wb") as f:
            np.save(f, np.ones(3))
    elif kind == "truncated":
        data = good.read_bytes()
        bad.write_bytes(data[: len(data) // 2])
    elif kind == "pickle":
        obj = np.empty(1, dtype=object)
        obj[0] = {"x": 1}
        _write_npz(bad, {"__manifest__": obj}, pickle=True)
    elif kind == "manifest_not_json":
        _write_npz(bad, {"__manifest__": np.frombuffer(b"{nope", dtype=np.uint8)})
    elif kind == "manifest_wrong_format":
        _write_npz(bad, {"__manifest__": _json_bytes({"format": "other", "variables": []})})
    else:
        manifest = {
            "format": "kernloom-checkpoint",
            "version": 1,
            "variables": [{"name": "w", "key": "v0", "dtype": "float32", "shape": [-1]}],
        }
        _write_npz(bad, {"__manifest__": _json_bytes(manifest)})
    with (
        kl.Session(g) as s,
        pytest.raises(
            kl.InvalidArgumentError, match=rf"{kind}.npz: not a valid kernloom checkpoint"
        ),
    ):
        saver.restore(s, bad)
    with kl.Session(g) as s, pytest.raises(kl.NotFoundError, match="no such checkpoint"):
        saver.restore(s, tmp_path / "absent.npz")


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_a_corrupted_checkpoint_restores_exactly_or_fails_clearly(
    registry: klp.Registry, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    directory = tmp_path_factory.mktemp("fuzz")
    good = directory / "good.npz"
    g, saver, w = _saved(registry, good)
    blob = bytearray(good.read_bytes())
    cut = data.draw(st.integers(min_value=0, max_value=len(blob)), label="truncate at")
    del blob[cut:]
    for _ in range(data.draw(st.integers(0, 4), label="flips")):
        if blob:
            where = data.draw(st.integers(0, len(blob) - 1))
            blob[where] = data.draw(st.integers(0, 255))
    bad = directory / "bad.npz"
    bad.write_bytes(bytes(blob))
    with kl.Session(g) as s:
        error: kl.InvalidArgumentError | None = None
        try:
            saver.restore(s, bad)
        except kl.InvalidArgumentError as exc:
            error = exc
        if error is not None:
            assert "bad.npz: not a valid kernloom checkpoint" in str(error)
        else:  # only an intact file may restore, and then to exactly what was saved
            np.testing.assert_array_equal(s.run(w.value()), np.ones((2, 3), np.float32))
