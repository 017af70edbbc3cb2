"""Seeing inside ranks on the shared pool: where each rank is, collective mismatches named within
seconds, hints for learners' mistakes, %ddp_check and the post-mortem debugger."""
import io
import os
import re
import subprocess
import sys
import textwrap
import time
from dataclasses import replace

import pytest
from IPython.core.error import UsageError

from ddplab.shared.errors import CollectiveMismatch

pytestmark = [pytest.mark.pool, pytest.mark.xdist_group("shared-pool")]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ddp(ip, cell, line=""):
    return ip.run_cell(f"%%ddp {line}\n{cell}")


def healthy(pool):
    result = pool.run("t = torch.ones(1)\ndist.all_reduce(t)\nok = t.item()")
    return pool.gather("ok") == [4.0] * 4 and result.failed == {}


def test_different_collectives_are_named_within_seconds_and_the_pool_stays_usable(pool):
    tic = time.monotonic()
    with pytest.raises(CollectiveMismatch) as info:
        pool.run("t = torch.ones(1)\nif rank == 0:\n    dist.broadcast(t, 0)\nelse:\n    dist.all_reduce(t)")
    assert time.monotonic() - tic < 5  # gloo alone: its timeout (30 s here)
    report = "\n".join(info.value.report(color=False))
    assert report.startswith("collective mismatch: rank 0 called broadcast(float32 [1], default group) at line 3; "
                             "ranks 1, 2, 3 called all_reduce(float32 [1], default group) at line 5")
    assert "group re-formed" in report
    assert healthy(pool)


def test_a_rank_that_skips_a_collective_and_a_shape_mismatch(pool):
    with pytest.raises(CollectiveMismatch, match=r"ranks 1, 2, 3 wait in all_reduce\(float32 \[1\], default group\) "
                                                 r"at line 3; rank 0 finished the cell without calling it"):
        pool.run("t = torch.ones(1)\nif rank != 0:\n    dist.all_reduce(t)")
    with pytest.raises(CollectiveMismatch) as info:  # gloo lets some ranks finish with what they have
        pool.run("t = torch.ones(3 if rank == 1 else 2)\ndist.all_reduce(t)")
    assert "float32 [3]" in str(info.value) and "float32 [2]" in str(info.value), str(info.value)
    assert healthy(pool)


def test_the_text_view_says_where_each_rank_is_in_a_long_cell(pool):
    from ddplab.dashboard.text import TextView

    out = io.StringIO()
    kept, pool.view = pool.view, TextView(every=0.5, stream=out)
    try:
        pool.run("import time\nt = torch.ones(1)\nif rank == 0:\n    time.sleep(3.5)\ndist.all_reduce(t)")
    finally:
        pool.view = kept
    lines = [line for line in out.getvalue().splitlines() if line.startswith("[where]")]
    assert any(re.search(r"rank 0: line 4; ranks 1, 2, 3: all_reduce \(line 5\), waiting [2-9] s", line) for line in lines), lines


def test_hints_for_what_learners_do_by_mistake(ip, pool, capsys):
    assert ddp(ip, "dist.init_process_group('gloo')\nx = dist.get_world_size()").success
    err = capsys.readouterr().err
    assert err.count("ddplab: init_process_group(...) in a cell: ddplab already formed this group") == 1
    assert ip.run_line_magic("ddp_gather", "x") == [4] * 4
    res = ddp(ip, "dist.init_process_group('gloo', rank=0, world_size=2)")
    assert not res.success and "dist.new_group(ranks)" in "\n".join(res.error_in_exec.report(color=False))
    capsys.readouterr()
    assert ddp(ip, "dist.destroy_process_group()").success
    assert "ddplab formed the group again" in capsys.readouterr().err
    assert healthy(pool)
    assert ddp(ip, "import ddplab\nddplab.log(loss=1.0, samples=1)\nwith ddplab.phase('p'):\n    pass").success
    assert ddp(ip, "from torch.utils.data import DataLoader, DistributedSampler\n"
                   "sampler = DistributedSampler(list(range(16)))\nloader = DataLoader(range(16), sampler=sampler)\n"
                   "for epoch in range(3):\n    for batch in loader:\n        pass").success
    assert capsys.readouterr().err.count("iterated again without set_epoch") == 1
    assert ddp(ip, "for epoch in range(3):\n    sampler.set_epoch(epoch)\n    for batch in loader:\n        pass").success
    assert "set_epoch" not in capsys.readouterr().err
    # a new sampler, iterated once each, is not "iterated again" (even where it takes a freed one's address)
    assert ddp(ip, "for _ in range(20):\n    s = DistributedSampler(list(range(16)))\n    list(s)\n    del s").success
    assert "set_epoch" not in capsys.readouterr().err
    zh, pool.config = pool.config, replace(pool.config, lang="zh")
    try:
        assert ddp(ip, "dist.init_process_group('gloo')").success
        assert "ddplab 已经建立了这个进程组" in capsys.readouterr().err
    finally:
        pool.config = zh


