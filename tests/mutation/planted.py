"""Re-plant the bugs once found by hand (docs/testing.md, Planted bugs), one at a time, and
check that a named test catches each.

Each bug is a one-line edit of today's code. For each, the source tree is copied to a
temporary folder, the edit is applied there (the checkout is never touched), and the
tests that should catch it run against the copy; they must fail. Then the same tests run
on the unedited copy and must pass. Prints one line per bug and exits 1 if any got through.

    .venv/bin/python tests/mutation/planted.py [NUMBER ...]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COPY = ("flows", "tasks", "trainers", "deploy", "tests", "standins", "benchmarks", "docs", "README.md",
        "pyproject.toml", ".env", "params.yaml")


@dataclass(frozen=True)
class Bug:
    what: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


BUGS = {
    1: Bug("the gate's inequality reversed (the p-value counts the wrong tail)", "tasks/registry/evidence.py",
           "np.count_nonzero(~(replicates < observed - 1e-12))",
           "np.count_nonzero(~(replicates > observed + 1e-12))",
           ("tests/tasks/registry/test_evidence.py",)),
    2: Bug("buy-and-hold buys at the wrong price", "trainers/common/evaluate.py",
           "price = data.open[t_lo + 1]\n    if data.tradable", "price = data.close[t_lo]\n    if data.tradable",
           ("tests/trainers/common/test_evaluate.py",)),
    3: Bug("the test window starts one bar late", "tasks/data/feature_set.py",
           "return (max(lo - 1, 0), hi)", "return (lo, hi)",
           ("tests/tasks/data/test_feature_set.py::test_an_env_window_starts_at_the_bar_before_its_split",
            "tests/tasks/model/test_backtest.py::test_backtest_of_a_handmade_policy_by_hand")),
    4: Bug("the serving turbulence gate switched off", "tasks/registry/serving.py",
           "    if threshold is None:\n        return None", "    if True:\n        return None",
           ("tests/tasks/registry/test_serving.py",)),
    5: Bug("turbulence computed without the covariance", "tasks/data/turbulence.py",
           "inv = np.linalg.pinv(np.atleast_2d(np.cov(hist, rowvar=False)))",
           "inv = np.linalg.pinv(np.diag(np.diag(np.atleast_2d(np.cov(hist, rowvar=False)))))",
           ("tests/tasks/data/test_turbulence.py",)),
    6: Bug("a quarantine file silently drops a row while the count stays right", "tasks/data/validate.py",
           'write_parquet(group.drop(columns="_file").reset_index(drop=True), self.staging',
           'write_parquet(group.drop(columns="_file").reset_index(drop=True).iloc[[0] * len(group)], self.staging',
           ("tests/tasks/data/test_validate.py::test_every_row_lands_once_in_validated_or_quarantine_with_its_values",)),
    7: Bug("the gymnasium adapter returns the post-reset observation as the final one", "trainers/common/gym_env.py",
           "obs = step.last_states()[0].cpu().numpy()", "obs = step.state[0].cpu().numpy()",
           ("tests/trainers/common/test_gym_env.py::test_single_env_truncates_and_returns_the_final_observation",)),
    8: Bug("a copied agent keeps its own weights (equal widths)", "trainers/population/evolution.py",
           "pop.hparams[src], pop.seeds[src], pop.states[src], chosen.hparams[dst]",
           "pop.hparams[src], pop.seeds[src], pop.states[dst], chosen.hparams[dst]",
           ("tests/trainers/population/test_evolution.py::"
            "test_a_copied_agent_starts_the_next_generation_with_its_parents_weights_and_adam_state",)),
    9: Bug("the value bootstrap taken from the reset state", "trainers/ppo/ppo.py",
           "_values_at(nets, layout, step.final)",
           "_values_at(nets, layout, FinalStates(step.final.index, slot.next_obs[step.final.index]))",
           ("tests/trainers/ppo/test_ppo.py::test_rollout_values_truncated_episodes_from_their_final_state",)),
    10: Bug("Alpaca keeps extended-hours bars", "tasks/data/sources/alpaca.py",
            "return bars[inside].reset_index(drop=True)", "return bars.reset_index(drop=True)",
            ("tests/tasks/data/sources/test_alpaca.py::test_regular_hours_keeps_session_minutes_only",)),
    11: Bug("`podracer train` removed", "flows/stage_table.py",
            '_trained, lambda p: [p.dirs.features, p.dirs.raw], trains=True),',
            'None, lambda p: [p.dirs.features, p.dirs.raw], trains=True),',
            ("tests/flows/test_cli_commands.py",)),
    12: Bug("`podracer run` removed", "flows/cli.py",
            "@app.command()\ndef run(", "def run(",
            ("tests/flows/test_cli_commands.py",)),
    13: Bug("the gate ignores gate_alpha", "tasks/registry/evidence.py",
            "and self.p_value < self.alpha", "and self.p_value < 0.05",
            ("tests/tasks/registry/test_evidence.py::test_alpha_and_the_margin_decide",)),
    14: Bug("the paired returns shifted by one bar", "tasks/registry/evidence.py",
            "paired_test(returns[model].to_numpy(), returns[name].to_numpy(),",
            "paired_test(returns[model].to_numpy()[1:], returns[name].to_numpy()[:-1],",
            ("tests/tasks/registry/test_evidence.py::test_against_pairs_every_other_column_on_the_same_bars",)),
    15: Bug("a shadow's record starts one bar early, on the window that chose it", "tasks/model/backtest.py",
            'first = int(np.searchsorted(dates, since, side="right"))',
            'first = int(np.searchsorted(dates, since, side="left"))',
            ("tests/tasks/model/test_backtest.py::test_a_shadow_record_starts_on_the_bar_after_its_since_date",)),
    16: Bug("the champion dropped from the benchmarks", "tasks/registry/evidence.py",
            "others = [name for name in values.columns if name != model]",
            'others = [name for name in values.columns if name not in (model, "champion")]',
            ("tests/tasks/registry/test_evidence.py::test_against_pairs_every_other_column_on_the_same_bars",)),
    17: Bug("a shadow's orders sent to the champion's account", "tasks/delivery/client/session.py",
            "return TradingLoop(params, client, journal, log_cycle, alias=SHADOW)",
            "return TradingLoop(params, champion.client, journal, log_cycle, alias=SHADOW)",
            ("tests/tasks/delivery/client/test_shadow.py",)),
    18: Bug("the shadow's record tested every night (repeated looks)", "tasks/registry/decision.py",
            "if record and record[0].bars - tested >= every:", "if record and record[0].bars - tested >= 1:",
            ("tests/tasks/registry/test_decision.py",)),
    29: Bug("the interval's ends swapped", "tasks/registry/evidence.py",
            "return Evidence(name, bars, observed, low, high, p_value",
            "return Evidence(name, bars, observed, high, low, p_value",
            ("tests/tasks/registry/test_evidence.py::test_the_interval_and_the_p_value_agree",)),
    30: Bug("the interval computed at α/2 while labelled 1 − 2α", "tasks/registry/evidence.py",
            "basic = np.quantile(error, [1.0 - alpha, alpha])",
            "basic = np.quantile(error, [1.0 - alpha / 2, alpha / 2])",
            ("tests/tasks/registry/test_evidence.py::test_the_p_value_and_interval_rebuilt_by_hand_from_the_same_resamples",)),
    31: Bug("a percentile p-value instead of the recentred one", "tasks/registry/evidence.py",
            "p_value = max(_p(error, edge), _p(studentised, edge / se))",
            "p_value = max(_p(-(replicated * scale), -margin), _p(studentised, edge / se))",
            ("tests/tasks/registry/test_evidence.py::test_the_p_value_and_interval_rebuilt_by_hand_from_the_same_resamples",)),
    32: Bug("against hard-codes α 0.05", "tasks/registry/evidence.py",
            "alpha=registry.gate_alpha,\n", "alpha=0.05,\n",
            ("tests/tasks/registry/test_evidence.py::test_against_reads_alpha_and_margin_from_the_registry",)),
    33: Bug("the studentised statistic dropped (oversized under persistence)", "tasks/registry/evidence.py",
            "p_value = max(_p(error, edge), _p(studentised, edge / se))", "p_value = _p(error, edge)",
            ("tests/benchmarks/evidence/test_gate_calibrate.py::test_a_small_calibration_holds_the_size_where_the_basic_bootstrap_did_not",)),
    34: Bug("a NaN return is not a fault (the test fails open)", "tasks/registry/evidence.py",
            "bad = ~np.isfinite(values) if", "bad = np.isinf(values) if",
            ("tests/tasks/registry/test_evidence.py::test_bad_or_flat_returns_fail_closed",)),
    35: Bug("the champion dropped from the shadow record's promotion test", "tasks/registry/decision.py",
            "if all(e.passed for e in record):", "if all(e.passed for e in record[-1:]):",
            ("tests/tasks/registry/test_decision.py"
             "::test_a_shadow_that_beats_buy_and_hold_but_not_the_champion_is_not_promoted",)),
    36: Bug("the weak screen ignores a faulted test (fails open)", "tasks/registry/decision.py",
            "return all(e.fault is None and e.diff >= e.margin for e in evidence)",
            "return all(e.diff >= e.margin for e in evidence)",
            ("tests/tasks/registry/test_decision.py::test_a_faulted_test_fails_closed_and_the_line_names_the_fault",)),
    37: Bug("a shadow has no maximum age", "tasks/registry/decision.py",
            "elif max_bars is not None and tested >= max_bars:", "elif False:",
            ("tests/tasks/registry/test_decision.py::test_a_shadow_is_retired_at_its_maximum_age_unless_it_passes",)),
    25: Bug("the evaluator reads the bar it is at back from the device", "trainers/common/env.py",
            "for j in range(1, held + 1))", "for j in range(1, int(self.t[0]) * 0 + held + 1))",
            ("tests/trainers/ppo/test_sync_free.py::test_the_evaluators_decision_reads_nothing_back",)),
    26: Bug("a recorded group allocates new rollout buffers every iteration", "trainers/ppo/schedule.py",
            "        self.refresh_nets()\n        buf = self.buf",
            "        self.refresh_nets()\n        self.buf = self._buffers()\n        buf = self.buf",
            ("tests/trainers/common/test_capture.py::test_recorded_rollouts_and_updates_read_the_same_tensors_every_time",)),
    27: Bug("a CPU generator draws a whole horizon in one call", "trainers/common/draws.py",
            'if generator.device.type == "cpu":', 'if generator.device.type == "never":',
            ("tests/trainers/common/test_draws.py::test_a_horizon_drawn_up_front_is_what_step_by_step_draws_take",)),
    28: Bug("generator states moved to the device with the rest of a state", "trainers/common/jobs.py",
            "return tree if tree.dtype == torch.uint8 else tree.to(device)", "return tree.to(device)",
            ("tests/trainers/common/test_draws.py::test_generator_states_stay_cpu_byte_tensors_when_a_state_moves",)),
    38: Bug("the supervisor's backoff does not grow", "deploy/local/supervisor.py",
            "return min(BACKOFF_MAX, self.restart_backoff * 2.0 ** restarts)",
            "return min(BACKOFF_MAX, self.restart_backoff)",
            ("tests/deploy/local/test_supervisor.py::test_a_crash_loop_backs_off_doubling_then_stops_with_one_line",)),
    39: Bug("a crash loop is retried for ever", "deploy/local/supervisor.py",
            "if len(w.restarts) >= self.limits.restart_limit:", "if False:",
            ("tests/deploy/local/test_supervisor.py::test_a_crash_loop_backs_off_doubling_then_stops_with_one_line",)),
    40: Bug("the runner is judged while Prefect, which its health check goes through, is down",
            "deploy/local/supervisor.py", "if any(not self.check(s.health, s.headers) for s in needs):", "if False:",
            ("tests/deploy/local/test_supervisor.py::test_a_service_is_not_judged_while_what_its_health_check_goes_through_is_down",)),
    41: Bug("a service that stops answering is never restarted", "deploy/local/supervisor.py",
            "        if now - w.heard <= limit:\n            return None",
            "        if True:\n            return None",
            ("tests/deploy/local/test_supervisor.py::test_a_service_that_stops_answering_is_stopped_and_restarted_after_the_grace",)),
    42: Bug("the runner delivers every model's promotion", "flows/deployments.py",
            'resource=EventResourceFilter(id=[f"podracer.model.{params.registry.model_name}"]))', "resource=None)",
            ("tests/flows/test_deployments.py::test_the_runner_delivers_a_promotion_in_its_own_process_the_moment_the_event_arrives",)),
    43: Bug("a burst of promotions delivered once per move", "flows/deployments.py",
            "            while not wanted.empty():  # a burst of moves: the current champion once\n"
            "                version = wanted.get_nowait()\n", "",
            ("tests/flows/test_deployments.py::test_the_runner_delivers_a_promotion_in_its_own_process_the_moment_the_event_arrives",)),
    44: Bug("the cycle's slot keeps Prefect's 300 s lease", "flows/ct_cycle.py",
            "LEASE_SECONDS = 60.0", "LEASE_SECONDS = 300.0",
            ("tests/flows/test_ct_cycle.py::test_the_cycles_slot_is_leased_for_a_minute_so_a_killed_cycle_frees_it_soon",)),
    45: Bug("the runner started before Prefect, which its poll goes through, answers", "deploy/local/supervisor.py",
            "for w in [w for w in waiting if all(self._answers(n) for n in w.service.needs if n in self.by_name)]:",
            "for w in list(waiting):",
            ("tests/deploy/local/test_supervisor.py::"
             "test_services_start_together_and_one_that_goes_through_another_once_that_one_answers",)),
    46: Bug("a generation's GPU jobs left to Dask's placement (two on one GPU while another idles)",
            "tasks/model/scaleout.py", "pure=False,\n                                     **where)", "pure=False)",
            ("tests/tasks/model/test_scaleout.py::test_gpu_jobs_ask_for_the_gpu_resource_and_run",)),
    47: Bug("a new runner leaves a killed cycle's slot to its lease (the rerun waits a minute)", "flows/deployments.py",
            "client.release_concurrency_slots_with_lease(UUID(str(lease)))", "pass",
            ("tests/flows/test_deployments.py::"
             "test_a_new_runner_releases_the_slot_a_killed_cycle_held_so_its_rerun_starts_at_once",)),
    48: Bug("a replay follows the alias as it moves (one window, two versions)", "tasks/delivery/client/loop.py",
            "if self.pinned and self.version is not None:", "if False:",
            ("tests/tasks/delivery/client/test_loop.py::"
             "test_a_cycle_sends_the_policys_orders_sells_first_and_a_new_champion_takes_over",)),
    49: Bug("the loop's client sends a broker on 127.0.0.1 to the environment's proxy",
            "tasks/delivery/client/session.py", "client._session.trust_env = False", "pass",
            ("tests/tasks/delivery/client/test_session.py::"
             "test_a_broker_on_this_machine_is_reached_directly_whatever_proxy_the_environment_names",)),
    50: Bug("validation removes the last validated set when it starts (the broker's prices vanish meanwhile)",
            "tasks/data/validate.py", "    writer = BarsWriter(out, freq)\n",
            "    out.unlink(missing_ok=True)\n    writer = BarsWriter(out, freq)\n",
            ("tests/tasks/data/test_validate.py::"
             "test_the_last_validated_set_stays_readable_until_the_new_one_replaces_it",)),
    51: Bug("a flat benchmark is not named as the test's fault", "tasks/registry/evidence.py",
            "for label, values in ((arm, model), (name, benchmark)):", "for label, values in ((arm, model),):",
            ("tests/tasks/registry/test_evidence.py::test_a_flat_benchmark_is_named_as_the_fault",)),
    52: Bug("the gate's minimum of 10 bars counted on account values (9 returns get tested)",
            "tasks/registry/evidence.py", "if model.size < MIN_BARS:", "if model.size + 1 < MIN_BARS:",
            ("tests/tasks/registry/test_evidence.py::test_the_minimum_counts_returns_not_account_values",)),
    53: Bug("the stationary bootstrap's block length used for the circular bootstrap", "tasks/registry/evidence.py",
            'optimal_block_length(psi)["circular"]', 'optimal_block_length(psi)["stationary"]',
            ("tests/tasks/registry/test_evidence.py::test_the_block_length_is_the_circular_bootstraps",)),
    54: Bug("the bootstrap's chunks drawn from a fresh generator each (other resamples than one draw)",
            "tasks/registry/evidence.py", "        yield rng.integers(",
            "        rng = np.random.default_rng(seed)\n        yield rng.integers(",
            ("tests/tasks/registry/test_evidence.py::"
             "test_the_resamples_drawn_in_chunks_are_the_resamples_drawn_at_once",)),
    55: Bug("a diverged agent's NaN curve scores a Sharpe of 0 and wins selection in a losing year",
            "trainers/common/metrics.py", "    if not (np.isfinite(values).all() and (values > 0).all()):",
            "    if False:",
            ("tests/trainers/population/test_evolution.py::"
             "test_a_diverged_agent_is_never_selected_even_when_every_healthy_agent_loses",)),
    56: Bug("a snapshot that led the final population beyond luck is registered instead of it",
            "trainers/population/evolution.py", "pop.last[finals[0]]) > -math.inf:",
            "pop.last[finals[0]]) >= pop.best[order[0]][0] - luck:",
            ("tests/trainers/population/test_evolution.py::"
             "test_the_final_population_is_chosen_however_far_a_snapshot_led_unless_every_final_agent_diverged",)),
    57: Bug("a stop signals a service's leader alone, so its children outlive it", "deploy/local/processes.py",
            "        os.killpg(pid, sig)", "        os.kill(pid, sig)",
            ("tests/deploy/local/test_processes.py::"
             "test_a_stop_reaches_the_whole_group_so_no_child_of_a_service_outlives_it",)),
    58: Bug("the runner waits on the threads a finished cycle leaves, so `down` waits out its grace",
            "flows/deployments.py", "    leave(lambda: serve(*deployments(params), print_starting_message=True))",
            "    serve(*deployments(params), print_starting_message=True)",
            ("tests/flows/test_deployments.py::"
             "test_the_runner_ends_at_sigterm_even_with_the_threads_a_finished_cycle_leaves",)),
    59: Bug("the decay benchmark's mixture monitor at the two-sided level", "benchmarks/evidence/decay.py",
            "log_term = math.log(1.0 / (2.0 * alpha))", "log_term = math.log(1.0 / alpha)",
            ("tests/benchmarks/evidence/test_decay.py::"
             "test_the_mixture_boundary_is_crossed_where_the_hand_computed_one_is",)),
    60: Bug("the fused narrow layers drop their bias", "trainers/ppo/batched.py",
            "x = (x.unsqueeze(-1) * weight.unsqueeze(1)).sum(-2) + bias",
            "x = (x.unsqueeze(-1) * weight.unsqueeze(1)).sum(-2)",
            ("tests/trainers/ppo/test_batched.py::test_fused_narrow_layers_compute_what_the_matmuls_do",)),
    61: Bug("a chunked evaluation keeps each later stretch's warm-up returns", "trainers/common/evaluate.py",
            "values[warm + 1 :, :, c] / values[warm:-1, :, c]", "values[1:, :, c] / values[:-1, :, c]",
            ("tests/trainers/common/test_evaluate.py::test_chunks_chain_each_stretchs_own_returns_after_its_warm_up",)),
    62: Bug("the evaluator's batch read chunk by chunk, mixing the agents", "trainers/ppo/multiplex.py",
            "nets.mean(states.view(len(self.agents), -1, states.shape[-1]))).flatten(0, 1)",
            "nets.mean(states.view(-1, len(self.agents), states.shape[-1]).transpose(0, 1))).transpose(0, 1)"
            ".flatten(0, 1)",
            ("tests/trainers/ppo/test_multiplex.py::test_a_chunked_evaluation_scores_each_agent_on_its_own_chunks",)),
    63: Bug("a device run's tree check passes a file that differs from the stamp", "benchmarks/perf/tree.py",
            "or blob_hash(path) != sha", "or False",
            ("tests/benchmarks/perf/test_tree.py::test_the_stamp_finds_a_changed_and_a_missing_file",)),
    64: Bug("the watch's threshold set for one look, not for the run of looks", "tasks/registry/decay.py",
            "h = threshold(slack, years * per_year)", "h = threshold(slack, 1.0)",
            ("tests/tasks/registry/test_decay.py::test_repeated_looks_at_a_healthy_record_alarm_about_as_rarely_as_asked",)),
    65: Bug("the watch ignores its tolerance", "tasks/registry/decay.py",
            "norm.ppf(1.0 - alpha) * promise.se - tolerance * spread / math.sqrt(per_year)",
            "norm.ppf(1.0 - alpha) * promise.se",
            ("tests/tasks/registry/test_decay.py::test_the_tolerance_lowers_the_promises_floor",)),
    66: Bug("a NaN in the live record is tested instead of failing closed", "tasks/registry/decay.py",
            'fault = (data_fault({"champion": model, "buy-and-hold": benchmark}, "return") or promise.fault()',
            "fault = (promise.fault()",
            ("tests/tasks/registry/test_decay.py::test_a_bad_record_fails_closed_and_never_alarms",
             "tests/tasks/delivery/client/test_watch.py::test_a_nan_in_the_record_or_no_promise_fails_closed_and_nothing_acts")),
    67: Bug("a severe decay rolls back to a previous champion whose own watch did not hold",
            "tasks/delivery/client/watch.py", "previous != seen.version and healthy(params, previous):",
            "previous != seen.version:",
            ("tests/tasks/delivery/client/test_watch.py::"
             "test_a_severe_decay_goes_flat_when_the_previous_champion_is_not_known_healthy",)),
    68: Bug("the on-decay deployment listens for another resource: the watch's alarm starts no retraining",
            "flows/deployments.py", 'expect={DECAYED}, match={"prefect.resource.id": "podracer.model.*"}',
            'expect={DECAYED}, match={"prefect.resource.id": "podracer.dataset.*"}',
            ("tests/flows/test_watch_live.py",)),
    69: Bug("each generation's PPO compiles its steps anew (Dynamo's caches dropped)", "trainers/ppo/ppo.py",
            "        self._rollout_step = compiled(rollout_step, runtime.compile)",
            "        torch._dynamo.reset(); self._rollout_step = compiled(rollout_step, runtime.compile)",
            ("tests/trainers/common/test_capture.py::test_compiled_and_eager_steps_give_the_same_generation",)),
    70: Bug("recording the same reading again adds a second row", "benchmarks/common.py",
            "    if not again:", "    if True:",
            ("tests/benchmarks/test_common.py::test_the_same_reading_recorded_again_keeps_its_date_and_adds_no_row",)),
    71: Bug("the GPU script's CPU smoke holds each section to its device budget", "benchmarks/perf/gpu.py",
            "budget = left - 5 if args.tiny else min(BUDGET[name], left - 5)", "budget = min(BUDGET[name], left - 5)",
            ("tests/benchmarks/perf/test_gpu.py::"
             "test_a_section_keeps_its_device_budget_but_the_cpu_smoke_takes_what_the_deadline_leaves",)),
    72: Bug("a final population whose every agent diverged is registered over the best snapshot",
            "trainers/population/evolution.py", "pop.last[finals[0]]) > -math.inf:",
            "pop.last[finals[0]]) >= -math.inf:",
            ("tests/trainers/population/test_evolution.py::"
             "test_the_final_population_is_chosen_however_far_a_snapshot_led_unless_every_final_agent_diverged",)),
    73: Bug("the trend Sharpe's lookback counts its volatility's window, not its trend's", "tasks/data/momentum.py",
            'if name.startswith(("ewm", "sr")) else horizon', 'if name.startswith("ewm") else horizon',
            ("tests/tasks/data/test_features_append.py",)),
    74: Bug("a stock with no volatility gets a NaN trend Sharpe", "tasks/data/momentum.py",
            "np.where(np.isnan(trend) | np.isnan(vol), np.nan, 0.0)", "np.full(trend.shape, np.nan)",
            ("tests/tasks/data/test_momentum.py::"
             "test_a_flat_stock_has_a_trend_sharpe_of_zero_not_nan_and_its_peers_are_still_ranked",)),
    75: Bug("a started scorer ranks by its first input whatever input it was given", "trainers/common/nets.py",
            "first.weight[0, index], first.weight[1, index] = 1.0, -1.0",
            "first.weight[0, 0], first.weight[1, 0] = 1.0, -1.0",
            ("tests/trainers/common/test_nets.py::test_a_scorer_started_at_an_input_scores_each_stock_by_it",)),
    76: Bug("the anchor pulls the critic and the log-std too, not the actor's layers alone", "trainers/ppo/batched.py",
            "if anchor is not None and k in self.pulled:", "if anchor is not None:",
            ("tests/trainers/ppo/test_batched.py::"
             "test_the_anchor_pulls_the_actors_layers_towards_their_start_as_adamw_does",)),
    77: Bug("a copy made by the selector keeps its own start, not its parent's", "trainers/ppo/agent.py",
            "self.anchor = copy.deepcopy(other.anchor)", "pass",
            ("tests/trainers/ppo/test_ppo.py::"
             "test_the_anchor_holds_the_actor_near_its_start_and_travels_with_its_lineage",)),
    78: Bug("the rule best on validation is chosen by its test edge", "benchmarks/evidence/ablations.py",
            'key=lambda r: r["val"] if math.isfinite(r["val"]) else -math.inf)', 'key=lambda r: r["test"])',
            ("tests/benchmarks/evidence/test_ablations.py::"
             "test_the_rule_best_on_validation_is_chosen_by_validation_never_by_test_nor_a_nan",)),
    79: Bug("a rule with a NaN validation edge can be the one picked", "benchmarks/evidence/ablations.py",
            'key=lambda r: r["val"] if math.isfinite(r["val"]) else -math.inf)', 'key=lambda r: r["val"])',
            ("tests/benchmarks/evidence/test_ablations.py::"
             "test_the_rule_best_on_validation_is_chosen_by_validation_never_by_test_nor_a_nan",)),
}


def pytest(root: Path, tests: tuple[str, ...]) -> bool:
    """Whether ``tests`` pass in the copy at ``root``."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:randomly", *tests], cwd=root,
                          capture_output=True, text=True)
    return done.returncode == 0


def check(number: int, bug: Bug) -> bool:
    with tempfile.TemporaryDirectory(prefix="planted-") as tmp:
        root = Path(tmp)
        for name in COPY:
            source = REPO / name
            if source.is_dir():
                shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(source, root / name)
        target = root / bug.path
        text = target.read_text()
        if text.count(bug.old) != 1:
            print(f"{number:>2}. {bug.what}: STALE (the line to edit is not in {bug.path} exactly once)")
            return False
        clean = pytest(root, bug.tests)
        target.write_text(text.replace(bug.old, bug.new))
        caught = not pytest(root, bug.tests)
    verdict = "caught" if clean and caught else ("FAILS WITHOUT THE BUG" if not clean else "GOT THROUGH")
    print(f"{number:>2}. {bug.what}: {verdict} by {', '.join(bug.tests)}", flush=True)
    return clean and caught


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("numbers", nargs="*", type=int, help="bugs to plant (default: all)")
    numbers = parser.parse_args().numbers or sorted(BUGS)
    results = [check(n, BUGS[n]) for n in numbers]
    print(f"{sum(results)} of {len(results)} planted bugs caught")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
