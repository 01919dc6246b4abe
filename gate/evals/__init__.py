"""Quality slices for bounded-degradation claims (release-gate step 7, seed 000 Part III).

Slices are data (evals/*.yaml, loaded by `gate.evals.spec`); `gate.evals.builders` turns a slice
and a seed into rows deterministically; `gate.evals.datasets_io` saves them as a fingerprinted
`datasets.Dataset`; `gate.evals.stats` judges envelopes on one-sided confidence bounds.
"""
