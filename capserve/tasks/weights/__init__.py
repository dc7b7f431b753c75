"""Weights stage tasks: the only code that talks to the Hub and S3 for weights, and touches weight files."""
