"""The device script's training sections (benchmarks/perf/gpu.py): the hot steps for the sync
audit, PPO throughput by population, and the headline run with its RL-Scope breakdown
(CPU-CUDA parity and cross-device resume: benchmarks/perf/gpu_parity.py). trainers/, torch
and numpy only."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks.perf.gpu_common import (
    HEADLINE,
    KERNEL_ERROR,
    TINY,
    Args,
    Stop,
    paper_env,
    paper_evolution,
    paper_ppo,
    scales_of,
    sync,
)
from benchmarks.perf.gpu_eval import actors_of, chunk_check
from benchmarks.perf.gpu_market import minute_market, sample_market
from benchmarks.perf.gpu_split import compiled_split, first_generation
from trainers import profiler
from trainers.common.capture import compiled
from trainers.common.env import MarketData, MarketEnv
from trainers.common.evaluate import buy_and_hold, run_policies
from trainers.common.metrics import performance
from trainers.config import RuntimeConfig, SACConfig
from trainers.population.config import EvolutionConfig
from trainers.population.evolution import EvolutionResult
from trainers.ppo.agent import PPOAgent
from trainers.ppo.multiplex import KeptPPO
from trainers.ppo.ppo import PPO
from trainers.sac.sac import SACAgent

EVAL_CHUNKS = 64
"""The chunks the headline's final population is also evaluated in, beside its single pass
(about 300 decisions in a chain instead of 19,656): the training itself keeps the single
pass, which the development seeds did not let chunks replace (docs/evolution.md, parallel
evaluation)."""
SEARCH = {"lr": (2.0**-16, 2.0**-10), "entropy_coef": (0.002, 0.05), "clip": (0.1, 0.3), "gamma": (0.95, 0.999),
          "gae_lambda": (0.9, 0.99)}
"""The headline's search space: params.paper.yaml's, less the shapes (env count, width,
epochs), so the population keeps one shape and every step stays the same."""


def population(data: MarketData, agents: int, runtime: RuntimeConfig, **ppo: Any) -> PPO:
    """``agents`` fresh PPO agents of the paper's config as one batched model (static schedule)."""
    cfg = paper_ppo(**ppo)
    made = [PPOAgent(data, scales_of(data, 0), paper_env(), cfg, (0, data.close.shape[0] - 1), seed)
            for seed in range(agents)]
    return PPO([lrn for a in made for lrn in a.learners], [e for a in made for e in a.envs], cfg, runtime, static=True)


def compiled_step(env: MarketEnv, mode: str) -> Callable[..., object]:
    """The env's step, compiled by Inductor for ``mode: inductor``."""
    return compiled(env.step, "inductor" if mode == "inductor" else "eager")


def hot_steps(args: Args) -> dict[str, Callable[[], None]]:
    """The rollout, a static PPO gradient step, the evaluator's decision and SAC's gradient
    step, each warmed up once, ready to run again; on CUDA also the PPO gradient step's loss and
    gradients by the update kernel (``train.compile: kernel``; on a CPU Triton's interpreter copies
    to the host, so it is not a step to guard there)."""
    stocks = 4 if args.tiny else 30
    data = sample_market(stocks, 300, seed=0, device=args.device)
    ppo = population(data, 2, RuntimeConfig(), **TINY)
    ppo.train_iteration([0, 1])
    group = ppo.group([0, 1])
    group.load(ppo.learners, ppo.envs)
    weight, active = group.schedule.static_masks()
    idx = torch.zeros_like(weight[0], dtype=torch.long)
    env = MarketEnv(data, scales_of(data, 0), paper_env(), 2, (0, 200), random_start=False)
    env.static = True
    state = [env.reset()]

    def decide() -> None:
        state[0] = env.step(torch.tanh(ppo.nets.mean(state[0].unsqueeze(1))).squeeze(1)).state

    decide()
    sac = SACAgent(data, scales_of(data, 0), paper_env(), SACConfig(num_envs=4, horizon=8, batch_size=8, updates=1,
                                                                    net_dims=(8,), policy="shared"), (0, 250), 0)
    sac.train_iteration()
    def sac_step() -> None:
        sac.gradient_step()

    steps = {"rollout": lambda: ppo.rollout(group),
             "ppo_gradient_step": lambda: ppo.static_step(group.batch, idx, weight[0], active[0]),
             "evaluator_decision": decide, "sac_gradient_step": sac_step}
    if args.device == "cuda":
        from trainers.ppo.kernel import kernel_loss

        loss, hp = kernel_loss(ppo.device), (ppo.hparam("clip"), ppo.hparam("entropy_coef"), ppo.cfg.value_coef)

        def kernel_step() -> None:
            nets = ppo.nets.sub([0, 1], grad=True)
            torch.autograd.grad(loss(nets, group.batch, idx, weight[0], *hp), nets.params)

        kernel_step()  # Triton compiles it here
        steps["kernel_gradient_step"] = kernel_step
    return steps


