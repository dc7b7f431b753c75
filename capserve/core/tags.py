"""The one key that marks what a campaign owns: an AWS tag key and a Kubernetes label key alike.

The cloud is the source of truth for what exists (docs/design.md §3): creates look
things up by this key before making them, teardown deletes only what carries it.
"""

CAMPAIGN_TAG = "capserve.io/campaign"
