"""The process layer: what starts, watches and ends the pool's processes. Pools (local, launched on
other hosts, attached), the zygote (the fork server engines are forked from), ipyparallel's
launchers, the cluster ddplab owns and the reaper that ends it when the notebook dies. Its code runs
in the notebook's kernel, in the zygote and in the reaper."""
