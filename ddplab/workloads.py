"""`ddplab.workloads`, the training workloads rank code imports (`from ddplab.workloads import mlp`),
is this public path of ddplab.rank.workloads (the rank's side): one module under both names."""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("ddplab.rank.workloads")
