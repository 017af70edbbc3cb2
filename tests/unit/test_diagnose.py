"""Where ranks are and which collectives can never finish: pure functions of what ranks report."""
from ddplab.shared.diagnose import HINTS, hint_text, mismatch, where_text


def waiting(op, line, since=2.0, group="default", shape=(1,), dtype="float32"):
    return {"line": line, "op": op, "group": group, "shape": list(shape), "dtype": dtype, "since": since}


def test_where_groups_ranks_that_are_at_the_same_place():
    wheres = {0: waiting("broadcast", 5, 3.0), 1: waiting("all_reduce", 7, 12.4), 2: waiting("all_reduce", 7, 12.4),
              3: {"line": 9, "op": None, "group": None, "shape": None, "dtype": None, "since": None}}
    assert where_text(wheres) == ("rank 0: broadcast (line 5), waiting 3 s; ranks 1, 2: all_reduce (line 7), "
                                  "waiting 12 s; rank 3: line 9")
    assert "第 7 行" in where_text(wheres, "zh") and "已等待 12 秒" in where_text(wheres, "zh")
    assert where_text({0: waiting("all_reduce", 3, group="ranks 0,1")}) == \
        "rank 0: all_reduce [ranks 0,1] (line 3), waiting 2 s"
    assert where_text({0: None}) == ""


def test_different_collectives_at_the_same_point_are_a_mismatch():
    wheres = {0: waiting("broadcast", 5), 1: waiting("all_reduce", 4), 2: waiting("all_reduce", 4), 3: waiting("all_reduce", 4)}
    m = mismatch(wheres, [0, 1, 2, 3], [], 4)
    assert m.ranks == [0, 1, 2, 3]
    assert m.text.startswith("collective mismatch: rank 0 called broadcast(float32 [1], default group) at line 5; "
                             "ranks 1, 2, 3 called all_reduce(float32 [1], default group) at line 4")
    assert mismatch(wheres, [0, 1, 2, 3], [], 4, "zh").text.startswith("集合通信不匹配")


def test_shapes_and_dtypes_must_match_too():
    wheres = {0: waiting("all_reduce", 3, shape=(2,)), 1: waiting("all_reduce", 3, shape=(3,))}
    assert "float32 [2]" in mismatch(wheres, [0, 1], [], 2).text
    wheres = {0: waiting("all_reduce", 3, dtype="float32"), 1: waiting("all_reduce", 3, dtype="bfloat16")}
    assert "bfloat16" in mismatch(wheres, [0, 1], [], 2).text


def test_a_rank_that_lags_one_collective_behind_is_not_a_mismatch():
    pair = dict(waiting("all_reduce", 3, group="ranks 0,1"), calls=4)  # rank 0, slow to finish the pair's
    whole = dict(waiting("all_reduce", 5), calls=5)                      # rank 1, already in the next one
    assert mismatch({0: pair, 1: whole}, [0, 1], [], 2) is None
    assert mismatch({0: dict(pair, calls=5), 1: whole}, [0, 1], [], 2) is not None  # the same point: it is one


def test_no_mismatch_while_a_rank_still_computes_or_waits_briefly():
    wheres = {1: waiting("all_reduce", 4), 2: waiting("all_reduce", 4),
              0: {"line": 2, "op": None, "group": None, "shape": None, "dtype": None, "since": None}}
    assert mismatch(wheres, [0, 1, 2], [], 3) is None  # rank 0 may still call all_reduce: a straggler
    assert mismatch({0: waiting("broadcast", 5, since=0.2), 1: waiting("all_reduce", 4)}, [0, 1], [], 2) is None
    assert mismatch({0: waiting("send", 5), 1: waiting("recv", 6)}, [0, 1], [], 2) is None  # a pair
    # separate groups, each whole: two different collectives at once are fine
    wheres = {0: waiting("all_reduce", 3, group="ranks 0,1"), 1: waiting("all_reduce", 3, group="ranks 0,1"),
              2: waiting("broadcast", 4, group="ranks 2,3"), 3: waiting("broadcast", 4, group="ranks 2,3")}
    assert mismatch(wheres, [0, 1, 2, 3], [], 4) is None


