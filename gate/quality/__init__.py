"""Quality slices for bounded-degradation claims (release-gate step 7, background: approximate caches).

Slices are data (evals/*.yaml, loaded by `gate.quality.spec`); `gate.quality.builders` turns a slice
and a seed into rows deterministically; `gate.quality.datasets_io` saves them as a fingerprinted
`datasets.Dataset`; `gate.quality.stats` judges envelopes on one-sided confidence bounds.
"""
