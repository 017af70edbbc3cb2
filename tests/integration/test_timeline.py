"""The timeline of real cells on the session's pool: a straggler named and the others' waiting measured,
DDP's bucket all-reduces overlapping backward, memory per rank equal to the tensors, the trace file,
and recording through a failed cell and a restarted pool."""
import json
import re

import pytest
from IPython.core.error import UsageError

from ddplab.shared.errors import RankFailed

pytestmark = [pytest.mark.pool, pytest.mark.xdist_group("shared-pool")]

MODEL = """
import time
from torch.nn.parallel import DistributedDataParallel as DDP

class Net(nn.Module):
    def __init__(self, slow=None, delay=0.0):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
        self.slow, self.delay = slow, delay

    def forward(self, x):
        if rank == self.slow:
            time.sleep(self.delay)  # a straggler: slower inside its forward
        return self.body(x)

def train(model, opt, steps, log=True):
    for step in range(steps):
        x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        if log:
            ddplab.log(loss=loss, samples=64)
"""


def test_a_straggler_is_named_and_the_others_wait_for_it(pool):
    pool.run(MODEL + "torch.manual_seed(0)\nmodel = DDP(Net(slow=2, delay=0.02))\n"
             "opt = torch.optim.SGD(model.parameters(), lr=0.01)\ntrain(model, opt, 25)")
    tl = pool.records.timeline()
    assert re.fullmatch(r"rank 2 is the slowest: the others wait \d+ ms per step for it", tl.verdict()), tl.verdict()
    parts = tl.breakdown()
    for r in (0, 1, 3):  # most of the 20 ms the straggler adds to each step, spent waiting for it
        assert parts[r]["wait"] >= 0.012, (r, parts[r])
    waited = min(parts[r]["wait"] for r in (0, 1, 3))  # it waits for nobody (a little, on a loaded machine)
    assert parts[2]["wait"] < waited / 3 and parts[2]["compute"] >= 0.02, (parts[2], waited)
    assert tl.blame()[2] >= 0.012  # each other rank waits for it, on average
    frame = tl.to_pandas()
    assert list(frame.columns) == ["rank", "step", "phase", "start", "end", "op", "bucket", "module", "group", "bytes",
                                   "wait"]
    assert set(frame["rank"]) == {0, 1, 2, 3} and set(frame["phase"]) >= {"forward", "backward", "optimizer", "comm"}
    # steps counted by ddplab.log: of its 25, the cell's first 20 timed, then one in 10 (test below)
    assert sorted(set(frame["step"])) == list(range(21))
    assert "rank 2 is the slowest" in repr(tl) and "compute" in tl.summary().columns
    assert "21 steps timed: a cell's first 20, then one in 10" in repr(tl)


def test_bucket_all_reduces_overlap_backward(pool):
    pool.run("from torch.nn.parallel import DistributedDataParallel as DDP\n"
             "deep = DDP(nn.Sequential(*[nn.Linear(512, 512) for _ in range(6)]), bucket_cap_mb=1)\n"
             "opt = torch.optim.SGD(deep.parameters(), lr=0.01)\n"
             "for step in range(6):\n    opt.zero_grad()\n    deep(torch.randn(64, 512)).square().mean().backward()\n"
             "    opt.step()")
    tl = pool.records.timeline()
    frame = tl.to_pandas()
    assert frame["step"].max() == 5  # without ddplab.log, steps are counted by the optimizer (from 0)
    steps = frame[(frame["rank"] == 0) & (frame["step"] == 4)]
    backward = steps[steps["phase"] == "backward"].iloc[0]
    buckets = steps[(steps["phase"] == "comm") & steps["bucket"].notna()]
    assert len(buckets) >= 3 and set(buckets["op"]) == {"all_reduce"}
    assert sorted(buckets["bucket"]) == list(range(len(buckets)))
    started_during = buckets[(buckets["start"] > backward["start"]) & (buckets["start"] < backward["end"])]
    assert len(started_during) == len(buckets)  # each launched while backward still ran ...
    assert buckets["start"].min() < backward["end"] - 0.0005  # ... the first well before it ended
    # each ends when it completed: after it started, and before backward returned (DDP waits for them)
    assert ((buckets["end"] >= buckets["start"]) & (buckets["end"] <= backward["end"])).all(), buckets
    assert tl.breakdown()[0]["hidden"] > 0  # collectives that ran under backward's compute
    assert buckets["bytes"].sum() == 6 * (512 * 512 + 512) * 4  # every gradient, once


