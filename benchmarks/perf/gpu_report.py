"""A device run of benchmarks/perf/gpu.py into docs/benchmarks.md's GPU section, beside the same
workloads on this machine's CPU, with a plot (docs/img/benchmark_gpu.png).

    .venv/bin/python -m benchmarks.perf.gpu --record docs/results/gpu-h100 --cpu docs/results/gpu-cpu
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.common import DOCS, ROOT, Reading, commit, now, record
from benchmarks.perf.gpu_update import update_table
from trainers.ppo.kernel import Launch

IMAGE = ROOT / "docs" / "img" / "benchmark_gpu.png"
MODES = {"off": "eager", "eager": "eager", "graphs": "CUDA graphs", "inductor": "Inductor + CUDA graphs",
         "kernel": "the update's Triton kernel + Inductor + CUDA graphs"}
"""Display names; ``off`` is what the first device run called ``eager``."""


def load(folder: Path) -> dict[str, dict[str, Any]]:
    return {path.stem: json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))}


def _mode(row: dict[str, Any], device: str) -> str:
    mode = MODES[row["mode"]]
    return "Inductor" if device == "cpu" and mode.startswith("Inductor") else mode


def device_line(run: dict[str, dict[str, Any]]) -> str:
    d = run["device"]
    nominal = d.get("nominal") or {}
    sheet = (f"; data sheet {nominal['bandwidth_gbs']:,.0f} GB/s and {nominal['fp32_tflops']:.0f} TFLOP/s"
             if nominal else "")
    triton = f", Triton {d['triton']}" if d.get("triton") else ""  # recorded since the update kernel
    return (f"{d['name']} (capability {d.get('capability', '-')}, {d.get('sms', '-')} SMs), "
            f"torch {d['torch']}{triton}: "
            f"measured copy {d['copy_gbs']:,.0f} GB/s, FP32 matmul {d['fp32_matmul_tflops']:.1f} TFLOP/s{sheet}")


def env_table(gpu: dict[str, dict[str, Any]], cpu: dict[str, dict[str, Any]] | None) -> str:
    bandwidth = gpu["device"]["copy_gbs"]
    cpu_rate = {(r["envs"], _mode(r, "cpu")): r["steps_per_s"] for r in (cpu or {}).get("env", {}).get("rows", [])
                if "steps_per_s" in r}
    lines = ["| envs | mode | env steps/s | bytes/step, eager (counted) | bytes/step, necessary | GB/s at the necessary"
             " bytes | share of the measured bandwidth | 2 CPU cores, eager | GPU / CPU |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in gpu["env"]["rows"]:
        if "steps_per_s" not in r:
            lines.append(f"| {r['envs']:,} | {_mode(r, 'cuda')} | failed: {r.get('error', '')[:80]} |||||||")
            continue
        gbs = r["steps_per_s"] * r["necessary_bytes_per_env_step"] / 1e9
        base = cpu_rate.get((r["envs"], "eager"))
        counted = f"{r['bytes_per_env_step']:,.0f}" if "bytes_per_env_step" in r else "-"
        here, ratio = ("-", "-") if base is None else (f"{base / 1e6:.2f} M", f"{r['steps_per_s'] / base:,.0f}x")
        lines.append(f"| {r['envs']:,} | {_mode(r, 'cuda')} | {r['steps_per_s'] / 1e6:,.1f} M | {counted} | "
                     f"{r['necessary_bytes_per_env_step']:,} | {gbs:,.0f} | {gbs / bandwidth:.0%} | {here} | {ratio} |")
    return "\n".join(lines)


def ppo_table(gpu: dict[str, dict[str, Any]], cpu: dict[str, dict[str, Any]] | None) -> str:
    """One row a population size and stock count, each mode's figures side by side
    (``eager · CUDA graphs``)."""
    peak = gpu["device"]["fp32_matmul_tflops"]
    cpu_rate = {(r["agents"], r["stocks"]): r["samples_per_s"] for r in (cpu or {}).get("ppo", {}).get("rows", [])
                if "samples_per_s" in r}
    order = list(MODES)
    rows = sorted(gpu["ppo"]["rows"], key=lambda r: (r["stocks"], r["agents"], order.index(r["mode"])))
    modes = list(dict.fromkeys(_mode(r, "cuda") for r in sorted(rows, key=lambda r: order.index(r["mode"]))))
    sizes: dict[tuple[int, int], dict[str, dict[str, Any]]] = {}
    for r in rows:
        sizes.setdefault((r["stocks"], r["agents"]), {})[_mode(r, "cuda")] = r

    def figures(r: dict[str, Any] | None, base: float | None) -> list[str]:
        if r is None or "samples_per_s" not in r:
            return ["-" if r is None else "failed", "-", "-", "-", "-"]
        ratio = "-" if base is None else f"{r['samples_per_s'] / base:,.0f}x"
        return [f"{r['samples_per_s']:,.0f}", f"{r['rollout_share']:.0%}", f"{r['update_tflops']:.2f}",
                f"{r['update_tflops'] / peak:.1%}", ratio]

    lines = [f"Each figure for {' · '.join(modes)}.", "",
             "| stocks | agents | samples/s | rollout share | update TFLOP/s | share of FP32 matmul | 2 CPU cores "
             "| GPU / CPU |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (stocks, agents), by_mode in sizes.items():
        base = cpu_rate.get((agents, stocks))
        cells = [" · ".join(column) for column in zip(*(figures(by_mode.get(m), base) for m in modes))]
        here = "-" if base is None else f"{base:,.0f}"
        lines.append(f"| {stocks} | {agents} | {' | '.join(cells[:4])} | {here} | {cells[4]} |")
    return "\n".join(lines)


def headline_text(run: dict[str, dict[str, Any]]) -> str:
    h = run["headline"]
    profile = h.get("profile") or run.get("profile", {})  # a separate profile.json before the update section
    test = h.get("test", {})
    sharpe = " · ".join(f"{name.replace('_', '-')} {m['sharpe']:.2f}" for name, m in test.items() if "sharpe" in m)
    shares = ", ".join(f"{k} {v:.0%}" for k, v in sorted(profile.get("shares_of_wall", {}).items(),
                                                          key=lambda kv: -kv[1]))
    market = h["market"]
    launch = h.get("kernel_launch") if h["mode"] == "kernel" else None
    build = f" ({Launch.of(launch).text()})" if launch else ""
    return (f"Population {h['config']['population']} × {h['config']['ppo']['num_envs']:,} envs, "
            f"{market['stocks']} stocks × {market['sessions']:,} sessions of 1-minute bars "
            f"({market['bars']:,} bars, built in {market['seconds']:.0f} s), {MODES[h['mode']]}{build}, "
            f"{h['config']['iterations_per_generation']} iterations a generation:\n\n"
            f"- **{h['env_steps'] / 1e6:,.1f} M env steps in {h['train_seconds']:.0f} s** "
            f"({len(h['curve'])} generations, compilation included): {h['env_steps_per_s']:,.0f} env steps/s, "
            f"{h.get('steady_env_steps_per_s', 0):,.0f} after the first generation; "
            f"1 billion env steps would take {h['seconds_for_1e9_env_steps'] / 60:,.0f} minutes "
            f"(the moonshot is 10).\n"
            f"- Test year (never seen in training or selection), Sharpe: {sharpe}; "
            f"best validation Sharpe {h['best_validation_sharpe']:.2f}.\n"
            f"- RL-Scope breakdown (one eager iteration and 500 evaluation decisions, shares of wall): {shares}."
            + _split(h) + _chunked(h))


def two_core_text(cpu: dict[str, dict[str, Any]] | None) -> str:
    """The 2-core agent's test year on the headline's market (benchmarks/perf/gpu_two_core.py), when
    the CPU's folder has it."""
    two = (cpu or {}).get("two_core")
    if not two:
        return ""
    test = two["test"]
    return (f"\n- The 2-core agent on the same market (params.paper.yaml's budget, benchmarks/perf/gpu_two_core.py "
            f"at {two['tree']['commit']}): {two['env_steps'] / 1e6:.1f} M env steps in {two['train_seconds']:.0f} s "
            f"on {two['threads']} CPU cores; test Sharpe {test['agent']['sharpe']:.2f}, buy-and-hold "
            f"{test['buy_and_hold']['sharpe']:.2f}.")


