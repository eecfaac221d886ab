"""A local HTTP listener that serves a planted marker and counts every request it gets: proof
that the server fetched nothing on a customer's behalf (no request) and showed nothing it
could have fetched (the marker never appears in an answer)."""

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def marker_listener(marker: str) -> Iterator[tuple[str, list[str]]]:
    """(base URL, the paths requested so far) of a listener on 127.0.0.1 that answers every
    GET and POST with a JSON schema holding `marker`."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            hits.append(self.path)
            body = json.dumps({"type": "string", "const": marker}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET  # noqa: N815

        def log_message(self, *args):
            """Quiet: the tests read `hits`, not the log."""

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()
