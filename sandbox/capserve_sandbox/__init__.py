"""Local stand-ins for AWS, Kubernetes, the Hub and the endpoint (docs/sandbox.md): demo and tests only.

A distribution of its own (``sandbox/pyproject.toml``, ``capserve-sandbox``) on top of capserve's core and tasks:
a production install of capserve carries none of it, and capserve's CLI finds it through the ``capserve.sandbox``
entry-point group (``capserve/cli/stand_ins.py``), never by importing it.
"""
