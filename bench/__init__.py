"""ddplab's benchmark suite: python -m bench [--quick] (results in docs/performance: the docs' Performance page)."""
