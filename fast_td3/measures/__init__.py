"""Pure measurements of arrays a run produces: gait metrics (from an env's gait signals) and critic
diagnostics (from the critic's outputs). They import nothing from the project, so the in-run evaluation
(`fast_td3.training`) and the reports (`fast_td3.analysis`) both use them."""
