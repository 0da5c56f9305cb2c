"""Twin GPs on the Poser data (Agarwal & Triggs): 100-d silhouette descriptors → 3-D pose.

Split 1927 train / 418 test (``human_pose/ankurDataPoseSilhouette.mat``). Metric: mean
per-joint 3-D position error (mean_joint_error; the papers predicted 54 joint angles in
degrees, which this copy of the data does not have). Protocol as in the paper: kernel
widths and λ by 5-fold CV of KLTGP, α (step 0.1) and β ∈ {0.99, 0.5, 1.5} by 5-fold CV
(on --cv-subset training frames, CPU budget), GPR and weighted k-NN baselines CV'd
likewise. ``--neighbors 800`` predicts with the paper's local model (each test point uses
its 800 nearest training points, batched over test points with gathered kernel blocks);
the default is the global model on all 1927 training frames.

    nice python examples/twin_gp_poser.py --out results [--neighbors 800] [--checkpoint DIR]
    python examples/twin_gp_poser.py --quick --out /tmp/tgp
"""
from __future__ import annotations

import numpy as np  # noqa: E402

from tandem.inference import Results  # noqa: E402
from tandem.inference.datasets.poser import load_poser  # noqa: E402
from tandem.inference.experiments.cli import base_parser, set_seed  # noqa: E402
from tandem.inference.metrics import mean_joint_error  # noqa: E402
from tandem.inference.twin_gp.selection import add_protocol_args, alpha_grid, run_real_experiment  # noqa: E402

EXPERIMENT = "twin_gp_poser"


def parser():
    p = base_parser(__doc__.splitlines()[0], real_data=True)
    add_protocol_args(p, unit="frames")
    return p


def main(args):
    set_seed(args.seed)
    data = load_poser(args.data_dir)
    if args.quick:
        rng = np.random.default_rng(args.seed)
        tr = rng.choice(1927, 300, replace=False)
        te = rng.choice(418, 60, replace=False)
        data = {"X_train": data["X_train"][tr], "Y_train": data["Y_train"][tr],
                "X_test": data["X_test"][te], "Y_test": data["Y_test"][te]}
    alphas = (0.0, 0.5, 1.0) if args.quick else alpha_grid(args.alpha_step)
    betas = (0.99,) if args.quick else (0.99, 0.5, 1.5)
    neighbors = args.neighbors
    if args.quick and neighbors is not None:
        neighbors = min(neighbors, 100)
    res = Results(EXPERIMENT, [args.seed], {"split": "1927/418 (Poser)", "quick": args.quick,
                                            "n_train": len(data["X_train"]), "n_test": len(data["X_test"]),
                                            "alphas": alphas, "betas": betas})
    run_real_experiment(data, mean_joint_error, "mean_joint_error", res,
                        cv_subset=150 if args.quick else args.cv_subset, folds=2 if args.quick else 5,
                        rho_mult=(1.0, 2.0) if args.quick else (0.5, 1.0, 2.0),
                        lam_grid=(1e-2,) if args.quick else (1e-3, 1e-2),
                        alphas=alphas, betas=betas, neighbors=neighbors,
                        max_iter=10 if args.quick else args.max_iter, seed=args.seed,
                        checkpoint=args.checkpoint, progress=not args.no_progress, ensemble=args.ensemble)
    path = res.write(args.out)
    print(res.table(("split",)))
    print("wrote", path)
    return res


if __name__ == "__main__":
    main(parser().parse_args())
