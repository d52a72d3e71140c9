"""Benchmark of the training layer (docs/training.md), ours against FinRL + Stable-Baselines3.

Side by side in one run, on the same data (the default embedded market: 30 stocks of
daily bars, built by our ingest/validate/features stages in a temp folder):

1. **env**: env steps/s of ``trainers.common.env.MarketEnv`` for E parallel envs, against
   FinRL's ``StockTradingEnv`` stepping random actions; the bytes of state the env writes
   per second, against a memcpy measured in the same run;
2. **PPO**: training samples/s and the wall time of a fixed number of samples, ours
   against SB3's PPO on FinRL's env with the same widths and PPO settings (Table 3);
3. **learning**: validation Sharpe against training wall time for both; the figure is
   our time to reach SB3's final validation Sharpe, as a fraction of SB3's wall time.

Prints the tables, records them in docs/benchmarks.md (the training section's latest reading
and a row of its history) and draws docs/img/benchmark_train.png.
On a CUDA machine it also measures 100 stocks × 16384 envs and PPO samples/s there.

    make install && .venv/bin/python -m benchmarks.perf.train            # about 8 minutes
    .venv/bin/python -m benchmarks.perf.train --samples 16384               # a quicker run
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure

from benchmarks.common import ROOT, Reading, commit, default_features, now, record
from benchmarks.perf import baselines
from tasks.config import Params
from tasks.data.feature_set import FeatureSet
from trainers.common.env import MarketData, MarketEnv
from trainers.common.evaluate import buy_and_hold, run_policy
from trainers.common.metrics import periods_per_year, sharpe
from trainers.common.state import StateScales
from trainers.config import EnvConfig, PPOConfig
from trainers.ppo.agent import PPOAgent
from trainers.ppo.ppo import PPO

ENV_SIZES = (1, 64, 1024, 4096, 16384)
TARGETS = "env steps/s >= 1000x FinRL's; PPO samples/s >= 10x SB3's; time to SB3's final validation Sharpe " \
          "<= 1/10 of SB3's wall time (2 CPU cores); GPU: >= 50M env steps/s for 100 stocks x 16384 envs"


@dataclass
class Curve:
    """Validation Sharpe against training seconds (evaluation time excluded)."""

    name: str
    seconds: list[float]
    samples: list[int]
    sharpe: list[float]

    def time_to(self, level: float) -> float | None:
        """Training seconds until an evaluated snapshot first scores ``level`` (the evaluator
        keeps that snapshot, finrl-podracer §4.2); the untrained policy does not count."""
        return next((s for s, v in zip(self.seconds[1:], self.sharpe[1:]) if v >= level), None)

    def seconds_at(self, samples: int) -> float:
        return next(s for s, n in zip(self.seconds, self.samples) if n >= samples)


def scales_for(data: MarketData, cfg: EnvConfig, first: int) -> StateScales:
    return StateScales(1 / cfg.initial_cash, 1 / cfg.hmax, tuple(data.close[first].tolist()))



def env_rate(data: MarketData, cfg: EnvConfig, num_envs: int, window: tuple[int, int], seconds: float) -> float:
    """Env steps/s (E per batched step) under random actions, next states into one buffer."""
    env = MarketEnv(data, scales_for(data, cfg, window[0]), cfg, num_envs, window, seed=0)
    out = torch.empty((num_envs, env.state_dim), device=data.close.device)
    g = torch.Generator(device=data.close.device).manual_seed(0)
    actions = [torch.rand((num_envs, env.action_dim), generator=g, device=out.device) * 2 - 1 for _ in range(8)]
    env.reset(out)
    steps, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds or steps < 3:
        env.step(actions[steps % 8], out=out)
        steps += 1
        if out.is_cuda and steps % 64 == 0:
            torch.cuda.synchronize()
    if out.is_cuda:
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
    return steps * num_envs / elapsed


def memcpy_rate(device: str = "cpu", size: int = 256 * 2**20) -> float:
    """Bytes copied per second by one large tensor copy (best of 5)."""
    src = torch.ones(size, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        dst.copy_(src)
        if src.is_cuda:
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return size / best


def finrl_frames(fs: FeatureSet) -> tuple[dict[str, object], list[str]]:
    """FinRL frames of the train split and the validation window, raw indicators."""
    names = list(fs.feature_names)
    frames = {}
    for split in ("train", "validation"):
        lo, hi = fs.window(split) if split == "validation" else fs.splits[split]
        rows = slice(lo, hi + 1)
        indicators = {name: np.asarray(fs.features[rows, :, j], dtype=np.float64) for j, name in enumerate(names)}
        frames[split] = baselines.finrl_frame(fs.timestamps[rows], fs.symbols, np.asarray(fs.prices[rows]),
                                              indicators, open_=np.asarray(fs.opens[rows]))
    return frames, names


def our_learning(params: Params, fs: FeatureSet, min_samples: int, min_seconds: float, seed: int) -> Curve:
    """Train one PPO agent (Table 3 settings) and evaluate after every iteration."""
    data = fs.market("cpu")
    window, val = fs.window("train"), fs.window("validation")
    scales = scales_for(data, params.env, window[0])
    agent = PPOAgent(data, scales, params.env, params.ppo, window, seed)
    model = PPO(agent.learners, agent.envs, params.ppo)
    per_year = periods_per_year(params.data.freq)
    curve = Curve(f"ours (seed {seed})", [0.0], [0], [sharpe(run_policy(agent.policy, data, scales, params.env, val),
                                                              per_year)])
    trained = 0.0
    while curve.samples[-1] < min_samples or trained < min_seconds:
        start = time.perf_counter()
        model.train_iteration([0])
        model.advance_average([0])  # the policy is the averaged one with ppo.average (trainers/ppo/averaging.py)
        trained += time.perf_counter() - start
        model.write_back()
        curve.seconds.append(trained)
        curve.samples.append(curve.samples[-1] + agent.samples_per_iteration)
        curve.sharpe.append(sharpe(run_policy(agent.policy, data, scales, params.env, val), per_year))
    print(f"  ours, seed {seed}: {curve.samples[-1]:,} samples in {trained:.1f} s, "
          f"validation Sharpe {curve.sharpe[-1]:.2f} (best {max(curve.sharpe):.2f})", flush=True)
    return curve


def sb3_learning(params: Params, fs: FeatureSet, samples: int, seed: int) -> tuple[Curve, float]:
    """SB3 PPO on FinRL's env with our settings; returns its curve and samples/s."""
    frames, names = finrl_frames(fs)
    n, env, ppo = len(fs.symbols), params.env, params.ppo
    kwargs = {"hmax": env.hmax, "initial_amount": env.initial_cash, "cost_pct": env.cost_pct,
              "reward_scaling": env.reward_scale}

    def evaluate(model: object) -> float:
        value = baselines.finrl_validation_sharpe(model, frames["validation"], n, names,
                                                  periods_per_year(params.data.freq), **kwargs)
        print(f"  SB3: {model.num_timesteps:>7,} samples, validation Sharpe {value:.2f}", flush=True)  # type: ignore[attr-defined]
        return value

    result = baselines.train_sb3(
        lambda: baselines.make_finrl_env(frames["train"], n, names, **kwargs), samples,
        net_dims=ppo.net_dims, lr=ppo.lr, gamma=ppo.gamma, gae_lambda=ppo.gae_lambda, batch_size=ppo.batch_size,
        n_epochs=ppo.repeat_times, clip=ppo.clip, ent_coef=ppo.entropy_coef, n_steps=ppo.num_envs * ppo.horizon,
        seed=seed, eval_fn=evaluate, eval_every_s=20.0, normalize_obs=True,
    )
    curve = Curve("SB3 + FinRL env", [p.train_s for p in result.curve], [p.timesteps for p in result.curve],
                  [p.sharpe for p in result.curve])
    return curve, result.samples_per_s