def test_memory_per_rank_is_the_tensors_sizes(pool):
    # memory counts every model and optimizer the rank's namespace holds: earlier tests' go first
    pool.run("for name in [k for k, v in globals().items() if isinstance(v, (nn.Module, torch.optim.Optimizer))]:\n"
             "    del globals()[name]")
    pool.run(MODEL + "torch.manual_seed(0)\nmodel = DDP(Net())\nopt = torch.optim.Adam(model.parameters())\n"
             "train(model, opt, 3)\n"
             "expected = {'params': sum(p.numel() * p.element_size() for p in model.parameters()),\n"
             "            'grads': sum(p.grad.numel() * p.grad.element_size() for p in model.parameters()),\n"
             "            'optimizer': sum(t.numel() * t.element_size() for s in opt.state.values() "
             "for t in s.values())}")
    tl = pool.records.timeline()
    expected = pool.gather("expected")
    memory = tl.memory.set_index("rank")
    for r in range(4):
        for kind in ("params", "grads", "optimizer"):
            assert memory.loc[r, kind] == expected[r][kind], (r, kind)
        assert memory.loc[r, "buckets"] == expected[r]["params"]  # float32 buckets: one copy of the gradients
        assert memory.loc[r, "rss"] > 50 * 2**20
    assert expected[0]["optimizer"] > 2 * expected[0]["params"]  # Adam: two moments (and its step counters)

    # ZeRO-1 (its state lives in this rank's own optimizer, .optim) and gradients that are bucket views
    pool.run("del model, opt\nfrom torch.distributed.optim import ZeroRedundancyOptimizer\n"
             "model = DDP(Net(), gradient_as_bucket_view=True)\n"
             "opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam)\n"
             "train(model, opt, 3)\n"
             "share = sum(t.numel() * t.element_size() for s in opt.optim.state.values() for t in s.values())")
    memory, shares = pool.records.timeline().memory.set_index("rank"), pool.gather("share")
    assert sum(shares) == expected[0]["optimizer"]  # the shares add up to one Adam
    for r in range(4):
        assert memory.loc[r, "optimizer"] == shares[r] and memory.loc[r, "buckets"] == 0, r
        assert memory.loc[r, "grads"] == expected[r]["grads"]


def test_the_trace_file_has_one_lane_per_rank(pool, tmp_path, ip, capsys):
    pool.run(MODEL + "model = DDP(Net())\nopt = torch.optim.SGD(model.parameters(), lr=0.01)\ntrain(model, opt, 3)\n"
             "t = torch.ones(1000)\ndist.all_reduce(t)")
    path = tmp_path / "trace.json"
    ip.run_line_magic("ddp_timeline", f"--save {path}")
    assert f"to {path}" in capsys.readouterr().out
    trace = json.loads(path.read_text())
    lanes = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert lanes == {f"rank {r}" for r in range(4)}
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] for e in spans} == {0, 1, 2, 3} and all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)
    assert sum(e["name"] == "all_reduce" for e in spans) == 4  # the cell's own dist.all_reduce, on each rank
    assert any(e["name"].startswith("all_reduce bucket") for e in spans)


def test_recording_survives_a_failed_rank_and_a_restarted_pool(pool):
    with pytest.raises(RankFailed):
        pool.run(MODEL + "model = DDP(Net())\nopt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
                 "train(model, opt, 4)\nif rank == 1:\n    raise ValueError('boom')\ntrain(model, opt, 4)")
    failed = pool.records.timeline()
    assert set(failed.to_pandas()["rank"]) == {0, 1, 2, 3} and failed.to_pandas()["step"].max() >= 3
    pool.restart()
    pool.run(MODEL + "model = DDP(Net())\nopt = torch.optim.SGD(model.parameters(), lr=0.01)\ntrain(model, opt, 3)")
    again = pool.records.timeline()
    assert again.cell > failed.cell and set(again.to_pandas()["rank"]) == {0, 1, 2, 3}
    assert pool.records.timeline(failed.cell).cell == failed.cell  # an earlier cell's, still there


