"""Capacity (pure): offers, ranking, request builders, reservation states, approval, the acquire result.

Import from the submodules (``capserve.core.capacity.ranking``, …): this package imports nothing itself,
so that ``capserve.core.spec`` can use ``capacity.settings`` without an import cycle.
"""
