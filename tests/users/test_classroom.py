"""A class on a shared machine, as it runs there: a teacher and three learners, ordinary accounts made here
(removed after), ddplab installed as a user installs it. The teacher makes the class folder with the
command line; two learners join it in real kernels, predict, reveal and answer exercises; the third
predicts without joining. The teacher's data counts exactly what they did; a learner cannot list the
folder, read, change or remove another's record; planted records (a symbolic link, a huge file, a file
with bad lines) are skipped and counted; a learner's report is valid (report.json against its schema,
Gradescope's results.json as documented)."""
import json
import os
import shutil
import tempfile

import nbformat
import pytest
from nbclient import NotebookClient

from .accounts import Account, account_env, run_as, user_env, user_kernel

pytestmark = [pytest.mark.pool, pytest.mark.xdist_group("users"), pytest.mark.slow]

LEARNER_CELLS = [
    "%load_ext ddplab",
    "%ddp_class join {folder} --name {name}",
    "from ddplab.lessons import check, predict, reveal",
    "predict('4.overlap', {guess})",
    "reveal('4.overlap', 0.2)",
    "check('3.1', [6, 1, 5, 3], N=23, world_size=4)",  # right: 6 a rank, 1 repeated; 5 a rank, 3 left out
    "check('3.1', [5, 0, 5, 3], N=23, world_size=4)",  # wrong
    "predict('4.overlap', 0.25)",  # after the reveal: a second attempt
]


@pytest.fixture(scope="module")
def people():
    made = {role: Account.make(prefix) for role, prefix in
            (("teacher", "ddpt"), ("ann", "ddpa"), ("bo", "ddpb"), ("cy", "ddpc"))}
    yield made
    for account in made.values():
        account.remove()


@pytest.fixture(scope="module")
def klass(people):
    """The class folder, made by the teacher with `ddplab class create` in a folder of the teacher's."""
    parent = tempfile.mkdtemp(prefix="ddplab-classes-")
    os.chmod(parent, 0o755)
    os.chown(parent, people["teacher"].uid, people["teacher"].gid)
    folder = os.path.join(parent, "ddp")
    code, out, err = run_as(people["teacher"], [user_env().parent / "ddplab", "class", "create", folder]).finish(60)
    assert code == 0, out + err
    yield folder
    shutil.rmtree(parent, ignore_errors=True)


def in_kernel(account, cells, timeout=120):
    km, folder = user_kernel(account, user_env())
    km.start_kernel(cwd=account.home, env=account_env(account))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    try:
        NotebookClient(nb, km=km, timeout=timeout).execute()
    finally:
        km.shutdown_kernel(now=False)
        shutil.rmtree(folder, ignore_errors=True)
    return ["".join(o.get("text", "") for o in c.outputs) for c in nb.cells]


def as_python(account, code, timeout=60):
    code_, out, err = run_as(account, [user_env(), "-c", code]).finish(timeout)
    assert code_ == 0, out + err
    return out


@pytest.fixture(scope="module")
def worked(people, klass):
    """Ann and Bo work in the class; Cy predicts without joining."""
    said = {}
    for name, guess in (("ann", 0.5), ("bo", 0.1)):
        said[name] = in_kernel(people[name], [c.format(folder=klass, name=name.capitalize(), guess=guess)
                                              for c in LEARNER_CELLS])
    said["cy"] = in_kernel(people["cy"], ["from ddplab.lessons import predict\npredict('4.overlap', 0.9)"])
    return said


def test_learners_in_real_kernels_are_told_what_is_kept(worked, klass):
    ann = worked["ann"]
    assert f"you joined the class in {klass} as Ann" in ann[1]
    assert "you predicted 0.5; measured 0.2" in ann[4] and "Right" in ann[5] and "Not yet" in ann[6]
    assert "committed as attempt 2" in ann[7]


