"""Device placement: every model, guide and solver follows the device of its input tensors.

No GPU is needed. Three checks stand in for one:

* a lint over the device-owning modules: every tensor factory (``torch.zeros``, ``torch.eye``,
  ``torch.tensor``, ...) names ``device=`` (or the line says ``# device: cpu-ok``), and
  ``.numpy()`` is only called right after ``.cpu()``;
* a runtime check: the smallest fit of every model runs under a torch function mode that
  records each tensor factory called from a tandem source file without ``device=`` — a
  tensor that would land on the CPU while the data live on the GPU;
* the high-level fits accept ``device=`` and put every fitted tensor there (the CPU here).

``python examples/gpu_check.py`` compares CPU and CUDA numbers on a machine with a GPU.
"""
from __future__ import annotations

import ast
import random
import sys
from pathlib import Path

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer.autoguide import AutoDelta
from torch.overrides import TorchFunctionMode
from torch.utils._device import _device_constructors

from tandem.guides.coupled_projections import Guide
from tandem.inference import svi
from tandem.inference.coupled_projections.solver import CoupledProjections
from tandem.inference.mcgpds import McGPDS
from tandem.inference.mcgpds import stochastic as st
from tandem.inference.mcgpds.fit import fit_mcgpds
from tandem.inference.samtc.model_fit import fit_model
from tandem.inference.samtc.simulate import simulate_tasks
from tandem.inference.svi import fit
from tandem.inference.validation import resolve_device
from tandem.models import coupled_projections as cpm
from tandem.models.mcgpds import McGPDSData, simulate

ROOT = Path(__file__).resolve().parent.parent

#: every module of the package is checked line by line (a new module is covered without being
#: listed); a factory that is meant to create a CPU tensor carries the mark below with its reason
DEVICE_FILES = sorted(str(p.relative_to(ROOT)) for d in ("models", "guides", "inference")
                      for p in (ROOT / d).rglob("*.py"))
FACTORIES = {f.__name__ for f in _device_constructors()}
#: (``torch.as_tensor`` of a tensor keeps its device, but statically the lint cannot tell a
#: tensor from an array, so it asks for ``device=`` there too; ``device=None`` keeps a tensor's)
MARK = "# device: cpu-ok"


