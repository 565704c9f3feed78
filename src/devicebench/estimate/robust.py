"""One reweighting of a robust, bounded least-squares fit: what the roofline's GPU shares (roofline.py) and the
host's terms (host.py) are both fitted by. Least squares on relative errors, with a weak prior's rows beside the
points' and every parameter within its bounds (scipy's bounded-variable least squares); then Huber's weights at
that solution, so that a point off by more than a threshold weighs less the further it is, and a forged or mistaken
run cannot drag the fit after it. Each caller repeats it until the weights hold still.

    python -c "import numpy as np; from devicebench.estimate.robust import reweighted_fit; print(reweighted_fit(np.eye(2), np.ones(2), np.ones(2), np.zeros((0, 2)), np.zeros(2), (0, 2), 0.5))"
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import lsq_linear


def reweighted_fit(
    terms: np.ndarray,
    target: np.ndarray,
    weights: np.ndarray,
    prior_rows: np.ndarray,
    prior: np.ndarray,
    bounds: tuple,
    huber_relative: float,
) -> tuple[np.ndarray, np.ndarray]:
    """(The x of least weighted squares of `terms @ x - target` (one row a point, `weights` each), beside
    `prior_rows @ x` pulled to `prior_rows @ prior`, within `bounds`; each point's weight under Huber's loss at it:
    1 within `huber_relative` of its target, `huber_relative` over its error beyond)."""
    root = np.sqrt(weights)
    solution = lsq_linear(
        np.vstack([terms * root[:, None], prior_rows]),
        np.concatenate([target * root, prior_rows @ prior]),
        bounds=bounds,
        method="bvls",
    ).x
    residual = np.abs(terms @ solution - target)
    return solution, np.minimum(1.0, huber_relative / np.maximum(residual, 1e-12))
