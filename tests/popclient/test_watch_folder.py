"""The watch-folder engine (popclient.watch_folder) on real files in a temporary directory, with
a fake `fire` and a clock the tests move: settling, the state file across restarts, patterns,
moving and marking, refusals and retries."""

import json
import os
import threading
import time

import httpx
import pytest

from popclient.watch_folder import (
    DEFAULT_STATE_NAME,
    FileVersion,
    FolderWatcher,
    StateFileError,
    firing_key,
)

SETTLE = 10.0


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


class Fire:
    """Answers each firing with the next of `answers` (the last one repeats); an exception in
    the list is raised instead. Records (event, idempotency key) per call."""

    def __init__(self, *answers):
        self.answers = list(answers) or [(201, {"status": "submitted"})]
        self.calls = []

    def __call__(self, event, key):
        self.calls.append((event, key))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        status, body = answer
        return status, {**body, "agenda": f"agenda-{len(self.calls)}"}

    @property
    def names(self):
        return [event["relative_path"] for event, _ in self.calls]


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def folder(tmp_path):
    path = tmp_path / "drop"
    path.mkdir()
    return path


def watcher_for(folder, fire, clock, **options):
    return FolderWatcher(folder, "trig-1", fire, settle_seconds=SETTLE, clock=clock, **options)


def settled_pass(watcher, clock):
    """A first pass that sees the files, then one a settle time later."""
    watcher.step()
    clock.advance(SETTLE)
    watcher.step()


def state_of(folder):
    return json.loads((folder / DEFAULT_STATE_NAME).read_text())


def test_a_new_file_fires_once_after_it_stays_unchanged_for_the_settle_time(folder, clock):
    (folder / "clip.mxf").write_bytes(b"x" * 100)
    fire = Fire()
    watcher = watcher_for(folder, fire, clock)

    watcher.step()
    clock.advance(SETTLE - 0.1)
    watcher.step()
    assert fire.calls == []

    clock.advance(0.1)
    watcher.step()
    clock.advance(SETTLE * 3)
    watcher.step()

    assert fire.names == ["clip.mxf"]


def test_the_event_names_the_file_its_size_and_mtime_with_a_key_of_that_version(folder, clock):
    path = folder / "clip.mxf"
    path.write_bytes(b"x" * 7)
    os.utime(path, ns=(1_700_000_000_123_456_789, 1_700_000_000_123_456_789))
    fire = Fire()

    settled_pass(watcher_for(folder, fire, clock), clock)

    [(event, key)] = fire.calls
    assert event == {
        "path": str(path),
        "name": "clip.mxf",
        "relative_path": "clip.mxf",
        "size": 7,
        "mtime": "2023-11-14T22:13:20.123457+00:00",
    }
    assert key == firing_key("trig-1", FileVersion("clip.mxf", 7, 1_700_000_000_123_456_789))
    assert key != firing_key("trig-2", FileVersion("clip.mxf", 7, 1_700_000_000_123_456_789))
    assert key != firing_key("trig-1", FileVersion("clip.mxf", 8, 1_700_000_000_123_456_789))
    assert len(key) <= 255


def test_a_file_still_growing_keeps_resetting_its_settle_clock(folder, clock):
    path = folder / "growing.mxf"
    fire = Fire()
    watcher = watcher_for(folder, fire, clock)

    for _ in range(5):  # a chunk every 0.6 settle times: never unchanged long enough
        with path.open("ab") as handle:
            handle.write(b"x" * 1000)
        watcher.step()
        clock.advance(SETTLE * 0.6)
    watcher.step()
    assert fire.calls == []

    clock.advance(SETTLE * 0.4)
    watcher.step()

    assert fire.names == ["growing.mxf"]
    assert fire.calls[0][0]["size"] == 5000


def test_a_restarted_watcher_does_not_fire_a_fired_file_again(folder, clock):
    (folder / "clip.mxf").write_bytes(b"x")
    fire = Fire()
    settled_pass(watcher_for(folder, fire, clock), clock)

    restarted = watcher_for(folder, fire, clock)
    settled_pass(restarted, clock)

    assert fire.names == ["clip.mxf"]
    entry = state_of(folder)["files"]["clip.mxf"]
    assert (entry["status"], entry["trigger"], entry["size"]) == ("fired", "trig-1", 1)
    assert entry["answer"] == {"status": "submitted", "agenda": "agenda-1"}


def test_a_file_that_arrived_while_the_watcher_was_down_fires_after_the_restart(folder, clock):
    (folder / "first.mxf").write_bytes(b"x")
    fire = Fire()
    settled_pass(watcher_for(folder, fire, clock), clock)
    (folder / "second.mxf").write_bytes(b"y")

    settled_pass(watcher_for(folder, fire, clock), clock)

    assert fire.names == ["first.mxf", "second.mxf"]


