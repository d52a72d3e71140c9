"""The input-drift statistic beside a maintained package's: ``tasks/data/drift.py``'s PSI
against Evidently's (docs/operations.md, the watch: input drift).

Evidently (0.7.23) was tried for the drift line and not kept. Its PSI cuts the reference and
the live window together into equal-width Sturges bins, so its bins move with the live sample
and its scale with the sample's size, where the credit convention the 0.1 / 0.25 thresholds
come from cuts the reference at its deciles (as ``drift.psi`` does). It installs about 80
packages (litestar, nltk, plotly, statsmodels, faker …) for a twenty-line statistic, and
0.7.23 fails to import with the newest pandas that its metadata allows (3.x). This script
measures the two statistics on the same windows: 200 draws of a fat-tailed (Student t, 4
degrees of freedom) reference of five years × 30 stocks and a live quarter (63 bars × 30),
the same distribution or shifted. It needs Evidently, which the project does not install:

    python3.11 -m venv /tmp/evenv && /tmp/evenv/bin/pip install evidently==0.7.23 pandas==2.2.3 scipy
    PYTHONPATH=. /tmp/evenv/bin/python -m benchmarks.evidence.drift_packages
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tasks.data.drift import LARGE, psi

WINDOWS = (("same distribution", 0.0, 1.0), ("mean +0.25 sd", 0.25, 1.0), ("sd × 1.5", 0.0, 1.5))
DRAWS, REFERENCE, LIVE = 200, 1260 * 30, 63 * 30


def main(seed: int = 170) -> None:
    from evidently.legacy.calculations.stattests.psi import _psi
    from evidently.legacy.core import ColumnType

    rng = np.random.default_rng(seed)
    print(f"| live window | ours: median PSI | ours: share > {LARGE} | Evidently: median PSI "
          f"| Evidently: share > {LARGE} |\n|---|---|---|---|---|")
    for label, shift, scale in WINDOWS:
        ours, theirs = [], []
        for _ in range(DRAWS):
            ref, live = rng.standard_t(4, REFERENCE), shift + scale * rng.standard_t(4, LIVE)
            ours.append(psi(ref, live))
            theirs.append(_psi(pd.Series(ref), pd.Series(live), ColumnType.Numerical, 0.1)[0])
        a, b = np.array(ours), np.array(theirs)
        cells = (f"{np.median(x):.3f} | {np.mean(x > LARGE):.2f}" for x in (a, b))
        print(f"| {label} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
