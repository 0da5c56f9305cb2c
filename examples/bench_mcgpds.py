"""Benchmark: McGPDS vs GPy MRD on human pose — train + predict wall time and error, same run.

Fits the "McGPDS (tandem)" configuration (collapsed bound, L-BFGS in float64) on the
566-frame human-pose protocol split and predicts the 158 test poses from the silhouettes;
then, unless ``--skip-gpy`` or GPy is absent, fits GPy's MRD (Q = 5, M = 100, the peer of
the data README: 706 s train + 20 s predict, error 2.865 on the authors' machine) on the
same scaled views and prints the time ratio. Targets: McGPDS train + predict ≤ 60 s and
≥ 10× faster than GPy MRD.

Writes ``bench_mcgpds.json`` with ``timings_s`` keys "McGPDS" and "GPy MRD" and records
"mean_joint_error", "msll" and "wall_time_s" (train + predict) per method.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mcgpds_human_pose import score, tandem_config  # noqa: E402

from inference.experiment import base_parser, seed_list, set_seed  # noqa: E402
from inference.mcgpds_baselines import fit_gpy_mrd, gpy_available  # noqa: E402
from inference.results import Results  # noqa: E402

EXPERIMENT = "bench_mcgpds"


def _np(x):
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def parser():
    p = base_parser(__doc__.split("\n")[0], real_data=True, default_seeds=1)
    p.add_argument("--skip-gpy", action="store_true", help="do not run GPy MRD")
    p.add_argument("--gpy-iters", type=int, default=1000, help="GPy MRD optimiser iterations")
    p.add_argument("--joint-iters", type=int, default=None, help="McGPDS joint iterations (default: tandem config)")
    return p


def main(args):
    from inference.datasets.human_pose import load_human_pose
    from inference.mcgpds_fit import fit_mcgpds, predict_view
    data = load_human_pose(args.data_dir)
    seeds = seed_list(args)
    mask = data.Y2.std(axis=0) > 0
    over = {} if args.joint_iters is None else {"joint_iters": args.joint_iters}
    cfg = tandem_config("pose", args.quick, seeds[0], data, **over)
    res = Results(EXPERIMENT, seeds, config={"mcgpds_config": repr(cfg), "quick": bool(args.quick),
                                            "gpy": "skipped" if args.skip_gpy else ("Q=5, M=100, "
                                                   f"{args.gpy_iters} iterations" if gpy_available() else "not installed")})
    errs, lls, tot = [], [], []
    for s in seeds:
        set_seed(s)
        t0 = time.perf_counter()
        fitted = fit_mcgpds(data.views, data.t, seq_ends=data.seq_ends, config=cfg, seed=s,
                            progress=not args.no_progress)
        t1 = time.perf_counter()
        pred = predict_view(fitted, data.m1_test, data.t_test, method="generative", seed=s)
        t2 = time.perf_counter()
        res.time("McGPDS", "train", t1 - t0)
        res.time("McGPDS", "predict", t2 - t1)
        err, ll, _, _ = score(data, _np(pred.mean), _np(pred.var), "mean_joint_error", mask)
        errs.append(err), lls.append(ll), tot.append(t2 - t0)
    for k in ("train", "predict"):
        res.time("McGPDS", k, res.timings["McGPDS"][k] / len(seeds), accumulate=False)
    res.add("McGPDS", "mean_joint_error", errs)
    res.add("McGPDS", "msll", lls)
    res.add("McGPDS", "wall_time_s", tot)
    t_mc = float(np.mean(tot))
    print(f"McGPDS (tandem): train+predict {t_mc:.1f} s, mean joint error {np.mean(errs):.3f}, "
          f"MSLL {np.mean(lls):.3f}")
    if args.skip_gpy:
        print("GPy MRD skipped (--skip-gpy)")
    elif not gpy_available():
        print("GPy not installed (optional extra 'peers'): GPy MRD skipped")
    else:
        iters = 20 if args.quick else args.gpy_iters
        r = fit_gpy_mrd(data.m1, data.m2, data.m1_test, Q=5, M=(20 if args.quick else 100),
                        seed=seeds[0], max_iters=iters, init_vardist_iters=min(200, iters))
        err, ll, _, _ = score(data, r.mean, r.var, "mean_joint_error", mask)
        res.time("GPy MRD", "train", r.train_s)
        res.time("GPy MRD", "predict", r.predict_s)
        t_g = r.train_s + r.predict_s
        res.add("GPy MRD", "mean_joint_error", err)
        res.add("GPy MRD", "msll", ll)
        res.add("GPy MRD", "wall_time_s", t_g)
        res.config["time_ratio_gpy_over_mcgpds"] = t_g / t_mc
        print(f"GPy MRD (Q=5, M={20 if args.quick else 100}): train {r.train_s:.1f} s + predict {r.predict_s:.1f} s, "
              f"mean joint error {err:.3f}, MSLL {ll:.3f}")
        print(f"time ratio GPy MRD / McGPDS = {t_g / t_mc:.1f}x")
    out = Path(args.out)
    res.write(out)
    print(res.table())
    return res


if __name__ == "__main__":
    main(parser().parse_args())
