"""Migration revisions, oldest first: ``0001_initial`` is the first schema the registry shipped."""
