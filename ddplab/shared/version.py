"""ddplab's version (pyproject.toml says the same: the tests compare them)."""
VERSION = "0.1.0"
