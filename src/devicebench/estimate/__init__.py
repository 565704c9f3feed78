"""`devicebench estimate` in one place: how fast a workload would train on GPUs that are not here, and how sure that is.

- `roofline.py`: a step's kernels at their precision's peaks and the fitted shares (numbers only: no model is
  built here);
- `validation.py`: each point predicted by a fit made without its group, and the split-conformal interval those
  held-out errors give;
- `points.py`: the points the shares are fitted on (the public record, the seeds' figures, committed and stored
  GPU runs) and the fit of them, `fit_roofline`;
- `targets.py`: the estimate of a workload on each GPU asked for, over the CPU baseline measured here;
- `against_measured.py`: what the estimate would have said of a finished GPU run, for `run` and the report.

The package imports none of them: each sits in its own import layer (pyproject.toml).
"""
