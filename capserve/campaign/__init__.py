"""The campaign engine the flows share: a run's context, the stages the flows hand it run in order with the record
and report kept (``runner``), the ledger, reuse of what an earlier run made, and the names and announcements of
runs. It imports no flow: ``capserve/flows/`` holds the flows and their stage functions, which only sequence.
"""