HOOKED = ("import torch.nn.modules.module as _m, torch.optim.optimizer as _o\n"
          "from torch.utils.data import dataloader as _d\n"
          "hooked = dict(modules=len(_m._global_forward_pre_hooks) + len(_m._global_forward_hooks), "
          "optimizers=len(_o._global_optimizer_post_hooks), backward=hasattr(torch.autograd.backward, '__wrapped__'), "
          "data=hasattr(_d._BaseDataLoaderIter.__next__, '__wrapped__'), ddp=hasattr(DDP.forward, '__wrapped__'))")


GROUPED = ("from ddplab.rank import RANK as _rank\n"
           "grouped = [m in _rank.recorder.timed_models for m in (model, model2)]")


SEEDED = ("torch.manual_seed(0)\nseeded = DDP(Net())\nseeded_opt = torch.optim.SGD(seeded.parameters(), lr=0.1)\n"
          "train(seeded, seeded_opt, 3, log=False)\n{name} = [p.detach().clone() for p in seeded.parameters()]\n")


def test_recording_can_be_switched_off_and_on(pool, ip, capsys):
    # Off takes every hook out at the next cell's start (torch's fast paths come back: DDP without a
    # comm hook), so it costs nothing; on puts them back, and a model built while off is timed then.
    ip.run_line_magic("ddp_timeline", "--off")  # in effect on every rank when it returns: no waiting here
    assert "not recorded" in capsys.readouterr().out
    pool.run(MODEL + SEEDED.format(name="untimed") + "model = DDP(Net())\nopt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
             "train(model, opt, 3)\n" + HOOKED + "\nown_hook = hasattr(model, '_ddplab_hook')")
    assert len(pool.records.timeline()) == 0
    assert pool.gather("hooked") == [dict(modules=0, optimizers=0, backward=False, data=False, ddp=False)] * 4
    assert pool.gather("own_hook") == [False] * 4
    ip.run_line_magic("ddp_timeline", "--on")
    pool.run(HOOKED + "\nat_start = hooked\n" + SEEDED.format(name="timed")
             + "model2 = DDP(Net())\nopt2 = torch.optim.SGD(model2.parameters(), lr=0.01)\n"
             "train(model2, opt2, 3)\ntrain(model, opt, 2)\n" + HOOKED
             + "\nsame = all(torch.equal(a, b) for a, b in zip(timed, untimed))")
    assert pool.gather("same") == [True] * 4  # a timed DDP computes what an untimed one does, bit for bit
    assert pool.gather("at_start") == [dict(modules=2, optimizers=1, backward=True, data=True, ddp=True)] * 4
    # a DDP forward times itself, and takes the global module hooks out for the rest of the cell
    assert pool.gather("hooked") == [dict(modules=0, optimizers=1, backward=True, data=True, ddp=True)] * 4
    frame = pool.records.timeline().to_pandas()
    # one forward per step, DDP's own (3 + 3 + 2 steps): none twice, none lost when the hooks went out
    assert (frame[frame["phase"] == "forward"].groupby("rank").size() == 8).all()
    comm = frame[frame["phase"] == "comm"]
    # both models' buckets: model2's 3 steps and the 2 of the model built while off, per rank
    assert (comm.groupby("rank")["step"].nunique() == 5).all() and len(comm) >= 4 * 5, comm
    # timed through the group DDP's reducer all-reduces with: DDP has no comm hook (its fast path, which
    # divides the gradients while it copies them into its buckets), and gets its own group back when off
    pool.run(GROUPED + "\nhooks = [m._get_ddp_logging_data().get('comm_hook', '') for m in (model, model2)]\n"
             "import pickle\npickled = len(pickle.dumps(model2.module)) > 0 and len(pickle.dumps(model2)) > 0")
    assert pool.gather("hooks") == [["", ""]] * 4 and pool.gather("grouped") == [[True, True]] * 4
    assert pool.gather("pickled") == [True] * 4  # a timed DDP model still pickles (torch.save)
    ip.run_line_magic("ddp_timeline", "--off")
    pool.run("train(model2, opt2, 2)\n" + GROUPED)
    assert pool.gather("grouped") == [[False, False]] * 4 and len(pool.records.timeline()) == 0
    ip.run_line_magic("ddp_timeline", "--on")
    assert "have not said" not in capsys.readouterr().out