def test_a_file_replaced_by_another_version_fires_again(folder, clock):
    path = folder / "clip.mxf"
    path.write_bytes(b"x")
    fire = Fire()
    watcher = watcher_for(folder, fire, clock)
    settled_pass(watcher, clock)

    path.write_bytes(b"a longer replacement")
    settled_pass(watcher, clock)

    assert fire.names == ["clip.mxf", "clip.mxf"]
    assert [event["size"] for event, _ in fire.calls] == [1, 20]
    assert fire.calls[0][1] != fire.calls[1][1]


def test_only_files_matching_a_pattern_fire_and_hidden_files_never(folder, clock):
    for name in ["a.mxf", "b.MXF", "c.mov", "notes.txt", ".a.mxf.partial", ".hidden.mxf"]:
        (folder / name).write_bytes(b"x")
    fire = Fire()

    settled_pass(watcher_for(folder, fire, clock, patterns=["*.mxf", "*.mov"]), clock)

    assert sorted(fire.names) == ["a.mxf", "c.mov"]


def test_sub_folders_fire_only_when_recursive(folder, clock, tmp_path):
    (folder / "show" / "ep1").mkdir(parents=True)
    (folder / "show" / "ep1" / "clip.mxf").write_bytes(b"x")
    (folder / "top.mxf").write_bytes(b"x")
    plain, recursive = Fire(), Fire()

    settled_pass(watcher_for(folder, plain, clock), clock)
    settled_pass(
        watcher_for(
            folder, recursive, clock, recursive=True, state_file=tmp_path / "recursive.json"
        ),
        clock,
    )

    assert plain.names == ["top.mxf"]
    assert sorted(recursive.names) == ["show/ep1/clip.mxf", "top.mxf"]


def test_move_to_moves_a_fired_file_keeping_its_sub_folder(folder, clock, tmp_path):
    done = tmp_path / "done"
    (folder / "show").mkdir()
    (folder / "show" / "clip.mxf").write_bytes(b"x")
    (done / "show").mkdir(parents=True)
    (done / "show" / "clip.mxf").write_bytes(b"an older one")
    fire = Fire()

    settled_pass(watcher_for(folder, fire, clock, recursive=True, move_to=done), clock)

    assert fire.names == ["show/clip.mxf"]
    assert not (folder / "show" / "clip.mxf").exists()
    assert (done / "show" / "clip.mxf").read_bytes() == b"an older one"
    assert (done / "show" / "clip-1.mxf").read_bytes() == b"x"
    assert state_of(folder)["files"] == {}


def test_mark_suffix_renames_a_fired_file_which_then_never_fires(folder, clock):
    (folder / "clip.mxf").write_bytes(b"x")
    fire = Fire()
    watcher = watcher_for(folder, fire, clock, mark_suffix=".done")

    settled_pass(watcher, clock)
    settled_pass(watcher, clock)

    assert fire.names == ["clip.mxf"]
    assert sorted(p.name for p in folder.iterdir()) == [DEFAULT_STATE_NAME, "clip.mxf.done"]


def test_a_move_cut_short_after_the_firing_is_done_by_the_restarted_watcher(folder, clock):
    (folder / "clip.mxf").write_bytes(b"x")
    fire = Fire()
    settled_pass(watcher_for(folder, fire, clock), clock)  # as if it died before marking

    settled_pass(watcher_for(folder, fire, clock, mark_suffix=".done"), clock)

    assert fire.names == ["clip.mxf"]
    assert (folder / "clip.mxf.done").exists()


@pytest.mark.parametrize("status", [400, 401, 404])
def test_a_refused_file_is_recorded_and_never_fired_again_until_retry_refused(
    folder, clock, status, caplog
):
    (folder / "clip.mxf").write_bytes(b"x")
    fire = Fire((status, {"detail": "no"}), (201, {"status": "submitted"}))
    watcher = watcher_for(folder, fire, clock, move_to=folder.parent / "done")

    settled_pass(watcher, clock)
    for _ in range(3):
        clock.advance(SETTLE * 10)
        watcher.step()
    settled_pass(watcher_for(folder, fire, clock), clock)

    assert fire.names == ["clip.mxf"]
    assert state_of(folder)["files"]["clip.mxf"]["status"] == "refused"
    assert (folder / "clip.mxf").exists()  # a refused file is not moved: it was not processed
    assert f"refused (HTTP {status})" in caplog.text and "not retried" in caplog.text

    settled_pass(watcher_for(folder, fire, clock, retry_refused=True), clock)

    assert fire.names == ["clip.mxf", "clip.mxf"]
    assert state_of(folder)["files"]["clip.mxf"]["status"] == "fired"


