"""A rank's telemetry thread and its cell's thread, without engines: what the telemetry thread may
touch (never torch's objects while a cell trains), and which cuts it applies (its own forming's only)."""
from ddplab.shared import wire


def test_memory_is_measured_on_the_cells_thread_only(monkeypatch):
    """Reading a gradient or DDP's logging data from the telemetry thread while backward writes them
    crashed an engine: the telemetry thread only sends what the cell's thread measured between steps."""
    import threading

    import zmq

    from ddplab import rank as rank_module

    measured = []  # the threads memory() ran on
    monkeypatch.setattr(rank_module, "memory", lambda ns: measured.append(threading.get_ident()) or {"rss": 7})
    context = zmq.Context.instance()
    inbox = context.socket(zmq.PULL)
    inbox.bind("inproc://memory-test")
    r = rank_module.Rank()
    r.sender._sock, r.sender._key = context.socket(zmq.PUSH), b"k" * 32
    r.sender._sock.connect("inproc://memory-test")
    try:
        r.begin_cell()

        def elsewhere(call):
            t = threading.Thread(target=call)
            t.start()
            t.join(10)
            assert not t.is_alive()

        elsewhere(lambda: r.log(loss=1.0))  # a step logged from another thread: not measured there
        elsewhere(lambda: r.sender.flush(beat=True))  # the telemetry thread's tick
        assert measured == []
        r.log(loss=1.0)  # the cell's thread, between steps: measured once per MEMORY_EVERY
        r.log(loss=0.5)
        assert measured == [threading.get_ident()]
        elsewhere(lambda: r.sender.flush(beat=True))  # ... and sent by the telemetry thread
        batches = []
        while inbox.poll(500):
            batches.append(wire.decode(b"k" * 32, inbox.recv_multipart())[0])
        assert [b.memory for b in batches if b.memory] == [{"rss": 7}]
    finally:
        r.sender.close()
        inbox.close(linger=0)


def test_a_cut_applies_to_its_own_forming_only(monkeypatch):
    """A cut read for a forming must not break the next one: none applies while a group forms (join()
    clears what may be cut before it makes the new group), nor one for a forming before."""
    import zmq

    from ddplab import rank as rank_module

    context = zmq.Context.instance()
    notebook = context.socket(zmq.ROUTER)
    notebook.bind("inproc://cut-test")
    r = rank_module.Rank()
    cuts = []
    monkeypatch.setattr(r, "cut", lambda ports=(): cuts.append(list(ports)))
    r.sender._agent = "no telemetry thread: the test reads the commands itself"
    key = b"k" * 32
    try:
        r.sender.connect("inproc://cut-test", key, generation=7)
        assert notebook.poll(5000)
        route = notebook.recv_multipart()[0]  # the first, empty batch says where the rank is

        def command(gen, seq, **what):
            notebook.send_multipart([route, *wire.encode_command(key, 0, gen, seq, **what)])
            for _ in range(50):  # (inproc delivers at once; bounded anyway)
                r.sender._commands()

        command(7, 1, cmd="cut", ports=[1])
        assert cuts == [[1]]  # the forming's own cut
        with r.lock:  # what join() does before it makes a new group
            r.sender.cuttable = None
        command(7, 2, cmd="cut", ports=[2])
        assert cuts == [[1]]  # read while the next group forms: not applied
        r.sender.connect("inproc://cut-test", key, generation=8)
        assert notebook.poll(5000)
        while notebook.poll(100):  # the new connection's first batch (the old one's acknowledgements may come too)
            frames = notebook.recv_multipart()
            batch, _ = wire.decode(key, frames[1:])
            if batch is not None and batch.gen == 8:
                route = frames[0]
        command(7, 3, cmd="cut", ports=[3])
        command(8, 1, cmd="cut", ports=[4])
        assert cuts == [[1], [4]]  # the old forming's cut dropped, the new one's applied
    finally:
        r.sender.close()
        notebook.close(linger=0)


def test_the_mmap_threshold_is_held_only_where_memory_is_limited(monkeypatch):
    """Holding glibc's mmap threshold saves memory in a Binder or hub session but made FSDP2's step
    3.5 % slower: held where the session has a memory limit, glibc's own elsewhere."""
    import ctypes

    from ddplab import rank as rank_module

    calls = []

    class C:
        def mallopt(self, param, value):
            calls.append((param, value))
            return 1

    monkeypatch.setattr(ctypes, "CDLL", lambda name: C())
    assert rank_module.fix_mmap_threshold(None) is False and calls == []
    assert rank_module.fix_mmap_threshold(2**30) is True and calls == [(-3, rank_module.MMAP_THRESHOLD)]
