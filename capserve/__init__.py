"""capserve: from a GPU reservation that does not exist yet to an evaluated vLLM endpoint, and back."""

__version__ = "0.1.0"
