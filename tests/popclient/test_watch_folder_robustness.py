"""The watch folder on names that are not UTF-8, on errors nobody planned for, and on many
files at once (popclient/README.md, "Watch folders"): one bad file never stops the others, and
the state file is written a bounded number of times, not once per file."""

import json
import os
import threading

import pytest

from popclient.watch_folder import (
    DEFAULT_STATE_NAME,
    STATE_SAVE_SECONDS,
    FileVersion,
    FolderWatcher,
    WatchState,
    firing_key,
)
from tests.popclient.test_watch_folder import SETTLE, Clock, Fire, settled_pass, state_of


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


def drop_bytes_name(folder, name: bytes, content: bytes = b"x") -> None:
    with open(os.path.join(os.fsencode(folder), name), "wb") as handle:
        handle.write(content)


def test_a_file_whose_name_is_not_utf8_fires_with_an_escaped_name_and_a_stable_key(folder, clock):
    drop_bytes_name(folder, b"clip-\xff.mov")
    fire = Fire()
    watcher = watcher_for(folder, fire, clock)

    settled_pass(watcher, clock)
    watcher.save_state()
    restarted = watcher_for(folder, fire, clock)
    settled_pass(restarted, clock)

    [(event, key)] = fire.calls
    assert (event["name"], event["relative_path"]) == ("clip-\\xff.mov", "clip-\\xff.mov")
    assert event["path"].endswith("/drop/clip-\\xff.mov")
    json.dumps(event).encode("utf-8")  # what goes on the wire is valid UTF-8
    version = FileVersion("clip-\udcff.mov", 1, os.stat(folder / "clip-\udcff.mov").st_mtime_ns)
    assert key == firing_key("trig-1", version)
    assert [entry["status"] for entry in state_of(folder)["files"].values()] == ["fired"]


def test_the_key_of_a_utf8_name_is_what_it_always_was():
    version = FileVersion("été.mxf", 3, 7)

    key = firing_key("trig-1", version)

    import hashlib

    expected = hashlib.sha256("trig-1\0été.mxf\x003\x007".encode()).hexdigest()
    assert key == "pop-watch-" + expected


def test_a_file_that_fails_unexpectedly_is_recorded_refused_and_the_others_fire(folder, clock):
    (folder / "a.mxf").write_bytes(b"a")
    (folder / "b.mxf").write_bytes(b"bb")
    fire = Fire(ValueError("cannot encode this one"), (201, {"status": "submitted"}))
    watcher = watcher_for(folder, fire, clock)

    settled_pass(watcher, clock)
    watcher.save_state()
    again = Fire()
    settled_pass(watcher_for(folder, again, clock), clock)

    assert sorted(fire.names) == ["a.mxf", "b.mxf"]
    files = state_of(folder)["files"]
    refused = files[fire.names[0]]
    assert (refused["status"], refused["http_status"]) == ("refused", 0)
    assert refused["answer"] == {"error": "ValueError: cannot encode this one"}
    assert files[fire.names[1]]["status"] == "fired"
    assert again.calls == []  # neither fires again after a restart


def test_a_listener_that_fails_does_not_stop_the_watch(folder, clock):
    (folder / "a.mxf").write_bytes(b"a")
    (folder / "b.mxf").write_bytes(b"bb")
    fire = Fire()

    def listener(*outcome):
        raise UnicodeEncodeError("utf-8", "\udcff", 0, 1, "surrogates not allowed")

    watcher = watcher_for(folder, fire, clock, on_outcome=listener)
    settled_pass(watcher, clock)

    assert sorted(fire.names) == ["a.mxf", "b.mxf"]


class CountingSaves:
    def __init__(self, monkeypatch):
        self.count = 0
        real = WatchState.save

        def save(state):
            self.count += 1
            real(state)

        monkeypatch.setattr(WatchState, "save", save)


def test_two_thousand_files_in_one_pass_write_the_state_file_a_bounded_number_of_times(
    folder, clock, monkeypatch
):
    for number in range(2_000):
        (folder / f"f{number:05}.mxf").write_bytes(b"")
    seconds_per_firing = 0.01
    answers = Fire()

    def fire(event, key):
        clock.advance(seconds_per_firing)  # a firing takes a while
        return answers(event, key)

    saves = CountingSaves(monkeypatch)
    watcher = watcher_for(folder, fire, clock)

    settled_pass(watcher, clock)
    during_pass = saves.count
    watcher.save_state()  # on exit

    assert len(answers.calls) == 2_000
    assert during_pass <= 2 + 2_000 * seconds_per_firing / STATE_SAVE_SECONDS
    assert len(state_of(folder)["files"]) == 2_000


def test_what_a_crash_lost_of_the_state_fires_again_with_the_same_keys(folder, clock):
    for name in ("a.mxf", "b.mxf", "c.mxf"):
        (folder / name).write_bytes(name.encode())
    fire = Fire()
    settled_pass(watcher_for(folder, fire, clock), clock)  # then killed: no save on exit

    again = Fire((200, {"status": "duplicate"}))
    restarted = watcher_for(folder, again, clock)
    clock.advance(STATE_SAVE_SECONDS)
    settled_pass(restarted, clock)
    restarted.save_state()

    first_keys = {event["relative_path"]: key for event, key in fire.calls}
    assert again.calls and all(first_keys[e["relative_path"]] == k for e, k in again.calls)
    assert (len(fire.calls), len(again.calls)) == (3, 2)  # only the first was on disk
    assert sorted(state_of(folder)["files"]) == ["a.mxf", "b.mxf", "c.mxf"]


def test_run_writes_the_state_file_when_it_stops(folder):
    fired = threading.Event()
    watcher = FolderWatcher(
        folder, "trig-1", Fire(), settle_seconds=0.2, on_outcome=lambda *o: fired.set()
    )
    (folder / "a.mxf").write_bytes(b"a")
    watcher._saved_at = float("inf")  # no write is due while it runs
    thread = threading.Thread(target=watcher.run, kwargs={"poll": True})
    thread.start()
    try:
        assert fired.wait(5)
        assert not (folder / DEFAULT_STATE_NAME).exists()
    finally:
        watcher.stop()
        thread.join(5)

    assert sorted(state_of(folder)["files"]) == ["a.mxf"]