def test_the_teachers_data_counts_exactly_what_the_learners_did(people, klass, worked):
    out = as_python(people["teacher"], (
        "import json\nfrom ddplab.classroom import Class\n"
        f"c = Class({klass!r})\nrows = c.rows()\n"
        "print(json.dumps({'rows': [[r['learner'], r['key'], r['kind'], r['answer'], r['ok'], r['attempt']] for r in rows],"
        " 'skipped': dict(c.skipped), 'summary': c.summary()}))"))
    data = json.loads(out.strip().splitlines()[-1])
    assert sorted(map(tuple, data["rows"])) == sorted([
        ("Ann", "4.overlap", "prediction", 0.5, None, 1), ("Ann", "4.overlap", "prediction", 0.25, None, 2),
        ("Ann", "3.1", "check", "(6, 1, 5, 3)", True, 1), ("Ann", "3.1", "check", "(5, 0, 5, 3)", False, 2),
        ("Bo", "4.overlap", "prediction", 0.1, None, 1), ("Bo", "4.overlap", "prediction", 0.25, None, 2),
        ("Bo", "3.1", "check", "(6, 1, 5, 3)", True, 1), ("Bo", "3.1", "check", "(5, 0, 5, 3)", False, 2)])
    summary = data["summary"]
    assert summary["learners"] == 2 and summary["exercises"]["3.1"]["tried"] == 2
    assert summary["exercises"]["3.1"]["right"] == 2 and summary["exercises"]["3.1"]["wrong"] == [["(5, 0, 5, 3)", 2]]
    assert sorted(summary["predictions"]["4.overlap"]["predicted"]) == [0.1, 0.5]  # each learner's first
    assert data["skipped"] == {}
    # Cy never joined: Cy's prediction is in Cy's own record only
    own = as_python(people["cy"], "import os; print(open(os.path.expanduser('~/.ddplab/record.jsonl')).read())")
    assert '"answer":0.9' in own and "Cy" not in json.dumps(data["rows"])


def test_a_learner_cannot_list_read_change_or_remove_anothers_record(people, klass, worked):
    ann_file = next(f for f in os.listdir(klass) if f.startswith("ann-"))  # (root may list: the attacker may not)
    probe = (
        "import os, json\n"
        f"folder, victim = {klass!r}, os.path.join({klass!r}, {ann_file!r})\n"
        "tried = {}\n"
        "for what, act in [('list', lambda: os.listdir(folder)), ('read', lambda: open(victim).read()),\n"
        "                  ('append', lambda: open(victim, 'a').write('x')), ('remove', lambda: os.unlink(victim)),\n"
        "                  ('rename', lambda: os.rename(victim, victim + '.x'))]:\n"
        "    try:\n        act(); tried[what] = 'done'\n"
        "    except PermissionError:\n        tried[what] = 'refused'\n"
        "print(json.dumps(tried))")
    tried = json.loads(as_python(people["bo"], probe).strip().splitlines()[-1])
    assert tried == dict.fromkeys(("list", "read", "append", "remove", "rename"), "refused")
    assert os.path.exists(os.path.join(klass, ann_file))


def test_planted_records_are_skipped_and_counted(people, klass, worked):
    plant = (
        "import os\n"
        f"folder = {klass!r}\n"
        "os.symlink('/etc/passwd', os.path.join(folder, 'eve-0000000000000000.jsonl'))\n"
        "with open(os.path.join(folder, 'huge-1111111111111111.jsonl'), 'wb') as f:\n"
        "    f.write(b'{}\\n' * (3 * 2**20 // 3))\n"
        "with open(os.path.join(folder, 'cy-2222222222222222.jsonl'), 'w') as f:\n"
        "    f.write('not json\\n{\"v\": 1}\\n')\n"
        "os.chmod(os.path.join(folder, 'huge-1111111111111111.jsonl'), 0o644)\n"
        "os.chmod(os.path.join(folder, 'cy-2222222222222222.jsonl'), 0o644)\n")
    as_python(people["cy"], plant)
    out = as_python(people["teacher"], (
        "import json\nfrom ddplab.classroom import Class\n"
        f"c = Class({klass!r})\nrows = c.rows()\nprint(json.dumps([len(rows), dict(c.skipped)]))"))
    rows, skipped = json.loads(out.strip().splitlines()[-1])
    assert rows == 8  # Ann's and Bo's, as before
    assert skipped.get("symlink") == 1 and skipped.get("too large") == 1 and skipped.get("malformed line") == 2, skipped


def test_a_learners_report_is_valid(people, klass, worked):
    out_dir = os.path.join(people["ann"].home, "report")
    code, out, err = run_as(people["ann"], [user_env().parent / "ddplab", "report", "--out", out_dir]).finish(60)
    assert code == 0, out + err
    import jsonschema

    from ddplab.kernel import classroom

    with open(os.path.join(os.path.dirname(classroom.__file__), "report_schema.json")) as f:
        schema = json.load(f)
    with open(os.path.join(out_dir, "report.json")) as f:
        report = json.load(f)
    jsonschema.validate(report, schema, cls=jsonschema.Draft202012Validator)
    with open(os.path.join(out_dir, "results.json")) as f:
        results = json.load(f)
    assert results["score"] == 1 and [t["score"] for t in results["tests"]] == [1]
    assert all({"name", "score", "max_score", "output"} <= set(t) for t in results["tests"])
    with open(os.path.join(out_dir, "report.md")) as f:
        assert "3.1" in f.read()
