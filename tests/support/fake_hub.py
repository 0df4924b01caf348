"""A small Hugging Face Hub on 127.0.0.1 for the push/pull tests: real sockets, real huggingface_hub client.

It implements the endpoints huggingface_hub 2.x calls for the paths eagleconv
uses (read from its code: hf_api.create_repo / model_info / list_repo_tree /
create_branch / _validate_yaml, _commit_api._fetch_upload_modes / _send_commit,
file_download's HEAD + GET on /resolve/), in regular upload mode only (no LFS,
no xet), with the token checked on every request.  Every request is recorded,
so a test can assert that a refused push sent none.

Failure switches (``hub.fail``): ``"commit-500"`` answers the commit with a
500 after reading it and stores nothing; ``"commit-lost"`` stores the commit
then drops the connection without an answer; ``"commit-race"`` lets another
writer commit first, so the client's ``parentCommit`` is stale (412); ``"all-500"`` answers every request with
a 500 (a Hub that is down); ``"resolve-500"`` answers the file downloads (``/resolve/``) with a 500, which
huggingface_hub retries five times.

Read-side switches (header-only ``hf://`` and ``audit``): a file may be a :class:`Sparse` (a 5 GB drafter that is
its header then zeros, served by range, never built); ``/resolve/`` answers ``Range`` with 206 and
``Content-Range``; ``GET /api/models`` searches (``search``, ``author``, ``limit``).  ``hub.throttle[repo_id] = n``
answers that repository's next n requests with 429 and ``Retry-After: hub.retry_after``; ``hub.broken`` (repo
ids) answers 500; ``hub.slow[repo_id] = s`` waits s seconds before each answer; ``hub.truncate`` (repo ids)
sends half of each file's bytes then closes; ``Repo.gated`` answers the files with 403 GatedRepo;
``hub.on_info`` runs after each model-info answer (a push landing between two reads).  A private repository
read without the token is a 401, as on the Hub.

Other switches: ``hub.hold`` names routes ("create", "info", "tree", "commit",
"resolve") whose answer waits until ``hub.release`` is set (at most
``hold_s``), a server that holds responses; ``hub.list_without_hash`` lists
tree entries with ``"oid": null``; ``hub.corrupt`` names paths that the next
commit stores with their last byte flipped.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

TOKEN = "hf_fake_token_for_loopback"


@dataclass(frozen=True)
class Sparse:
    """A large file that is ``head`` then zeros up to ``size``: its bytes are made per range, never all at once."""

    head: bytes
    size: int

    def __len__(self) -> int:
        return self.size

    def slice(self, start: int, end: int) -> bytes:
        part = self.head[start:end]
        return part + bytes(max(0, end - max(start, len(self.head))))


Blob = bytes | Sparse


def git_oid(data: Blob) -> str:
    if isinstance(data, Sparse):
        return hashlib.sha1(b"sparse %d\0" % data.size + data.head, usedforsecurity=False).hexdigest()
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data, usedforsecurity=False).hexdigest()


@dataclass
class Repo:
    private: bool
    commits: dict[str, dict[str, Blob]] = field(default_factory=dict)  # sha -> {path: bytes}
    refs: dict[str, str] = field(default_factory=dict)  # branch or refs/pr/N -> sha
    gated: bool = False


class FakeHub:
    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[tuple[str, str]] = []
        self.fail: str | None = None
        self.hold: set[str] = set()
        self.hold_s = 60.0
        self.release = threading.Event()
        self.list_without_hash = False
        self.corrupt: set[str] = set()
        self.throttle: dict[str, int] = {}
        self.retry_after = 1
        self.broken: set[str] = set()
        self.slow: dict[str, float] = {}
        self.truncate: set[str] = set()
        self.on_info: Callable[[str], None] | None = None
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> FakeHub:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.release.set()  # held handlers finish (into a closed socket) instead of blocking server_close
        self.server.shutdown()
        self.server.server_close()

    # -- state helpers used by tests --------------------------------------------------------
    def new_commit(self, repo: Repo, files: dict[str, Blob], parent: str | None) -> str:
        digest = hashlib.sha1(f"{parent}:{len(repo.commits)}".encode())  # noqa: S324
        for path in sorted(files):
            blob = files[path]
            digest.update(path.encode() + b"\0" + (blob if isinstance(blob, bytes) else git_oid(blob).encode()))
        sha = digest.hexdigest()
        repo.commits[sha] = dict(files)
        return sha

    def add(self, repo_id: str, files: dict[str, Blob], *, private: bool = False, gated: bool = False) -> str:
        """Publish ``files`` as a repository's next commit on main (the repository made if new); its sha."""
        with self.lock:
            repo = self.repos.setdefault(repo_id, Repo(private=private, gated=gated))
            parent = repo.refs.get("main")
            repo.refs["main"] = sha = self.new_commit(repo, files, parent)
        return sha

    def files(self, repo_id: str, revision: str = "main") -> dict[str, Blob]:
        repo = self.repos[repo_id]
        return repo.commits[repo.refs.get(revision, revision)]

    def commit_posts(self) -> int:
        return sum(1 for method, path in self.requests if method == "POST" and "/commit/" in path)


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # quiet
            pass

        # -- plumbing ----------------------------------------------------------------------
        def _body(self) -> bytes:
            n = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(n) if n else b""

        def _send(self, status: int, payload: object = None, headers: dict[str, str] | None = None,
                  raw: bytes | None = None) -> None:
            data = raw if raw is not None else (json.dumps(payload).encode() if payload is not None else b"")
            self.send_response(status)
            self.send_header("Content-Type", "application/json" if raw is None else "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _error(self, status: int, message: str, code: str | None = None) -> None:
            self._send(status, {"error": message}, {"X-Error-Code": code} if code else None)

        def _authorized(self) -> bool:
            return self.headers.get("Authorization") == f"Bearer {TOKEN}"

        def _repo(self, repo_id: str, write: bool) -> Repo | None:
            repo = hub.repos.get(repo_id)
            if repo is None or ((write or repo.private) and not self._authorized()):
                self._error(404 if repo is None else 401, f"Repository {repo_id} not found", "RepoNotFound")
                return None
            return repo

        def _read_switches(self, repo_id: str) -> bool:
            """The per-repository read failures; True when one answered."""
            if repo_id in hub.slow:
                time.sleep(hub.slow[repo_id])
            with hub.lock:
                throttled = hub.throttle.get(repo_id, 0) > 0
                if throttled:
                    hub.throttle[repo_id] -= 1
            if throttled:
                self._send(429, {"error": "rate limited"}, {"Retry-After": str(hub.retry_after)})
                return True
            if repo_id in hub.broken:
                self._error(500, "Internal Error")
                return True
            return False

        def _search(self, query: dict[str, list[str]]) -> None:
            words = query.get("search", [""])[0].lower()
            author = query.get("author", [None])[0]
            limit = int(query.get("limit", ["1000000"])[0])
            found = [r for r in sorted(hub.repos) if words in r.lower() and (author is None or r.startswith(f"{author}/"))]
            self._send(200, [{"id": r, "modelId": r, "private": hub.repos[r].private} for r in found[:limit]])

        def _resolve(self, repo: Repo, rev: str) -> str | None:
            sha = repo.refs.get(rev) or (rev if rev in repo.commits else None)
            if sha is None:
                self._error(404, f"Invalid rev id: {rev}", "RevisionNotFound")
            return sha

        def _dispatch(self) -> None:
            url = urlsplit(self.path)
            with hub.lock:
                hub.requests.append((self.command, url.path))
            if hub.fail == "all-500":
                return self._error(500, "Internal Error")
            parts = url.path.strip("/").split("/")
            query = parse_qs(url.query)
            if self.command == "POST" and url.path == "/api/repos/create":
                self._held("create")
                return self._create_repo()
            if self.command == "POST" and url.path == "/api/validate-yaml":
                self._body()
                return self._send(200, {"errors": [], "warnings": []})
            if self.command == "GET" and parts == ["api", "models"]:
                return self._search(query)
            if len(parts) >= 4 and parts[0] == "api" and parts[1] == "models":
                repo_id, action, rest = f"{parts[2]}/{parts[3]}", (parts[4] if len(parts) > 4 else ""), parts[5:]
                if self.command == "GET" and action in ("", "revision") and self._read_switches(repo_id):
                    return None
                if self.command == "GET" and action in ("", "revision"):
                    self._held("info")
                    return self._info(repo_id, unquote(rest[0]) if rest else "main")
                if self.command == "GET" and action == "tree":
                    self._held("tree")
                    return self._tree(repo_id, unquote(rest[0]))
                if self.command == "POST" and action == "preupload":
                    return self._preupload(repo_id)
                if self.command == "POST" and action == "commit":
                    self._held("commit")
                    return self._commit(repo_id, unquote(rest[0]), "create_pr" in query)
                if self.command == "POST" and action == "branch":
                    return self._branch(repo_id, unquote(rest[0]))
            if self.command in ("GET", "HEAD") and len(parts) >= 5 and parts[2] == "resolve":
                self._held("resolve")
                if hub.fail == "resolve-500":
                    return self._error(500, "Internal Error")
                if self._read_switches(f"{parts[0]}/{parts[1]}"):
                    return None
                return self._download(f"{parts[0]}/{parts[1]}", unquote(parts[3]), unquote("/".join(parts[4:])))
            self._error(404, f"no route for {self.command} {url.path}")

        def _held(self, route: str) -> None:
            if route in hub.hold:
                hub.release.wait(hub.hold_s)

        do_GET = do_POST = do_HEAD = _dispatch

        def hub_other_commit(self, repo: Repo, head: str) -> str:
            return hub.new_commit(repo, {**repo.commits[head], "other.txt": b"someone else"}, head)

        # -- endpoints ---------------------------------------------------------------------
        def _create_repo(self) -> None:
            body = json.loads(self._body() or b"{}")
            if not self._authorized():
                return self._error(401, "Invalid credentials in Authorization header")
            repo_id = f"{body['organization']}/{body['name']}" if body.get("organization") else f"user/{body['name']}"
            with hub.lock:
                if repo_id in hub.repos:  # the Hub's 409 names the existing repo's url (create_repo reads it)
                    return self._send(409, {"error": "You already created this model repo",
                                            "url": f"{hub.url}/{repo_id}"})
                repo = Repo(private=body.get("visibility") == "private" or bool(body.get("private")))
                # The Hub creates a repository with one commit holding .gitattributes.
                repo.refs["main"] = hub.new_commit(repo, {".gitattributes": b"*.safetensors filter=lfs\n"}, None)
                hub.repos[repo_id] = repo
            self._send(200, {"url": f"{hub.url}/{repo_id}", "name": repo_id})

        def _info(self, repo_id: str, rev: str) -> None:
            repo = self._repo(repo_id, write=False)
            if repo is None:
                return
            sha = self._resolve(repo, rev)
            if sha is not None:
                self._send(200, {"id": repo_id, "sha": sha, "private": repo.private,
                                 "gated": "manual" if repo.gated else False,
                                 "siblings": [{"rfilename": p} for p in sorted(repo.commits[sha])]})
                if hub.on_info is not None:
                    hub.on_info(repo_id)

        def _tree(self, repo_id: str, rev: str) -> None:
            repo = self._repo(repo_id, write=False)
            if repo is None:
                return
            sha = self._resolve(repo, rev)
            if sha is not None:
                self._send(200, [{"type": "file", "path": p, "size": len(b),
                                  "oid": None if hub.list_without_hash else git_oid(b)}
                                 for p, b in sorted(repo.commits[sha].items())])

        def _preupload(self, repo_id: str) -> None:
            body = json.loads(self._body())
            if self._repo(repo_id, write=True) is None:
                return
            self._send(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None}
                                       for f in body["files"]]})

        def _branch(self, repo_id: str, branch: str) -> None:
            body = json.loads(self._body() or b"{}")
            repo = self._repo(repo_id, write=True)
            if repo is None:
                return
            if branch in repo.refs:
                return self._error(409, f"Reference already exists: refs/heads/{branch}")
            sha = self._resolve(repo, body.get("startingPoint") or "main")
            if sha is not None:
                repo.refs[branch] = sha
                self._send(200, {})

        def _commit(self, repo_id: str, rev: str, create_pr: bool) -> None:
            lines = [json.loads(line) for line in self._body().splitlines() if line.strip()]
            repo = self._repo(repo_id, write=True)
            if repo is None:
                return
            with hub.lock:
                head = self._resolve(repo, rev)
                if head is None:
                    return
                if hub.fail == "commit-race":  # another writer commits first
                    head = repo.refs[rev] = self.hub_other_commit(repo, head)
                header = lines[0]["value"]
                parent = header.get("parentCommit")
                if parent is not None and parent != head and not create_pr:
                    return self._error(412, f"A commit has happened since. Please refresh and try again. "
                                            f"(parent {parent} is not {head})")
                if hub.fail == "commit-500":
                    return self._error(500, "Internal Error: the commit could not be stored")
                files = dict(repo.commits[parent if create_pr and parent else head])
                for item in lines[1:]:
                    value = item["value"]
                    if item["key"] == "file":
                        data = base64.b64decode(value["content"])
                        if value["path"] in hub.corrupt:  # stored other than sent: same size, last byte flipped
                            data = data[:-1] + bytes([data[-1] ^ 0xFF])
                        files[value["path"]] = data
                    elif item["key"] == "deletedFile":
                        if value["path"] not in files:
                            return self._error(404, "A file with this name doesn't exist", "EntryNotFound")
                        del files[value["path"]]
                    else:
                        return self._error(400, f"the fake Hub takes regular files only, not {item['key']}")
                sha = hub.new_commit(repo, files, head)
                pr_url = None
                if create_pr:
                    number = 1 + sum(r.startswith("refs/pr/") for r in repo.refs)
                    repo.refs[f"refs/pr/{number}"] = sha
                    pr_url = f"{hub.url}/{repo_id}/discussions/{number}"
                else:
                    repo.refs[rev] = sha
            if hub.fail == "commit-lost":
                self.close_connection = True
                self.connection.shutdown(2)
                return
            self._send(200, {"commitUrl": f"{hub.url}/{repo_id}/commit/{sha}", "commitOid": sha,
                             "pullRequestUrl": pr_url})

        def _download(self, repo_id: str, rev: str, path: str) -> None:
            repo = self._repo(repo_id, write=False)
            if repo is None:
                return
            sha = self._resolve(repo, rev)
            if sha is None:
                return
            data = repo.commits[sha].get(path)
            if data is None:
                return self._send(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound",
                                                                       "X-Repo-Commit": sha})
            if repo.gated:
                return self._error(403, f"Access to model {repo_id} is restricted", "GatedRepo")
            headers = {"X-Repo-Commit": sha, "ETag": f'"{git_oid(data)}"'}
            wanted = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
            if wanted is None:
                return self._send(200, raw=data if isinstance(data, bytes) else data.slice(0, data.size),
                                  headers=headers)
            start = int(wanted[1])
            end = min(len(data), int(wanted[2]) + 1 if wanted[2] else len(data))
            if start >= len(data):
                return self._send(416, {"error": "Range Not Satisfiable"}, {"Content-Range": f"bytes */{len(data)}"})
            part = data[start:end] if isinstance(data, bytes) else data.slice(start, end)
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{len(data)}"
            if repo_id in hub.truncate:  # the length promised, half the bytes sent, the connection closed
                self.send_response(206)
                self.send_header("Content-Length", str(len(part)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(part[:len(part) // 2])
                self.close_connection = True
                return None
            self.send_response(206)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(part)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(part)
            return None

    return Handler
