"""Measurement, below both `hardware` (calibration) and `harness` (evaluation): kernel-only
timing (timing.py), SM and memory clocks (clocks.py) and the machine a run happened on
(environment.py). Nothing here knows about problems, candidates or profiles."""
