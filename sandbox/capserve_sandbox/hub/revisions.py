"""New revisions of a model on the local Hub, good or deliberately bad, for redeploy tests and the demo.

A revision is a copy of the repo's current files with a sandbox-only marker file
(``capserve_sandbox.openai_server.MODEL_MARKER_FILE``): a release number, and for a bad revision the
quality the stand-in serving it answers with (0: every golden-set answer wrong). Its ``config.json`` stays as
it was, as a new revision of the same architecture's does: only what the weights answer changes. Nothing decides a
verdict here: the evaluation fails the quality gate on what the stand-in answers.
"""

from __future__ import annotations

import json
import shutil

from capserve_sandbox.hub.checkpoint import TINY_K3
from capserve_sandbox.hub.server import HubState
from capserve_sandbox.openai_server import MODEL_MARKER_FILE


def publish_revision(state: HubState, repo_id: str = TINY_K3.repo, *, good: bool = True) -> str:
    """Push a new commit to ``repo_id``'s ``main`` on the local Hub and return its sha.

    ``good=False`` publishes a revision whose served quality falls below any quality gate. The earlier
    commits keep resolving by their sha (their files are left as they were).
    """
    current = state.repos[repo_id]
    release = len(state.older.get(repo_id, {})) + 1
    root = current.root.with_name(f"{current.root.name}@release-{release}")
    shutil.copytree(current.root, root)
    marker: dict[str, float | int] = {"release": release}
    if not good:
        marker["quality_accuracy"] = 0.0
    (root / MODEL_MARKER_FILE).write_text(json.dumps(marker, indent=2), encoding="utf-8")
    return state.publish(repo_id, root)
