"""Shadow tests: a package, so that test modules may share names with other folders' helpers."""
