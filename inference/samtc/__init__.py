"""SAMTC (Zhang, Zhang & Liu, IJCAI 2016): the paper's algorithm, its generative model's
fitting, and the simulator of partially related tasks.

``SAMTC(n_clusters).fit(tasks)`` is the common path (:mod:`.estimator`); the algorithm's
steps are in :mod:`.steps` and :mod:`.spectral`, the full reference in :mod:`.algorithm`,
the Pyro model's fit in :mod:`.model_fit`, the simulator in :mod:`.simulate`.
"""
from tandem.inference.samtc.algorithm import SAMTCResult, ncut_snn, samtc
from tandem.inference.samtc.estimator import SAMTC
from tandem.inference.samtc.model_fit import ModelFit, fit_model
from tandem.inference.samtc.simulate import simulate_tasks

__all__ = ["SAMTC", "samtc", "ncut_snn", "SAMTCResult", "fit_model", "ModelFit", "simulate_tasks"]