def update_flops_per_sample(stocks: int, features: int, hidden: int, state_dim: int, repeat_times: int) -> float:
    """FLOPs of the PPO update per rollout sample: the per-stock actor ``[k + 2, hidden, 1]`` on
    every stock and the critic ``[state_dim, hidden, 1]``, forward and backward (about twice
    the forward), over ``repeat_times`` passes."""
    forward = 2 * (stocks * ((features + 2) * hidden + hidden) + state_dim * hidden + hidden)
    return 3.0 * forward * repeat_times


def section_ppo(args: Args) -> dict[str, Any]:
    """PPO samples/s (rollout + update) of a population as one batched model, eager and
    recorded, by population and universe size; the update's FLOP rate beside the peak."""
    sizes = [1, 2] if args.tiny else list(args.agents)
    universes = [4] if args.tiny else [30, 100]
    modes = ["eager", "graphs"] if args.device == "cuda" else ["eager"]
    small = TINY if args.tiny else {}
    rows = []
    for stocks in universes:
        data = sample_market(stocks, 300 if args.tiny else 5000, seed=0, device=args.device)
        for agents in sizes:
            for mode in modes:
                if args.remaining() < 15:
                    return {"rows": rows, "cut_short": True}
                try:
                    rows.append(_ppo_rate(args, data, agents, mode, small))
                except Exception as error:  # noqa: BLE001 - the next size or mode may still run
                    rows.append({"agents": agents, "stocks": stocks, "mode": mode,
                                 "error": f"{type(error).__name__}: {error}"[:500]})
                print(json.dumps(rows[-1]), flush=True)
                args.save("ppo", {"rows": rows})
    return {"rows": rows, "peak": _peak(args)}


def _ppo_rate(args: Args, data: MarketData, agents: int, mode: str, small: dict[str, int]) -> dict[str, Any]:
    ppo = population(data, agents, RuntimeConfig(compile=mode), **small)
    group, dev = list(range(agents)), torch.device(args.device)
    for _ in range(2):  # warm-up; a recorded step is captured on the second
        ppo.train_iteration(group)
    rollout_s = update_s = 0.0
    iterations = 1
    for _ in range(iterations):
        sync(dev)
        started = time.perf_counter()
        rollout = ppo.collect(group)
        sync(dev)
        middle = time.perf_counter()
        ppo.update(group, rollout)
        sync(dev)
        rollout_s, update_s = rollout_s + middle - started, update_s + time.perf_counter() - middle
    cfg, stocks = ppo.cfg, data.n_stocks
    samples = agents * cfg.num_envs * cfg.horizon * iterations
    flops = update_flops_per_sample(stocks, data.n_features, cfg.net_dims[0], ppo.envs[0].state_dim, cfg.repeat_times)
    return {"agents": agents, "stocks": stocks, "mode": mode, "samples_per_s": samples / (rollout_s + update_s),
            "rollout_share": rollout_s / (rollout_s + update_s), "update_flops_per_sample": flops,
            "update_tflops": flops * samples / update_s / 1e12}


def _peak(args: Args) -> dict[str, Any] | None:
    path = args.out / "device.json"
    return json.loads(path.read_text()) if path.exists() else None


