"""The `fast-td3-train` console script: Ctrl-C and SIGTERM are deferred (`startup_signals`) before
Hydra, OmegaConf, torch or a simulator is imported, then `train.cli` runs. A signal during those
imports is acted on once the command can undo what it made, in one line, instead of breaking an
import half-way with a traceback.
"""

from fast_td3.training.startup_signals import defer_stops


def cli() -> None:
    defer_stops()
    from fast_td3.training.train import cli as train  # only now: the imports run with the stop deferred

    train()


if __name__ == "__main__":
    cli()
