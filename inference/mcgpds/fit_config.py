"""Every setting of a McGPDS fit (:class:`McGPDSConfig`) and the JSON specs of its time kernels.

Re-exported by :mod:`tandem.inference.mcgpds.fit`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from tandem.models.kernels import kernel_from_spec, mapping_kernel_kind

__all__ = ["McGPDSConfig", "FIT_GROUPS"]

#: the parameter groups the collapsed fit (:func:`tandem.inference.mcgpds.fit.fit_mcgpds`, and so
#: :class:`tandem.inference.mcgpds.McGPDS`) can hold fixed: "g" follows "W" (fixing W switches g
#: off), and the variational parameters are never fixed (the schedule alternates them with the model's)
FIT_GROUPS = ("alpha", "eps", "beta", "time", "W", "kernel", "inducing")


@dataclass
class McGPDSConfig:
    """Every setting of a McGPDS fit (defaults: the protocol's human-pose run).

    Attributes
    ----------
    Q : int, default 10
        Latent dimension (shared and every private latent).
    M : int, default 100
        Inducing inputs per view.
    J : int, default 1
        Number of g_j mappings per view (the w_j g_j terms).
    mapping_kernel : str or models.kernels.MappingKernel, default "rbfard"
        ``models.kernels.RBFARD()`` / ``LinearARD()``, or the alias ``"rbfard"`` | ``"linear"``.
    time_white : bool, default True
        Add a white term to the paper's RBF time kernel.
    time_bias : bool, default True
        Add a bias term to the paper's RBF time kernel.
    time_white_var : float, default 1e-2
        Initial variance of the white term (> 0).
    time_bias_var : float, default 1.0
        Initial variance of the bias term (> 0).
    time_invwidth : float or None, default None
        Initial inverse width of the RBF time kernel; None: 100 / range(t of the last sequence)².
    fixed : tuple of str, default ("alpha", "eps", "beta", "time")
        Parameter groups held at their initial values, from alpha, eps, beta, time, W, kernel,
        inducing (the protocol's; adding "W" is recommended, see the module docstring).
    cycles : int, default 5
        Cycles of [``var_iters`` variational-only, ``model_iters`` model-only] before the joint phase.
    var_iters : int, default 50
        L-BFGS iterations of each variational-only phase.
    model_iters : int, default 50
        L-BFGS iterations of each model-only phase.
    held_cycles : int, default 0
        Cycles of [``held_iters`` iterations with the variational precisions λ held,
        ``held_joint_iters`` iterations of everything] after the ``cycles`` and before the joint
        phase. With α, ε and the time kernels fixed, an evaluation with λ held skips the
        O(n³) private covariances of every (view, q, sequence) (they depend only on λ and the
        constant prior, so they are reused): ≈ 13× cheaper at 10⁴ frames in 1000-frame sequences, the schedule
        for long archives (docs/scaling.md, "Holding the precisions").
    held_iters : int, default 200
        L-BFGS iterations of each λ-held phase (means, mapping kernel, inducing inputs learned).
    held_joint_iters : int, default 10
        L-BFGS iterations of each phase that learns λ too, after a λ-held phase.
    joint_iters : int, default 1000
        L-BFGS iterations of the final joint phase.
    lbfgs_max_iter : int, default 50
        Iterations per L-BFGS step (a phase of n iterations runs ceil(n / lbfgs_max_iter) steps).
    tol : float or None, default None
        Early-stopping tolerance passed to :func:`tandem.inference.fit`.
    precondition : bool, default False
        Run L-BFGS on the means whitened by the Cholesky factors of the private prior
        covariances A_k (:class:`tandem.inference.mcgpds.preconditioner.PriorPreconditioner`):
        the same bound, a different path. It pays where the prior's ill-conditioning dominates
        (long sequences, a start far from the optimum: the scaling benchmark); from a PCA start
        with a high signal-to-noise β plain L-BFGS did as well (docs/scaling.md, "Whitening the
        means"). Off by default; the recorded reproductions ran without it.
    init : str, default "pca"
        Latent initialisation: ``"pca"`` (PCA of the views side by side) or ``"separately"``
        (PCA of each view, ``init_dims`` columns each).
    init_dims : tuple of int or None, default None
        With ``init="separately"``: one latent dimension per view, summing to ``Q``.
    init_views : list of array_like or None, default None
        Arrays used only for the PCA initialisation (default: the views fitted).
    alpha_init : float, default 0.5
        Initial coupling α in (0, 1].
    eps_init : float, default 1e-3
        Initial ε (> 0).
    beta_init : str, float or sequence of float, default "snr"
        Initial noise precisions: ``"snr"`` (100 / variance of each view), one value, or one per view.
    w_init_scale : float, default 1e-6
        Scale of the initial w_j (the authors' 1e-6).
    lam_init : float, default 0.5
        Initial variational λ (> 0).
    private_prior : str, default "mcgpds"
        ``"mcgpds"`` (private latents coupled to the shared dynamics) or ``"gplvm"``.
    output_layer : str, default "cgpds"
        ``"cgpds"`` or ``"linear"`` (a linear mapping kernel).
    coupling : bool, default True
        False: α fixed to 1 (an independent CGPDS per view).
    dtype : str, default "float64"
        Floating-point type of the fit.
    time_kernel : models.kernels.TimeKernel, sequence of them, or None, default None
        None: the paper's RBF + white + bias (``time_white`` / ``time_bias`` / ``time_*_var`` /
        ``time_invwidth`` apply); a TimeKernel for the shared and every private kernel, or a
        sequence of V + 1.
    """
    Q: int = 10
    M: int = 100
    J: int = 1
    mapping_kernel: str = "rbfard"          # models.kernels.RBFARD() / LinearARD(), or alias "rbfard" | "linear"
    time_white: bool = True
    time_bias: bool = True
    time_white_var: float = 1e-2
    time_bias_var: float = 1.0
    time_invwidth: float | None = None      # None -> 100 / range(t of the last sequence)²
    fixed: tuple = ("alpha", "eps", "beta", "time")   # protocol; add "W" (recommended, see module doc)
    cycles: int = 5
    var_iters: int = 50
    model_iters: int = 50
    held_cycles: int = 0
    held_iters: int = 200
    held_joint_iters: int = 10
    joint_iters: int = 1000
    lbfgs_max_iter: int = 50
    tol: float | None = None
    precondition: bool = False
    init: str = "pca"                        # "pca" | "separately"
    init_dims: tuple | None = None
    init_views: list | None = None           # arrays used only for the PCA init
    alpha_init: float = 0.5
    eps_init: float = 1e-3
    beta_init: object = "snr"                # "snr" | float | sequence of floats
    w_init_scale: float = 1e-6
    lam_init: float = 0.5
    private_prior: str = "mcgpds"            # "mcgpds" | "gplvm"
    output_layer: str = "cgpds"              # "cgpds" | "linear"
    coupling: bool = True                    # False: alpha fixed to 1 (independent CGPDS per view)
    dtype: str = "float64"
    #: None: the paper's RBF + white + bias (time_white/time_bias/time_*_var/time_invwidth apply);
    #: a models.kernels.TimeKernel for the shared and every private kernel, or a sequence of V + 1
    time_kernel: object = None

    def to_dict(self) -> dict:
        """The configuration as a JSON-able dict (``init_views`` recorded only as given or None).

        Returns
        -------
        dict
            One entry per field; kernels as their specs.
        """
        d = asdict(self)
        d["init_views"] = None if self.init_views is None else "given"
        d["mapping_kernel"] = mapping_kernel_kind(self.mapping_kernel)
        d["time_kernel"] = time_kernel_spec(self.time_kernel)
        return d


def time_kernel_spec(tk):
    """JSON-able spec of a ``time_kernel`` setting (None, a TimeKernel or a sequence of them)."""
    if tk is None:
        return None
    if isinstance(tk, (list, tuple)):
        return [k.to_spec() for k in tk]
    return tk.to_spec()


def time_kernel_from_spec(spec):
    """Inverse of :func:`time_kernel_spec`."""
    if spec is None:
        return None
    if isinstance(spec, (list, tuple)):
        return [kernel_from_spec(s) for s in spec]
    return kernel_from_spec(spec)


# checkpoint and cache fingerprints (tandem.inference.checkpoints), saved files (tandem.inference.
# persistence) and pickles name a class by module and qualname: the classes keep the module
# that defined them before it was split, so those names (and keys) stay the same
for _cls in (McGPDSConfig,):
    _cls.__module__ = "tandem.inference.mcgpds.fit"
