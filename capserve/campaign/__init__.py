"""The campaign engine the flows share: a run's context, its stages run in order with the record and report kept
(``runner``), the stage adapters that call the stage subflows (``stages``), the ledger, reuse of what an earlier run
made, and the names and announcements of runs. ``capserve/flows/`` holds the flows themselves, which only sequence.
"""
