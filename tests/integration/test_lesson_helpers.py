"""ddplab.lessons.ranks on the shared 4-rank pool: spread, communication counter, timeline, timing."""
import pytest

pytestmark = [pytest.mark.pool, pytest.mark.xdist_group("shared-pool")]  # one worker holds the session pool


def test_param_spread_is_zero_only_when_ranks_agree(pool):
    pool.run("""
from ddplab.lessons.ranks import param_spread
torch.manual_seed(0)
model = nn.Linear(3, 2)
same = param_spread(model)
with torch.no_grad():
    model.weight[0, 0] += 0.5 * rank
apart = param_spread(model)
""")
    assert pool.gather("same") == [0.0] * 4
    assert pool.gather("apart") == [pytest.approx(1.5)] * 4  # rank 3 is 1.5 from rank 0


@pytest.mark.parametrize("compress, width", [(None, 4), ("bf16", 2)])
def test_comm_counter_counts_buckets_and_bytes_and_still_averages(pool, compress, width):
    pool.push(compress=compress)
    pool.run("""
from torch.nn.parallel import DistributedDataParallel as DDP
from ddplab.lessons.ranks import CommCounter, param_spread
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(1000, 500), nn.ReLU(), nn.Linear(500, 500), nn.ReLU(), nn.Linear(500, 100)),
            bucket_cap_mb=1)   # 801100 parameters, 3.2 MB: several 1 MB buckets
counter = CommCounter(compress)
model.register_comm_hook(None, counter.hook)
for step in range(3):
    model(torch.ones(2, 1000) * (rank + 1)).sum().backward()
    model.zero_grad()
counted = (counter.calls, counter.bytes, sum(counter.sizes))
model(torch.ones(2, 1000) * (rank + 1)).sum().backward()
grad = model.module[4].bias.grad.clone()
""")
    calls, sent, elements = pool.gather("counted")[0]
    # more than one bucket a step (DDP re-buckets after step 1)
    assert elements == 3 * 801100 and sent == elements * width and calls > 3
    # the gradient of bias is 2 per rank, identical on every rank after averaging
    assert [g.tolist() == [2.0] * 100 for g in pool.gather("grad")] == [True] * 4


def test_timeline_lines_ranks_up_and_median_seconds_is_the_slowest(pool):
    pool.run("""
import time
from ddplab.lessons.ranks import Timeline, median_seconds
tl = Timeline()
with tl("work", f"r{rank}"):
    time.sleep(0.05 * rank)
took = median_seconds(lambda: time.sleep(0.01 * (rank + 1)), repeat=3)
events = tl.events
""")
    timelines = pool.gather("events")
    assert [len(e) for e in timelines] == [1] * 4
    start, end, kind, label = timelines[3][0]
    assert kind == "work" and label == "r3" and 0.14 < end - start < 1.0 and abs(start) < 0.5
    took = pool.gather("took")
    assert len(set(took)) == 1 and 0.039 < took[0] < 0.2


def test_all_reduce_counter_counts_what_a_model_averager_sends(pool):
    pool.run("""
from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
from ddplab.lessons.ranks import AllReduceCounter, param_spread
torch.manual_seed(rank)                       # every rank starts different
model = nn.Linear(10, 5)                      # 55 parameters
model(torch.ones(1, 10)).sum().backward()     # the averager skips parameters without a .grad
averager = PeriodicModelAverager(period=3)    # averages at its steps 0, 3, 6
counter = AllReduceCounter()
spreads = []
before = dist.all_reduce
with counter:
    for step in range(7):
        averager.average_parameters(model.parameters())
spreads.append(param_spread(model))           # outside the with: not counted
outside = torch.ones(4)
dist.all_reduce(outside)                      # not counted either
restored = dist.all_reduce is before         # the real all_reduce is back after the with
counted = (counter.calls, counter.bytes)
""")
    assert pool.gather("counted") == [(3, 3 * 55 * 4)] * 4
    assert pool.gather("spreads") == [[0.0]] * 4
    assert pool.gather("outside.tolist()") == [[4.0] * 4] * 4
    assert pool.gather("restored") == [True] * 4
