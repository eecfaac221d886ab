"""The web's CPU per agenda as instructions counted by valgrind: a figure the VM does not move.

`python -m bench.instructions [--rounds N]` runs the hot requests of the HTTP throughput run —
bulk submit 100, pull 10, batch report 10 — through POP's WSGI application in one process
(Django, its middleware, DRF, the services; no server, no client), on its own database, under
`valgrind --tool=callgrind`. After a warm-up of ten rounds (a bulk submit and ten pulls each
followed by its batch report), it counts the instructions this process executes for N more
bulk submits, then for their pulls, then for their batch reports, and prints each per agenda
(callgrind dumps its counters between the three). PostgreSQL's own work runs in its server
processes and is not counted; nor is any wait.

Why: the throughput runs measure seconds of CPU, which on this shared VM drift by a fifth
within minutes (bench/RESULTS.md), so a lever worth a few percent of the web's CPU cannot be
told from the drift without many alternated runs. Instructions for the same code and inputs
repeat to a few thousandths of a percent (2026-11-28: 1,147,029,454 and 1,147,060,261 for the
same 300 agendas), whatever else the machine does; a pull's count moves by up to 1% between
runs, as its inline fills fall. Judge a change by this count before and
after (the same rounds); the throughput runs still decide the targets. Needs Debian's valgrind
(`apt-get install valgrind`); about 30 times slower than a plain run.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import ROOT, bench_database, close_django_connections, django_setup, make_world

WARM_UP_ROUNDS = 10
PULL = 10
BULK = 100
SUCCEEDED = [{"name": "noop", "state": "succeeded", "result": {"ok": True}}]
OPERATIONS = [{"name": "noop", "type": "noop", "payload": {}}]
_CHILD = "POP_BENCH_INSTRUCTIONS_CHILD"
SECTIONS = ("bulk", "pull", "report")  # counted in this order, one callgrind dump each


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="measured bulk submits of 100")
    args = parser.parse_args()
    if os.environ.get(_CHILD):
        _count(args.rounds)
        return
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("bench.instructions needs valgrind (Debian: apt-get install valgrind)")
    with tempfile.TemporaryDirectory(prefix="pop-instructions-") as out:
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={out}/callgrind.out",
                f"--log-file={out}/valgrind.log",  # its own lines; the child's errors on stderr
                sys.executable,
                "-m",
                "bench.instructions",
                f"--rounds={args.rounds}",
            ],
            cwd=ROOT,
            env={**os.environ, _CHILD: "1", "PYTHONPATH": str(ROOT)},
            check=True,
        )
        # Each dump writes callgrind.out.<n>, its counters since the one before.
        totals = {
            section: _total(Path(out) / f"callgrind.out.{number}")
            for number, section in enumerate(SECTIONS, start=1)
        }
    agendas = args.rounds * BULK
    print(f"web instructions per agenda, in process ({agendas} agendas after the warm-up):")
    for section, total in totals.items():
        print(f"  {section:8} {total / agendas / 1e6:7.3f} M")
    print(f"  {'total':8} {sum(totals.values()) / agendas / 1e6:7.3f} M")


def _total(path: Path) -> int:
    match = re.search(r"^(?:totals|summary): (\d+)", path.read_text(), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no instruction count in {path}")
    return int(match.group(1))


def _count(rounds: int) -> None:
    """In the child, under callgrind: warm up, then count each section and dump it."""
    with bench_database(f"pop_bench_instructions_{os.getpid()}") as dbname:
        django_setup(dbname)
        world = make_world(customers=5, queue_size=100)
        from popsite.wsgi import application

        api = _Api(application, world)
        for number in range(WARM_UP_ROUNDS):
            api.bulk(number)
            for _ in range(BULK // PULL):
                api.report(api.pull())
        _callgrind("--instr=on")
        for number in range(rounds):
            api.bulk(number)
        _callgrind("--dump")
        pulled = [api.pull() for _ in range(rounds * BULK // PULL)]
        _callgrind("--dump")
        for items in pulled:
            api.report(items)
        _callgrind("--dump")
        _callgrind("--instr=off")
        close_django_connections()


def _callgrind(option: str) -> None:
    subprocess.run(
        ["callgrind_control", option, str(os.getpid())],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


class _Api:
    """The three requests, as popclient sends them, straight to the WSGI application."""

    def __init__(self, application, world) -> None:
        self.application, self.world = application, world

    def bulk(self, number: int) -> None:
        customer = self.world.customers[number % len(self.world.customers)]
        body = {"agendas": [{"operations": OPERATIONS} for _ in range(BULK)]}
        self._post("/api/v1/agendas/bulk/", self.world.tokens[customer], body)

    def pull(self) -> list:
        path = f"/api/v1/insights/{self.world.insight_id}/pull/"
        answer = self._post(path, self.world.worker_token, {"count": PULL, "worker": "bench"})
        if len(answer["agendas"]) != PULL:
            raise RuntimeError(f"a pull took {len(answer['agendas'])} agendas, not {PULL}")
        return answer["agendas"]

    def report(self, items: list) -> None:
        reports = [
            {
                "execution": item["execution"]["id"],
                "lease_token": item["execution"]["lease_token"],
                "operations": SUCCEEDED,
                "state": "succeeded",
            }
            for item in items
        ]
        answer = self._post(
            "/api/v1/executions/report/", self.world.worker_token, {"reports": reports}
        )
        if not all(result["ok"] for result in answer["results"]):
            raise RuntimeError(f"a report was refused: {answer['results']}")

    def _post(self, path: str, token: str, body: dict) -> dict:
        data = json.dumps(body).encode()
        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": path,
            "QUERY_STRING": "",
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "HTTP_HOST": "127.0.0.1:8000",
            "REMOTE_ADDR": "127.0.0.1",
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(data)),
            "HTTP_AUTHORIZATION": f"Token {token}",
            "wsgi.input": io.BytesIO(data),
            "wsgi.errors": sys.stderr,
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "http",
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
        }
        status = []
        body_out = b"".join(
            self.application(environ, lambda line, headers, *_: status.append(line))
        )
        if not status[0].startswith("200"):
            raise RuntimeError(f"{path}: {status[0]} {body_out[:300]!r}")
        return json.loads(body_out)


if __name__ == "__main__":
    main()