def _lint(path: Path) -> list[str]:
    src = path.read_text()
    rel = path.relative_to(ROOT) if ROOT in path.parents else path.name
    lines = src.splitlines()
    bad = []
    for node in ast.walk(ast.parse(src)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        span = "\n".join(lines[node.lineno - 1:node.end_lineno])
        if MARK in span:
            continue
        f = node.func
        if isinstance(f.value, ast.Name) and f.value.id == "torch" and f.attr in FACTORIES:
            # ``**opts`` (arg None) is taken to carry the device: the runtime check below sees it
            if not any(k.arg in ("device", None) for k in node.keywords):
                bad.append(f"{rel}:{node.lineno}: torch.{f.attr}(...) without device=")
        if f.attr == "numpy" and not node.args:
            recv = f.value
            ok = isinstance(recv, ast.Call) and isinstance(recv.func, ast.Attribute) and recv.func.attr == "cpu"
            if not ok:
                bad.append(f"{rel}:{node.lineno}: .numpy() not right after .cpu()")
    return bad


@pytest.mark.parametrize("rel", DEVICE_FILES)
def test_tensor_factories_name_their_device(rel):
    assert _lint(ROOT / rel) == []


def test_lint_catches_what_it_should(tmp_path):
    p = tmp_path / "probe.py"
    p.write_text("import torch\n"
                 "a = torch.zeros(3)\n"
                 "b = torch.zeros(3, device=x.device)\n"
                 "c = torch.eye(2)  # device: cpu-ok\n"
                 "d = y.numpy()\n"
                 "e = y.detach().cpu().numpy()\n"
                 "f = y.new_zeros(3)\n")
    bad = _lint(p)
    assert [b.split(":")[1] for b in bad] == ["2", "5"]


# ------------------------------------------------------------------ runtime check
class FactoryRecorder(TorchFunctionMode):
    """Records tensor factories called from a tandem source file without ``device=``.

    ``torch.as_tensor``/``asarray``/``tensor`` of a tensor keep (or copy from) its device and
    are not recorded; neither are lines marked ``# device: cpu-ok``.
    """

    def __init__(self):
        super().__init__()
        self.hits: set[str] = set()
        self._lines: dict = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in FACTORIES and func in _device_constructors() and "device" not in kwargs:
            keeps = name in ("as_tensor", "asarray", "tensor") and args and isinstance(args[0], torch.Tensor)
            if not keeps:
                fr = sys._getframe(1)
                fn = Path(fr.f_code.co_filename).resolve()
                if ROOT in fn.parents and "tests" not in fn.relative_to(ROOT).parts:
                    src = self._lines.setdefault(fn, fn.read_text().splitlines() if fn.exists() else [])
                    if MARK not in (src[fr.f_lineno - 1] if fr.f_lineno <= len(src) else ""):
                        self.hits.add(f"{fn.relative_to(ROOT)}:{fr.f_lineno}: torch.{name}")
        return func(*args, **kwargs)


def test_recorder_catches_a_device_less_factory_in_a_tandem_file():
    code = compile("import torch\nx = torch.zeros(2)\ny = torch.zeros(2, device=x.device)\n"
                   "z = torch.as_tensor(x)\n", str(ROOT / "models" / "_probe.py"), "exec")
    rec = FactoryRecorder()
    with rec:
        exec(code, {})
    assert rec.hits == {"models/_probe.py:2: torch.zeros"}


def _mcgpds_small():
    t = torch.linspace(0, 1, 24, dtype=torch.float64)
    sim = simulate(t, torch.zeros(24, dtype=torch.long), [3, 2], Q=2, M=4, seed=0)
    m = McGPDS(Q=2, M=4, cycles=1, var_iters=2, model_iters=2, joint_iters=2, device="cpu")
    m.fit([sim["y_0"], sim["y_1"]], times=t)
    pred = m.predict(sim["y_0"][:5], t[:5], method="paper", test_iters=2)
    idata = m.to_inference_data(num_samples=2)
    return m, pred, idata


def _stochastic_small():
    sim = st.simulate_sequences(3, 12, [3, 2], Q=2, M=4, seed=0)
    cfg = st.StochasticConfig(Q=2, M=4, window=6, batch=2, num_steps=2, fixed=("alpha", "eps", "beta", "time"))
    m = st.StochasticMcGPDS(cfg).fit(sim["views"], sim["times"], sim["seq_ids"], seed=0)
    return m, m.elbo(), m.latents()


def _samtc_small():
    sim = simulate_tasks(n_tasks=2, n_points=(60, 60), n_private=(1, 0), seed=0)
    mf = fit_model([torch.as_tensor(X) for X in sim.tasks], sim.h, num_steps=3, seed=0, device="cpu")
    return mf, mf.cluster_probs(num_samples=1), mf.to_inference_data(num_samples=2)


def _cp_small():
    sim = cpm.simulate(n=20, d=2, dx=4, dy=3, seed=0)
    cp = CoupledProjections(d=2).fit(sim["X"], sim["Y"], sim["pairs"][:8])
    w = cpm.whiten(cp, device="cpu")
    res = fit(cpm.model, Guide(), w.zhat, w.omega, 2, num_steps=3, progress=False)
    return w, res


def _driver_small():

    def reg(X, y):
        w = pyro.sample("w", dist.Normal(X.new_zeros(2), 1.0).to_event(1))
        with pyro.plate("data", X.shape[0]):
            pyro.sample("y", dist.Normal(X @ w, 0.3), obs=y)

    X = torch.randn(20, 2, dtype=torch.float64)
    return fit(reg, AutoDelta(reg), X, X.sum(1), num_steps=5, progress=False)


SMALL_FITS = {"mcgpds": _mcgpds_small, "mcgpds_stochastic": _stochastic_small, "samtc": _samtc_small,
              "coupled_projections": _cp_small, "driver": _driver_small}


def _tensors(obj, seen=None):
    """Every tensor reachable from ``obj`` through lists, tuples, dicts and attributes."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple, set)):
        for v in obj:
            yield from _tensors(v, seen)
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v, seen)
    elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("tandem"):
        for v in vars(obj).values():
            yield from _tensors(v, seen)


@pytest.mark.parametrize("name", sorted(SMALL_FITS))
def test_smallest_fit_creates_no_device_less_tensor(name):
    """The runtime twin of the lint: no tensor factory without ``device=`` is reached from the
    device-owning modules while fitting, predicting and exporting (other modules' hits are
    listed in the failure message only when they are in those modules)."""
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    rec = FactoryRecorder()
    with rec:
        out = SMALL_FITS[name]()
    mine = sorted(h for h in rec.hits if h.split(":")[0] in DEVICE_FILES)
    assert mine == [], "\n".join(mine)
    # and everything produced lives on the CPU (the inputs' device)
    devs = {t.device.type for t in _tensors(out)} | {v.device.type for v in pyro.get_param_store().values()}
    assert devs <= {"cpu"}


def test_resolve_device():
    assert resolve_device(None, np.zeros(3)) == torch.device("cpu")
    assert resolve_device(None, [np.zeros(3), torch.zeros(2)]) == torch.device("cpu")
    assert resolve_device("cpu", torch.zeros(1)) == torch.device("cpu")
    with pytest.raises(ValueError, match="device"):
        resolve_device("not-a-device")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA"):
            resolve_device("cuda")
    # a meta device computes nothing and other backends are not supported: refused by name
    for bad in ("meta", torch.device("meta"), "xpu"):
        with pytest.raises(ValueError, match="device: expected a cpu or cuda device"):
            resolve_device(bad)
    with pytest.raises(ValueError, match="device"):     # an index beyond the GPUs present
        resolve_device(f"cuda:{torch.cuda.device_count()}")


def test_device_argument_is_checked_early():
    if torch.cuda.is_available():
        pytest.skip("CUDA present: device='cuda' is valid here")
    with pytest.raises(ValueError, match="CUDA"):
        McGPDS(device="cuda")
    with pytest.raises(ValueError, match="CUDA"):
        fit_mcgpds([np.random.randn(10, 2), np.random.randn(10, 2)], np.arange(10.0), device="cuda")
    with pytest.raises(ValueError, match="CUDA"):
        McGPDSData([np.random.randn(10, 2)], np.arange(10.0), np.zeros(10), 1, 3, device="cuda")
    with pytest.raises(ValueError, match="CUDA"):
        fit_model([np.random.randn(20, 2)] * 2, [2, 2], num_steps=1, device="cuda")


def test_checkpoint_rng_state_round_trip():
    """The checkpoint's RNG record restores torch, numpy and Python's RNG (and CUDA's
    generators once CUDA is in use; without CUDA nothing CUDA is recorded or touched)."""
    torch.manual_seed(3)
    np.random.seed(3)
    random.seed(3)
    s = svi._rng_state()
    a = (torch.rand(2), np.random.rand(2), random.random())
    svi._set_rng_state(s)
    b = (torch.rand(2), np.random.rand(2), random.random())
    assert torch.equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and a[2] == b[2]
    assert ("torch_cuda" in s) == (torch.cuda.is_available() and torch.cuda.is_initialized())


@pytest.mark.parametrize("bad", ["meta", "xpu", "not-a-device"])
def test_low_level_device_arguments_are_resolved(bad):
    # the functions below the estimators take a device too: each resolves it before any work,
    # so a device tandem cannot run on is refused by name rather than passed to torch
    from tandem.inference.mcgpds.hyper_step import lbfgs_sharded
    from tandem.inference.twin_gp.predictor import TwinGP
    from tandem.models.coupled_projections import q_raw_init, whiten
    from tandem.models.mcgpds_data import default_init
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(12, 2)), rng.normal(size=(12, 1))
    cp = CoupledProjections(d=1).fit(rng.normal(size=(10, 3)), rng.normal(size=(10, 2)), [[i, i] for i in range(5)])
    calls = {
        "default_init": lambda: default_init(10, [2, 2], 2, 3, times=torch.arange(10.0), device=bad),
        "q_raw_init": lambda: q_raw_init(4, 2, device=bad),
        "whiten": lambda: whiten(cp, device=bad),
        "TwinGP": lambda: TwinGP(X, Y, 1.0, 1.0, device=bad),
        "lbfgs_sharded": lambda: lbfgs_sharded(lambda: (0.0, None), [], 1, device=bad, replicated=True),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match="device"):
            call()
