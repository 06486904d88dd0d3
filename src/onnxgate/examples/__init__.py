"""Example modules for the documentation and the demo (their frameworks are imported lazily)."""
