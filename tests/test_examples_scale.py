"""Smoke tests of examples/bench_scale.py and examples/gpu_check.py (--quick)."""
import json
import math
import time

import pytest
import torch

from common import ROOT, load_script, run_example


def _bench_module():
    return load_script("examples/bench_scale.py")


def _run(name, *args):
    return run_example(name, *args, timeout=900, returncode=None)


def test_bench_scale_quick(tmp_path):
    r = _run("bench_scale.py", "--quick", "--out", str(tmp_path), "--device", "both")
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((tmp_path / "bench_scale.json").read_text())
    assert res["experiment"] == "bench_scale"
    assert {"experiment", "seeds", "results", "timings_s", "config", "environment"} <= set(res)
    recs = res["results"]
    for method in ("McGPDS stochastic (cpu)", "McGPDS collapsed (cpu)"):
        times = {r["n_frames"]: r["mean"] for r in recs if r["method"] == method and r["metric"] == "epoch_time_s"}
        assert set(times) == {200, 400} and all(t > 0 for t in times.values())
        assert any(r["method"] == method and r["metric"] == "growth_exponent" for r in recs)
    mem = [r["mean"] for r in recs if r["metric"] == "peak_memory_mb"]
    assert mem and all(m > 0 for m in mem)
    # steps per epoch of the stochastic path: S / batch windows (N / window / batch)
    steps = {r["n_frames"]: r["steps_per_epoch"] for r in recs
             if r["method"] == "McGPDS stochastic (cpu)" and r["metric"] == "epoch_time_s"}
    assert steps == {200: 2, 400: 4}
    assert (tmp_path / "bench_scale.png").stat().st_size > 0
    if not torch.cuda.is_available():
        assert "CUDA requested but absent" in r.stdout
    # quality: the full-data bound traced per epoch, time to quality against the best of the run
    assert res["config"]["diverge_tol"] == 1.0 and res["config"]["min_epochs"] == 3
    best = {}
    for method in ("McGPDS stochastic (cpu)", "McGPDS collapsed (cpu)"):
        for N in (200, 400):
            fb = [r for r in recs if r["method"] == method and r["metric"] == "final_bound" and r["n_frames"] == N]
            assert len(fb) == 1
            trace = fb[0]["trace"]
            assert len(trace) == 4                                    # warm-up + 3 timed epochs
            cpu = [c for c, _ in trace]
            assert all(b < a for a, b in zip(cpu[1:], cpu)) and cpu[0] > 0   # cumulative CPU time increases
            assert all(math.isfinite(b) and b < 0 for _, b in trace)
            assert fb[0]["mean"] == trace[-1][1]
            bpf = [r["mean"] for r in recs if r["method"] == method and r["metric"] == "final_bound_per_frame"
                   and r["n_frames"] == N]
            assert bpf == [pytest.approx(trace[-1][1] / N)]
            best[N] = max(best.get(N, -math.inf), max(b for _, b in trace))
    for N in (200, 400):
        # the L-BFGS methods' traces: the best bound among their evaluations so far, one point each
        for method in ("collapsed-lbfgs", "collapsed-held"):
            lb = [r for r in recs if r["method"] == f"McGPDS {method} (cpu)" and r["metric"] == "final_bound"
                  and r["n_frames"] == N]
            assert len(lb) == 1 and lb[0]["stop"] == "iterations"
            ev, trace = lb[0]["evaluations"], lb[0]["trace"]
            assert len(ev) == len(trace) >= 2 and [c for c, _ in ev] == [c for c, _ in trace]
            assert [b for _, b in trace] == [max(b for _, b in ev[:i + 1]) for i in range(len(ev))]
            assert trace[-1][1] > trace[0][1]
            best[N] = max(best[N], trace[-1][1])
        tq = [r for r in recs if r["metric"] in ("time_to_1pct_cpu_s", "time_to_0.1nat_cpu_s") and r["n_frames"] == N]
        assert len(tq) == 8 and all(r["best_bound"] == best[N] for r in tq)
        # the method that found the best bound reached it (within both tolerances) at a traced time
        reached = [r["mean"] for r in tq if r["mean"] is not None and math.isfinite(r["mean"])]
        assert len(reached) >= 2 and all(t > 0 for t in reached)
    assert "time to 1 %" in r.stdout and "nats/frame" in r.stdout
    # the GPyTorch peer (the 'peers' extra), beside ours, outside the time to quality
    peer = [x for x in recs if x["method"] == "GPyTorch BayesianGPLVM (cpu)"]
    if _bench_module().gpytorch_available():
        ep = {x["n_frames"]: x for x in peer if x["metric"] == "epoch_cpu_time_s"}
        assert set(ep) == {200, 400} and all(x["mean"] > 0 for x in ep.values())
        assert {x["batch_frames"] for x in ep.values()} == {100}          # window × batch frames per step
        conv = [x for x in peer if x["metric"] == "time_to_converge_cpu_s"]
        assert len(conv) == 2 and all(x["max_cpu_s"] == 3.0 for x in conv)
        elbo = [x for x in peer if x["metric"] == "final_elbo_per_frame"]
        assert len(elbo) == 2 and all(math.isfinite(x["mean"]) and x["trace"] for x in elbo)
    else:
        assert "GPyTorch not installed" in r.stdout


