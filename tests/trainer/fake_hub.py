"""A private model repo served over HTTP the way the Hugging Face Hub serves one, for the online ``hf://``
tests (no Hub is reachable here). ``huggingface_hub`` is pointed at it with ``HF_ENDPOINT``.

Only the four calls ``snapshot_download`` makes are served: the revision's info
(``/api/models/<repo>/revision/<rev>``), its file tree (``/api/models/<repo>/tree/<commit>``), and a
``HEAD``/``GET`` of each file (``/<repo>/resolve/<commit>/<file>`` with the ``X-Repo-Commit``, ``ETag`` and
``Content-Length`` headers the client reads). Every request must carry ``Authorization: Bearer <token>``;
without it the server answers as the Hub does for a private repo (401, ``X-Error-Code: RepoNotFound``).
Requests are recorded so a test can see what the client sent.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass
class FakeHub:
    repo_id: str
    files: dict[str, bytes]
    token: str
    url: str = ""
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    """(method, path, Authorization header) of every request."""

    @property
    def commit(self) -> str:
        return hashlib.sha1(b"".join(k.encode() + v for k, v in sorted(self.files.items()))).hexdigest()

    def answer(self, method: str, path: str, auth: str | None) -> tuple[int, dict[str, str], bytes]:
        self.requests.append((method, path, auth))
        if auth != f"Bearer {self.token}":
            return 401, {"X-Error-Code": "RepoNotFound"}, b'{"error": "Repository not found"}'
        path = path.split("?", 1)[0]
        api = f"/api/models/{self.repo_id}/"
        if path.startswith(api + "revision/"):
            info = {
                "id": self.repo_id,
                "sha": self.commit,
                "siblings": [{"rfilename": name} for name in sorted(self.files)],
            }
            return 200, {"Content-Type": "application/json"}, json.dumps(info).encode()
        if path == f"{api}tree/{self.commit}":
            tree = [
                {"type": "file", "path": n, "size": len(b), "oid": hashlib.sha1(b).hexdigest()}
                for n, b in sorted(self.files.items())
            ]
            return 200, {"Content-Type": "application/json"}, json.dumps(tree).encode()
        prefix = f"/{self.repo_id}/resolve/{self.commit}/"
        if path.startswith(prefix) and path[len(prefix) :] in self.files:
            body = self.files[path[len(prefix) :]]
            etag = f'"{hashlib.sha1(body).hexdigest()}"'
            return 200, {"X-Repo-Commit": self.commit, "ETag": etag}, body
        return 404, {"X-Error-Code": "EntryNotFound"}, b'{"error": "Entry not found"}'


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _reply(self, with_body: bool) -> None:
            status, headers, body = hub.answer(self.command, self.path, self.headers.get("Authorization"))
            self.send_response(status)
            for name, value in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(name, value)
            self.end_headers()
            if with_body:
                self.wfile.write(body)

        def do_GET(self) -> None:
            self._reply(True)

        def do_HEAD(self) -> None:
            self._reply(False)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@contextmanager
def serve(repo_id: str, folder: Path, token: str) -> Iterator[FakeHub]:
    """Serve every file of ``folder`` as private model repo ``repo_id`` on a loopback port."""
    hub = FakeHub(repo_id, {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}, token)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