def test_a_long_ddp_cell_is_timed_in_its_first_steps_then_one_step_in_every_few(pool, ip, capsys):
    # Timing DDP's buckets costs each step (a Python group in the reducer): after a cell's first 20
    # steps one in 10 is timed, whole; the other steps all-reduce through the model's own group and
    # compute the same, bit for bit. --every 1 times every step.
    run = ("torch.manual_seed(0)\nlong = DDP(Net())\nlong_opt = torch.optim.SGD(long.parameters(), lr=0.1)\n"
           "train(long, long_opt, 45, log=False)\n{name} = [p.detach().clone() for p in long.parameters()]\n")
    pool.run(MODEL + run.format(name="sampled"))
    tl = pool.records.timeline()
    frame = tl.to_pandas()
    timed = [*range(20), 20, 30, 40]
    buckets = frame[(frame["phase"] == "comm") & frame["bucket"].notna()]
    for r in range(4):
        mine = frame[frame["rank"] == r]
        assert sorted(set(mine["step"])) == timed, sorted(set(mine["step"]))
        for phase in ("forward", "backward", "optimizer"):  # each timed step whole: one of each
            assert (mine[mine["phase"] == phase].groupby("step").size() == 1).all(), phase
        mine = buckets[buckets["rank"] == r]
        assert sorted(set(mine["step"])) == timed  # its buckets too
        assert set(mine[mine["step"] >= 1].groupby("step")["bucket"].nunique()) == {mine["bucket"].nunique()}
    assert tl.every == 10 and tl.breakdown()[0]["steps"] == len(timed)
    assert "23 steps timed: a cell's first 20, then one in 10" in repr(tl)
    try:
        ip.run_line_magic("ddp_timeline", "--every 1")
        assert "a cell: every step" in capsys.readouterr().out
        pool.run(run.format(name="every"))
        tl = pool.records.timeline()
        assert sorted(set(tl.to_pandas()["step"])) == list(range(45)) and tl.every == 1
        assert "steps timed" not in repr(tl)
        pool.run("same = all(torch.equal(a, b) for a, b in zip(sampled, every))")
        assert pool.gather("same") == [True] * 4
        with pytest.raises(UsageError, match="--every takes a whole number of steps"):
            ip.run_line_magic("ddp_timeline", "--every 0")
    finally:
        ip.run_line_magic("ddp_timeline", "--every 10")
    assert "its first 20 steps, then one in 10" in capsys.readouterr().out


