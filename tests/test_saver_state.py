"""The checkpoint bookkeeping of ``kl.train.Saver``, as TensorFlow 1's: the ``checkpoint``
state file, ``max_to_keep``, ``latest_checkpoint`` and ``get_checkpoint_state``."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from runtime_helpers import make_registry

import kernloom as kl
import kernloom.plugin as klp
import kernloom.train.saver as saver_module
from kernloom.train.checkpoint_management import format_checkpoint_state, parse_checkpoint_state


@pytest.fixture(scope="module")
def registry() -> klp.Registry:
    return make_registry()


class Model:
    """One float variable ``v`` and a saver of it; ``save(step)`` stores ``v == step``."""

    def __init__(self, registry: klp.Registry, **saver_args: object) -> None:
        self.graph = kl.Graph(registry)
        with self.graph.as_default():
            self.v = kl.Variable(np.zeros(2, np.float32), name="v")
            self.saver = kl.train.Saver(**saver_args)  # type: ignore[arg-type]
        self.session = kl.Session(self.graph)
        self.session.run(self.v.initializer)

    def save(self, prefix: str | Path, step: int, **save_args: object) -> str:
        self.session.run(self.v.assign(np.full(2, step, np.float32)))
        return self.saver.save(self.session, prefix, global_step=step, **save_args)  # type: ignore[arg-type]

    def restored(self, path: str | None) -> float:
        """The value of ``v`` in a fresh session restored from ``path``."""
        assert path is not None
        with kl.Session(self.graph) as fresh:
            self.saver.restore(fresh, path)
            return float(fresh.run(self.v.value())[0])


@pytest.fixture
def model(registry: klp.Registry) -> Model:
    return Model(registry, max_to_keep=2)


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# -- the state file and max_to_keep -----------------------------------------------------------


def test_max_to_keep_deletes_the_oldest_and_the_state_file_lists_the_rest(
    model: Model, tmp_path: Path
) -> None:
    written = [model.save(tmp_path / "model", step) for step in (1, 2, 3, 4)]
    assert written == [str(tmp_path / f"model-{n}") for n in (1, 2, 3, 4)]
    assert _files(tmp_path) == ["checkpoint", "model-3", "model-4"]
    assert model.saver.last_checkpoints == written[2:]
    # TensorFlow's text format, with paths relative to the directory.
    assert (tmp_path / "checkpoint").read_text() == (
        'model_checkpoint_path: "model-4"\n'
        'all_model_checkpoint_paths: "model-3"\n'
        'all_model_checkpoint_paths: "model-4"\n'
    )
    state = kl.train.get_checkpoint_state(tmp_path)
    assert state == kl.train.CheckpointState(
        str(tmp_path / "model-4"), (str(tmp_path / "model-3"), str(tmp_path / "model-4"))
    )
    assert kl.train.latest_checkpoint(tmp_path) == str(tmp_path / "model-4")
    assert model.restored(kl.train.latest_checkpoint(tmp_path)) == 4.0
    assert model.restored(state.all_model_checkpoint_paths[0]) == 3.0


def test_saving_to_a_kept_path_again_moves_it_to_the_end(model: Model, tmp_path: Path) -> None:
    one, two = model.save(tmp_path / "m", 1), model.save(tmp_path / "m", 2)
    assert model.save(tmp_path / "m", 1) == one  # m-1 again: now the newest, nothing deleted
    assert model.saver.last_checkpoints == [two, one]
    assert _files(tmp_path) == ["checkpoint", "m-1", "m-2"]
    assert kl.train.latest_checkpoint(tmp_path) == one
    three = model.save(tmp_path / "m", 3)  # m-2 is now the oldest
    assert model.saver.last_checkpoints == [one, three]
    assert _files(tmp_path) == ["checkpoint", "m-1", "m-3"]


def test_the_default_keeps_five_and_zero_or_none_keeps_all(
    registry: klp.Registry, tmp_path: Path
) -> None:
    default = Model(registry)
    assert default.saver.max_to_keep == 5
    (tmp_path / "d").mkdir()
    for step in range(1, 8):
        default.save(tmp_path / "d" / "m", step)
    assert _files(tmp_path / "d") == ["checkpoint"] + [f"m-{n}" for n in range(3, 8)]
    for keep_all in (0, None):
        directory = tmp_path / f"all-{keep_all}"
        directory.mkdir()
        model = Model(registry, max_to_keep=keep_all)
        for step in (1, 2, 3):
            model.save(directory / "m", step)
        assert _files(directory) == ["checkpoint", "m-1", "m-2", "m-3"]
        # As TensorFlow: the state file then lists only the newest, and the saver none.
        assert model.saver.last_checkpoints == []
        assert (directory / "checkpoint").read_text() == (
            'model_checkpoint_path: "m-3"\nall_model_checkpoint_paths: "m-3"\n'
        )


def test_write_state_false_writes_no_state_and_deletes_nothing(
    model: Model, tmp_path: Path
) -> None:
    for step in (1, 2, 3):
        model.save(tmp_path / "m", step, write_state=False)
    assert _files(tmp_path) == ["m-1", "m-2", "m-3"]
    assert model.saver.last_checkpoints == []
    assert kl.train.latest_checkpoint(tmp_path) is None
    assert kl.train.get_checkpoint_state(tmp_path) is None


def test_latest_filename_names_the_state_file(model: Model, tmp_path: Path) -> None:
    model.save(tmp_path / "m", 1, latest_filename="state")
    assert _files(tmp_path) == ["m-1", "state"]
    assert kl.train.latest_checkpoint(tmp_path) is None  # no file named "checkpoint"
    assert kl.train.latest_checkpoint(tmp_path, "state") == str(tmp_path / "m-1")
    assert kl.train.latest_checkpoint(str(tmp_path), latest_filename="state") == str(
        tmp_path / "m-1"
    )


def test_two_savers_in_one_directory_each_delete_only_their_own(
    registry: klp.Registry, tmp_path: Path
) -> None:
    a, b = Model(registry, max_to_keep=2), Model(registry, max_to_keep=2)
    for step in (1, 2, 3):
        a.save(tmp_path / "a", step)
    b.save(tmp_path / "b", 10)
    # The state file is the last writer's, as in TensorFlow.
    assert kl.train.get_checkpoint_state(tmp_path) == kl.train.CheckpointState(
        str(tmp_path / "b-10"), (str(tmp_path / "b-10"),)
    )
    a.save(tmp_path / "a", 4)
    assert _files(tmp_path) == ["a-3", "a-4", "b-10", "checkpoint"]
    assert kl.train.latest_checkpoint(tmp_path) == str(tmp_path / "a-4")
    assert b.restored(str(tmp_path / "b-10")) == 10.0


# -- relative and absolute paths --------------------------------------------------------------


def test_a_relative_save_path_is_recorded_relative_and_read_back_joined(
    model: Model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("ckpts").mkdir()
    assert model.save("ckpts/model", 3) == os.path.join("ckpts", "model-3")
    assert model.saver.last_checkpoints == [os.path.join("ckpts", "model-3")]
    assert Path("ckpts/checkpoint").read_text().startswith('model_checkpoint_path: "model-3"\n')
    assert kl.train.latest_checkpoint("ckpts") == os.path.join("ckpts", "model-3")
    # A bare file name: the state file is in the working directory.
    assert model.save("bare", 1) == "bare-1"
    assert kl.train.latest_checkpoint(".") == os.path.join(".", "bare-1")
    assert kl.train.latest_checkpoint("") == "bare-1"  # os.path.join("", ...), as TensorFlow
    # The working directory changes: the saver still deletes the right files.
    monkeypatch.chdir("ckpts")
    model.save(tmp_path / "ckpts" / "model", 4)
    assert _files(tmp_path / "ckpts") == ["checkpoint", "model-4"]
    assert (tmp_path / "bare-1").is_file()


def test_a_kept_checkpoint_in_another_directory_is_recorded_absolute(
    model: Model, tmp_path: Path
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = model.save(tmp_path / "a" / "m", 1)
    model.save(tmp_path / "b" / "m", 2)
    assert (tmp_path / "b" / "checkpoint").read_text() == (
        'model_checkpoint_path: "m-2"\n'
        f'all_model_checkpoint_paths: "{first}"\n'
        'all_model_checkpoint_paths: "m-2"\n'
    )
    state = kl.train.get_checkpoint_state(tmp_path / "b")
    assert state is not None
    assert state.all_model_checkpoint_paths == (first, str(tmp_path / "b" / "m-2"))


def test_a_moved_checkpoint_directory_still_restores(model: Model, tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    model.save(tmp_path / "run" / "model", 5)
    moved = shutil.move(tmp_path / "run", tmp_path / "elsewhere")
    latest = kl.train.latest_checkpoint(moved)
    assert latest == str(tmp_path / "elsewhere" / "model-5")
    assert model.restored(latest) == 5.0


# -- reading TensorFlow's state files ---------------------------------------------------------


def test_a_state_file_written_by_hand_in_tensorflow_s_format_is_read(
    model: Model, tmp_path: Path
) -> None:
    model.save(tmp_path / "model.ckpt", 6, write_state=False)
    model.save(tmp_path / "model.ckpt", 7, write_state=False)
    (tmp_path / "checkpoint").write_text(
        "# written by TensorFlow 2's CheckpointManager\n"
        'model_checkpoint_path: "model.ckpt-7"\n'
        "all_model_checkpoint_paths: 'model.ckpt-6'\n"
        'all_model_checkpoint_paths: "model." "ckpt-7"\n'
        "all_model_checkpoint_timestamps: 1700000000.5\n"
        "all_model_checkpoint_timestamps: 1.7e9\n"
        "last_preserved_timestamp: 1699999999\n"
    )
    state = kl.train.get_checkpoint_state(tmp_path)
    assert state == kl.train.CheckpointState(
        str(tmp_path / "model.ckpt-7"),
        (str(tmp_path / "model.ckpt-6"), str(tmp_path / "model.ckpt-7")),
    )
    assert model.restored(kl.train.latest_checkpoint(tmp_path)) == 7.0
    # An absolute path stays as it is.
    (tmp_path / "checkpoint").write_text(f'model_checkpoint_path: "{tmp_path / "model.ckpt-6"}"; ')
    assert kl.train.latest_checkpoint(tmp_path) == str(tmp_path / "model.ckpt-6")
    assert kl.train.get_checkpoint_state(tmp_path) == kl.train.CheckpointState(
        str(tmp_path / "model.ckpt-6"), ()
    )


def test_escapes_round_trip_as_protobuf_writes_them() -> None:
    # CEscape in UTF-8 mode: quotes, backslashes and ASCII control characters escaped,
    # other characters as they are. Worked out by hand from protobuf's text_encoding.
    text = format_checkpoint_state('dé"\\\tx\x7f', ["a'b"])
    assert text == (
        'model_checkpoint_path: "dé\\"\\\\\\tx\\177"\nall_model_checkpoint_paths: "a\\\'b"\n'
    )
    assert parse_checkpoint_state(text) == kl.train.CheckpointState('dé"\\\tx\x7f', ("a'b",))
    hex_and_unicode = 'model_checkpoint_path: "\\x41\\u00e9\\101\\303\\251"'
    assert parse_checkpoint_state(hex_and_unicode).model_checkpoint_path == "AéAé"
    # A file name's byte that is not UTF-8 round-trips as os.fsdecode spells it.
    name = os.fsdecode(b"m\xff\x01")
    written = format_checkpoint_state(name, [name])
    assert written.startswith('model_checkpoint_path: "m\\377\\001"\n')
    assert parse_checkpoint_state(written).model_checkpoint_path == name


def test_protobuf_s_own_text_format_agrees() -> None:
    pytest.importorskip("google.protobuf")
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

    proto = descriptor_pb2.FileDescriptorProto(name="checkpoint_state.proto", package="t")
    message = proto.message_type.add(name="CheckpointState")
    label = descriptor_pb2.FieldDescriptorProto
    for number, (name, kind, repeated) in enumerate(
        [
            ("model_checkpoint_path", label.TYPE_STRING, False),
            ("all_model_checkpoint_paths", label.TYPE_STRING, True),
            ("all_model_checkpoint_timestamps", label.TYPE_DOUBLE, True),
            ("last_preserved_timestamp", label.TYPE_DOUBLE, False),
        ],
        start=1,
    ):
        message.field.add(
            name=name,
            number=number,
            type=kind,
            label=label.LABEL_REPEATED if repeated else label.LABEL_OPTIONAL,
        )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    state_class = message_factory.GetMessageClass(pool.FindMessageTypeByName("t.CheckpointState"))
    paths = ["/tmp/ü ber/model-1", 'q"uote\\d', "tab\there\x01", "plain-2"]
    state = state_class(model_checkpoint_path=paths[-1], all_model_checkpoint_paths=paths)
    assert format_checkpoint_state(paths[-1], paths) == text_format.MessageToString(state)
    state.all_model_checkpoint_timestamps.extend([1.5, 2.0, 3.25, 4e9])
    state.last_preserved_timestamp = 1.0
    expected = kl.train.CheckpointState(paths[-1], tuple(paths))
    assert parse_checkpoint_state(text_format.MessageToString(state)) == expected
    # Older protobuf (TensorFlow 1's) wrote non-ASCII as octal UTF-8 bytes.
    octal = text_format.MessageToString(state, as_utf8=False)
    assert "\\303\\274" in octal and parse_checkpoint_state(octal) == expected
    # And protobuf reads what we write, to the same message.
    ours = state_class()
    text_format.Merge(format_checkpoint_state(paths[-1], paths), ours)
    assert list(ours.all_model_checkpoint_paths) == paths
    assert ours.model_checkpoint_path == paths[-1]


# -- latest_checkpoint when there is none -----------------------------------------------------


def test_latest_checkpoint_is_none_without_a_state_file_or_directory(tmp_path: Path) -> None:
    assert kl.train.latest_checkpoint(tmp_path) is None
    assert kl.train.latest_checkpoint(tmp_path / "never-made") is None
    assert kl.train.get_checkpoint_state(tmp_path / "never-made") is None


def test_latest_checkpoint_after_deleting_the_newest_file_is_none(
    model: Model, tmp_path: Path
) -> None:
    model.save(tmp_path / "m", 1)
    newest = model.save(tmp_path / "m", 2)
    os.unlink(newest)
    # As TensorFlow: no fallback to an older one; it says why (TensorFlow logs an error).
    with pytest.warns(RuntimeWarning, match=r"checkpoint: the newest checkpoint .*m-2.* not exist"):
        assert kl.train.latest_checkpoint(tmp_path) is None
    state = kl.train.get_checkpoint_state(tmp_path)  # the state itself still reads
    assert state is not None and state.model_checkpoint_path == newest
    # A save after the file was deleted by hand: the missing file is no error.
    model.save(tmp_path / "m", 3)
    model.save(tmp_path / "m", 4)  # evicts m-2, already gone: no warning (filterwarnings=error)
    assert _files(tmp_path) == ["checkpoint", "m-3", "m-4"]


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"garbage here\n", r"expected ':' after|expected a CheckpointState field"),
        (b'model_path: "m-1"\n', r"line 1: expected a CheckpointState field, got 'model_path'"),
        (b'model_checkpoint_path: "m-1\n', r"line 1: unexpected"),
        (b"model_checkpoint_path: 7\n", r"model_checkpoint_path must be a quoted string"),
        (b'model_checkpoint_path: "\\q"\n', r"unknown escape"),
        (b'model_checkpoint_path: "\xff"\n', r"cannot be read \(not UTF-8 text"),
        (b"last_preserved_timestamp: 'x'\n", r"last_preserved_timestamp must be a number"),
    ],
)
def test_a_corrupt_state_file_warns_and_gives_none_as_tensorflow(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    (tmp_path / "checkpoint").write_bytes(content)
    for read in (kl.train.latest_checkpoint, kl.train.get_checkpoint_state):
        with pytest.warns(RuntimeWarning) as caught:
            assert read(tmp_path) is None
        message = str(caught[0].message)
        assert message.startswith(f"{tmp_path / 'checkpoint'}: ")
        assert "Delete the file, or save a checkpoint in that directory" in message
        assert caught[0].filename == __file__  # points at the caller
        assert re.search(problem, message), message


def test_an_unreadable_state_file_warns_and_gives_none(tmp_path: Path) -> None:
    (tmp_path / "checkpoint").mkdir()
    with pytest.warns(RuntimeWarning, match=r"checkpoint: cannot be read \(a directory"):
        assert kl.train.latest_checkpoint(tmp_path) is None


def test_a_state_file_naming_no_checkpoint_is_an_error(tmp_path: Path) -> None:
    # TensorFlow: ValueError("Invalid checkpoint state loaded from ...").
    for content in ("", "# nothing\n", 'all_model_checkpoint_paths: "m-1"\n'):
        (tmp_path / "checkpoint").write_text(content)
        with pytest.raises(
            kl.InvalidArgumentError,
            match=r"checkpoint: invalid checkpoint state, it names no model_checkpoint_path; "
            r"delete the file",
        ):
            kl.train.latest_checkpoint(tmp_path)


# -- recovering after a restart ---------------------------------------------------------------


def test_recover_last_checkpoints_adopts_the_state_after_a_restart(
    registry: klp.Registry, tmp_path: Path
) -> None:
    first = Model(registry, max_to_keep=3)
    for step in (1, 2, 3):
        first.save(tmp_path / "m", step)
    os.unlink(tmp_path / "m-1")  # gone meanwhile: left out
    restarted = Model(registry, max_to_keep=3)
    state = kl.train.get_checkpoint_state(tmp_path)
    assert state is not None
    restarted.saver.recover_last_checkpoints(state.all_model_checkpoint_paths)
    assert restarted.saver.last_checkpoints == [str(tmp_path / "m-2"), str(tmp_path / "m-3")]
    restarted.save(tmp_path / "m", 4)
    restarted.save(tmp_path / "m", 5)
    assert _files(tmp_path) == ["checkpoint", "m-3", "m-4", "m-5"]
    with pytest.raises(TypeError, match=r"checkpoint_paths must be a list of paths, got str"):
        restarted.saver.recover_last_checkpoints(str(tmp_path / "m-5"))
    with pytest.raises(TypeError, match=r"each checkpoint path must be a str.*got int"):
        restarted.saver.recover_last_checkpoints([str(tmp_path / "m-5"), 5])  # type: ignore[list-item]
    assert restarted.saver.last_checkpoints[-1] == str(tmp_path / "m-5")  # unchanged


def test_checkpoint_exists(model: Model, tmp_path: Path) -> None:
    path = model.save(tmp_path / "m", 1)
    assert kl.train.checkpoint_exists(path) and kl.train.checkpoint_exists(Path(path))
    assert not kl.train.checkpoint_exists(tmp_path / "m-2")
    assert not kl.train.checkpoint_exists(tmp_path)  # a directory is no checkpoint
    with pytest.raises(TypeError, match=r"checkpoint_path must be a str"):
        kl.train.checkpoint_exists(None)  # type: ignore[arg-type]


# -- nothing is lost --------------------------------------------------------------------------


def test_a_failure_deleting_an_old_checkpoint_keeps_the_new_one_and_the_state(
    model: Model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model.save(tmp_path / "m", 1)
    model.save(tmp_path / "m", 2)
    real_unlink = os.unlink

    def refuse(path: object, *args: object, **kwargs: object) -> None:
        if os.fspath(path).endswith("m-1"):  # type: ignore[call-overload]
            raise PermissionError(13, "Permission denied")
        real_unlink(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "unlink", refuse)
    with pytest.warns(RuntimeWarning, match=r"m-1: could not delete this old checkpoint"):
        newest = model.save(tmp_path / "m", 3)
    monkeypatch.undo()
    assert _files(tmp_path) == ["checkpoint", "m-1", "m-2", "m-3"]  # m-1 left, nothing lost
    assert model.saver.last_checkpoints == [str(tmp_path / "m-2"), newest]
    assert kl.train.latest_checkpoint(tmp_path) == newest
    assert model.restored(newest) == 3.0


def test_a_failure_writing_the_state_deletes_nothing(
    model: Model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model.save(tmp_path / "m", 1)
    model.save(tmp_path / "m", 2)
    state_before = (tmp_path / "checkpoint").read_text()

    def full_disk(*args: object) -> None:
        raise kl.KernloomError("checkpoint: no space left on device")

    monkeypatch.setattr(saver_module, "write_checkpoint_state", full_disk)
    with pytest.raises(kl.KernloomError, match="no space left"):
        model.save(tmp_path / "m", 3)
    monkeypatch.undo()
    # The old state stands and names files that all exist; the saver's list is as before.
    assert (tmp_path / "checkpoint").read_text() == state_before
    assert _files(tmp_path) == ["checkpoint", "m-1", "m-2", "m-3"]
    assert model.saver.last_checkpoints == [str(tmp_path / "m-1"), str(tmp_path / "m-2")]
    assert kl.train.latest_checkpoint(tmp_path) == str(tmp_path / "m-2")


# -- bad arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["3", 2.0, True, [2]])
def test_max_to_keep_must_be_an_int(registry: klp.Registry, bad: object) -> None:
    with pytest.raises(TypeError, match=r"kl.train.Saver: max_to_keep must be an int or None"):
        Model(registry, max_to_keep=bad)


def test_max_to_keep_must_not_be_negative(registry: klp.Registry) -> None:
    with pytest.raises(ValueError, match=r"max_to_keep=-1 is negative") as caught:
        Model(registry, max_to_keep=-1)
    assert isinstance(caught.value, kl.InvalidArgumentError)
    assert Model(registry, max_to_keep=np.int64(3)).saver.max_to_keep == 3


@pytest.mark.parametrize("bad", ["sub/state", "", ".", "..", f"a{os.sep}b", "nul\0l"])
def test_latest_filename_must_be_a_plain_file_name(model: Model, tmp_path: Path, bad: str) -> None:
    message = r"latest_filename=.* must be a plain file name, without a directory"
    with pytest.raises(kl.InvalidArgumentError, match=rf"Saver.save: {message}"):
        model.save(tmp_path / "m", 1, latest_filename=bad)
    assert _files(tmp_path) == []  # refused before writing anything
    for read in (kl.train.latest_checkpoint, kl.train.get_checkpoint_state):
        with pytest.raises(ValueError, match=message):
            read(tmp_path, bad)
    with pytest.raises(TypeError, match=r"latest_filename must be a file name \(str\) or None"):
        model.save(tmp_path / "m", 1, latest_filename=Path("checkpoint"))


def test_checkpoint_dir_must_be_a_directory(model: Model, tmp_path: Path) -> None:
    path = model.save(tmp_path / "m", 1)
    for read in (kl.train.latest_checkpoint, kl.train.get_checkpoint_state):
        with pytest.raises(
            kl.InvalidArgumentError,
            match=r"checkpoint_dir=.*m-1' is a file, not a directory; pass the directory",
        ):
            read(path)
        with pytest.raises(TypeError, match=r"checkpoint_dir must be a str or os.PathLike"):
            read(None)  # type: ignore[arg-type]


def test_a_checkpoint_where_the_state_file_goes_is_refused_before_writing(
    model: Model, tmp_path: Path
) -> None:
    with pytest.raises(
        kl.InvalidArgumentError, match=r"'.*checkpoint' is where the checkpoint state file"
    ):
        model.saver.save(model.session, tmp_path / "checkpoint")
    assert _files(tmp_path) == []
    # Under another state file name it is an ordinary checkpoint; the default state file
    # would then overwrite a kept checkpoint, so that save is refused too.
    model.saver.save(model.session, tmp_path / "checkpoint", latest_filename="state")
    with pytest.raises(kl.InvalidArgumentError, match=r"where the checkpoint state file"):
        model.save(tmp_path / "m", 2)
    assert _files(tmp_path) == ["checkpoint", "state"]
    assert model.restored(str(tmp_path / "checkpoint")) == 0.0


# -- save_path is a prefix, as TensorFlow's -----------------------------------------------------
# TensorFlow 2.21's tf.compat.v1.train.Saver.save appends "-<global_step>" to save_path as a
# string: save(sess, "ckdir/", global_step=5) returned "ckdir/-5", written inside ckdir/, and
# ckdir/checkpoint read 'model_checkpoint_path: "-5"'; save(sess, "", 1) returned "-1" and
# save(sess, ".", 1) ".-1"; latest_checkpoint("") gave ".-1" and latest_checkpoint(".")
# "./.-1"; save(sess, "./ckdir/", 7) returned "./ckdir/-7".


def test_a_save_path_ending_in_a_separator_saves_inside_that_directory(
    model: Model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("run").mkdir()
    assert model.save("run/", 5) == "run/-5"
    assert _files(tmp_path) == ["run"]  # nothing written beside run/
    assert _files(tmp_path / "run") == ["-5", "checkpoint"]
    assert Path("run/checkpoint").read_text() == (
        'model_checkpoint_path: "-5"\nall_model_checkpoint_paths: "-5"\n'
    )
    assert kl.train.latest_checkpoint("run") == os.path.join("run", "-5")
    assert kl.train.latest_checkpoint("run/") == "run/-5"
    assert kl.train.get_checkpoint_state("run") == kl.train.CheckpointState(
        os.path.join("run", "-5"), (os.path.join("run", "-5"),)
    )
    assert model.restored("run/-5") == 5.0
    assert model.restored(kl.train.latest_checkpoint("run")) == 5.0
    assert model.save("./run/", 7) == "./run/-7"  # returned as passed, as TensorFlow
    assert _files(tmp_path / "run") == ["-5", "-7", "checkpoint"]
    assert model.saver.last_checkpoints == ["run/-5", "./run/-7"]
    assert model.restored(kl.train.latest_checkpoint("run")) == 7.0
    absolute = model.save(f"{tmp_path / 'run'}{os.sep}", 8)
    assert absolute == str(tmp_path / "run" / "-8")
    assert _files(tmp_path / "run") == ["-7", "-8", "checkpoint"]  # max_to_keep=2


def test_an_empty_or_dot_save_path_with_a_global_step_is_a_prefix_as_tensorflow_s(
    model: Model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert model.save("", 1) == "-1"
    assert model.save(".", 2) == ".-2"
    assert _files(tmp_path) == ["-1", ".-2", "checkpoint"]
    assert Path("checkpoint").read_text() == (
        'model_checkpoint_path: ".-2"\n'
        'all_model_checkpoint_paths: "-1"\n'
        'all_model_checkpoint_paths: ".-2"\n'
    )
    assert kl.train.latest_checkpoint("") == ".-2"
    assert kl.train.latest_checkpoint(".") == os.path.join(".", ".-2")
    assert model.restored("-1") == 1.0
    assert model.restored(".-2") == 2.0


@pytest.mark.parametrize("save_path", ["", ".", "..", "/", "run/", "run/.", "run/..", "new/"])
def test_a_save_path_that_names_a_directory_is_refused_without_a_global_step(
    model: Model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, save_path: str
) -> None:
    # Without a step the prefix is the whole file name: one ending in '/' (or '.', '..')
    # names a directory, where a kernloom checkpoint (one file) cannot be written.
    monkeypatch.chdir(tmp_path)
    Path("run").mkdir()
    with pytest.raises(kl.InvalidArgumentError) as info:
        model.saver.save(model.session, save_path)
    message = str(info.value)
    assert message.startswith(f"Saver.save: save_path={save_path!r} ")
    assert "not a checkpoint file" in message
    assert "pass a file name" in message and "or pass global_step=" in message
    if save_path == "new/":
        assert message.endswith("directory 'new/' does not exist either: create it first")
    assert _files(tmp_path) == ["run"] and _files(tmp_path / "run") == []  # nothing written


def test_a_save_path_in_a_missing_directory_is_refused_naming_it(
    model: Model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(kl.KernloomError, match=r"newdir/-5: directory .*newdir does not exist"):
        model.save("newdir/", 5)
    assert _files(tmp_path) == []  # no file named newdir


def test_restore_takes_the_path_as_written(model: Model, tmp_path: Path) -> None:
    # "model/" is a directory path: with a file "model" there, POSIX (and TensorFlow) find
    # no checkpoint under it; restoring from the file would restore something not asked for.
    written = model.saver.save(model.session, tmp_path / "model")
    assert model.restored(written) == 0.0
    with pytest.raises(kl.InvalidArgumentError) as info:
        model.restored(f"{written}/")
    assert str(info.value).startswith(
        f"Saver.restore: save_path={written + '/'!r} names a directory"
    )
    assert "kl.train.latest_checkpoint" in str(info.value)
    with pytest.raises(kl.InvalidArgumentError, match=r"names a directory"):
        kl.train.read_checkpoint_manifest(f"{written}/")