def _split(headline: dict[str, Any]) -> str:
    """The compiled generation's split (benchmarks/perf/gpu_train.py::_compiled_split), when run."""
    split = headline.get("compiled_split") or {}
    if "shares_of_generation" not in split:
        return ""
    parts = ", ".join(f"{k} {v:.0%} ({split['seconds'][k]:.2f} s each)" for k, v in
                      sorted(split["shares_of_generation"].items(), key=lambda kv: -kv[1]))
    rollout = (f" The rollout, the env with the policy in the loop on this market: "
               f"{split['rollout_env_steps_per_s'] / 1e6:.1f} M env steps/s (target 50 M)."
               if "rollout_env_steps_per_s" in split else "")
    first = (f" The first evaluation, which records its decision: {split['seconds']['first_evaluation']:.2f} s; "
             f"the later ones replay it." if "first_evaluation" in split["seconds"] else "")
    start = split.get("generation_start") or {}
    kept = (f" A next generation's first {start['iterations']} iterations: {start['kept_seconds']:.2f} s on the PPO "
            f"kept and reloaded in place, {start['rebuilt_seconds']:.2f} s on a new one that makes its buffers and "
            f"records its steps again ({start['iterations']} iterations as they run: {start['running_seconds']:.2f} s)."
            if "kept_seconds" in start else f" Keeping the PPO was not timed: {start['skipped']}." if start else "")
    return (f"\n- A generation as it runs ({MODES[split['mode']]}, the device drained between parts): "
            f"{parts}.{first}{rollout}{kept}")


