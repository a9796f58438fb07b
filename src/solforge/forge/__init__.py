"""The forge: search for faster correct kernels (templates, an LLM proposer, a MAP-Elites
archive), every candidate judged by the harness."""
