"""The learners', env's, runtime's and Nitro's configs: plain frozen dataclasses, and no torch
import (the population's are in ``trainers/population/config.py``).

``tasks/config.py`` validates them as sections of ``params.yaml`` (pydantic reads each
class's ``__pydantic_config__``, so an unknown key is an error), and every command that
loads the config without training (the broker, ``status``, ``promote``) starts without
paying for torch. Defaults follow finrl-podracer Table 3 (PPO) and nitro §5.3 (Nitro).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

from trainers._checks import require

HPARAMS = ("lr", "entropy_coef", "clip", "gamma", "gae_lambda", "repeat_times", "num_envs", "net_width")
"""Hyperparameters that may differ between agents of a population and be evolved;
``net_width`` is the first hidden layer's width (the others keep their proportions)."""


C = TypeVar("C", "PPOConfig", "SACConfig")


def evolved(cfg: C, values: Mapping[str, float], floats: tuple[str, ...], integers: tuple[str, ...]) -> C:
    """``cfg`` with the evolved ``values`` applied: ``floats`` as floats, ``integers`` rounded,
    and ``net_width`` rescaling ``net_dims`` (the other layers keep their proportions)."""
    changes: dict[str, Any] = {k: float(values[k]) for k in floats if k in values}
    changes.update({k: int(round(values[k])) for k in integers if k in values})
    if "net_width" in values:
        scale = values["net_width"] / cfg.net_dims[0]
        changes["net_dims"] = tuple(max(1, int(round(d * scale))) for d in cfg.net_dims)
    return replace(cfg, **changes)


@dataclass(frozen=True)
class PPOConfig:
    """PPO hyperparameters (finrl-podracer Table 3 defaults)."""

    __pydantic_config__ = {"extra": "forbid"}

    lr: float = 2**-14
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.25
    entropy_coef: float = 0.02
    value_coef: float = 0.5
    max_grad_norm: float = 0.5
    batch_size: int = 2**10
    repeat_times: int = 2**3
    """Passes (epochs) over each rollout."""
    num_envs: int = 2**5
    horizon: int = 2**7
    """Steps per env per rollout; ``num_envs × horizon`` is the buffer size (2^12)."""
    net_dims: tuple[int, ...] = (128, 64)
    init_log_std: float = -0.5
    learners: int = 1
    """Parallel learners per agent, from one set of weights, each with its own seed and envs;
    their parameters are averaged at the end of every epoch (finrl-podracer §4.4)."""
    policy: Literal["mlp", "shared"] = "mlp"
    """``mlp``: one network over the whole state (the paper's). ``shared``: one per-stock
    scorer applied to every stock (:class:`trainers.common.state.StockLayout`); the critic stays
    an MLP over the whole state."""
    average: int = 0
    """The policy an agent hands on (scored, snapshotted, registered) is the average of its
    weights over its iterations: after the k-th it moves 1/min(k, average) of the way to the new
    weights (trainers/ppo/averaging.py). 0: the last iterate."""
    credit: Literal["joint", "per_stock"] = "joint"
    """``joint``: one GAE(λ) advantage for the whole action (the paper's). ``per_stock``:
    each stock's action gets its own advantage, the env's difference reward
    (:func:`trainers.common.credit.per_stock_credit`), and its own clipped ratio; the critic still
    learns the GAE returns."""
    start_ranked_by: int | None = None
    """``shared`` policy with one hidden layer: each new scorer starts as the ranking by its input of
    this index (0: the first of ``features.indicators``), two of its hidden units carrying that input's
    positive and negative parts, and PPO learns from there (a prior policy, as in residual policy
    learning: Silver et al. 2018). None: a random start."""
    anchor: float = 0.0
    """Each Adam step also pulls the actor's layers towards the weights it started from by ``lr ×
    anchor × (θ − θ₀)`` (decoupled, as AdamW's weight decay, but towards the start rather than 0: L2-SP,
    Li et al. 2018). With a start at a rule (``start_ranked_by``), training can leave it only as far as
    the gradient keeps pushing; the log-std and the critic are free. 0: no pull."""

    def __post_init__(self) -> None:
        require(self.lr > 0, "lr must be > 0")
        require(0 < self.gamma <= 1, "gamma must be in (0, 1]")
        require(0 <= self.gae_lambda <= 1, "gae_lambda must be in [0, 1]")
        require(0 < self.clip < 1, "clip must be in (0, 1)")
        require(self.entropy_coef >= 0, "entropy_coef must be >= 0")
        require(self.batch_size >= 1, "batch_size must be >= 1")
        require(self.repeat_times >= 1, "repeat_times must be >= 1")
        require(self.num_envs >= 1 and self.horizon >= 1, "num_envs and horizon must be >= 1")
        require(len(self.net_dims) >= 1 and min(self.net_dims) >= 1, "net_dims must be positive")
        require(self.learners >= 1, "learners must be >= 1")
        require(self.average >= 0, "average must be >= 0 (0: no averaging)")
        require(self.anchor >= 0, "anchor must be >= 0 (0: no pull towards the start)")
        require(self.start_ranked_by is None or (self.policy == "shared" and len(self.net_dims) == 1
                                                  and self.net_dims[0] >= 2 and self.start_ranked_by >= 0),
                "start_ranked_by needs policy: shared, one hidden layer of at least 2 units and an index >= 0")

    @property
    def net_width(self) -> int:
        return self.net_dims[0]

    def hparams(self) -> dict[str, float]:
        """The evolvable hyperparameters as a plain dict."""
        return {name: float(getattr(self, name)) for name in HPARAMS}

    def with_hparams(self, values: Mapping[str, float]) -> PPOConfig:
        """This config with ``values`` applied (integers rounded; ``net_width`` rescales
        ``net_dims``)."""
        return evolved(self, values, ("lr", "entropy_coef", "clip", "gamma", "gae_lambda"),
                       ("repeat_times", "num_envs"))

    def iteration_cost(self) -> int:
        """Scheduled compute of one iteration: env steps plus the update's gradient samples."""
        return self.learners * self.num_envs * self.horizon * (1 + self.repeat_times)