def section_headline(args: Args) -> dict[str, Any]:
    """A population of 16 on the paper-scale minute market for ``--headline-seconds`` of
    training, then its test year beside buy-and-hold and momentum, and an RL-Scope profile."""
    baselines = subprocess.Popen([sys.executable, "-m", "benchmarks.perf.gpu_baselines", "--out", str(args.out),
                                  *(["--tiny"] if args.tiny else [])], cwd=Path(__file__).resolve().parents[2])
    started = time.perf_counter()
    market = minute_market(8, 12, device=args.device) if args.tiny else minute_market(100, 2520, device=args.device)
    data, windows = market.data, market.windows
    out: dict[str, Any] = {"market": {"stocks": market.stocks, "sessions": market.sessions,
                                      "bars": int(data.close.shape[0]), "windows": windows,
                                      "seconds": time.perf_counter() - started}}
    shapes = TINY if args.tiny else HEADLINE
    evo = EvolutionConfig(population=2 if args.tiny else 16, generations=10**6, iterations_per_generation=1
                          if args.tiny else 4, eval_interval=1 if args.tiny else 4, search_space=dict(SEARCH), seed=0)
    out["config"] = {"ppo": shapes, "population": evo.population, "iterations_per_generation":
                     evo.iterations_per_generation}
    args.save("headline", out)
    modes = _modes(args)
    if "kernel" in modes:
        out["kernel_launch"] = _kernel_launch(args)
    result, curve = _first_that_trains(args, modes, out, lambda mode, budget: _train(
        args, data, windows, shapes, evo, RuntimeConfig(compile=mode), budget))
    steps = result.env_steps
    train_s = curve[-1]["seconds"]
    out |= {"curve": curve, "env_steps": steps, "train_seconds": train_s, "env_steps_per_s": steps / train_s,
            "seconds_for_1e9_env_steps": 1e9 * train_s / steps, "best_validation_sharpe": result.best_fitness}
    if len(curve) > 2:  # after the first generation's warm-up and compilation
        d_steps = curve[-1]["env_steps"] - curve[0]["env_steps"]
        out["steady_env_steps_per_s"] = d_steps / (curve[-1]["seconds"] - curve[0]["seconds"])
    args.save("headline", out)
    out["test"] = _guarded(lambda: scored_test_year(data, windows, result, market.per_year))
    out["chunked_evaluation"] = _guarded(lambda: chunk_check(  # the final population, both ways
        data, scales_of(data, windows["train"][0]), windows["validation"],
        actors_of(data, scales_of(data, windows["train"][0]), [lead.actor for lead in result.leaders]),
        market.per_year, "graphs" if args.device == "cuda" else "eager", chunks=(EVAL_CHUNKS,)))
    try:
        baselines.wait(timeout=max(1.0, args.remaining() - 40))
    except subprocess.TimeoutExpired:
        baselines.kill()
    found = args.load("baselines")
    if found is not None:
        out["test"] |= found
        (args.out / "baselines.json").unlink()  # folded in here: the device hands back at most 8 files
    args.save("headline", out)
    gc.collect()  # the training's buffers and graphs, before the profile builds its own
    if args.device == "cuda":
        torch.cuda.empty_cache()
    out["profile"] = _guarded(lambda: _profile(args, data, windows, shapes, evo))  # in here too: 8 files at most
    args.save("headline", out)
    out["compiled_split"] = _guarded(lambda: compiled_split(args, data, windows, shapes, evo, out["mode"]))
    args.save("headline", out)
    return out


def _modes(args: Args) -> list[str]:
    """The modes to try in turn, on CUDA: Inductor, then CUDA graphs alone, graphs only when the env
    section saw Inductor fail; the update's Triton kernel first where the update section found its
    gradients autograd's (:data:`~benchmarks.perf.gpu_common.KERNEL_ERROR`) and its update faster
    than Inductor's fused one. Eager on the CPU."""
    if args.device != "cuda":
        return ["eager"]
    env = args.load("env") or {}
    if any(row.get("mode") == "inductor" and "error" in row for row in env.get("rows", [])):
        return ["graphs"]
    update = {row.get("form"): row for row in (args.load("update") or {}).get("rows", [])}
    kernel, fused = update.get("kernel", {}), update.get("fused", {})
    faster = kernel.get("sample_epochs_per_s", 0.0) > fused.get("sample_epochs_per_s", float("inf"))
    return (["kernel"] if faster and kernel.get("kernel_error", 1.0) <= KERNEL_ERROR else []) + ["inductor", "graphs"]


