"""The fault matrix (``make faults``, ``python -m faults``): kill campaigns at every stage boundary and inside
purchase, download, apply, rollout and teardown, re-run them, tear them down, and count what went wrong.
docs/faults.md says how to run it and what each column means."""
