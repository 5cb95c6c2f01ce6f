"""Two lrtune commands never write one output directory at once: the second is refused in one
line, and the directory is free again when the first ends (or dies)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lrtune.errors import ConfigError


def _hold_in_child(path, lock=None):
    """A child process that holds ``path``'s lock (the folder, or its lock file ``lock``) until
    its stdin closes; returns it once it holds."""
    target = path / lock if lock else path
    code = (
        "import sys; from lrtune import locks; from pathlib import Path; "
        f"assert locks.hold(Path({str(target)!r})); print('held', flush=True); sys.stdin.read()"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"  # readiness, not a sleep
    return child


def test_a_second_command_on_an_output_directory_in_use_is_refused_and_changes_nothing(tmp_path):
    from lrtune import locks
    from lrtune.outdir import claim_out

    out = tmp_path / "eval"
    out.mkdir()
    child = _hold_in_child(out)
    try:
        with pytest.raises(
            ConfigError,
            match=rf"^--out {out} is being written by another lrtune command now; "
            rf"wait for it to end or pick another --out$",
        ):
            claim_out(out, "evaluate")
        assert not (out / ".lrtune-owner.json").exists()  # refused before it recorded anything
    finally:
        child.stdin.close()
        child.wait()
    assert claim_out(out, "evaluate") == out  # free once the holder ended
    assert claim_out(out, "evaluate") == out  # and taken again by the same command: no refusal
    assert sorted(p.name for p in out.iterdir()) == [".lrtune-owner.json"]  # the lock leaves no file
    locks.release_all()


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    from lrtune import locks
    from lrtune.outdir import claim_out

    out = tmp_path / "eval"
    out.mkdir()
    child = _hold_in_child(out)
    child.kill()
    child.wait()
    assert claim_out(out, "evaluate") == out
    locks.release_all()


def test_shards_of_one_dataset_lock_their_own_parts_and_run_side_by_side(tmp_path):
    from lrtune import locks
    from lrtune.outdir import claim_out

    out = tmp_path / "data"
    out.mkdir()
    child = _hold_in_child(out, ".lrtune-lock-s001")  # shard 1 collecting
    try:
        assert claim_out(out, "collect", lock=".lrtune-lock-s000") == out  # shard 0 may
        with pytest.raises(ConfigError, match="being written by another lrtune command"):
            claim_out(out, "collect", lock=".lrtune-lock-s001")  # a second shard 1 may not
    finally:
        child.stdin.close()
        child.wait()
        locks.release_all()


def test_the_command_line_frees_its_locks_when_a_command_ends(tmp_path):
    from lrtune import locks
    from lrtune.boundary import run_guarded

    def command() -> int:
        assert locks.hold(tmp_path)
        return 0

    assert run_guarded(command) == 0
    assert locks._HELD == {}
    child = _hold_in_child(tmp_path)  # another process can take it now
    child.stdin.close()
    assert child.wait() == 0


def test_a_second_command_writing_one_json_file_is_refused_and_the_first_keeps_it(tmp_path):
    from lrtune import locks
    from lrtune.outdir import claim_json_out

    out = tmp_path / "results" / "profile.json"
    out.parent.mkdir()
    out.write_text('{"c1": 0.3}')
    child = _hold_in_child(out.parent, lock=".profile.json.lrtune-lock")
    try:
        with pytest.raises(ConfigError, match=r"^--out .*profile.json is being written by another lrtune command"):
            claim_json_out(out)
        assert out.read_text() == '{"c1": 0.3}'
    finally:
        child.stdin.close()
        child.wait()
    claim_json_out(tmp_path / "new" / "p.json")  # its folder made, the file itself not yet written
    assert not (tmp_path / "new" / "p.json").exists()
    claim_json_out(out)
    locks.release_all()