def test_a_long_sharded_cell_and_a_loop_of_collectives_are_sampled_too(pool):
    """Sampling is not DDP's alone: an FSDP2 cell of 25 steps times its first 20 and then step 20, each
    whole (every timed step with the same all-gathers and reduce-scatters, each naming its unit; an untimed
    step builds no span and reads no label), and so does a loop of explicit all-reduces that logs."""
    pool.run(MODEL + "from torch.distributed.fsdp import fully_shard\n"
             "mesh = ddplab.mesh()\ntorch.manual_seed(0)\nsharded = Net()\n"
             "for layer in sharded.body:\n    if isinstance(layer, nn.Linear):\n        fully_shard(layer, mesh=mesh)\n"
             "fully_shard(sharded, mesh=mesh)\nsharded_opt = torch.optim.Adam(sharded.parameters())\n"
             "train(sharded, sharded_opt, 25)")
    tl = pool.records.timeline()
    frame = tl.to_pandas()
    for r in range(4):
        mine = frame[frame["rank"] == r]
        assert sorted(set(mine["step"])) == list(range(21)), sorted(set(mine["step"]))
        comm = mine[mine["phase"] == "comm"]
        per_step = comm.groupby("step")["op"].value_counts().unstack()
        assert (per_step["all_gather"] >= 3).all() and (per_step["reduce_scatter"] == 3).all(), per_step
        assert len(per_step.drop_duplicates()) == 1, per_step  # each timed step whole
        assert {"body.0", "body.2", "body.4"} <= set(comm["module"]), comm[["op", "module"]].drop_duplicates()
    assert "21 steps timed: a cell's first 20, then one in 10" in repr(tl)

    pool.run("for i in range(30):\n    dist.all_reduce(torch.ones(10))\n    ddplab.log(i=i)")
    frame = pool.records.timeline().to_pandas()
    reduces = frame[(frame["phase"] == "comm") & (frame["rank"] == 0)]
    assert sorted(reduces["step"]) == [*range(20), 20], sorted(reduces["step"])


def test_compiled_models_keep_one_graph_and_their_forward_spans(pool):
    # The recorder's global module hooks return at once inside code torch.compile traces: no graph
    # break per module, no warning about them, and the compiled module's own call times the forward.
    pool.run("import warnings\nsmall = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))\n"
             "x = torch.randn(8, 32)\nexplained = torch._dynamo.explain(small)(x)\n"
             "breaks = (explained.graph_count, explained.graph_break_count)\n"
             "compiled = torch.compile(small, backend='eager')\n"
             "with warnings.catch_warnings(record=True) as caught:\n    for _ in range(5):\n        compiled(x)\n"
             "warned = [str(w.message) for w in caught]")
    assert pool.gather("breaks") == [(1, 0)] * 4
    assert pool.gather("warned") == [[]] * 4
    frame = pool.records.timeline().to_pandas()
    forwards = (frame["phase"] == "forward").groupby(frame["rank"]).sum().to_dict()
    recorders = pool.gather("(lambda r: (r.enabled, r.installed, r._depth))(__import__('ddplab.rank').rank.RANK.recorder)")
    assert forwards == {r: 6 for r in range(4)}, (recorders, pool.telemetry.dropped)  # explain ran it once too


