"""Alembic migrations of the registry (run programmatically; see ``onnxgate.registry._db``)."""
