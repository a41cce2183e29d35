"""Tools that read what training wrote: checkpoint evaluation and play (`fast-td3-eval`,
`fast-td3-play`), run reports (`fast-td3-report`), gait metrics, learner diagnostics, and the
hot-path op counter used by the tests and benchmarks.
"""
