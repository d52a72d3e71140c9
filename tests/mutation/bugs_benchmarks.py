"""The planted bugs whose edits are in ``benchmarks/``: the evidence, the device script and the
other benchmarks (docs/testing.md, Planted bugs)."""

from __future__ import annotations

from tests.mutation.bug import Bug, Entry

BENCHMARKS: dict[int, Entry] = {
    59: Bug("the decay benchmark's mixture monitor at the two-sided level", "benchmarks/evidence/decay.py",
            "log_term = math.log(1.0 / (2.0 * alpha))", "log_term = math.log(1.0 / alpha)",
            ("tests/benchmarks/evidence/test_decay.py::"
             "test_the_mixture_boundary_is_crossed_where_the_hand_computed_one_is",)),
    63: Bug("a device run's tree check passes a file that differs from the stamp", "benchmarks/perf/tree.py",
            "or blob_hash(path) != sha", "or False",
            ("tests/benchmarks/perf/test_tree.py::test_the_stamp_finds_a_changed_and_a_missing_file",)),
    70: Bug("recording the same reading again adds a second row", "benchmarks/common.py",
            "    if not again:", "    if True:",
            ("tests/benchmarks/test_common.py::test_the_same_reading_recorded_again_keeps_its_date_and_adds_no_row",)),
    71: Bug("the GPU script's CPU smoke holds each section to its device budget", "benchmarks/perf/gpu.py",
            "budget = left - 5 if args.tiny else min(BUDGET[name], left - 5)", "budget = min(BUDGET[name], left - 5)",
            ("tests/benchmarks/perf/test_gpu.py::"
             "test_a_section_keeps_its_device_budget_but_the_cpu_smoke_takes_what_the_deadline_leaves",)),
    78: Bug("the rule best on validation is chosen by its test edge", "benchmarks/evidence/ablations.py",
            'key=lambda r: r["val"] if math.isfinite(r["val"]) else -math.inf)', 'key=lambda r: r["test"])',
            ("tests/benchmarks/evidence/test_ablations.py::"
             "test_the_rule_best_on_validation_is_chosen_by_validation_never_by_test_nor_a_nan",)),
    79: Bug("a rule with a NaN validation edge can be the one picked", "benchmarks/evidence/ablations.py",
            'key=lambda r: r["val"] if math.isfinite(r["val"]) else -math.inf)', 'key=lambda r: r["val"])',
            ("tests/benchmarks/evidence/test_ablations.py::"
             "test_the_rule_best_on_validation_is_chosen_by_validation_never_by_test_nor_a_nan",)),
    80: Bug("the selection bound picks the final agent best on validation, not on test",
            "benchmarks/evidence/ablations.py", "**finite[int(np.argmax(tests))]",
            '**finite[int(np.argmax([e["val"] for e in finite]))]',
            ("tests/benchmarks/evidence/test_ablations.py::"
             "test_the_bound_is_the_final_agent_best_on_test_never_a_nan_with_its_spread",)),
    81: Bug("a blend averages the rankings' raw scores, not their cross-sectional z-scores",
            "benchmarks/evidence/ablations.py", "return np.mean([cross_sectional_z(s) for s in scores], axis=0)",
            "return np.mean(scores, axis=0)",
            ("tests/benchmarks/evidence/test_ablations.py::"
             "test_a_blend_averages_each_rankings_cross_sectional_z_score_bar_by_bar",)),
    82: Bug("a blend is paired with the shipped learner, not with the rule it screens against",
            "benchmarks/evidence/ablations_report.py", "START if arm == PICKED or arm in BLENDS else REFERENCE",
            "START if arm == PICKED else REFERENCE",
            ("tests/benchmarks/evidence/test_ablations_report.py::"
             "test_blends_pair_with_the_learners_start_and_the_bound_with_the_vanilla_agent",)),
    86: Bug("an ablations report redraws docs/img/ablations.png when no --plot is named",
            "benchmarks/evidence/ablations.py", 'parser.add_argument("--plot", type=Path,',
            'parser.add_argument("--plot", type=Path, default=Path("docs/img/ablations.png"),',
            ("tests/benchmarks/evidence/test_ablations_report.py::"
             "test_a_report_draws_its_plot_only_where_one_is_named",)),
    96: (Bug("the update section times the update with the shipped build of the kernel, not the fastest right one",
             "benchmarks/perf/gpu_update.py",
             '            kernel.LAUNCH = fastest_launch(out["launches"]) or shipped\n'
             '            out["launch"] = kernel.LAUNCH._asdict()',
             '            out["launch"] = (fastest_launch(out["launches"]) or shipped)._asdict()',
             ("tests/benchmarks/perf/test_gpu.py::"
              "test_the_update_is_timed_with_the_fastest_right_build_of_the_kernel",)),
         Bug("the update section leaves the build it measured last in place afterwards",
             "benchmarks/perf/gpu_update.py",
             "        kernel.LAUNCH = shipped\n    sample_epochs", "        pass\n    sample_epochs",
             ("tests/benchmarks/perf/test_gpu.py::"
              "test_the_update_is_timed_with_the_fastest_right_build_of_the_kernel",))),
    97: Bug("the fastest build is chosen without its gradient check (gpu_update.fastest_launch)",
            "benchmarks/perf/gpu_update.py",
            'right = [r for r in rows if "loss_s" in r and r["kernel_error"] <= KERNEL_ERROR]',
            'right = [r for r in rows if "loss_s" in r]',
            ("tests/benchmarks/perf/test_gpu.py::"
             "test_the_fastest_kernel_build_is_one_whose_gradients_are_autograds",)),
    98: (Bug("the headline builds the kernel as shipped, not as the update section timed it",
             "benchmarks/perf/gpu_train.py",
             "    kernel.LAUNCH = kernel.Launch.of(launch) if launch else kernel.LAUNCH\n"
             "    return kernel.LAUNCH._asdict()",
             "    return (kernel.Launch.of(launch) if launch else kernel.LAUNCH)._asdict()",
             ("tests/benchmarks/perf/test_gpu.py::"
              "test_the_headline_builds_the_kernel_as_the_update_section_timed_it",)),
         Bug("the report names no build of the kernel", "benchmarks/perf/gpu_report.py",
             'build = f" ({Launch.of(launch).text()})" if launch else ""', 'build = ""',
             ("tests/benchmarks/perf/test_gpu.py::"
              "test_a_device_run_trained_with_the_kernel_is_reported_with_its_build",))),
    99: Bug("a section stopped at its budget loses what it had saved", "benchmarks/perf/gpu.py",
            'args.save(name, {**(args.load(name) or {}), "ok": False,', 'args.save(name, {"ok": False,',
            ("tests/benchmarks/perf/test_gpu.py::test_a_section_killed_at_its_budget_keeps_what_it_saved",)),
    100: Bug("the headline's fallback mode trains for the whole budget after a failed mode spent part of it",
             "benchmarks/perf/gpu_train.py",
             "    for mode in modes:\n"
             "        budget = min(args.headline_seconds, max(20.0, args.remaining() - (20 if args.tiny else 150)))\n",
             "    budget = min(args.headline_seconds, max(20.0, args.remaining() - (20 if args.tiny else 150)))\n"
             "    for mode in modes:\n",
             ("tests/benchmarks/perf/test_gpu.py::test_a_mode_that_fails_leaves_the_next_what_the_deadline_leaves",)),
    101: (Bug("the instruction count takes a branch to itself for a loop", "benchmarks/perf/gpu_kernel.py",
              "if branch and labels.get(branch.group(1), count) < count:",
              "if branch and labels.get(branch.group(1), count + 1) <= count:",
              ("tests/benchmarks/perf/test_gpu_kernel.py::"
               "test_a_blocks_instructions_read_each_inner_loop_once_per_trip",)),
          Bug("the instruction count counts each inner loop once, not once per trip", "benchmarks/perf/gpu_kernel.py",
              "+ sum(size * n for size, n in zip(sizes, trips))", "+ sum(size for size, n in zip(sizes, trips))",
              ("tests/benchmarks/perf/test_gpu_kernel.py::"
               "test_a_blocks_instructions_read_each_inner_loop_once_per_trip",))),
    102: Bug("a device-script module imports the config (tasks.config, so pydantic), which the GPU machine lacks",
             "benchmarks/perf/gpu_common.py", "from trainers.config import EnvConfig,",
             "from tasks.config import load_params  # noqa: F401\nfrom trainers.config import EnvConfig,",
             ("tests/benchmarks/perf/test_gpu.py::test_every_section_runs_at_toy_sizes_and_writes_its_json",)),
    105: (Bug("a sample's instructions are a block's over 16 samples whatever the build's block",
              "benchmarks/perf/gpu_kernel.py", "block * launch.warps / launch.block", "block * launch.warps / 16",
              ("tests/benchmarks/perf/test_gpu_kernel.py::"
               "test_a_samples_instructions_are_a_blocks_over_its_samples_for_each_warp",)),
          Bug("the fastest build is rebuilt without its shape of work", "benchmarks/perf/gpu_update.py",
              "return None if best is None else kernel.Launch.of(best)",
              'return None if best is None else kernel.Launch(best["warps"], best["dot"], best["stages"])',
              ("tests/benchmarks/perf/test_gpu.py::"
               "test_the_fastest_kernel_build_is_one_whose_gradients_are_autograds",))),
    120: Bug("a cell of the evidence report prints nan where a t cannot be computed",
             "benchmarks/evidence/results_report.py", "    if not math.isnan(t):\n", "    if True:\n",
             ("tests/benchmarks/evidence/test_results_report.py::"
              "test_a_cell_without_a_t_says_why_instead_of_printing_nan",)),
    121: Bug("the null markets' target takes the largest t, so an arm without one is passed over",
             "benchmarks/evidence/results_report.py",
             "                        not any(beats(d) for d in edges.values())))",
             "                        max(t_stat(d) for d in edges.values()) < 2))",
             ("tests/benchmarks/evidence/test_results_report.py::"
              "test_the_null_targets_fail_when_an_arm_beats_buy_and_hold_beyond_noise",)),
}
