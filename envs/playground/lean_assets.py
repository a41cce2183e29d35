"""Memory-lean copies of EnvPool's Playground scene files, generated at first use.

EnvPool loads one MuJoCo model per env, and the stock humanoid scenes carry the
robots' visual meshes and an 800x800 skybox: tens of MB per env, so a thousand T1 envs
do not fit in a workstation's memory (docs/performance.md). Neither matters to the physics: visual geoms collide with nothing
(contype = conaffinity = 0) and, in bodies with an explicit `<inertial>`, add no mass
(scenes with rangefinders, which see every geom, keep theirs).
This module writes a copy of an asset package's scene folders without them into a
cache folder (the robot meshes still in use are linked, not copied), and EnvPool is
pointed at it with `base_path=`. A test checks that observations, rewards and dones
are bitwise the same as with the stock files.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

GENERATOR_VERSION = 1
"""Bump when the rewriting rules change, so cached folders are regenerated."""
SCENES = Path("mujoco", "playground", "assets", "mujoco_playground")
MENAGERIE = Path("mujoco", "playground", "assets", "mujoco_menagerie")


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fast-td3"


def lean_package(package_root: Path, distribution: str, cache_dir: Path | None = None) -> Path:
    """The lean mirror of an asset package (made once, atomically; reused after)."""
    try:
        version = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    digest = hashlib.sha256(f"{package_root}|{version}|{GENERATOR_VERSION}".encode())
    for scene in sorted((package_root / SCENES).rglob("*.xml")):  # a reinstall with other files: a new copy
        digest.update(scene.read_bytes())
    key = digest.hexdigest()[:12]
    target = (cache_dir or cache_root()) / f"envpool-lean-{distribution}-{key}"
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".lean-"))
    try:
        _write_mirror(package_root, staging)
        os.rename(staging, target)
    except OSError:
        if not target.is_dir():  # not a concurrent run that finished first
            raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _write_mirror(package_root: Path, out: Path) -> None:
    """Scene XMLs rewritten, everything else in the package linked."""
    for entry in package_root.iterdir():
        if entry.name != "mujoco" and not entry.name.startswith("__"):
            (out / entry.name).symlink_to(entry)
    menagerie = package_root / MENAGERIE
    if menagerie.is_dir():
        (out / MENAGERIE).mkdir(parents=True)
        for robot in menagerie.iterdir():
            (out / MENAGERIE / robot.name).symlink_to(robot)
    scenes = package_root / SCENES
    for source in sorted(scenes.rglob("*")):
        if source.is_dir():
            continue
        destination = out / SCENES / source.relative_to(scenes)
        destination.parent.mkdir(parents=True, exist_ok=True)
        if source.suffix == ".xml" and source.parent.name == "xmls":
            continue  # rewritten below, a folder at a time (defaults and bodies may be in different files)
        destination.symlink_to(source)
    for folder in sorted({p.parent for p in scenes.rglob("*.xml") if p.parent.name == "xmls"}):
        for name, text in strip_folder(folder).items():
            (out / SCENES / folder.relative_to(scenes) / name).write_text(text)


# ------------------------------------------------------------------ rewriting rules
def strip_folder(folder: Path) -> dict[str, str]:
    """File name -> rewritten XML for every MJCF file in one scene folder."""
    trees = {p.name: ET.parse(p) for p in sorted(folder.glob("*.xml"))}
    classes = _geom_defaults([t.getroot() for t in trees.values()])
    inertia_from_geoms = any(c.get("inertiafromgeom") == "true"
                             for t in trees.values() for c in t.getroot().iter("compiler"))
    # rangefinders see geoms that collide with nothing: keep every geom where there is one
    sees_geoms = any(True for t in trees.values() for _ in t.getroot().iter("rangefinder"))
    for tree in trees.values():
        _drop_skybox(tree.getroot())
        if not (inertia_from_geoms or sees_geoms):
            _drop_visual_geoms(tree.getroot(), classes)
    used = {g.get("mesh") for t in trees.values() for g in t.getroot().iter("geom") if g.get("mesh")}
    for tree in trees.values():
        _drop_unused_meshes(tree.getroot(), used)
    return {name: ET.tostring(tree.getroot(), encoding="unicode") for name, tree in trees.items()}


def _geom_defaults(roots: list[ET.Element]) -> dict[str, dict[str, str]]:
    """Default class -> the geom attributes it sets, inherited down the default tree."""
    classes: dict[str, dict[str, str]] = {}

    def visit(default: ET.Element, inherited: dict[str, str]) -> None:
        own = dict(inherited)
        geom = default.find("geom")
        if geom is not None:
            own.update(geom.attrib)
        classes[default.get("class", "main")] = own
        for child in default.findall("default"):
            visit(child, own)

    for root in roots:
        for top in root.findall("default"):
            visit(top, {})
    return classes


def _is_visual_only(geom: ET.Element, inherited_class: str, classes: dict[str, dict[str, str]]) -> bool:
    """A mesh geom that collides with nothing and is not named (named geoms may be looked up)."""
    attrs = dict(classes.get(geom.get("class", inherited_class), classes.get("main", {})))
    attrs.update(geom.attrib)
    is_mesh = attrs.get("type") == "mesh" or ("mesh" in attrs and "type" not in attrs)
    return (is_mesh and "name" not in geom.attrib
            and attrs.get("contype", "1") == "0" and attrs.get("conaffinity", "1") == "0")


def _drop_visual_geoms(root: ET.Element, classes: dict[str, dict[str, str]]) -> None:
    def visit(body: ET.Element, inherited_class: str) -> None:
        child_class = body.get("childclass", inherited_class)
        explicit_inertia = body.find("inertial") is not None
        for child in list(body):
            if child.tag == "geom" and body.tag == "body" and explicit_inertia \
                    and _is_visual_only(child, child_class, classes):
                body.remove(child)
            elif child.tag in ("body", "frame"):
                visit(child, child_class)

    for world in root.iter("worldbody"):
        visit(world, "main")


def _drop_skybox(root: ET.Element) -> None:
    for asset in root.iter("asset"):
        for texture in asset.findall("texture"):
            if texture.get("type") == "skybox":
                asset.remove(texture)


def _drop_unused_meshes(root: ET.Element, used: set[str]) -> None:
    for asset in root.iter("asset"):
        for mesh in asset.findall("mesh"):
            name = mesh.get("name") or Path(mesh.get("file", "")).stem
            if name not in used:
                asset.remove(mesh)
