"""A Hugging Face Hub-compatible HTTP server on loopback, for tests and the demo.

It implements what huggingface_hub 2.4 calls for a pinned download and header-only planning
(docs/weights.md §3.2): model info (with files metadata), the paginated tree listing,
paths-info, HEAD/GET ``resolve`` with Range, 302 redirects of LFS files to another host name (as the
real Hub sends them to its CDN), and the headers the client insists on (``X-Repo-Commit``, ``ETag`` /
``X-Linked-Etag``, ``X-Linked-Size``, ``Accept-Ranges``; errors keyed by ``X-Error-Code``).

Faults are injected on purpose: a connection dropped mid-file, a flipped byte, 503s.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from capserve_sandbox.gates import GATES
from capserve_sandbox.loopback import ReportingHTTPServer

LFS_MIN_BYTES = 10 * 1024  # the Hub stores big files (and every *.safetensors) in LFS


class Faults(BaseModel):
    """What to break, and how often. Counts are consumed as faults fire."""

    model_config = ConfigDict(extra="forbid")

    cut_after_bytes: int | None = Field(
        None, ge=0, description="Drop the connection after this many body bytes of a file's first full GET."
    )
    cut_files: tuple[str, ...] | None = Field(None, description="Files the cut applies to; None: every file.")
    corrupt: dict[str, int] = Field(
        default_factory=dict, description="Path -> number of GETs whose body has one byte flipped (mid-file)."
    )
    fail_resolve_requests: int = Field(0, ge=0, description="The first N resolve requests (HEAD or GET) answer 503.")
    redirect_lfs: bool = Field(False, description="Answer LFS resolves with a 302 to another host name.")
    page_size: int = Field(1000, ge=1, le=10000, description="Tree listing page size (Link: rel=next pagination).")


@dataclass
class ServedFile:
    size: int
    sha256: str
    git_oid: str
    lfs: bool
    pointer_size: int


@dataclass
class ServedRepo:
    root: Path
    files: dict[str, ServedFile]
    sha: str

    @classmethod
    def scan(cls, root: Path) -> ServedRepo:
        files = {}
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            rel = path.relative_to(root).as_posix()
            if not rel.startswith("."):
                files[rel] = _describe(path)
        commit = hashlib.sha1(usedforsecurity=False)
        for rel, f in files.items():
            commit.update(f"{rel}\0{f.sha256}\n".encode())
        return cls(root=root, files=files, sha=commit.hexdigest())

    def tree_entry(self, rel: str) -> dict[str, Any]:
        f = self.files[rel]
        entry: dict[str, Any] = {"type": "file", "oid": f.git_oid, "size": f.size, "path": rel}
        if f.lfs:
            entry["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": f.pointer_size}
        return entry

    def sibling(self, rel: str) -> dict[str, Any]:
        f = self.files[rel]
        entry: dict[str, Any] = {"rfilename": rel, "size": f.size, "blobId": f.git_oid}
        if f.lfs:
            entry["lfs"] = {"sha256": f.sha256, "size": f.size, "pointerSize": f.pointer_size}
        return entry


def _describe(path: Path) -> ServedFile:
    size = path.stat().st_size
    sha256 = hashlib.sha256()
    # git blob id = sha1("blob <size>\0" + content): git's content address, not a security hash
    git = hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            sha256.update(chunk)
            git.update(chunk)
    lfs = size >= LFS_MIN_BYTES or path.name.endswith(".safetensors")
    if not lfs:
        return ServedFile(size, sha256.hexdigest(), git.hexdigest(), False, 0)
    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256.hexdigest()}\nsize {size}\n".encode()
    pointer_oid = hashlib.sha1(f"blob {len(pointer)}\0".encode() + pointer, usedforsecurity=False).hexdigest()
    return ServedFile(size, sha256.hexdigest(), pointer_oid, True, len(pointer))


@dataclass
class HubState:
    repos: Mapping[str, ServedRepo]
    faults: Faults
    log: list[dict[str, Any]]
    lock: threading.Lock = field(default_factory=threading.Lock)
    cut_done: set[str] = field(default_factory=set)

    def record(self, entry: dict[str, Any]) -> None:
        with self.lock:
            self.log.append(entry)

    older: dict[str, dict[str, ServedRepo]] = field(default_factory=dict)  # repo -> sha -> an earlier commit

    def publish(self, repo_id: str, root: Path | None = None) -> str:
        """A new commit on ``main``: ``root`` (default: the repo's directory, read again: write the new files
        first); returns its sha. Like a push to the Hub, the branch now resolves to the new commit
        (docs/events.md §3); an earlier commit still resolves by its sha while its directory is unchanged."""
        with self.lock:
            repos = dict(self.repos)
            before = self.repos[repo_id]
            repos[repo_id] = ServedRepo.scan(root or before.root)
            if root is not None and root != before.root:
                self.older.setdefault(repo_id, {})[before.sha] = before
            self.repos = repos
            return repos[repo_id].sha

    def commit(self, repo_id: str, revision: str) -> ServedRepo | None:
        """The commit ``revision`` names: ``main`` or the head's sha, or an earlier commit's sha."""
        head = self.repos.get(repo_id)
        if head is None or revision in ("main", head.sha):
            return head
        return self.older.get(repo_id, {}).get(revision)


class HubServer(ReportingHTTPServer):
    stand_in = "local Hub"

    def __init__(self, state: HubState) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state


_MODEL_INFO = re.compile(r"/api/models/([^/]+)/([^/]+)(?:/revision/([^/]+))?")
_TREE = re.compile(r"/api/models/([^/]+)/([^/]+)/tree/([^/]+)(?:/(.*))?")
_PATHS_INFO = re.compile(r"/api/models/([^/]+)/([^/]+)/paths-info/([^/]+)")
_RESOLVE = re.compile(r"/([^/]+)/([^/]+)/resolve/([^/]+)/(.+)")
_BLOB = re.compile(r"/_blobs/([^/]+)/([^/]+)/(.+)")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HubServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Quiet: the request log is structured (HubState.log)."""

    def do_HEAD(self) -> None:
        self._route()

    def do_GET(self) -> None:
        self._route()

    def do_POST(self) -> None:
        self._route()

    @property
    def state(self) -> HubState:
        return self.server.state

    def _route(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        path = url.path
        if (m := _TREE.fullmatch(path)) and self.command == "GET":
            self._tree(m.group(1), m.group(2), m.group(3), urllib.parse.unquote(m.group(4) or ""), query)
        elif (m := _PATHS_INFO.fullmatch(path)) and self.command == "POST":
            self._paths_info(m.group(1), m.group(2), m.group(3))
        elif (m := _MODEL_INFO.fullmatch(path)) and self.command in ("GET", "HEAD"):
            self._model_info(m.group(1), m.group(2), m.group(3) or "main", query)
        elif m := _RESOLVE.fullmatch(path):
            self._resolve(m.group(1), m.group(2), m.group(3), urllib.parse.unquote(m.group(4)))
        elif (m := _BLOB.fullmatch(path)) and self.state.faults.redirect_lfs:
            repo = self.state.repos.get(urllib.parse.unquote(m.group(1)).replace("--", "/"))
            rel = urllib.parse.unquote(m.group(3))
            if repo is None or rel not in repo.files:
                self._error(404, "EntryNotFound")
            else:
                self._serve_file(repo, rel, {})
        else:
            self._error(404, "EntryNotFound", f"no route for {self.command} {path}")

    def _send(self, status: int, body: bytes, headers: Mapping[str, str]) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.state.record(
            {"method": self.command, "path": self.path, "status": status, "range": self.headers.get("Range")}
        )

    def _error(self, status: int, code: str, message: str = "", headers: Mapping[str, str] | None = None) -> None:
        body = json.dumps({"error": message or code}).encode()
        self._send(status, body, {"X-Error-Code": code, "X-Error-Message": message or code, **(headers or {})})

    def _repo(self, org: str, name: str, revision: str) -> ServedRepo | None:
        if f"{org}/{name}" not in self.state.repos:
            self._error(404, "RepoNotFound", f"repository {org}/{name} not found")
            return None
        repo = self.state.commit(f"{org}/{name}", urllib.parse.unquote(revision))
        if repo is None:
            self._error(404, "RevisionNotFound", f"revision {revision} not found")
            return None
        return repo

    def _model_info(self, org: str, name: str, revision: str, query: dict[str, list[str]]) -> None:
        if (repo := self._repo(org, name, revision)) is None:
            return
        blobs = query.get("blobs", ["false"])[0].lower() == "true"
        siblings = [repo.sibling(r) if blobs else {"rfilename": r} for r in repo.files]
        body = {
            "_id": repo.sha[:24],
            "id": f"{org}/{name}",
            "modelId": f"{org}/{name}",
            "sha": repo.sha,
            "private": False,
            "gated": False,
            "disabled": False,
            "tags": [],
            "siblings": siblings,
            "lastModified": "2026-01-01T00:00:00.000Z",
            "createdAt": "2026-01-01T00:00:00.000Z",
        }
        self._send(200, json.dumps(body).encode(), {"X-Repo-Commit": repo.sha})

    def _tree(self, org: str, name: str, revision: str, prefix: str, query: dict[str, list[str]]) -> None:
        if (repo := self._repo(org, name, revision)) is None:
            return
        recursive = query.get("recursive", ["false"])[0].lower() == "true"
        base = prefix.rstrip("/") + "/" if prefix else ""
        entries, dirs = [], set()
        for rel in repo.files:
            if not rel.startswith(base):
                continue
            rest = rel[len(base) :]
            if "/" in rest and not recursive:
                dirs.add(base + rest.split("/")[0])
                continue
            parts = rest.split("/")[:-1]
            dirs.update(base + "/".join(parts[: i + 1]) for i in range(len(parts)))
            entries.append(repo.tree_entry(rel))
        items = [
            {"type": "directory", "oid": hashlib.sha1(d.encode(), usedforsecurity=False).hexdigest(), "size": 0,
             "path": d}
            for d in sorted(dirs)
        ] + entries
        start = int(query.get("cursor", ["0"])[0])
        size = self.state.faults.page_size
        headers = {"X-Repo-Commit": repo.sha}
        if start + size < len(items):
            nxt = {k: v[0] for k, v in query.items()} | {"cursor": str(start + size)}
            url = f"http://{self.headers['Host']}{urllib.parse.urlsplit(self.path).path}?{urllib.parse.urlencode(nxt)}"
            headers["Link"] = f'<{url}>; rel="next"'
        self._send(200, json.dumps(items[start : start + size]).encode(), headers)

    def _paths_info(self, org: str, name: str, revision: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        form = urllib.parse.parse_qs(self.rfile.read(length).decode())
        if (repo := self._repo(org, name, revision)) is None:
            return
        found = [repo.tree_entry(p) for p in form.get("paths", []) if p in repo.files]
        self._send(200, json.dumps(found).encode(), {"X-Repo-Commit": repo.sha})

    def _resolve(self, org: str, name: str, revision: str, rel: str) -> None:
        with self.state.lock:
            fail = self.state.faults.fail_resolve_requests > 0
            if fail:
                self.state.faults.fail_resolve_requests -= 1
        if fail:
            self._error(503, "ServiceUnavailable", "injected 503")
            return
        if (repo := self._repo(org, name, revision)) is None:
            return
        if rel not in repo.files:
            self._error(404, "EntryNotFound", f"{rel} not found", {"X-Repo-Commit": repo.sha})
            return
        f = repo.files[rel]
        headers = {"X-Repo-Commit": repo.sha, "Accept-Ranges": "bytes"}
        if f.lfs:
            etag = f'"{f.sha256}"'
            headers |= {"ETag": etag, "X-Linked-Etag": etag, "X-Linked-Size": str(f.size)}
            if self.state.faults.redirect_lfs:
                # Like the Hub's CDN redirect: another host name, so the client drops auth and does not
                # follow the redirect on HEAD (it reads the metadata from the 302; docs/weights.md §3.2).
                port = self.server.server_address[1]
                location = f"http://localhost:{port}/_blobs/{org}--{name}/{f.sha256}/{urllib.parse.quote(rel)}"
                self._send(302, b"", headers | {"Location": location})
                return
        else:
            headers["ETag"] = f'"{f.git_oid}"'
        self._serve_file(repo, rel, headers)

    def _serve_file(self, repo: ServedRepo, rel: str, headers: dict[str, str]) -> None:
        size = repo.files[rel].size
        start, end, status = 0, size - 1, 200
        requested = self.headers.get("Range")
        if requested and (m := re.fullmatch(r"bytes=(\d*)-(\d*)", requested.strip())):
            if m.group(1):
                start = int(m.group(1))
                end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
            elif m.group(2):
                start = max(size - int(m.group(2)), 0)
            status = 206
            headers = headers | {"Content-Range": f"bytes {start}-{end}/{size}"}
        length = max(end - start + 1, 0)
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.end_headers()
        self.state.record(
            {
                "method": self.command,
                "path": self.path,
                "status": status,
                "range": requested,
                "file": rel,
                "length": length,
            }
        )
        if self.command == "HEAD":
            return
        GATES.wait("download", rel)  # headers sent, the body not yet (fault matrix)
        faults = self.state.faults
        cut = None
        with self.state.lock:
            wants_cut = faults.cut_after_bytes is not None and (faults.cut_files is None or rel in faults.cut_files)
            if (
                wants_cut
                and status == 200
                and rel not in self.state.cut_done
                and length > (faults.cut_after_bytes or 0)
            ):
                self.state.cut_done.add(rel)
                cut = faults.cut_after_bytes
            flip = None
            middle = size // 2
            if faults.corrupt.get(rel, 0) > 0 and start <= middle <= end:
                faults.corrupt[rel] -= 1
                flip = middle - start
        with open(repo.root / rel, "rb") as fh:
            fh.seek(start)
            body = bytearray(fh.read(length))
        if flip is not None:
            body[flip] ^= 0xFF
        if cut is not None:
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.close_connection = True
            self.state.record({"event": "cut", "file": rel, "after": cut})
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        self.wfile.write(body)
