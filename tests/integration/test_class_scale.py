"""The teacher's reader at a class's full size: 200 learners with 2,000 records each (400,000), read
exactly, refreshed reading only what was appended, and the view's summary counted again only for the
files that grew. (In the full suite, not --quick: it writes and reads 30 MB. Its times are printed.)"""
import time

from ddplab.kernel import classroom as c


def event(kind="check", key="4.1", answer=3, ok=True, learner="Ann Lee", attempt=1, **more):
    return c.make_event(kind, key, answer, ok, learner=learner, attempt=attempt, when=more.pop("when", 1.7e9), **more)


def write_lines(path, lines):
    with open(path, "ab") as f:
        f.write(b"".join(x if isinstance(x, bytes) else c.line(x) for x in lines))


def test_a_class_of_200_learners_with_2000_events_each(tmp_path):
    folder = c.create_class(tmp_path / "class")
    template = ('{"v":1,"learner":"learner %d","kind":"%s","key":"%d.%d","lesson":%d,"answer":%d,"ok":%s,'
                '"attempt":%d,"time":%d.5}\n')
    paths = []
    for i in range(200):
        text = "".join(template % (i, "check" if j % 3 else "prediction", j % 21 + 1, j % 4 + 1, j % 21 + 1, j,
                                   "true" if j % 2 else "false", j // 84 + 1, 1_700_000_000 + j) for j in range(2000))
        paths.append(folder / f"learner-{i}-{i:016x}.jsonl")
        paths[-1].write_text(text)
    tic = time.perf_counter()
    klass = c.Class(folder)
    first = time.perf_counter() - tic
    assert len(klass) == 400_000 and klass.skipped == {}
    tic = time.perf_counter()
    assert klass.refresh() == 0
    unchanged = time.perf_counter() - tic
    tic = time.perf_counter()
    before = klass.summary()
    summed = time.perf_counter() - tic
    added = [c.line(event(learner=f"learner {i}", attempt=99)) for i in range(10)]
    for path, line in zip(paths, added):
        write_lines(path, [line])
    tic = time.perf_counter()
    assert klass.refresh() == sum(map(len, added))
    stale = [s for s in klass._files.values() if s.partial is not None and s.partial[0] != len(s.events)]
    after = klass.summary()  # the view's update: only the 10 grown files are counted again
    grown = time.perf_counter() - tic
    assert len(klass) == 400_010 and len(stale) == 10
    assert all(s.partial[0] == len(s.events) for s in klass._files.values())
    assert after["exercises"]["2.2"]["tried"] == before["exercises"]["2.2"]["tried"] == 200
    print(f"\nbench: 200 learners x 2,000 events: read {first:.2f} s (goal: a few s), refresh unchanged "
          f"{unchanged * 1e3:.1f} ms, first summary {summed:.2f} s, 10 files grown: refresh + summary "
          f"{grown * 1e3:.0f} ms (goal < 1 s)")