@pytest.mark.parametrize(
    "failure", [(503, {"detail": "down"}), (429, {}), httpx.ConnectError("refused")]
)
def test_an_unanswered_or_5xx_firing_is_retried_after_a_backoff_with_the_same_key(
    folder, clock, failure
):
    (folder / "a.mxf").write_bytes(b"x")
    (folder / "b.mxf").write_bytes(b"y")
    fire = Fire(failure, failure, (201, {"status": "submitted"}))
    watcher = watcher_for(folder, fire, clock)

    settled_pass(watcher, clock)
    assert len(fire.calls) == 1  # the server is down: b waits too
    assert not (folder / DEFAULT_STATE_NAME).exists()
    watcher.step()
    assert len(fire.calls) == 1  # not before the backoff
    clock.advance(1.3)
    watcher.step()
    clock.advance(2.5)
    watcher.step()

    watcher.save_state()  # as on exit: passes write it at most every STATE_SAVE_SECONDS

    assert fire.names == ["a.mxf", "a.mxf", "a.mxf", "b.mxf"]
    assert len({key for event, key in fire.calls[:3]}) == 1
    assert {name: e["status"] for name, e in state_of(folder)["files"].items()} == {
        "a.mxf": "fired",
        "b.mxf": "fired",
    }


def test_fifty_files_dropped_at_once_fire_fifty_times_in_one_pass(folder, clock):
    for number in range(50):
        (folder / f"clip-{number:02}.mxf").write_bytes(b"x" * number)
    fire = Fire()
    watcher = watcher_for(folder, fire, clock)

    settled_pass(watcher, clock)
    watcher.save_state()

    assert sorted(fire.names) == [f"clip-{number:02}.mxf" for number in range(50)]
    assert len(state_of(folder)["files"]) == 50


def test_records_of_deleted_files_are_pruned_but_kept_when_the_folder_looks_empty(folder, clock):
    (folder / "a.mxf").write_bytes(b"x")
    (folder / "b.mxf").write_bytes(b"y")
    watcher = watcher_for(folder, Fire(), clock)
    settled_pass(watcher, clock)

    (folder / "a.mxf").unlink()
    watcher.step()
    watcher.save_state()
    assert sorted(state_of(folder)["files"]) == ["b.mxf"]

    (folder / "b.mxf").unlink()  # everything gone at once: maybe an unmounted share
    watcher.step()
    watcher.save_state()
    assert sorted(state_of(folder)["files"]) == ["b.mxf"]


def test_the_state_file_is_replaced_whole_and_a_broken_one_stops_the_start(folder, clock):
    (folder / "clip.mxf").write_bytes(b"x")
    settled_pass(watcher_for(folder, Fire(), clock), clock)

    assert sorted(p.name for p in folder.iterdir()) == [DEFAULT_STATE_NAME, "clip.mxf"]
    (folder / DEFAULT_STATE_NAME).write_text("{not json")
    with pytest.raises(StateFileError, match="cannot read the state file"):
        watcher_for(folder, Fire(), clock)


def test_a_file_changed_after_the_scan_is_settled_again_before_it_fires(folder, clock):
    path = folder / "clip.mxf"
    path.write_bytes(b"x")
    fire = Fire()
    watcher = watcher_for(folder, fire, clock)
    watcher.step()
    clock.advance(SETTLE)
    real_scan = watcher.scan

    def scan_then_append():
        found = real_scan()
        with path.open("ab") as handle:
            handle.write(b"more")
        return found

    watcher.scan = scan_then_append
    watcher.step()
    watcher.scan = real_scan
    assert fire.calls == []

    settled_pass(watcher, clock)
    assert [event["size"] for event, _ in fire.calls] == [5]


@pytest.mark.parametrize("poll", [False, True], ids=["file events", "polling"])
def test_run_fires_a_file_copied_in_while_it_runs_and_stops_when_asked(folder, poll):
    fired = threading.Event()
    fire = Fire()
    watcher = FolderWatcher(
        folder,
        "trig-1",
        fire,
        settle_seconds=0.3,
        on_outcome=lambda *outcome: fired.set(),
    )
    thread = threading.Thread(target=watcher.run, kwargs={"poll": poll})
    thread.start()
    try:
        time.sleep(0.2)
        (folder / "clip.mxf").write_bytes(b"x" * 10)
        assert fired.wait(5)
    finally:
        watcher.stop()
        thread.join(5)

    assert not thread.is_alive()
    assert fire.names == ["clip.mxf"]
