"""Classes moved into smaller modules keep the module path that names them in checkpoint and
cache fingerprints, saved files and pickles, and every old import path still gives the same
object."""
from __future__ import annotations

import importlib
import pickle

import pytest

from tandem.inference.checkpoints import fingerprint

#: public home (the module they were defined in before the split) -> defining module: classes
MOVED_CLASSES = {
    ("tandem.models.kernels", "tandem.models.kernel_base"): ["Kernel"],
    ("tandem.models.kernels", "tandem.models.time_kernels"): ["TimeKernel", "RBF", "Matern12", "Matern32",
                                                             "Matern52", "Periodic", "White", "Bias", "Sum",
                                                             "TimeParams"],
    ("tandem.models.kernels", "tandem.models.mapping_kernels"): ["MappingKernel", "RBFARD", "LinearARD"],
    ("tandem.models.mcgpds", "tandem.models.mcgpds_data"): ["McGPDSData"],
    ("tandem.models.mcgpds", "tandem.models.mcgpds_basis"): ["Basis"],
    ("tandem.inference.mcgpds.fit", "tandem.inference.mcgpds.fit_config"): ["McGPDSConfig"],
    ("tandem.inference.mcgpds.fit", "tandem.inference.mcgpds.fitted"): ["McGPDSFitted", "Prediction"],
    ("tandem.inference.coupled_projections.solver", "tandem.inference.coupled_projections.pca"): ["PCA"],
}
CASES = [(home, mod, name) for (home, mod), names in MOVED_CLASSES.items() for name in names]


@pytest.mark.parametrize("home,mod,name", CASES, ids=[f"{m}.{n}" for _, m, n in CASES])
def test_moved_class_keeps_its_public_module(home, mod, name):
    cls = getattr(importlib.import_module(mod), name)
    assert cls.__module__ == home
    # what persistence and pickle write resolves back to the class
    assert getattr(importlib.import_module(cls.__module__), cls.__qualname__) is cls


def test_fingerprints_name_the_public_modules():
    from tandem.inference.mcgpds.fit import McGPDSConfig
    from tandem.models.kernels import RBFARD, Matern32
    fp = fingerprint(config=McGPDSConfig(Q=2, M=3, mapping_kernel=RBFARD(), time_kernel=Matern32()))
    assert fp["config"] == "tandem.inference.mcgpds.fit.McGPDSConfig"
    assert fp["config.mapping_kernel"] == "tandem.models.kernels.RBFARD"
    assert fp["config.time_kernel"] == "tandem.models.kernels.Matern32"


def test_kernel_objects_pickle_round_trip_through_the_public_module():
    from tandem.models.kernels import RBF, White
    k = RBF(variance=2.0) + White()
    blob = pickle.dumps(k)
    assert b"tandem.models.kernels" in blob and b"time_kernels" not in blob
    assert pickle.loads(blob) == k        # our own bytes, written just above


#: old module -> names moved out of it (public and private), each still importable from it
OLD_PATHS = {
    "tandem.models.kernels": ["_get", "Kernel", "TimeKernel", "Sum", "paper_time_kernel", "as_time_kernel",
                              "PAPER_NAMES", "_PAPER_PARTS", "is_paper_kernel", "TimeParams", "_LEGACY_KEYS",
                              "time_params_kernel", "MappingKernel", "RBFARD", "LinearARD", "_MAPPING_ALIASES",
                              "as_mapping_kernel", "mapping_kernel_kind", "_SPEC_TYPES", "kernel_from_spec"],
    "tandem.models.mcgpds": ["McGPDSData", "default_init", "pca_init", "check_init", "required_params",
                             "constraint_of", "_CONSTRAINTS", "param_group", "dims", "DIMS", "time_kernels",
                             "time_param_names", "time_init_values", "_time_constraints", "Basis", "view_bases",
                             "mapping_object", "kzz_diag", "_mapping_object", "_ALIAS_OBJECTS"],
    "tandem.inference.mcgpds.fit": ["McGPDSConfig", "time_kernel_spec", "time_kernel_from_spec", "McGPDSFitted",
                                    "Prediction", "constant_hyperparams", "fitted_to_dict", "fitted_from_dict",
                                    "save_fitted", "load_fitted", "predict_view", "_sources", "_test_loss",
                                    "holdout_folds", "holdout_predictions", "calibrated_extra_var", "_index"],
    "tandem.inference.samtc.algorithm": ["validate_tasks", "validate_labels", "_metric_for", "select_setting",
                                         "ncut_snn", "ncut_snn_grid", "kmeans_baseline", "pooled_baseline",
                                         "_fill_isolated", "_ncut_graph"],
    "tandem.inference.samtc.steps": ["reduce_dimension", "similarity", "neighbour_order", "js_matrix",
                                     "js_divergence", "_js_from_logs", "kmm_relatedness", "kmm_frank_wolfe",
                                     "_kmm_support", "weighted_snn", "snn_graph", "neighbour_indicator", "k_grid"],
    "tandem.inference.coupled_projections.solver": ["knn_heat_weights", "graph_laplacian", "heat_width",
                                                    "_connect", "_knn_mask", "check_pairs", "alignment_omega",
                                                    "objective_trace", "PCA", "sign_fix", "nearest_partner"],
}


@pytest.mark.parametrize("old", sorted(OLD_PATHS))
def test_old_import_paths_keep_working(old):
    mod = importlib.import_module(old)
    missing = [n for n in OLD_PATHS[old] if not hasattr(mod, n)]
    assert not missing, f"{old} lost {missing}"
    for n in getattr(mod, "__all__", []):
        assert hasattr(mod, n), f"{old}.__all__ names {n}, which it does not define"


def test_moved_functions_are_one_object_under_both_paths():
    from tandem.inference.mcgpds import fit, view_prediction
    from tandem.inference.samtc import algorithm, baselines, kmm_step, steps
    assert fit.predict_view is view_prediction.predict_view
    assert algorithm.pooled_baseline is baselines.pooled_baseline
    assert steps.kmm_relatedness is kmm_step.kmm_relatedness