def gpu_rows() -> tuple[list[str], str]:
    """100 stocks × 16384 envs on CUDA, and PPO samples/s there (when a GPU is present): the
    table's rows, and the env rate for the history row."""
    if not torch.cuda.is_available():
        return ["| GPU | no CUDA device in this run: not measured | | |"], "not measured"
    name = torch.cuda.get_device_name()
    g = torch.Generator().manual_seed(0)
    t, n, k = 2048, 100, 10
    close = 50 * torch.exp(torch.cumsum(0.02 * torch.randn(t, n, generator=g, dtype=torch.float64), 0))
    data = MarketData(close * 1.001, close, torch.randn(t, n, k, generator=g)).to("cuda")
    cfg = EnvConfig()
    rate = env_rate(data, cfg, 16384, (0, t - 1), 5.0)
    ppo = PPOConfig(num_envs=4096, horizon=64, batch_size=2**14)
    agent = PPOAgent(data, scales_for(data, cfg, 0), cfg, ppo, (0, t - 1), 0)
    model = PPO(agent.learners, agent.envs, ppo)
    model.train_iteration([0])
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(3):
        model.train_iteration([0])
    torch.cuda.synchronize()
    samples = 3 * agent.samples_per_iteration / (time.perf_counter() - start)
    return [f"| GPU env, 100 stocks x 16384 envs | {rate:,.0f} env steps/s | target 50,000,000 | {name} |",
            f"| GPU PPO, 100 stocks, 4096 envs x 64, batch 2^14 | {samples:,.0f} samples/s | | {name} |"], \
        f"{rate:,.0f} ({name})"