def _chunked(headline: dict[str, Any]) -> str:
    """The final population's validation Sharpe in one pass and in chunks (benchmarks/perf/gpu_eval.py)."""
    check = headline.get("chunked_evaluation") or {}
    if not check.get("chunked"):
        return ""
    row = check["chunked"][0]
    return (f"\n- Validation in {row['chunks']} chunks side by side against one pass, the final {check['agents']} "
            f"agents: {row['seconds']:.1f} s against {check['single_seconds']:.1f} s; largest Sharpe change "
            f"{row['largest_change']:.3f}, rank correlation {row['rank_correlation']:.2f}, the same best: "
            f"{row['same_best']} (one pass started {check['started_earlier']['bars']} bars earlier: largest change "
            f"{check['started_earlier']['largest_change']:.3f}).")


def _tree(run: dict[str, dict[str, Any]]) -> str:
    """How the run's tree was checked (benchmarks/perf/tree.py), when its JSON says."""
    tree = run["env"].get("tree")
    if tree is None:
        return ""
    state = "clean" if tree["clean"] else f"not clean ({', '.join(tree['changed'])})"
    return f", checked by the run itself ({tree['checked_by']}): {state}"


def _at(run: dict[str, dict[str, Any]], name: str) -> str:
    """``; measured at COMMIT`` when section ``name`` ran at another commit than the env's."""
    at = run[name].get("commit")
    return f"; measured at {at}, not rerun since" if at and at != run["env"].get("commit") else ""


def _listed(env: dict[str, Any]) -> str:
    """How many final states a static step lists, where the run reports it."""
    listed = [f"{r['final_states_listed']:,} of {r['envs']:,}" for r in env["rows"]
              if "final_states_listed" in r and r["mode"] == "eager"]
    return f"; a static step lists the final states of {', '.join(listed)} envs" if listed else ""


