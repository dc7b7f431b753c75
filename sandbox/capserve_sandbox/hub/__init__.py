"""The local Hugging Face Hub: a loopback server over generated K3-shaped checkpoints, with fault injection."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from capserve_sandbox.hub.checkpoint import K3, TINY_K3, CheckpointGeometry, write_checkpoint
from capserve_sandbox.hub.revisions import publish_revision
from capserve_sandbox.hub.server import Faults, HubServer, HubState, ServedRepo

__all__ = [
    "K3", "TINY_K3", "CheckpointGeometry", "Faults", "HubState", "local_hub", "publish_revision", "write_checkpoint",
]


@contextmanager
def local_hub(
    repos: Mapping[str, Path | CheckpointGeometry] | None = None,
    faults: Faults | None = None,
    log: list[dict[str, Any]] | None = None,
    states: list[HubState] | None = None,
) -> Iterator[str]:
    """Serve ``repos`` (repo id -> a directory, or a geometry generated into a temp dir) on 127.0.0.1:0.

    Yields the base URL. The default serves ``capserve-sandbox/tiny-k3``. ``faults`` is live: tests may
    change it while the server runs; ``log`` receives one dict per request; ``states`` receives the server's
    state (``HubState.publish`` moves a repo's ``main`` to a new commit).
    """
    repos = {TINY_K3.repo: TINY_K3} if repos is None else repos
    with tempfile.TemporaryDirectory(prefix="capserve-hub-") as tmp:
        served = {}
        for repo_id, source in repos.items():
            root = source if isinstance(source, Path) else write_checkpoint(source, Path(tmp) / repo_id)
            served[repo_id] = ServedRepo.scan(root)
        state = HubState(repos=served, faults=faults or Faults(), log=log if log is not None else [])
        if states is not None:
            states.append(state)
        server = HubServer(state)
        thread = threading.Thread(target=server.serve_forever, name="capserve-local-hub", daemon=True)
        thread.start()
        try:
            host, port = server.server_address[:2]
            yield f"http://{host!s}:{port}"
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)