def test_waiting_for_a_rank_that_finished_or_does_not_run_the_cell():
    assert mismatch({1: waiting("all_reduce", 3)}, [1], [0], 2).text.startswith("rank 1 waits in all_reduce")
    wheres = {1: waiting("all_reduce", 3, since=2.5), 2: waiting("all_reduce", 3, since=2.5)}
    m = mismatch(wheres, [1, 2], [0], 3)
    assert m.text == ("ranks 1, 2 wait in all_reduce(float32 [1], default group) at line 3 for rank 0, which "
                      "finished the cell without calling it") and m.ranks == [1, 2, 0]
    # when the finished ranks said what they called (the cell's last batch), it is named
    wheres = {r: dict(waiting("all_reduce", 2, since=1.5, shape=(4,)), calls=1) for r in (0, 2)}
    calls = {1: {"calls": 1, "last": waiting("all_reduce", 2, shape=(4,))},
             3: {"calls": 1, "last": waiting("all_reduce", 2, shape=(3,))}, 4: {"calls": 0, "last": None}}
    m = mismatch(wheres, [0, 2], [1, 3, 4], 5, calls=calls)
    assert m.text == ("ranks 0, 2 wait in all_reduce(float32 [4], default group) at line 2; rank 1 called "
                      "all_reduce(float32 [4], default group) at line 2 and finished the cell; rank 3 called "
                      "all_reduce(float32 [3], default group) at line 2 and finished the cell; rank 4 finished the "
                      "cell without calling it")
    m = mismatch({0: waiting("barrier", 1, shape=()), 1: waiting("barrier", 1, shape=())}, [0, 1], [], 4,
                 cell_ranks=[0, 1])
    assert "ranks 2, 3, which do not run this cell" in m.text


def test_every_running_rank_is_named_when_some_finished():
    calls = {r: {"calls": 1, "last": waiting("all_reduce", 2, shape=(2,))} for r in (0, 3)}
    rank1 = dict(waiting("all_reduce", 2, since=1.5, shape=(3,)), calls=1)
    rank2 = dict(waiting("all_reduce", 2, since=1.5, shape=(2,)), calls=1)
    # rank 1's stack has not said yet where it is: a moment for it, not a report without it
    assert mismatch({1: None, 2: rank2}, [1, 2], [0, 3], 4, calls=calls) is None
    m = mismatch({1: rank1, 2: rank2}, [1, 2], [0, 3], 4, calls=calls)
    assert m.text == ("rank 1 waits in all_reduce(float32 [3], default group) at line 2; rank 2 waits in "
                      "all_reduce(float32 [2], default group) at line 2; ranks 0, 3 called all_reduce(float32 [2], "
                      "default group) at line 2 and finished the cell") and sorted(m.ranks) == [0, 1, 2, 3]
    late = dict(rank2, since=4.5)  # it never says: named without it
    assert mismatch({1: None, 2: late}, [1, 2], [0, 3], 4, calls=calls).text.startswith("rank 2 waits")


def test_an_old_report_of_a_rank_that_peers_went_past_is_not_a_mismatch():
    calls = {0: {"calls": 3, "last": waiting("all_reduce", 26)}}  # rank 0 finished after a 3rd collective...
    old = dict(waiting("broadcast", 21, since=1.5), calls=2)        # ...that needed rank 3, "still" in the 2nd
    assert mismatch({3: old}, [3], [0], 4, calls=calls) is None
    assert mismatch({3: dict(old, since=4.5)}, [3], [0], 4, calls=calls) is not None  # unless it stays so


def test_every_hint_in_both_languages():
    for key in HINTS:
        en, zh = hint_text(key, "en", ms=40), hint_text(key, "zh", ms=40)
        assert en and zh and en != zh and "\n" not in en


def test_a_rank_late_to_say_it_left_a_collective_its_peers_finished_is_not_a_mismatch():
    """Rank 0 slept 4 s before an all_reduce; ranks 1-3 waited in it. Ranks 0, 2, 3 finished; rank 1,
    on a busy machine, has not said so yet: its last report still has it waiting, 4 s in."""
    calls = {r: {"calls": 1, "last": waiting("all_reduce", 5)} for r in (0, 2, 3)}
    late = dict(waiting("all_reduce", 5, since=4.2), calls=1)
    assert mismatch({1: late}, [1], [0, 2, 3], 4, calls=calls) is None
    # a peer that went through another shape, or another collective, is still a mismatch
    other = {**calls, 3: {"calls": 1, "last": waiting("all_reduce", 5, shape=(2,))}}
    assert mismatch({1: late}, [1], [0, 2, 3], 4, calls=other) is not None
    other = {**calls, 3: {"calls": 1, "last": waiting("broadcast", 5)}}
    assert mismatch({1: late}, [1], [0, 2, 3], 4, calls=other) is not None


def test_a_collective_a_peer_completed_is_not_a_mismatch_though_another_peer_was_seen_before_it():
    """Rank 3 slept, then entered the barrier; rank 1 went through it and finished. Ranks 0 and 2 are a
    moment late to say they left it, and rank 3's last report still has it on its line, before the
    barrier (or paused by py-spy): no member completes a barrier before all entered it, so no mismatch."""
    calls = {1: {"calls": 1, "last": waiting("barrier", 4, shape=())}}
    wheres = {r: dict(waiting("barrier", 4, since=5.5, shape=()), calls=1) for r in (0, 2)}
    wheres[3] = {"line": 3, "op": None, "calls": 0}
    assert mismatch(wheres, [0, 2, 3], [1], 4, calls=calls) is None
    # a running peer seen in another collective is still a mismatch
    wheres[3] = dict(waiting("all_reduce", 4, since=1.5), calls=1)
    assert mismatch(wheres, [0, 2, 3], [1], 4, calls=calls) is not None