def test_bench_scale_exits_nonzero_when_a_fit_diverges(tmp_path):
    """An absurd learning rate blows the fits up: the results are written, the exit status is
    non-zero and the message names the method, N and the numbers."""
    r = _run("bench_scale.py", "--quick", "--out", str(tmp_path), "--lr", "50")
    assert r.returncode != 0
    assert "diverged" in r.stderr and "N=200" in r.stderr
    assert (tmp_path / "bench_scale.json").exists()


def test_check_divergence_and_time_to_quality():
    b = _bench_module()
    N = 100
    ok = [(1.0, -5000.0), (2.0, -4000.0), (3.0, -4050.0), (4.0, -3990.0)]   # a fall of 0.5 nats/frame: allowed
    assert b.check_divergence(ok, N, 1.0, "m", "cpu") is None
    msg = b.check_divergence(ok, N, 0.4, "stochastic", "cpu")
    assert msg and "stochastic N=100 (cpu)" in msg and "-4000" in msg and "-4050" in msg
    assert "non-finite" in b.check_divergence([(1.0, -5000.0), (2.0, math.nan)], N)
    assert "non-finite" in b.check_divergence([(1.0, -math.inf)], N)
    assert "ceiling" in b.check_divergence([(1.0, 10.0)], N, ceiling=5.0)
    with pytest.raises(ValueError, match="tol_per_frame"):
        b.check_divergence(ok, N, -1.0)
    # ceiling: Σ_k N/2 Σ_d log(β/2π), a scalar β broadcast over D
    c = b.bound_ceiling([torch.tensor(2.0), torch.tensor([1.0, 3.0])], [3, 2], 10)
    assert c == pytest.approx(5 * (3 * math.log(2 / (2 * math.pi)) + math.log(1 / (2 * math.pi))
                                   + math.log(3 / (2 * math.pi))))
    # time to quality: best −3990; 1 % = 39.9 nats → −4029.9 first reached at t=2; 0.1·N = 10 → −4000 at t=2
    tq = b.time_to_quality(ok, -3990.0, N)
    assert tq == {"1pct": 2.0, "0.1nat": 2.0}
    tq = b.time_to_quality(ok, -3990.0, 10)      # 0.1 nats/frame = 1 nat: only the last point
    assert tq["0.1nat"] == 4.0
    assert math.isnan(b.time_to_quality(ok, -100.0, N)["1pct"])


def test_epochs_stop_rules():
    """_epochs: the flat rule stops at the first epoch gaining less than flat_tol (after
    min_epochs), max_cpu stops whatever the rest says, SIGTERM keeps the complete epochs."""
    import os
    import signal
    b = _bench_module()
    values = iter([-100.0, -60.0, -50.0, -49.5, -49.45, -49.44, -49.43])

    def run(trace, **kw):
        return b._epochs(lambda: None, lambda: None, 0.0, bound=lambda: next(values), trace=trace, **kw)

    trace = [(0.0, -200.0)]
    walls, cpus, stop = run(trace, min_epochs=2, flat_tol=1.0)
    # gains 100, 40, 10, 0.5: the 4th epoch is the first gaining < 1 nat
    assert stop == "flat" and len(walls) == len(cpus) == 4 and [v for _, v in trace] == [-200, -100, -60, -50, -49.5]
    assert all(c1 >= c0 for (c0, _), (c1, _) in zip(trace, trace[1:]))
    values = iter([-100.0, -60.0, -50.0])
    walls, _, stop = run([(0.0, -200.0)], min_epochs=3, flat_tol=1e9)     # flat at once, but min_epochs first
    assert stop == "flat" and len(walls) == 3
    values = iter([-100.0, -60.0])
    walls, _, stop = run([(0.0, -200.0)], min_epochs=5, max_cpu=-1.0)    # the cap wins over min_epochs
    assert stop == "max_cpu" and len(walls) == 1
    values = iter([-100.0, math.nan])
    assert run([(0.0, -200.0)], min_epochs=5)[2] == "non_finite"
    with pytest.raises(ValueError, match="flat_tol"):
        b._epochs(lambda: None, lambda: None, 0.0, flat_tol=1.0)
    # SIGTERM during the third epoch: two complete epochs kept, the handler restored
    calls = []

    def epoch():
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)        # the signal interrupts this
    before = signal.getsignal(signal.SIGTERM)
    values = iter([-100.0, -60.0, -50.0, -40.0])
    trace = [(0.0, -200.0)]
    walls, cpus, stop = b._epochs(epoch, lambda: None, 0.0, min_epochs=10, bound=lambda: next(values), trace=trace)
    assert stop == "interrupted" and len(walls) == len(cpus) == 2 and len(trace) == 3
    assert signal.getsignal(signal.SIGTERM) is before


