"""Teardown tasks: inventory a campaign by tag/name, run the deletion plan, find campaigns for the reaper."""