def _first_that_trains(args: Args, modes: list[str], out: dict[str, Any],
                       train: Callable[[str, float], tuple[EvolutionResult, list[dict]]]
                       ) -> tuple[EvolutionResult, list[dict]]:
    """``train(mode, budget)`` in the first of ``modes`` that does not fail (``out["mode"]``; the
    failures in ``out["fallbacks"]``), each try's budget ``--headline-seconds`` or what the
    deadline leaves after the time the test year and the rest need, so that a fallback does not
    overrun the section."""
    for mode in modes:
        budget = min(args.headline_seconds, max(20.0, args.remaining() - (20 if args.tiny else 150)))
        try:
            trained = train(mode, budget)
            out["mode"] = mode
            return trained
        except Stop:
            raise
        except Exception as error:  # noqa: BLE001 - Inductor may fail on a new stack; graphs are the fallback
            out.setdefault("fallbacks", []).append(f"{mode}: {type(error).__name__}: {error}"[:500])
    raise RuntimeError(f"every mode failed: {out.get('fallbacks')}")


def _kernel_launch(args: Args) -> dict[str, Any]:
    """Build the update kernel from here on as the update section ran its update (the fastest of
    its builds with autograd's gradients, benchmarks/perf/gpu_update.py::fastest_launch); the
    build, as a dict."""
    from trainers.ppo import kernel

    update = {row.get("form"): row for row in (args.load("update") or {}).get("rows", [])}
    launch = update.get("kernel", {}).get("launch")
    kernel.LAUNCH = kernel.Launch.of(launch) if launch else kernel.LAUNCH
    return kernel.LAUNCH._asdict()


def _guarded(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``fn()``, or the error it raised: a part of the headline failing keeps the rest."""
    try:
        return fn()
    except Exception as error:  # noqa: BLE001
        return {"error": f"{type(error).__name__}: {error}"[:800]}


def _train(args: Args, data: MarketData, windows: dict[str, tuple[int, int]], shapes: dict[str, int],
           evo: EvolutionConfig, runtime: RuntimeConfig, budget: float) -> tuple[EvolutionResult, list[dict]]:
    run = paper_evolution(data, windows["train"], windows["validation"], shapes, evo, runtime)
    curve: list[dict[str, Any]] = []
    started = time.perf_counter()

    def on_generation(best: EvolutionResult) -> None:
        sync(torch.device(args.device))
        seconds = time.perf_counter() - started
        curve.append({"generation": len(curve) + 1, "seconds": seconds, "env_steps": best.env_steps,
                      "best_validation_sharpe": best.best_fitness})
        if len(curve) == 1 or seconds // 10 > curve[-2]["seconds"] // 10:  # a line every 10 s
            print(json.dumps(curve[-1]), flush=True)
        if seconds >= budget:
            raise Stop

    try:
        with KeptPPO() as runner:
            run.run(on_generation=on_generation, runner=runner)
    except Stop:
        pass
    return run.best(), curve


def scored_test_year(data: MarketData, windows: dict[str, tuple[int, int]], result: EvolutionResult,
               per_year: float) -> dict:
    """The best validation snapshot and buy-and-hold on the test year (never seen in training
    or selection), under the env's rules."""
    env, scales = paper_env(), scales_of(data, windows["train"][0])
    (actor,) = actors_of(data, scales, [result.best_actor])
    agent = run_policies(actor, data, scales, env, windows["test"], accounts=1, compile="graphs")[:, 0]
    hold = buy_and_hold(data, env, windows["test"])
    return {"agent": performance(agent, per_year), "buy_and_hold": performance(hold, per_year)}


def _profile(args: Args, data: MarketData, windows: dict[str, tuple[int, int]], shapes: dict[str, int],
             evo: EvolutionConfig) -> dict[str, Any]:
    """RL-Scope's breakdown (trainers/profiler.py) of one eager iteration of the headline's
    population and a part of an evaluation, GPU kernels attributed to the operations."""
    lo, hi = windows["validation"]
    validation = (lo, min(hi, lo + (50 if args.tiny else 2500)))
    pop = first_generation(data, windows["train"], validation, shapes, evo, RuntimeConfig())
    group = list(range(len(pop.agents)))
    pop.train_iteration(group)  # warm-up
    sync(torch.device(args.device))
    profiler.enable(cuda=True)
    profiler.set_phase("training")
    pop.train_iteration(group)
    profiler.set_phase("evaluation")
    pop.evaluate()
    sync(torch.device(args.device))
    profiler.disable()
    report = profiler.report()
    total = report.wall_seconds or 1.0
    shares: dict[str, float] = {}
    for row in report.rows:
        key = "evaluation" if row.phase == "evaluation" else row.operation
        shares[key] = shares.get(key, 0.0) + row.raw_seconds / total
    return {"shares_of_wall": shares, "report": report.to_dict()}
