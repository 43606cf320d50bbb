"""Server tests: a package, so its conftest is not imported as a second top-level ``conftest``."""
