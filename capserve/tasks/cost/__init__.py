"""Cost: the ledger's plots, and prices read from the AWS Price List API."""
