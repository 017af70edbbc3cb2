"""ddplab's benchmark suite: python -m bench [--quick] (see README, "Performance")."""