def _row(method, N, times, bounds, ceiling=0.0):
    trace = [[float(t), float(v)] for t, v in zip(times, bounds)]
    return {"method": method, "n_frames": N, "device": "cpu", "epoch_time_s": 1.0, "epoch_cpu_s": N / 1000,
            "epochs_timed": len(trace) - 1, "first_epoch_s": 1.0, "steps_per_epoch": N // 1000,
            "peak_memory_mb": 100.0, "trace": trace, "final_bound": trace[-1][1], "bound_ceiling": ceiling,
            "diverged": None, "stop": "flat"}


def test_rows_from_summarises_time_to_quality_and_its_growth(tmp_path):
    """--rows-from: saved rows of separate runs give the time to quality against the best bound of
    each N (naming the method that found it) and its growth exponent; times ∝ N² give 2. A later
    file's row replaces an earlier one of the same method, N and device."""
    rows = []
    for N in (1000, 10000, 100000):
        k = (N / 1000) ** 2
        rows.append(_row("stochastic", N, [k, 2 * k, 3 * k], [-3.0 * N, -1.005 * N, -1.0 * N]))
        if N < 100000:    # the collapsed bound at 10³, 10⁴ only; best there at 10⁴
            best = -1.0 * N if N == 1000 else -0.99 * N
            rows.append(_row("collapsed", N, [0.5, 1.0], [-2.0 * N, best]))
    stale = _row("stochastic", 100000, [1.0, 2.0], [-9.0e5, -8.0e5])   # replaced by the later file's row
    (tmp_path / "a.json").write_text(json.dumps(rows[:-1] + [stale]))
    (tmp_path / "b.json").write_text(json.dumps(rows[-1]))          # a single-method run's JSON line
    r = _run("bench_scale.py", "--rows-from", str(tmp_path / "a.json"), str(tmp_path / "b.json"),
             "--skip-peer", "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr[-3000:]
    recs = json.loads((tmp_path / "out" / "bench_scale.json").read_text())["results"]

    def get(method, metric, N=None):
        return [x for x in recs if x["method"] == f"McGPDS {method} (cpu)" and x["metric"] == metric
                and (N is None or x["n_frames"] == N)]
    # 10³: stochastic's −1.0·N is the best (the collapsed one equal, found later in max order); 1 % at t = 2k
    t1 = get("stochastic", "time_to_1pct_cpu_s", 1000)[0]
    assert t1["mean"] == 2.0 and t1["best_bound"] == -1000.0
    # 10⁴: the collapsed bound (−9900) is best; 1 % needs ≥ −9999: the stochastic fit's best −10000 never
    # gets there; 0.1 nats/frame needs ≥ −10900: reached at its second point (t = 2k = 200)
    t1 = get("stochastic", "time_to_1pct_cpu_s", 10000)[0]
    assert t1["reference"] == "collapsed" and t1["best_bound"] == -9900.0
    assert t1["mean"] is None or math.isnan(t1["mean"])
    assert get("stochastic", "time_to_0.1nat_cpu_s", 10000)[0]["mean"] == 200.0
    # 10⁵: only the stochastic fit: its own best is the reference
    t5 = get("stochastic", "time_to_1pct_cpu_s", 100000)[0]
    assert t5["reference"] == "stochastic" and t5["methods_run"] == ["stochastic"] and t5["mean"] == 2e4
    # growth: to 1 % reached at 10³ and 10⁵ only, times 2 and 2·10⁴: slope 2
    g = get("stochastic", "time_to_1pct_growth_exponent")[0]
    assert g["sizes"] == [1000, 100000] and g["mean"] == pytest.approx(2.0)
    assert get("stochastic", "time_to_0.1nat_growth_exponent")[0]["mean"] == pytest.approx(2.0)
    assert get("stochastic", "growth_exponent")[0]["mean"] == pytest.approx(1.0)       # epoch CPU ∝ N
    assert get("stochastic", "final_bound", 100000)[0]["stop"] == "flat"
    saved = json.loads((tmp_path / "out" / "bench_scale_rows.json").read_text())
    assert len(saved) == len(rows) and "replaces the row of an earlier file" in r.stdout


def test_rows_rebuilt_from_a_summary(tmp_path):
    """--rows-from also reads a bench_scale.json: rows_of_results gives back the rows it summarised
    (McGPDS fits, a failed fit, the peer), so a recorded summary can be joined with a new long run;
    a file written before bound_ceiling/diverged were recorded gets no ceiling and a re-checked trace."""
    b = _bench_module()
    rows = [_row("stochastic", 1000, [1.0, 2.0, 3.0], [-3000.0, -1005.0, -1000.0], ceiling=50.0),
            _row("collapsed", 1000, [0.5, 1.0], [-2000.0, -990.0], ceiling=50.0),
            {"method": "collapsed", "n_frames": 10000, "device": "cpu", "error": "MemoryError: too large"},
            {"method": "gpytorch_bgplvm", "n_frames": 1000, "device": "cpu", "steps": 40, "steps_per_epoch": 1,
             "batch_frames": 1000, "epoch_cpu_s": 0.04, "epoch_time_s": 0.05, "time_to_converge_cpu_s": 1.6,
             "converged": True, "final_elbo_per_frame": -14.7, "trace": [[0.5, -20.0], [1.6, -14.7]],
             "peak_memory_mb": 300.0}]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    r = _run("bench_scale.py", "--rows-from", str(tmp_path / "rows.json"), "--out", str(tmp_path / "a"))
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((tmp_path / "a" / "bench_scale.json").read_text())
    key = lambda x: (x["method"], x["n_frames"])  # noqa: E731
    assert sorted(b.rows_of_results(summary), key=key) == sorted(rows, key=key)
    # joined again through --rows-from: the same records
    r = _run("bench_scale.py", "--rows-from", str(tmp_path / "a" / "bench_scale.json"), "--out", str(tmp_path / "b"))
    assert r.returncode == 0, r.stderr[-3000:]
    again = json.loads((tmp_path / "b" / "bench_scale.json").read_text())
    assert again["results"] == summary["results"]
    # an older summary: no ceiling recorded (∞), divergence re-checked on the trace (a fall of 2 nats/frame)
    for x in summary["results"]:
        x.pop("bound_ceiling", None)
        x.pop("diverged", None)
        if x["metric"] == "final_bound" and x["method"] == "McGPDS stochastic (cpu)":
            x["trace"][1][1] = -5000.0
    old = {key(x): x for x in b.rows_of_results(summary)}
    assert old["stochastic", 1000]["bound_ceiling"] == math.inf and old["collapsed", 1000]["diverged"] is None
    assert "fell from" in old["stochastic", 1000]["diverged"]
    # that infinite ceiling is written as null and read back as ∞: a summary joins again
    for x in summary["results"]:
        if x["metric"] == "final_bound":
            x["bound_ceiling"], x["diverged"] = None, None
    rebuilt = {key(x): x for x in b.rows_of_results(summary)}
    assert rebuilt["stochastic", 1000]["bound_ceiling"] == math.inf == rebuilt["collapsed", 1000]["bound_ceiling"]


def test_reference_rows_set_the_best_bound_and_stay_out_of_the_exponents(tmp_path):
    """--reference-from: an earlier, longer run of the same fit joins as '<method> reference'; its
    better bound becomes F* (so the new run's time to within 1 % is measured against it: here never
    reached, where against its own last point it was at 2 s) and it adds no point to the exponents."""
    new = [_row("stochastic", 1000, [1.0, 2.0, 3.0], [-3000.0, -1015.0, -1012.0]),
           _row("stochastic", 10000, [10.0, 20.0], [-30000.0, -10100.0])]
    ref = [_row("stochastic", 1000, [5.0, 10.0], [-2000.0, -1000.0])]
    (tmp_path / "new.json").write_text(json.dumps(new))
    (tmp_path / "ref.json").write_text(json.dumps(ref))
    out = {}
    for name, extra in (("alone", []), ("ref", ["--reference-from", str(tmp_path / "ref.json")])):
        r = _run("bench_scale.py", "--rows-from", str(tmp_path / "new.json"), *extra, "--out", str(tmp_path / name))
        assert r.returncode == 0, r.stderr[-3000:]
        out[name] = {(x["method"], x["metric"], x.get("n_frames")): x
                     for x in json.loads((tmp_path / name / "bench_scale.json").read_text())["results"]}
    alone, withref = out["alone"], out["ref"]
    key = ("McGPDS stochastic (cpu)", "time_to_1pct_cpu_s", 1000)
    assert alone[key]["mean"] == 2.0 and alone[key]["best_bound"] == -1012.0
    assert withref[key]["mean"] is None and withref[key]["best_bound"] == -1000.0
    assert withref[key]["reference"] == "stochastic reference"
    assert withref[("McGPDS stochastic (cpu)", "time_to_0.1nat_cpu_s", 1000)]["mean"] == 2.0
    assert withref[("McGPDS stochastic reference (cpu)", "time_to_1pct_cpu_s", 1000)]["mean"] == 10.0
    ge = ("McGPDS stochastic (cpu)", "growth_exponent", None)
    assert withref[ge]["sizes"] == alone[ge]["sizes"] == [1000, 10000]
    assert not any(m == "McGPDS stochastic reference (cpu)" and k.endswith("exponent") for m, k, _ in withref)
    r = _run("bench_scale.py", "--reference-from", str(tmp_path / "ref.json"), "--out", str(tmp_path / "x"))
    assert r.returncode != 0 and "--rows-from" in r.stderr


def test_gpytorch_peer_is_skipped_cleanly_when_absent(monkeypatch, capsys):
    """Without GPyTorch (or with --skip-peer) the benchmark says so, records it and runs nothing."""
    from tandem.inference.experiments.results import Results

    b = _bench_module()
    args = b.parser().parse_args(["--sizes", "200", "--out", "/tmp"])
    monkeypatch.setattr(b, "gpytorch_available", lambda: False)
    monkeypatch.setattr(b, "run_peer", lambda *a: pytest.fail("the peer ran without GPyTorch"))
    res = Results("t", [0], {})
    assert b.peer_rows(args, res) == []
    assert "GPyTorch not installed" in capsys.readouterr().out
    assert [r["metric"] for r in res.records if r["method"] == b.PEER] == ["not_run"]
    args.skip_peer = True
    assert b.peer_rows(args, Results("t", [0], {})) == []
    assert "skipped (--skip-peer)" in capsys.readouterr().out


def test_gpytorch_peer_fits_and_improves_its_elbo():
    """GPyTorch's Bayesian GPLVM on 200 simulated frames (needs the 'peers' extra): per-epoch
    time, its own convergence rule, and an ELBO that rises from the first block to the last."""
    pytest.importorskip("gpytorch")
    b = _bench_module()
    args = b.parser().parse_args(["--sizes", "200", "--seq-len", "100", "--window", "50", "--batch", "2", "--M", "5",
                                  "--dims", "4", "3", "--peer-max-cpu", "20", "--peer-lr", "0.05"])
    r = b.run_peer(200, args)
    assert r["n_frames"] == 200 and r["batch_frames"] == 100 and r["steps_per_epoch"] == 2
    assert r["epoch_cpu_s"] > 0 and len(r["trace"]) >= 2
    elbos = [e for _, e in r["trace"]]
    assert all(math.isfinite(e) for e in elbos) and elbos[-1] > elbos[0]
    assert r["converged"] == math.isfinite(r["time_to_converge_cpu_s"])


def test_gpu_check_runs_the_cpu_side_and_reports_cuda(tmp_path):
    r = _run("gpu_check.py", "--quick", "--out", str(tmp_path))
    res = json.loads((tmp_path / "gpu_check.json").read_text())
    checks = {x["method"] for x in res["results"] if x["metric"] == "time_s" and x["device"] == "cpu"}
    assert {"model:mcgpds", "model:twin_gp", "model:samtc", "model:coupled_projections", "driver",
            "mcgpds_collapsed_bound", "mcgpds_stochastic", "twin_gp_predict"} <= checks
    assert not [x for x in res["results"] if x["metric"] == "failed" and x["device"] == "cpu"]
    if torch.cuda.is_available():
        assert r.returncode in (0, 1)   # 1: some CUDA check failed (the list is printed)
        assert "max rel diff vs cpu" in r.stdout or "FAILED" in r.stdout
    else:
        assert r.returncode == 0, r.stderr[-3000:]
        assert "CUDA is absent" in r.stdout


def test_bench_scale_pose_quick(tmp_path, data_dir):
    """--pose on the real human-pose data (skipped without the shared data folder)."""
    r = _run("bench_scale.py", "--pose", "--quick", "--out", str(tmp_path), "--data-dir", str(data_dir))
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((tmp_path / "bench_scale_pose.json").read_text())
    errs = {x["method"]: x["mean"] for x in res["results"] if x["metric"] == "mean_joint_error"}
    assert set(errs) == {"McGPDS stochastic", "McGPDS collapsed"}
    assert all(0 < e < 10 for e in errs.values())      # joint positions in the data's units



def test_bench_lbfgs_overhead_quick(tmp_path, data_dir):
    """The driver and the bare torch.optim.LBFGS loop take the same path on the pose fit (same
    evaluations, same final loss) and the overhead is recorded (skipped without the data)."""
    r = _run("bench_lbfgs_overhead.py", "--quick", "--repeats", "1", "--out", str(tmp_path), "--data-dir",
             str(data_dir))
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((tmp_path / "bench_lbfgs_overhead.json").read_text())
    rec = {(x["method"], x["metric"]): x for x in res["results"]}
    assert rec["driver", "evaluations"]["mean"] == rec["bare", "evaluations"]["mean"] > 6
    assert rec["driver", "final_loss"]["mean"] == rec["bare", "final_loss"]["mean"]
    assert rec["driver", "cpu_s"]["mean"] > 0 and rec["bare", "cpu_s"]["mean"] > 0
    assert rec["driver", "overhead"]["target"] == 0.05 and math.isfinite(rec["driver", "overhead"]["mean"])
    assert "driver overhead over bare torch.optim.LBFGS" in r.stdout


def _store_copy(s):
    return {n: s[n].unconstrained().detach().clone() for n in s.keys()}


def test_bound_evaluation_restores_the_store_and_equals_the_collapsed_bound():
    """The stochastic fit's full-data bound refreshes the statistics and q(V), q(U) in the
    store; the benchmark's evaluation puts them back bit for bit, and its value is the
    collapsed method's bound at the same parameters (the two methods are compared on one scale)."""
    import pyro

    from tandem.guides.mcgpds import mcgpds_guide
    from tandem.inference.mcgpds import stochastic as st
    from tandem.inference.mcgpds.bound import collapsed_loss
    from tandem.inference.svi import fit
    from tandem.models.mcgpds import mcgpds_model

    b = _bench_module()
    sim = st.simulate_sequences(4, 50, [4, 3], Q=2, M=5, seed=0)
    cfg = st.StochasticConfig(Q=2, M=5, window=50, batch=2, num_steps=0, fixed=("alpha", "eps", "beta", "time", "W"))
    m = st.StochasticMcGPDS(cfg)
    m.data = m.prepare(sim["views"], sim["times"], sim["seq_ids"], seed=0)
    pyro.clear_param_store()
    m.train(4, seed=0)
    # the estimator owns its parameter store (issue 18): that is the store to keep intact
    before = _store_copy(m.param_store_)
    F = b._stochastic_bound(m)
    after = _store_copy(m.param_store_)
    assert set(after) == set(before) and all(torch.equal(before[n], after[n]) for n in before)
    assert math.isfinite(F) and F == m.elbo(optimal_inducing=True)     # the library's own evaluation
    changed = _store_copy(m.param_store_)
    assert any(not torch.equal(before[n], changed[n]) for n in before)  # which does change the store
    # the collapsed bound of the same model at the same parameters (windows = sequences here)
    pyro.clear_param_store()
    m2 = st.StochasticMcGPDS(st.StochasticConfig(Q=2, M=5, window=50, batch=4, num_steps=0,
                                                 fixed=("alpha", "eps", "beta", "time", "W")))
    m2.data = m2.prepare(sim["views"], sim["times"], sim["seq_ids"], seed=0)
    m2.train(2, seed=0)
    F2 = b._stochastic_bound(m2)
    d = m2.collapsed_data()
    pyro.clear_param_store()
    fit(mcgpds_model, mcgpds_guide, d, loss=collapsed_loss, num_steps=0, seed=0, progress=False)
    with torch.no_grad():
        Fc = -float(collapsed_loss(mcgpds_model, mcgpds_guide, d))
    assert Fc == pytest.approx(F2, rel=1e-10)


def _small_collapsed_start():
    from tandem.inference.mcgpds import stochastic as st
    sim = st.simulate_sequences(2, 50, [4, 3], Q=2, M=5, seed=0)
    return _bench_module().collapsed_start(sim, 2, 5, 50, 0)


def test_collapsed_start_on_a_device_keeps_the_model_and_its_bound():
    """``collapsed_start(device=)`` (how the collapsed rows run on CUDA) rebuilds the data on that
    device: every tensor there, the same mapping-kernel object, and the same start bound as the
    CPU data (checked with the CPU as the device: the rebuild is the same code on every device)."""
    import pyro

    from tandem.guides.mcgpds import mcgpds_guide
    from tandem.inference.mcgpds import stochastic as st
    from tandem.inference.mcgpds.bound import collapsed_loss
    from tandem.models.mcgpds import mcgpds_model

    b = _bench_module()
    sim = st.simulate_sequences(2, 50, [4, 3], Q=2, M=5, seed=0)
    plain = b.collapsed_start(sim, 2, 5, 50, 0)
    placed = b.collapsed_start(sim, 2, 5, 50, 0, device=torch.device("cpu"))
    assert placed.device == torch.device("cpu") and placed.mapping_kernel_obj is not None
    assert type(placed.mapping_kernel_obj) is type(plain.mapping_kernel_obj)
    assert all(v.device == placed.device for v in [*placed.views, placed.times, *placed.init.values()])
    assert set(placed.init) == set(plain.init)
    for n in plain.init:
        assert torch.equal(placed.init[n], plain.init[n]), n
    bounds = []
    for d in (plain, placed):
        pyro.clear_param_store()
        with torch.no_grad():
            bounds.append(-float(collapsed_loss(mcgpds_model, mcgpds_guide, d)))
    pyro.clear_param_store()
    assert math.isfinite(bounds[0]) and bounds[1] == bounds[0]


@pytest.mark.parametrize("precondition", [False, True])
def test_lbfgs_trace_is_the_iterates_bound_and_the_cap_stops_it(precondition):
    """Collapsed L-BFGS in the benchmark: one trace point per evaluation, the running best of the
    evaluations; after the run the bound at the parameters L-BFGS left equals the trace's last
    point (the running best is the iterate's bound, as the docstring says); CPU time increases;
    --max-cpu stops it at the first evaluation past the cap; SIGTERM's handler is restored."""
    import argparse
    import signal

    import pyro

    from tandem.guides.mcgpds import mcgpds_guide
    from tandem.inference.mcgpds.bound import collapsed_loss
    from tandem.models.mcgpds import mcgpds_model

    b = _bench_module()
    args = argparse.Namespace(seed=0, lbfgs_iters=15, precondition=precondition)
    before = signal.getsignal(signal.SIGTERM)
    data = _small_collapsed_start()
    trace, walls, cpus, stop, evals = b._lbfgs_fit(data, args, label="t", n_frames=100)
    assert stop == "iterations" and signal.getsignal(signal.SIGTERM) is before
    assert len(trace) == len(evals) == len(walls) == len(cpus) > 15          # line-search trials included
    assert all(c1 > c0 for (c0, _), (c1, _) in zip(trace, trace[1:]))
    assert [v for _, v in trace] == [max(v for _, v in evals[:i + 1]) for i in range(len(evals))]
    assert trace[-1][1] > trace[0][1] + 100          # it fits: gains > 1 nat/frame on 100 frames
    with torch.no_grad():
        here = -float(collapsed_loss(mcgpds_model, mcgpds_guide, data))
    assert here == pytest.approx(trace[-1][1], rel=1e-12, abs=0)
    pyro.clear_param_store()
    # a cap of 0 CPU seconds: the first evaluation completes, the second one's start stops the fit
    trace, walls, cpus, stop, evals = b._lbfgs_fit(_small_collapsed_start(), args, max_cpu=0.0, label="t")
    assert stop == "max_cpu" and len(trace) == len(evals) == 1 and signal.getsignal(signal.SIGTERM) is before


def test_held_phases_hold_lambda_and_end_when_a_round_gains_nothing(monkeypatch):
    """collapsed-held in the benchmark: the phases alternate λ held / λ learned within
    --lbfgs-iters; with no λ-learning phase λ stays at its start and the fit still gains; the
    trace is the running best of every evaluation; a round of phases that gains nothing ends it."""
    import argparse

    import pyro

    b = _bench_module()
    args = argparse.Namespace(seed=0, lbfgs_iters=30, held_iters=10, held_joint_iters=0, precondition=True)
    data = _small_collapsed_start()
    lam0 = data.init["lam_0"].clone()
    trace, walls, cpus, stop, evals = b._lbfgs_fit(data, args, label="t", n_frames=100,
                                                   phases=b.held_phases(args))
    assert stop == "iterations"
    torch.testing.assert_close(pyro.param("lam_0").detach(), lam0, rtol=1e-13, atol=0)
    assert not torch.allclose(pyro.param("mu_0").detach(), data.init["mu_0"])
    assert [v for _, v in trace] == [max(v for _, v in evals[:i + 1]) for i in range(len(evals))]
    assert trace[-1][1] > trace[0][1] + 100
    held_best = trace[-1][1]
    pyro.clear_param_store()
    args = argparse.Namespace(seed=0, lbfgs_iters=30, held_iters=10, held_joint_iters=5, precondition=True)
    data = _small_collapsed_start()
    trace, *_ = b._lbfgs_fit(data, args, label="t", n_frames=100, phases=b.held_phases(args))
    assert not torch.allclose(pyro.param("lam_0").detach(), lam0)
    assert trace[-1][1] > trace[0][1] + 100
    assert held_best != trace[-1][1]
    pyro.clear_param_store()
    # a fit that moves nothing (one evaluation, no step): the second round gains nothing and ends it
    calls = []

    def no_step(model, guide, data, loss, frozen=(), **kw):
        calls.append(frozen)
        loss(model, guide, data, frozen=frozen)

    monkeypatch.setattr(b, "fit", no_step)
    args = argparse.Namespace(seed=0, lbfgs_iters=1000, held_iters=10, held_joint_iters=5, precondition=True)
    trace, _, _, stop, _ = b._lbfgs_fit(_small_collapsed_start(), args, label="t", phases=b.held_phases(args))
    assert calls == [("lam",), (), ("lam",), ()] and stop == "iterations" and trace[-1][1] == trace[0][1]
    pyro.clear_param_store()


def test_bench_scale_mem_check_quick(tmp_path):
    r = _run("bench_scale.py", "--mem-check", "--quick", "--mem-old", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((tmp_path / "bench_scale_mem.json").read_text())
    recs = res["results"]
    peak = {x["method"]: x for x in recs if x["metric"] == "value_grad_peak_rss_mb"}
    assert set(peak) == {"McGPDS collapsed streamed (cpu)", "McGPDS collapsed old (cpu)"}
    for x in peak.values():
        assert x["n_frames"] == 400 and x["M"] == 5 and x["mean"] >= x["rss_before_mb"] > 0
    bounds = {x["method"]: x for x in recs if x["metric"] == "bound"}
    new, old = bounds["McGPDS collapsed streamed (cpu)"], bounds["McGPDS collapsed old (cpu)"]
    assert math.isfinite(new["mean"]) and new["mean"] == pytest.approx(old["mean"], rel=1e-10)
    assert new["grad_norm"] == pytest.approx(old["grad_norm"], rel=1e-10) and new["grad_norm"] > 0
    assert "value + gradient peak RSS" in r.stdout


def test_gpu_bench_script_runs_by_its_deadline(tmp_path):
    """``examples/gpu_bench.sh`` (the GPU checks in one run), here with the CPU as the device and
    tiny sizes: it ends by its deadline, ``gpu_check`` passes, and every row it kept is a JSON row
    that ``--rows-from`` takes, with the environment it was measured in."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, OUT=str(tmp_path / "out"), NOWHL="1", DEV="cpu", DEADLINE="90", SIZES_SMALL="200",
               CPU_METHODS="stochastic",
               MID="200", BIG="300", PY=sys.executable, OMP_NUM_THREADS="1")
    t0 = time.perf_counter()
    p = subprocess.run(["bash", str(ROOT / "examples" / "gpu_bench.sh")], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert time.perf_counter() - t0 < 90 + 60          # deadline + one row's kill grace + start-up
    log = (tmp_path / "out" / "device.log").read_text()
    assert "gpu_check: rc 0" in log and "done in" in log, log[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "out" / "rows.jsonl").read_text().splitlines() if line.strip()]
    assert rows and all(r["environment"]["python"] and "trace" in r for r in rows)
    for i, r in enumerate(rows):
        (tmp_path / f"r{i}.json").write_text(json.dumps(r))
    s = _run("bench_scale.py", "--rows-from", *(str(tmp_path / f"r{i}.json") for i in range(len(rows))),
             "--out", str(tmp_path / "sum"))
    assert s.returncode == 0, s.stderr[-2000:]
    summary = json.loads((tmp_path / "sum" / "bench_scale.json").read_text())
    assert summary["config"]["row_environments"]


def test_bench_memory_settings_are_applied_recorded_and_validated(monkeypatch):
    """``--prior-cache-mb`` / ``--kl-unchunked-mb`` hold during a row (the library's settings are
    back afterwards), the row records them, the bound does not depend on them (a cache only saves
    work), and a negative size is refused by the parser."""
    from tandem.inference.mcgpds import streamed

    b = _bench_module()
    base = ["--seq-len", "50", "--window", "25", "--batch", "2", "--M", "5", "--dims", "4", "3",
            "--min-time", "0", "--min-epochs", "1"]
    before = (streamed.PRIOR_CACHE_MB, streamed.KL_UNCHUNKED_MB)
    plain = b.run_one("collapsed", 100, "cpu", b.parser().parse_args(base))
    seen = {}
    real = b._run_one

    def spy(*a, **k):
        seen["settings"] = (streamed.PRIOR_CACHE_MB, streamed.KL_UNCHUNKED_MB)
        return real(*a, **k)

    monkeypatch.setattr(b, "_run_one", spy)
    tuned = b.run_one("collapsed", 100, "cpu", b.parser().parse_args(base + ["--prior-cache-mb", "0",
                                                                           "--kl-unchunked-mb", "inf"]))
    assert seen["settings"] == (0.0, math.inf) and (streamed.PRIOR_CACHE_MB, streamed.KL_UNCHUNKED_MB) == before
    assert tuned["streaming"] == {"prior_cache_mb": 0.0, "kl_unchunked_mb": math.inf} and "streaming" not in plain
    assert tuned["trace"][0][1] == pytest.approx(plain["trace"][0][1], rel=1e-12)
    with pytest.raises(SystemExit):
        b.parser().parse_args(base + ["--prior-cache-mb", "-1"])