SAC_HPARAMS = ("lr", "gamma", "tau", "updates", "num_envs", "net_width")
"""SAC's evolvable hyperparameters: the tournament's copies of a SAC agent explore these
(``SACConfig.search_space``), never PPO's."""

@dataclass(frozen=True)
class SACConfig:
    """Soft Actor-Critic (Haarnoja et al. 2018, with the automatic temperature of the
    2018b paper) on the same batched env, state and actions as PPO (:mod:`trainers.sac.sac`).

    The policy is PPO's :class:`~trainers.common.nets.Actor` (a Gaussian whose ``tanh`` is the
    action, one learned log-std per stock), so a SAC agent is served, backtested and
    delivered through the same bundle and pyfunc. Each iteration collects
    ``num_envs × horizon`` env steps into the replay buffer, then takes ``updates``
    gradient steps on minibatches of ``batch_size`` drawn from it."""

    __pydantic_config__ = {"extra": "forbid"}

    lr: float = 3e-4
    gamma: float = 0.99
    tau: float = 0.005
    """Target networks move this fraction of the way to the online ones after every update."""
    batch_size: int = 256
    buffer_size: int = 2**14
    """Replay rows kept on the training device (a ring: the oldest are overwritten). A
    leaderboard entry hands its whole buffer on to its copies."""
    updates: int = 64
    """Gradient steps per iteration."""
    num_envs: int = 32
    horizon: int = 128
    """Steps per env per iteration, as PPO's: ``num_envs × horizon`` env steps an iteration."""
    net_dims: tuple[int, ...] = (128, 64)
    """The actor's hidden layers (as ``ppo.net_dims``)."""
    critic_dims: tuple[int, ...] = (64, 64)
    """Each Q network's hidden layers, over the state and the action."""
    init_log_std: float = -0.5
    init_alpha: float = 0.01
    """The entropy temperature α at the start; it is then tuned towards ``target_entropy``."""
    target_entropy: float = -1.0
    """Target entropy per stock (the total is this × n stocks; -1 per dimension is the SAC paper's)."""
    policy: Literal["mlp", "shared"] = "mlp"
    """As ``ppo.policy``: one network over the state, or one per-stock scorer."""
    search_space: dict[str, tuple[float, float]] = field(default_factory=lambda: {
        "lr": (2.0**-14, 2.0**-10), "gamma": (0.95, 0.999), "tau": (0.001, 0.02), "updates": (32, 128),
        "num_envs": (16, 64), "net_width": (64, 256)})
    """Bounds a SAC agent's hyperparameters are drawn from and explored within."""

    def __post_init__(self) -> None:
        require(self.lr > 0, "sac lr must be > 0")
        require(0 < self.gamma < 1, "sac gamma must be in (0, 1)")
        require(0 < self.tau <= 1, "sac tau must be in (0, 1]")
        require(self.batch_size >= 1 and self.updates >= 0, "sac batch_size must be >= 1 and updates >= 0")
        require(self.num_envs >= 1 and self.horizon >= 1, "sac num_envs and horizon must be >= 1")
        require(self.buffer_size >= self.batch_size, "sac buffer_size must be >= batch_size")
        require(self.init_alpha > 0, "sac init_alpha must be > 0")
        require(len(self.net_dims) >= 1 and min(self.net_dims) >= 1, "sac net_dims must be positive")
        require(len(self.critic_dims) >= 1 and min(self.critic_dims) >= 1, "sac critic_dims must be positive")
        for name, (lo, hi) in self.search_space.items():
            require(name in SAC_HPARAMS, f"sac.search_space.{name} is not one of {', '.join(SAC_HPARAMS)}")
            require(0 < lo <= hi, f"sac.search_space.{name} needs 0 < low <= high")

    @property
    def net_width(self) -> int:
        return self.net_dims[0]

    def hparams(self) -> dict[str, float]:
        """The evolvable hyperparameters as a plain dict."""
        return {name: float(getattr(self, name)) for name in SAC_HPARAMS}

    def with_hparams(self, values: Mapping[str, float]) -> SACConfig:
        """This config with ``values`` applied (integers rounded; ``net_width`` rescales ``net_dims``)."""
        return evolved(self, values, ("lr", "gamma", "tau"), ("updates", "num_envs"))

    def iteration_cost(self) -> int:
        """Scheduled compute of one iteration: env steps plus the updates' minibatch samples."""
        return self.num_envs * self.horizon + self.updates * self.batch_size


