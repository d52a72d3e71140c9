"""benchmarks/perf/gpu_kernel.py: the instruction count of a build, its loops read once per trip,
and the ceiling it puts on the update's rate, by hand (the builds themselves are compiled by
tests/trainers/ppo/test_kernel.py)."""

from __future__ import annotations

import pytest

from benchmarks.perf.gpu_kernel import H100, NECESSARY, ceiling, loops, per_block, per_sample, table, trips
from trainers.ppo.kernel import LAUNCHES, Launch

SASS = """
        .text._body:
.L_x_0:
        /*0000*/                   FADD R1, R2, R3 ;
.L_x_1:
        /*0010*/                   FFMA R1, R2, R3, R1 ;
        /*0020*/               @P0 BRA `(.L_x_1) ;
        /*0030*/                   LDG.E R4, [R6.64] ;
        /*0040*/               @P1 BRA `(.L_x_4) ;
.L_x_2:
        /*0050*/                   FMUL R1, R1, R4 ;
        /*0060*/                   FADD R1, R1, R4 ;
        /*0070*/               @P0 BRA `(.L_x_2) ;
.L_x_4:
        /*0080*/               @P1 BRA `(.L_x_0) ;
        /*0090*/                   EXIT ;
.L_x_3:
        /*00a0*/                   BRA `(.L_x_3);
"""


def test_a_blocks_instructions_read_each_inner_loop_once_per_trip() -> None:
    # the block loop (instructions 0-8), two loops in it (1-2, 5-7); the forward branch and the
    # trap's branch to itself are no loops
    assert loops(SASS) == [(1, 2), (5, 7), (0, 8)]
    # the block loop's 9 instructions, less the inner bodies (2 and 3), plus those 5 and 7 times over
    assert per_block(SASS, (5, 7)) == 9 - 5 + 2 * 5 + 3 * 7 == 35
    assert per_block(SASS, (5, 7, 8)) is None  # another loop structure than the one the trips describe
    assert per_block("no code", (5,)) is None


def test_a_samples_instructions_are_a_blocks_over_its_samples_for_each_warp() -> None:
    shipped, other = Launch(), Launch(4, "ieee", 1, 32, 4, 32)
    assert trips(shipped) == (13, 13, 8, 8) and trips(other) == (25, 25, 16, 16)  # 100 / 8, 501 / 64; 100 / 4, 501 / 32
    assert {launch[3:] for launch in LAUNCHES} == {(16, 8, 64), (32, 4, 32)}
    # a block loop of 10 instructions around four loops of 2 (an instruction and its branch back)
    inner = "".join(f".L_x_{k}:\n /*{2 * k:04x}*/ FFMA R1, R2, R3, R1 ;\n /*{2 * k + 1:04x}*/ @P0 BRA `(.L_x_{k}) ;\n"
                    for k in range(1, 5))
    sass = f".L_x_0:\n /*ff00*/ FADD R1, R2, R3 ;\n{inner} /*ff10*/ @P1 BRA `(.L_x_0) ;\n"
    assert per_block(sass, trips(other)) == 10 - 8 + 2 * (25 + 25 + 16 + 16) == 166
    assert per_sample(sass, other) == 166 * 4 / 32
    assert per_sample(sass, shipped) == (10 - 8 + 2 * (13 + 13 + 8 + 8)) * 4 / 16


def test_the_issue_ceiling_by_hand() -> None:
    rate, share = ceiling(5000.0, 3000.0)
    assert rate == pytest.approx(132 * 4 * 1.98e9 / 5000) == pytest.approx(209.1e6, rel=1e-3)
    assert share == pytest.approx(rate * 3208 / 3000e9) and H100["sms"] == 132 and NECESSARY == 3208
    row = {"triton": "3.6.0", "warps": 4, "dot": "ieee", "stages": 1, "block": 32, "stocks": 4, "chunk": 32,
           "registers": 255, "spill_stores": 76, "spill_loads": 60, "shared_bytes": 12800, "per_sample": 5000.0}
    assert "| 4 | ieee | 1 | 32 × 4, 32 | 255 | 76 / 60 | 12 | 5,000 | 209 | 22% |" in table([row], 3000.0)
    # a build under two Tritons: one row, each cell the first's figure then the second's
    other = row | {"triton": "3.7.1", "registers": 254, "spill_stores": 0, "spill_loads": 0, "per_sample": None}
    text = table([other, row, row | {"block": 16, "stocks": 8, "chunk": 64}], 3000.0)
    assert text.startswith("Each figure for Triton 3.7.1 · 3.6.0.")
    assert ("| 4 | ieee | 1 | 32 × 4, 32 | 254 · 255 | 0 / 0 · 76 / 60 | 12 · 12 | - · 5,000 | - · 209 | - · 22% |"
            in text)
    assert "| 4 | ieee | 1 | 16 × 8, 64 | - · 255 | - · 76 / 60 | - · 12 | - · 5,000 | - · 209 | - · 22% |" in text
