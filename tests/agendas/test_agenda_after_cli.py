"""`pop agendas submit --after ID --after-link LINK --after-on …` sends `after`, and
`pop agendas show` prints what an agenda waits for (a MockTransport server, no database)."""

import json

from tests.popclient.test_cli import AGENDA, Server, pop


def test_submit_sends_after_with_ids_link_ids_and_the_rule(tmp_path):
    server = Server({("POST", "/agendas/"): (201, {"id": "a9", "state": "pending"})})
    path = tmp_path / "agenda.json"
    path.write_text(json.dumps({"operations": [{"name": "a", "type": "log"}]}))

    code, _, _ = pop(
        server, "agendas", "submit", str(path), "--after", "u1", "--after", "u2",
        "--after-link", "batch-7", "--after-on", "completed", "--json",
    )  # fmt: skip

    assert code == 0
    assert server.body()["after"] == {
        "agendas": ["u1", "u2"],
        "link_ids": ["batch-7"],
        "on": "completed",
    }


def test_submit_without_after_sends_none(tmp_path):
    server = Server({("POST", "/agendas/"): (201, {"id": "a9", "state": "ready"})})
    path = tmp_path / "agenda.json"
    path.write_text(json.dumps({"operations": [{"name": "a", "type": "log"}]}))

    code, _, _ = pop(server, "agendas", "submit", str(path), "--json")

    assert code == 0
    assert "after" not in server.body()


def test_after_on_without_agendas_is_a_usage_error_and_sends_nothing(tmp_path):
    server = Server()
    path = tmp_path / "agenda.json"
    path.write_text(json.dumps({"operations": [{"name": "a", "type": "log"}]}))

    code, _, err = pop(server, "agendas", "submit", str(path), "--after-on", "completed")

    assert code != 0
    assert "--after" in err
    assert server.requests == []


def test_show_prints_how_many_agendas_are_left(tmp_path):
    agenda = {
        **AGENDA,
        "state": "pending",
        "after": {"on": "succeeded", "on_failure": "fail", "total": 10, "remaining": 3},
    }
    server = Server({("GET", "/agendas/a1/"): (200, agenda)})

    code, out, _ = pop(server, "agendas", "show", "a1")

    assert code == 0
    assert "After      3 of 10 agendas left (on succeeded, on failure fail)" in out