def test_check_names_the_ranks_whose_model_drifted(ip, pool, capsys):
    assert ddp(ip, "torch.manual_seed(0)\nnet = nn.Linear(4, 2)\n"
                   "from torch.nn.parallel import DistributedDataParallel as DDP\nsynced = DDP(nn.Linear(4, 2))").success
    ip.run_line_magic("ddp_check", "net synced")
    out = capsys.readouterr().out
    assert "net: identical on every rank" in out and "synced: identical on every rank" in out
    assert ddp(ip, "if rank in (1, 3):\n    with torch.no_grad():\n        net.weight.mul_(1.001)").success
    assert pool.debug.check(["net"]) == {"net": [1, 3]}
    ip.run_line_magic("ddp_check", "net")
    assert "net: ranks 1, 3 differ from rank 0" in capsys.readouterr().out
    en, pool.config = pool.config, replace(pool.config, lang="zh")
    try:
        ip.run_line_magic("ddp_check", "net")
        assert "net: rank 1、3 与 rank 0 不同" in capsys.readouterr().out
    finally:
        pool.config = en
    with pytest.raises(UsageError, match="not an nn.Module"):
        ip.run_line_magic("ddp_check", "no_such_model")


def test_post_mortem_debugger_on_the_root_cause_rank(ip, pool, capsys):
    # rank 0's last exception: raised in a cell of its own (the shared pool's earlier tests leave others)
    assert not ddp(ip, "if rank == 0:\n    1 / 0").success
    res = ddp(ip, "def f(a):\n    b = a * 2\n    return b / (rank - 2)\nx = rank + 10\ny = f(x)")
    assert not res.success
    capsys.readouterr()
    ip.run_line_magic("ddp_debug", "-c where -c 'p a, b' -c up -c 'p x' -c list -c interact -c 'print(x * 3)' "
                                   "-c 'exit()' -c 'p rank'")
    out = capsys.readouterr().out
    assert out.startswith("ddplab: pdb on rank 2: ZeroDivisionError: division by zero")  # the root cause
    assert "-> return b / (rank - 2)" in out and "(Pdb rank 2) p a, b\n(12, 24)" in out
    assert "(Pdb rank 2) p x\n12" in out and "->\ty = f(x)" in out and "36" in out and "(Pdb rank 2) p rank\n2" in out
    ip.run_line_magic("ddp_debug", "0 -c 'p rank'")
    assert "(Pdb rank 0) p rank\n0" in capsys.readouterr().out
    # the same prompt from a script (Lab.debug.session): its questions and answers through the callables given
    rank, _ = pool.debug.start(2)
    answers, shown = iter(["p a", "up", "p x * 2", "q", "p x"]), []
    pool.debug.session(rank, ask=lambda prompt: shown.append(prompt) or next(answers),
                       show=lambda text, end="\n": shown.append(text))
    assert shown[:2] == ["(Pdb rank 2) ", "12\n"] and "24\n" in shown and next(answers) == "p x"  # q ended it
    assert ddp(ip, "pass").success
    with pytest.raises(UsageError, match="no rank failed in the last cell"):
        ip.run_line_magic("ddp_debug", "")


def test_post_mortem_debugger_in_terminal_ipython():
    """The same from a terminal: the prompt reads commands from the keyboard (here, a pipe)."""
    session = textwrap.dedent("""\
        %load_ext ddplab
        %ddp_start 2
        get_ipython().run_cell_magic("ddp", "", "secret = 41 + rank\\nraise ValueError('boom')")
        %ddp_debug 1
        p secret
        where
        q
        %ddp_stop
        exit
    """)
    proc = subprocess.run([sys.executable, "-m", "IPython", "--simple-prompt", "--no-banner", "--colors=NoColor",
                           "--no-confirm-exit"],
                          input=session, capture_output=True, text=True, timeout=180, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert re.search(r"\(Pdb rank 1\) 42\n", proc.stdout), proc.stdout[-2000:]  # p secret, typed at the prompt
    assert re.search(r"-> raise ValueError\('boom'\)", proc.stdout)  # where
    assert "ddplab: pdb on rank 1: ValueError: boom" in proc.stdout and "stopped 2 ranks" in proc.stdout


def test_a_cut_meant_for_an_earlier_group_does_not_break_the_group_formed_since(pool):
    """A cut (sent when ranks wait in collectives that cannot finish) can reach a rank after the
    group was re-formed, or be sent again by someone who saw it: it must not break the new group.
    A cut for the current group does break it."""
    from ddplab.shared import wire

    loop = "import time\nt = torch.ones(1)\nfor _ in range(60):\n    dist.all_reduce(t)\n    time.sleep(0.02)"
    ports = sorted({p for i in pool.info for p in i.get("ports", ())})
    telemetry, gen = pool.telemetry, pool.group.generation

    def cuts(generation, seq):
        return {r: wire.encode_command(telemetry.key, r, generation, seq, cmd="cut", ports=ports) for r in range(4)}

    def breaks(frames):
        bg = pool.run(loop, background=True)
        assert all(telemetry.heard(r) for r in range(4))
        with telemetry._lock:  # sent as the notebook sends commands, on each rank's connection
            for r, message in frames.items():
                telemetry.socket.send_multipart([telemetry._routes[r], *message])
        try:
            bg.result(60)
            return False
        except Exception as exc:  # noqa: BLE001 - the cut collective fails on the ranks
            broken.append(f"{type(exc).__name__}: {exc}")  # (said by the assertion that did not expect it)
            return True

    broken = []
    current = cuts(gen, 10**12)
    assert not breaks(cuts(gen - 1, 10**12 + 1)), ("a cut for the forming before", broken)
    assert breaks(current), "a cut for the current forming"
    assert pool.group.generation == gen + 1  # re-formed after the cut
    assert not breaks(current), ("the same cut again, after the group was formed again", broken[1:])
    assert healthy(pool)