def plot(env_rates: dict[int, float], finrl: float, curves: list[Curve], path: Path) -> None:
    figure = Figure(figsize=(11, 4.2), layout="constrained")
    left, right = figure.subplots(1, 2)
    sizes = sorted(env_rates)
    left.loglog(sizes, [env_rates[e] for e in sizes], "o-", label="ours (MarketEnv)")
    left.axhline(finrl, color="tab:red", linestyle="--", label="FinRL StockTradingEnv")
    left.set(xlabel="parallel envs E", ylabel="env steps/s", title="Env throughput, 30 stocks (CPU)")
    left.legend()
    for curve in curves:
        baseline = curve.name.startswith("SB3")
        right.plot(curve.seconds, curve.sharpe, marker="." if baseline else None, label=curve.name,
                   linewidth=2 if baseline else 1)
    right.set_xscale("symlog", linthresh=1.0)
    right.set(xlabel="training wall time, s (evaluation excluded)", ylabel="validation Sharpe",
              title="Learning: validation Sharpe against time")
    right.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2**16, help="SB3's training samples (and ours at least)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds of our PPO in the learning run")
    parser.add_argument("--env-seconds", type=float, default=3.0, help="seconds per env measurement")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        params, fs = default_features(Path(tmp))
        data = fs.market("cpu")
        window = fs.window("train")
        print(f"data: {len(fs.symbols)} stocks x {len(fs.timestamps)} bars x {len(fs.feature_names)} indicators")
        rates = {e: env_rate(data, params.env, e, window, args.env_seconds) for e in ENV_SIZES}
        frames, names = finrl_frames(fs)
        finrl_env = baselines.make_finrl_env(frames["train"], len(fs.symbols), names, hmax=params.env.hmax,
                                             initial_amount=params.env.initial_cash, cost_pct=params.env.cost_pct)
        finrl = baselines.step_rate(finrl_env, max(args.env_seconds, 5.0), seed=0)
        copy_bps = memcpy_rate()
        per_year = periods_per_year(params.data.freq)
        hold = sharpe(buy_and_hold(data, params.env, fs.window("validation")), per_year)
        state_bytes = 4 * (1 + 2 * len(fs.symbols) + len(fs.symbols) * len(fs.feature_names)) + 5
        print("env done; SB3 learning run ...", flush=True)
        sb3, sb3_rate = sb3_learning(params, fs, args.samples, seed=0)
        ours = [our_learning(params, fs, sb3.samples[-1], sb3.seconds[-1] / 10, seed) for seed in range(args.seeds)]
    lines = ["| figure | ours | FinRL / SB3 | ratio |", "|---|---|---|---|"]
    for e in ENV_SIZES:
        lines.append(f"| env steps/s, E={e} | {rates[e]:,.0f} | {finrl:,.0f} | {rates[e] / finrl:,.0f}x |")
    best = max(rates, key=rates.get)
    lines.append(f"| env state bytes/s at E={best} vs memcpy | {rates[best] * state_bytes / 1e9:.2f} GB/s | "
                 f"memcpy {copy_bps / 1e9:.2f} GB/s | {rates[best] * state_bytes / copy_bps:.0%} |")
    our_rate = float(np.median([c.samples[-1] / c.seconds[-1] for c in ours]))
    n = sb3.samples[-1]
    our_wall = float(np.median([c.seconds_at(n) for c in ours]))
    lines.append(f"| PPO training samples/s | {our_rate:,.0f} | {sb3_rate:,.0f} | {our_rate / sb3_rate:,.1f}x |")
    lines.append(f"| PPO wall time for {n:,} samples | {our_wall:.1f} s | {sb3.seconds[-1]:.1f} s | "
                 f"{sb3.seconds[-1] / our_wall:,.1f}x |")
    for label, level in (("final", sb3.sharpe[-1]), ("best", max(sb3.sharpe))):
        reached = [c.time_to(level) for c in ours]
        shown = ", ".join("not reached" if r is None else f"{r:.1f} s" for r in reached)
        median = sorted(float("inf") if r is None else r for r in reached)[len(reached) // 2]
        fraction = "median seed never reached it" if median == float("inf") else \
            f"median {median / sb3.seconds[-1]:.3f} of SB3's time"
        own = sb3.time_to(level)
        lines.append(f"| time to SB3's {label} validation Sharpe {level:.2f} | {shown} | "
                     f"{'untrained' if own is None else f'{own:.1f} s'} of {sb3.seconds[-1]:.1f} s | {fraction} |")
    for label, pick in (("untrained", lambda c: c.sharpe[0]), ("best", lambda c: max(c.sharpe)),
                        ("final", lambda c: c.sharpe[-1])):
        lines.append(f"| {label} validation Sharpe | {', '.join(f'{pick(c):.2f}' for c in ours)} | "
                     f"{pick(sb3):.2f} | buy-and-hold {hold:.2f} |")
    gpu_lines, gpu = gpu_rows()
    lines += gpu_lines
    text = "\n".join(lines)
    print(text)
    image = ROOT / "docs" / "img" / "benchmark_train.png"
    plot(rates, finrl, [sb3, *ours], image)
    command = "make install && .venv/bin/python -m benchmarks.perf.train" + \
        (f" --samples {args.samples}" if args.samples != 2**16 else "")
    stamp = now()
    record(Reading(
        "train", "Training layer: env, PPO and learning vs FinRL + SB3",
        f"Command: `{command}`  \nMachine: {os.cpu_count()} CPUs, {platform.machine()}, torch "
        f"{torch.__version__}, {torch.get_num_threads()} threads. Targets: {TARGETS}.  \n"
        f"Our PPO: {args.seeds} seeds, median shown; SB3: seed 0, observations normalised "
        f"(VecNormalize). Plot: `docs/img/benchmark_train.png`.\n\n{text}",
        ("date", "commit", "command", "env steps/s, best E (× FinRL)", "PPO samples/s (× SB3)", "GPU env steps/s"),
        (stamp, commit(), f"`{command}`", f"{rates[best]:,.0f} at E={best} ({rates[best] / finrl:,.0f}x)",
         f"{our_rate:,.0f} ({our_rate / sb3_rate:,.1f}x)", gpu)))


if __name__ == "__main__":
    main()