def test_a_sharded_model_counts_its_shards_and_each_gather_names_its_layer(pool):
    """FSDP2 (fully_shard per layer, on ddplab.mesh()): each rank's memory is what it holds, its shards
    of the parameters, gradients and Adam's state, equal to the local tensors' sizes and adding up to
    the model's; every all-gather and reduce-scatter on the timeline names
    the layer it serves, in forward and in backward."""
    pool.run("for name in [k for k, v in globals().items() if isinstance(v, (nn.Module, torch.optim.Optimizer))]:\n"
             "    del globals()[name]")
    pool.run(MODEL + "from torch.distributed.fsdp import fully_shard\n"
             "mesh = ddplab.mesh()\ntorch.manual_seed(0)\nmodel = Net()\n"
             "whole = sum(p.numel() * p.element_size() for p in model.parameters())\n"
             "for layer in model.body:\n    if isinstance(layer, nn.Linear):\n        fully_shard(layer, mesh=mesh)\n"
             "fully_shard(model, mesh=mesh)\nopt = torch.optim.Adam(model.parameters())\ntrain(model, opt, 3)\n"
             "local = lambda t: t.to_local() if hasattr(t, 'to_local') else t\n"
             "expected = {'params': sum(local(p).nbytes for p in model.parameters()),\n"
             "            'grads': sum(local(p.grad).nbytes for p in model.parameters()),\n"
             "            'optimizer': sum(local(t).nbytes for s in opt.state.values() for t in s.values())}")
    tl, expected, whole = pool.records.timeline(), pool.gather("expected"), pool.gather("whole")[0]
    memory = tl.memory.set_index("rank")
    for r in range(4):
        for kind in ("params", "grads", "optimizer"):
            assert memory.loc[r, kind] == expected[r][kind], (r, kind, memory.loc[r, kind], expected[r][kind])
        assert memory.loc[r, "params"] < whole / 4 * 1.05, (r, memory.loc[r, "params"], whole)
    assert memory["params"].sum() == whole  # the shards add up to the model (the last rank's rows are fewer)
    frame = tl.to_pandas()
    comm = frame[(frame["phase"] == "comm") & (frame["rank"] == 0)]
    gathers, scatters = comm[comm["op"] == "all_gather"], comm[comm["op"] == "reduce_scatter"]
    assert {"body.0", "body.2", "body.4"} <= set(gathers["module"]), comm[["op", "module"]].drop_duplicates()
    assert {"body.0", "body.2", "body.4"} <= set(scatters["module"]), comm[["op", "module"]].drop_duplicates()
    assert set(comm["group"]) == {"world"}, comm[["op", "group"]].drop_duplicates()  # (a 1D mesh: every rank)
    parts = tl.breakdown()[0]
    assert parts["comm"] + parts["wait"] > 0 and parts["compute"] < parts["step"]  # its collectives are not compute

    # a 2D mesh, named: one call
    pool.run("mesh2 = ddplab.mesh(2, 2, names=('dp', 'tp'))\n"
             "shape = (mesh2['dp'].size(), mesh2['tp'].size(), mesh2.mesh_dim_names)")
    assert pool.gather("shape") == [(2, 2, ("dp", "tp"))] * 4

    # tensor parallelism within pairs: the row-split layer's all-reduce (DTensor's, a functional
    # collective) is on the timeline, inside forward, with its bytes; the outputs are the unsplit model's
    pool.run("from torch.distributed.tensor.parallel import parallelize_module, ColwiseParallel, RowwiseParallel\n"
             "torch.manual_seed(1)\nmlp = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))\n"
             "x = torch.randn(4, 16, requires_grad=True)\nplain = mlp(x).detach()\n"
             "parallelize_module(mlp, mesh2['tp'], {'0': ColwiseParallel(), '2': RowwiseParallel()})\n"
             "for _ in range(3):\n    out = mlp(x)\n    out.sum().backward()\n"
             "same = torch.allclose(out, plain, atol=1e-5)\n"
             "work = dist.all_reduce(torch.ones(1000), async_op=True)\nwork.wait()")
    assert pool.gather("same") == [True] * 4
    frame = pool.records.timeline().to_pandas()
    reduces = frame[(frame["phase"] == "comm") & (frame["op"] == "all_reduce") & (frame["rank"] == 0)]
    forwards = frame[(frame["phase"] == "forward") & (frame["rank"] == 0)]
    backwards = frame[(frame["phase"] == "backward") & (frame["rank"] == 0)]

    def within(spans, s, e):
        return ((spans["start"] <= s) & (e <= spans["end"])).any()

    # the row-split layer ("2") all-reduces its output in forward; the column-split one ("0") the input's
    # gradient in backward; both within the pair, the mesh's "tp" dimension, with the activations' bytes
    ahead = reduces[[within(forwards, s, e) for s, e in zip(reduces["start"], reduces["end"])]]
    behind = reduces[[within(backwards, s, e) for s, e in zip(reduces["start"], reduces["end"])]]
    assert len(ahead) == 3 and set(ahead["module"]) == {"2"} and (ahead["bytes"] == 4 * 8 * 4).all(), reduces
    assert len(behind) == 3 and set(behind["module"]) == {"0"} and (behind["bytes"] == 4 * 16 * 4).all(), reduces
    assert set(ahead["group"]) == set(behind["group"]) == {"tp"}, reduces
    # an async all-reduce (async_op=True) is timed until its Work completes, on the whole group
    alone = reduces[(reduces["bytes"] == 4000)]
    assert len(alone) == 1 and alone["module"].isna().all() and list(alone["group"]) == ["world"], reduces
    with pytest.raises(RankFailed, match="multiply to the pool's 4 ranks"):
        pool.run("ddplab.mesh(3)")
