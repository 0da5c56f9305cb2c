"""Settings of a stochastic McGPDS fit (:class:`StochasticConfig`), each checked against its declared constraint."""
from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real

from tandem.inference.params import Boolean, InstanceOf, Interval, Options, SequenceOf, validate_params
from tandem.models.kernels import MappingKernel, TimeKernel

__all__ = ["StochasticConfig"]


@dataclass
class StochasticConfig:
    """Settings of a stochastic McGPDS fit (defaults: the protocol's fixed groups, g off).

    Every field is checked against its declared constraint at construction and whenever the
    config is used (:meth:`validate`).

    Attributes
    ----------
    Q : int, default 10
        Latent dimension of each private space.
    M : int, default 100
        Number of inducing points per view.
    J : int, default 1
        Number of inducing points of the shared space's mapping g.
    window : int, default 200
        Frames per window (at most ``window`` consecutive frames of one sequence).
    batch : int, default 16
        Windows per step.
    num_steps : int, default 2000
        Steps of :meth:`~tandem.inference.mcgpds.stochastic.StochasticMcGPDS.fit` (0: prepare only; train with
        :meth:`~tandem.inference.mcgpds.stochastic.StochasticMcGPDS.train`).
    local_iters : int, default 20
        L-BFGS iterations on the drawn windows' q(X) per step.
    hyper_iters : int, default 5
        Per epoch: L-BFGS iterations on the hyperparameters (full-data bound); 0: an Adam step
        (``lr``) on the minibatch gradient every step instead.
    lr : float, default 0.05
        Adam's learning rate for the hyperparameters (unconstrained units).
    lr_final : float, default 0.1
        The learning rate decays geometrically to this fraction of ``lr`` over ``lr_decay_steps``,
        in (0, 1].
    lr_decay_steps : int or None, default None
        Steps of the decay; ``None``: ``num_steps``, or 2000 when ``num_steps`` is 0 (steps
        trained by ``train()``).
    fixed : tuple of str or set, default ("alpha", "eps", "beta", "time", "W")
        Parameter groups held at their initial values, out of "alpha", "eps", "beta", "time",
        "kernel", "inducing", "W", "g", "variational", "model" ("W" also fixes "g").
    mapping_kernel : {"rbfard", "linear"} or tandem.models.kernels.MappingKernel, default "rbfard"
        Kernel of the output mappings.
    time_white : bool, default True
        Add a white-noise term to the paper's time kernel.
    time_bias : bool, default True
        Add a bias term to the paper's time kernel.
    time_white_var : float, default 1e-2
        Initial variance of the white term.
    time_bias_var : float, default 1.0
        Initial variance of the bias term.
    time_invwidth : float or None, default None
        Initial inverse squared width of the RBF time kernel; ``None``: 100 / (range of t over one
        window)².
    alpha_init : float, default 0.5
        Initial α in [0, 1].
    eps_init : float, default 1e-3
        Initial ε (> 0).
    beta_init : float, default 100.0
        Initial noise precision β on the standardised views (= 100 / var(Y) in data units).
    w_init_scale : float, default 1e-6
        Scale of the initial mapping weights W (≥ 0).
    lam_init : float, default 0.5
        Initial variational precisions λ of q(X).
    private_prior : {"mcgpds", "gplvm"}, default "mcgpds"
        Prior of the private latent spaces.
    time_kernel : tandem.models.kernels.TimeKernel or sequence of them, optional
        ``None``: the paper's RBF + white + bias (``time_white``, ``time_bias``, ...).
    """
    Q: int = 10
    M: int = 100
    J: int = 1
    window: int = 200
    batch: int = 16                 # windows per step
    num_steps: int = 2000
    local_iters: int = 20           # L-BFGS iterations on the drawn windows' q(X) per step
    hyper_iters: int = 5            # per epoch: L-BFGS iterations on the hyperparameters (full-data bound);
                                    # 0: an Adam step (lr) on the minibatch gradient every step instead
    lr: float = 0.05                # Adam, hyperparameters (unconstrained units)
    lr_final: float = 0.1           # the learning rate decays geometrically to this fraction over lr_decay_steps
    lr_decay_steps: int | None = None   # None: num_steps, or 2000 when num_steps is 0 (steps trained by train())
    fixed: tuple = ("alpha", "eps", "beta", "time", "W")
    mapping_kernel: str = "rbfard"
    time_white: bool = True
    time_bias: bool = True
    time_white_var: float = 1e-2
    time_bias_var: float = 1.0
    time_invwidth: float | None = None   # None: 100 / (range of t over one window)²
    alpha_init: float = 0.5
    eps_init: float = 1e-3
    beta_init: float = 100.0        # on the standardised views (= 100 / var(Y) in data units)
    w_init_scale: float = 1e-6
    lam_init: float = 0.5
    private_prior: str = "mcgpds"
    time_kernel: object = None      # None: the paper's RBF + white + bias (time_white/time_bias/...)

    def __post_init__(self):
        self.validate()

    def validate(self) -> "StochasticConfig":
        """Check every field against its declared constraint (at construction, and again wherever the
        config is used: a field changed after construction is checked too).

        Returns
        -------
        StochasticConfig
            ``self``.

        Raises
        ------
        tandem.inference.params.InvalidParameterError
            (A ``ValueError`` and a ``TypeError``.) Naming the field outside its constraint.
        """
        validate_params(_STOCHASTIC_CONSTRAINTS, {n: getattr(self, n) for n in self.__dataclass_fields__},
                        "StochasticConfig: ")
        return self


_POS_INT, _NONNEG_INT = Interval(Integral, 1), Interval(Integral, 0)
_POS = Interval(Real, 0, closed="neither")
#: declared constraints of every :class:`StochasticConfig` field (checked at construction)
_STOCHASTIC_CONSTRAINTS = {
    "Q": [_POS_INT], "M": [_POS_INT], "J": [_POS_INT], "window": [_POS_INT], "batch": [_POS_INT],
    "num_steps": [_NONNEG_INT], "local_iters": [_POS_INT], "hyper_iters": [_NONNEG_INT],
    "lr": [_POS], "lr_final": [Interval(Real, 0, 1, closed="right")], "lr_decay_steps": [None, _POS_INT],
    "fixed": [SequenceOf(Options(("alpha", "eps", "beta", "time", "kernel", "inducing", "W", "g", "variational",
                                  "model")), nonempty=False),
              InstanceOf(set, frozenset, what="a set of parameter groups")],
    "mapping_kernel": [Options(("rbfard", "linear")), InstanceOf(MappingKernel)],
    "time_kernel": [None, InstanceOf(TimeKernel), SequenceOf(InstanceOf(TimeKernel))],
    "time_white": [Boolean()], "time_bias": [Boolean()],
    "time_white_var": [_POS], "time_bias_var": [_POS], "time_invwidth": [None, _POS],
    "alpha_init": [Interval(Real, 0, 1)], "eps_init": [_POS], "beta_init": [_POS],
    "w_init_scale": [Interval(Real, 0)], "lam_init": [_POS], "private_prior": [Options(("mcgpds", "gplvm"))],
}