def dask_text(d: dict[str, Any]) -> str:
    """The ``dask`` section in a sentence: where the jobs ran and how the leaderboard compares."""
    if not d.get("ok"):
        return f"**Dask GPU workers** (benchmarks/perf/gpu_dask.py): failed: {d.get('error', '')[:200]}"
    memory = ", ".join(f"{b / 2**20:,.0f} MiB" for b in d["worker_gpu_bytes"]) or "-"
    return (f"**Dask GPU workers** (benchmarks/perf/gpu_dask.py): a `dask scheduler` and {d['workers']} "
            f"`dask worker --resources GPU=1` processes on 127.0.0.1, pinned to GPU {d['CUDA_VISIBLE_DEVICES']}, "
            f"trained {sum(d['jobs_by_worker'].values())} jobs ({' + '.join(map(str, d['jobs_by_worker'].values()))}"
            f" by worker; the most GPU memory each held: {memory}) in {d['workers_seconds']:.1f} s, against "
            f"{d['in_process_seconds']:.1f} s in one process; the leaderboard (best fitness {d['best_fitness']:.6f}, "
            f"{d['evaluations']} evaluations) is {'bit for bit the same' if d['identical'] else 'different'}: "
            f"largest fitness difference {d['max_fitness_diff']:.1e}, largest weight difference "
            f"{d['max_best_actor_weight_diff']:.1e}, the same agent selected: {d['same_best_agent']}.")


def plot(gpu: dict[str, dict[str, Any]], cpu: dict[str, dict[str, Any]] | None, title: str, image: Path) -> None:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 3.8), layout="constrained")
    axes = figure.add_subplot(1, 2, 1)
    for stocks, marker in ((30, "o"), (100, "s")):
        for mode, colour in (("off", "tab:blue"), ("graphs", "tab:orange")):
            rows = sorted((r for r in gpu["ppo"]["rows"] if r.get("stocks") == stocks and r["mode"] == mode
                           and "samples_per_s" in r), key=lambda r: r["agents"])
            axes.plot([r["agents"] for r in rows], [r["samples_per_s"] for r in rows], marker=marker, color=colour,
                      label=f"{stocks} stocks, {MODES[mode]}")
        base = sorted((r for r in (cpu or {}).get("ppo", {}).get("rows", []) if r.get("stocks") == stocks
                       and "samples_per_s" in r), key=lambda r: r["agents"])
        if base:
            axes.plot([r["agents"] for r in base], [r["samples_per_s"] for r in base], marker=marker, color="grey",
                      linestyle=":", label=f"{stocks} stocks, 2 CPU cores")
    axes.set(xscale="log", yscale="log", xlabel="agents in the batched model", ylabel="PPO samples / s",
             title="PPO training (rollout + update)")
    axes.legend(fontsize=7)
    axes = figure.add_subplot(1, 2, 2)
    rows = [r for r in gpu["env"]["rows"] if "steps_per_s" in r]
    short = {"off": "eager", "eager": "eager", "graphs": "graphs", "inductor": "inductor"}
    labels = [f"{r['envs'] // 1024}k\n{short[r['mode']]}" for r in rows]
    axes.bar(range(len(rows)), [r["steps_per_s"] / 1e6 for r in rows], color="tab:green")
    axes.set_xticks(range(len(rows)), labels, fontsize=7)
    axes.axhline(100, color="red", linestyle="--", linewidth=1, label="target: 100 M")
    axes.set(ylabel="million env steps / s", title="env alone, 100 stocks")
    axes.legend(fontsize=7)
    figure.suptitle(title, fontsize=9)
    figure.savefig(image, dpi=100)


