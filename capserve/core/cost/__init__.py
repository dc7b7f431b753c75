"""Cost truth for a campaign: the ledger, the dated price table, and planning before buying (pure).

Import from the submodules (``capserve.core.cost.ledger``, …): this package re-exports nothing.
How to read the ledger, and where every price comes from: docs/cost.md.
"""