CompileMode = Literal["eager", "graphs", "inductor", "kernel"]
RngDevice = Literal["device", "cpu"]


@dataclass(frozen=True)
class RuntimeConfig:
    """How training executes on its device, never what it computes (docs/training.md, GPU
    workers): ``params.yaml``'s ``train.compile``, ``train.deterministic`` and ``train.rng``."""

    compile: CompileMode = "eager"
    """``eager``: kernels launched one by one. ``graphs``: the rollout, the PPO update and the evaluator's
    decision are recorded once as CUDA graphs and replayed (CUDA only). ``inductor``: their
    bodies are compiled by ``torch.compile`` (fused kernels), and on CUDA also replayed as
    CUDA graphs. ``kernel``: as ``inductor``, but the PPO update's loss and gradients are one
    hand-written Triton kernel (trainers/ppo/kernel.py; CUDA, or Triton's interpreter on the CPU
    for checking). Anything but ``eager`` runs the update on the whole padded population with
    masks (fixed shapes), which is within float rounding of the default."""
    deterministic: bool = False
    """``torch.use_deterministic_algorithms`` (and cuBLAS's fixed workspace): a CUDA run
    repeats bit for bit on the same GPU, at some cost in speed."""
    rng: RngDevice = "device"
    """Where the random streams live: on the training device (fast), or on the CPU, so a
    CUDA run draws the very numbers a CPU run draws (for checking one against the other)."""


TURBULENCE = "turbulence"
"""The indicator the turbulence gate reads, raw (not normalised)."""

SESSION_GRID = 30
"""gcd of a 390-minute session and a 210-minute half day: a decision grid whose step divides
it and that starts at a session's last bar decides at every session's close."""