def record_run(folder: Path, cpu_folder: Path | None = None, docs: Path = DOCS, image: Path = IMAGE) -> None:
    """Record the device run in ``folder`` (and the CPU's in ``cpu_folder``) in ``docs``, its plot in ``image``."""
    gpu = load(folder)
    cpu = load(cpu_folder) if cpu_folder is not None else None
    name = gpu["device"]["name"]
    rel = folder.resolve().relative_to(ROOT) if folder.resolve().is_relative_to(ROOT) else folder
    plot(gpu, cpu, name, image)
    sync = ", ".join(f"{k} {v}" for k, v in gpu["sync"]["steps"].items())
    parity = gpu["parity"]
    resume = "; ".join(f"{k}: {v['generations']} generations" for k, v in parity["resume"].items())
    cpu_line = f" 2 CPU cores: {cpu['device']['name']}, the same scripts (`{cpu_folder}`)." if cpu else ""
    latest = (
        f"Device run: `make gpu-prep` here, then `python3 -m pip install --no-deps "
        f".whl/*.whl; python3 -m benchmarks.perf.gpu --out OUT` on the GPU machine, `.whl/` carrying dask's wheels "
        f"and `.stamp/` the tree's stamp (docs/training.md, GPU workers); its JSON and console output: `{rel}/`, "
        f"each JSON naming its commit{_tree(gpu)}; recorded with "
        f"`.venv/bin/python -m benchmarks.perf.gpu --record {rel}"
        + (f" --cpu {cpu_folder}" if cpu_folder else "") + "`.  \n"
        f"Device: {device_line(gpu)}.{cpu_line} Plot: `docs/img/{image.name}`.\n\n"
        f"**Sync audit** (torch's sync debug mode `error` and the host-read guard): {sync}.\n\n"
        f"**Env alone** (100 stocks, the paper's rules; target ≥ 100 M env steps/s at 16,384 envs"
        f"{_listed(gpu['env'])}):\n\n"
        f"{env_table(gpu, cpu)}\n\n"
        f"**PPO** (population × 32 envs × 128 steps, the paper's config; the update's FLOPs counted from the "
        f"layer shapes{_at(gpu, 'ppo')}):\n\n{ppo_table(gpu, cpu)}\n\n"
        f"**CUDA against the CPU**: one short evolution, random streams on the CPU: best fitness "
        f"{parity['device_best_fitness']:.6f} against {parity['cpu_best_fitness']:.6f}, the same agent selected: "
        f"{parity['same_best_agent']}, largest fitness difference {parity['max_fitness_diff']:.1e}, largest weight "
        f"difference {parity['max_best_actor_weight_diff']:.1e}. Cross-device resume: {resume}.\n\n"
        + (f"{dask_text(gpu['dask'])}\n\n" if "dask" in gpu else "")
        + (f"**The update's bytes** (benchmarks/perf/gpu_update.py; counted at {gpu['update']['agents']} agents, "
           f"the rate at the headline's shapes):\n\n{update_table(gpu['update'])}\n\n"
           if gpu.get("update", {}).get("rows") else "")
        + f"**The headline** (benchmarks/perf/gpu_train.py):\n\n{headline_text(gpu)}{two_core_text(cpu)}\n")
    h = gpu["headline"]
    env16 = next((r for r in gpu["env"]["rows"] if r["envs"] == 16384 and r["mode"] == "inductor"), {})
    eager16 = next((r for r in gpu["env"]["rows"] if r["envs"] == 16384 and r["mode"] == "eager"), {})
    record(Reading("gpu", "GPU workers: benchmarks/perf/gpu.py", latest,
                   ("date", "commit", "device", "env steps/s (16,384 envs)", "bytes/env step, eager (counted)",
                    "PPO env steps/s (headline)", "test Sharpe"),
                   (now(), gpu["env"].get("commit") or commit(), name, f"{env16.get('steps_per_s', 0) / 1e6:.0f} M",
                    f"{eager16.get('bytes_per_env_step', 0):,.0f}", f"{h['env_steps_per_s']:,.0f}",
                    f"{h['test']['agent']['sharpe']:.2f}")), docs)
