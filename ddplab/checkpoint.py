"""`ddplab.checkpoint` (`ddplab.checkpoint.save(...)`, `load(...)` in rank code) is this public path of
ddplab.rank.checkpoint (the rank's side): one module under both names."""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("ddplab.rank.checkpoint")
