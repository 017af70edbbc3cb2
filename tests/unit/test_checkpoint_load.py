"""ddplab.checkpoint without a process group (one process is rank 0): what load reads, and what
it refuses to read."""
import os
import pickle

import pytest
import torch

import ddplab.checkpoint as ck

from ..conftest import RunsCode


def _model_and_optimizer():
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    return model, opt


def test_a_checkpoint_comes_back_whole_with_its_extras(tmp_path):
    model, opt = _model_and_optimizer()
    path = tmp_path / "ckpt.pt"
    ck.save(path, model, opt, 12, lr=0.1, note="epoch 3", losses=[1.5, 0.5], mask=torch.ones(2))
    model2 = torch.nn.Linear(3, 2)
    opt2 = torch.optim.SGD(model2.parameters(), lr=0.1, momentum=0.9)
    assert ck.load(path, model2, opt2) == 12
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), model2.state_dict().values()))
    assert opt2.state_dict()["state"][0]["momentum_buffer"].equal(opt.state_dict()["state"][0]["momentum_buffer"])
    extra = ck.load_extra(path)
    assert extra["note"] == "epoch 3" and extra["losses"] == [1.5, 0.5] and extra["mask"].equal(torch.ones(2))
    assert os.stat(path).st_mode & 0o777 == 0o600


@pytest.mark.filterwarnings("ignore:Detected pickle protocol:UserWarning")  # torch's, before it refuses the bare pickle
def test_a_planted_file_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "it-ran"
    path = tmp_path / "ckpt.pt"
    model, _ = _model_and_optimizer()
    torch.save({"model": model.state_dict(), "step": 1, "extra": {"x": RunsCode(marker)}, "optimizer": None}, path)
    with pytest.raises(ValueError, match="holds more than tensors and plain values.*weights_only=False"):
        ck.load(path, model)
    assert not marker.exists()
    with open(path, "wb") as f:  # a bare pickle, not even torch's format
        pickle.dump(RunsCode(marker), f)
    with pytest.raises((ValueError, RuntimeError)):
        ck.load(path, model)
    assert not marker.exists()


def test_a_missing_checkpoint_says_so(tmp_path):
    with pytest.raises(FileNotFoundError):
        ck.load(tmp_path / "none.pt", torch.nn.Linear(3, 2))


def test_saving_never_writes_through_a_planted_link_nor_a_predictable_name(tmp_path):
    """Someone who can write the folder plants a symlink at the name an earlier ddplab would have used
    (ckpt.pt.tmp-PID), and at every name they can guess: save creates its own file, exclusively."""
    model, opt = _model_and_optimizer()
    path = tmp_path / "ckpt.pt"
    victim = tmp_path / "victim"
    victim.write_text("precious")
    for name in (f"ckpt.pt.tmp-{os.getpid()}", f".ckpt.pt.tmp-{os.getpid()}"):
        (tmp_path / name).symlink_to(victim)
    ck.save(path, model, opt, 1)
    assert victim.read_text() == "precious" and ck.load(path, torch.nn.Linear(3, 2)) == 1
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    leftovers = sorted(p.name for p in tmp_path.iterdir() if "tmp-" in p.name)
    assert leftovers == sorted([f"ckpt.pt.tmp-{os.getpid()}", f".ckpt.pt.tmp-{os.getpid()}"])  # theirs, untouched
    assert all((tmp_path / n).is_symlink() for n in leftovers)