@dataclass(frozen=True)
class EnvConfig:
    """Trading constants of the MDP; saved with every model so serving uses the same."""

    __pydantic_config__ = {"extra": "forbid"}

    initial_cash: float = 1_000_000.0
    hmax: int = 100
    """Largest trade per stock per bar, in shares (finrl-podracer §3: k ≤ h_max)."""
    cost_pct: float = 0.002
    """Transaction cost as a fraction of traded notional (0.2%, paper Fig. 4)."""
    reward_scale: float = 1e-4
    """Multiplies the change of account value to give the reward."""
    episode_len: int = 256
    """Longest training episode in bars; episodes also end (truncate) at the end of data."""
    min_episode_len: int = 64
    """Shortest training episode; each episode's length is drawn in [min, episode_len]."""
    turbulence_threshold: float | None = None
    """Turbulence gate: at or above this turbulence index, block buys and liquidate.
    ``None`` turns it off. The index is about n_stocks on an average bar (a χ²_n distance)."""
    action: Literal["shares", "weights"] = "shares"
    """``shares``: a ∈ (-1, 1)^n trades ``trunc(a · hmax)`` shares per stock (finrl-podracer
    §3, eq. 3). ``weights``: a is a target allocation, ``softmax(WEIGHT_LOGITS · a, 0)`` over
    the stocks and cash, reached in whole shares at the next open (hmax does not apply)."""
    tilt: float | None = None
    """``action: weights``. ``None``: the action is the allocation's logits over
    ``WEIGHT_LOGITS``, as the agent gives them. A number τ: the action is a score, and the env
    trades ``tanh(τ · z)`` of its cross-sectional z-score over the tradable stocks
    (:func:`trainers.common.orders.ranked`), the mapping the ``ewm_40`` rule is traded through:
    the agent learns the ranking, τ sets how concentrated the allocation is (docs/training.md)."""
    rebalance_band: float = 0.0
    """``action: weights``: an order smaller than this fraction of the account value is not
    sent (a no-trade band, :func:`trainers.common.orders.target_orders`); 0 trades every difference."""
    decide_every: int = 1
    """Bars each decision is held. The agent decides at every ``decide_every``-th close and
    its orders fill at the next open; in between nothing is traded but the turbulence gate's
    liquidation and the close-out of a stock that stops trading. One env step is one decision:
    its reward is the account's change over those bars (docs/training.md). 1: every bar."""
    reward: Literal["value", "log", "excess"] = "value"
    """``value``: Δ account value × reward_scale. ``log``: log(V_t+1 / V_t) × initial_cash ×
    reward_scale, the same size at the start but proportional to returns, not dollars.
    ``excess``: the log return minus the equal-weight market's, log(mean_i close_t+1 / close_t),
    on the same scale: the market's move, which no allocation escapes, leaves the reward,
    so what is left credits the allocation (a benchmark-relative reward)."""
    overnight: Literal["carry", "flatten"] = "carry"
    """Intraday bars: ``carry`` holds positions over the overnight gap (the holder bears it).
    ``flatten`` sells every position at each session's last close, a market-on-close order
    filled at that close with ``cost_pct``, before the decision taken at that close, which
    then sees a flat account (``MarketData.session_last``; docs/training.md, Minute bars)."""

    def __post_init__(self) -> None:
        require(self.initial_cash > 0, "initial_cash must be > 0")
        require(self.hmax >= 1, "hmax must be >= 1")
        require(0 <= self.cost_pct < 0.5, "cost_pct must be in [0, 0.5)")
        require(self.reward_scale > 0, "reward_scale must be > 0")
        require(0 <= self.rebalance_band < 1, "rebalance_band must be in [0, 1)")
        require(self.tilt is None or (self.tilt > 0 and self.action == "weights"),
                "tilt must be > 0, with action: weights (or null)")
        require(self.decide_every >= 1, "decide_every must be >= 1")
        require(self.min_episode_len >= 1, "min_episode_len must be >= 1")
        require(self.episode_len >= self.min_episode_len, "episode_len must be >= min_episode_len")
        require(self.turbulence_threshold is None or self.turbulence_threshold > 0,
                "turbulence_threshold must be > 0 (or null for no gate)")

    def check_freq(self, freq: str) -> None:
        """Raise ``ValueError`` (one line) when these rules do not fit bars of ``freq``: on
        minute bars ``decide_every`` must divide :data:`SESSION_GRID`, and ``flatten`` needs
        intraday bars (a daily bar is a whole session)."""
        if freq == "1min":
            require(SESSION_GRID % self.decide_every == 0,
                    f"env.decide_every {self.decide_every} must divide {SESSION_GRID} on 1min bars, so decisions "
                    "land on every session's close (390-minute sessions, 210-minute half days)")
        else:
            require(self.overnight == "carry", f"env.overnight: flatten needs intraday bars, not {freq}")


@dataclass(frozen=True)
class NitroConfig:
    """Nitro's knobs (§5.3 defaults: window n = 6; the decay d and actor range [I_min, I_max] are per budget)."""

    __pydantic_config__ = {"extra": "forbid"}

    enabled: bool = False
    window: int = 6
    """n: rounds of R in the sliding window that normalises the score."""
    decay: float = 0.96
    """d: the score is annealed by d^k at round k; 1 disables the annealing."""
    min_envs: int = 8
    """I_min: envs per rollout in the least boosted round."""
    max_envs: int = 64
    """I_max: envs per rollout in the most boosted round."""
    lanczos_steps: int = 12
    """Lanczos iterations (Hessian-vector products) per detection."""
    subset: int = 256
    """Rollout samples the Hessian is taken on (§6.2: a subset of the trajectories)."""
    eps: float = 1e-6
    """Guard for λmin ≈ 0, relative to the spectrum's scale (see :func:`convexity_ratio`)."""

    def __post_init__(self) -> None:
        require(self.window >= 1, "nitro window must be >= 1")
        require(0 < self.decay <= 1, "nitro decay must be in (0, 1]")
        require(1 <= self.min_envs <= self.max_envs, "nitro needs 1 <= min_envs <= max_envs")
        require(self.lanczos_steps >= 2, "nitro lanczos_steps must be >= 2")
        require(self.subset >= 1, "nitro subset must be >= 1")
        require(self.eps > 0, "nitro eps must be > 0")
